"""What an action is, below every stage: its kinds, and the fields an approval binds with their hash.

The planner writes actions, the store keeps them as rows, the approval hashes them and the executor sends them:
each reads the kind and the hash from here, so all four agree on what an action is."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any


class ActionKind(StrEnum):
    """The admin calls a plan may make on a bundle."""

    UNLOAD = "unload"
    SPLIT = "split"


# What an action's admin call is made of: an approval binds exactly these, in order, and nothing else
# (the reason and the predicted traffic are for the reviewer; they do not change what is sent).
EXECUTED_FIELDS = ("kind", "bundle", "source", "destination", "splitAlgorithm", "splitPositions")


def actions_hash(actions: Sequence[Mapping[str, Any]], maintenance: Mapping[str, Any] | None = None) -> str:
    """SHA-256 of the canonical JSON of the executed fields of each action, with its position: what an
    approval approves. The executor recomputes it from the action rows it is about to run.

    A maintenance plan's mode, brokers and the plan it rolls back are hashed too: the executor fences (and
    unfences) brokers by them, admin writes the approval must cover as well. Plans without one hash as before."""
    executed = [
        {"sequence": sequence, **{name: action.get(name) for name in EXECUTED_FIELDS}}
        for sequence, action in enumerate(actions)
    ]
    approved: Any = executed
    if maintenance:
        executed_maintenance = {
            "mode": maintenance.get("mode"),
            "brokers": list(maintenance.get("brokers") or []),
            "rollsBack": maintenance.get("rollsBack"),
        }
        approved = {"actions": executed, "maintenance": executed_maintenance}
    canonical = json.dumps(approved, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
