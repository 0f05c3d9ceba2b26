"""A cluster's stored replay: what each strategy would have done on its recorded traffic over a window, and how the
live plans of that window compare with their replanning from the recording (`planner.simulator.replay`,
`planner.simulator.live_check`). The CLI's `simulate --replay ... --store` and the daily replay task write it; the
review's replay page reads it, never computing a replay in a request.

Stored as JSON under the storage root, through its URIs: `replays/cluster=<name>/replay-<end>.json` per run and
`latest.json`, the one the page shows.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from planner import storage
from planner.errors import InputError, NotFoundError, format_validation_error
from planner.plan.document import WireModel

LATEST = "latest.json"


class PolicyOutcome(WireModel):
    """One strategy's run over the recorded traffic, in the evaluation's figures."""

    policy: str
    offline: bool  # this product's plans (`offline:`), else Pulsar's in-broker shedder
    moves: int
    disconnections: int
    rounds: int
    minutes_to_balance: int | None
    peak_score: float
    p95_score: float
    final_spread: float
    prediction_error: float | None
    # The hottest broker's score per hour of the window (None: no broker up that hour), for the page's chart.
    hourly_max: tuple[float | None, ...] = ()


class LivePlanResult(WireModel):
    """One live plan against its replanning from the recording."""

    plan: int
    strategy: str
    created_at: datetime
    checked: bool
    equal: bool
    only_live: tuple[str, ...] = ()
    only_replayed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    not_applied: tuple[str, ...] = ()


class LiveConsistency(WireModel):
    consistent: bool
    checked: int
    equal: int
    results: tuple[LivePlanResult, ...] = ()


class StoredReplay(WireModel):
    cluster: str
    start: datetime  # the first snapshot replayed
    end: datetime  # the last one
    made_at: datetime
    minutes: int
    snapshots: int
    brokers: tuple[str, ...]
    target_spread: float
    not_reproduced: tuple[str, ...] = ()  # what the replay cannot reproduce, said once
    outcomes: tuple[PolicyOutcome, ...]
    live: LiveConsistency | None = None  # None: the live plans were not checked

    @classmethod
    def parse(cls, text: str | bytes, what: str) -> StoredReplay:
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            raise InputError(format_validation_error(error, what)) from None


def replay_directory(root: str | Path, cluster: str) -> str:
    return storage.join(storage.to_uri(root), "replays", f"cluster={cluster}")


def write_replay(root: str | Path, replay: StoredReplay) -> str:
    """Store the run and make it the cluster's latest; returns the run's URI."""
    directory = replay_directory(root, replay.cluster)
    data = replay.model_dump_json(by_alias=True, indent=2).encode()
    uri = storage.join(directory, f"replay-{replay.end.strftime('%Y%m%dT%H%M%SZ')}.json")
    storage.write_bytes(uri, data)
    storage.write_bytes(storage.join(directory, LATEST), data)
    return uri


def latest_replay(root: str | Path, cluster: str) -> StoredReplay:
    """The cluster's latest stored replay, or NotFoundError when none was stored yet."""
    uri = storage.join(replay_directory(root, cluster), LATEST)
    if not storage.exists(uri):
        raise NotFoundError(
            f"cluster {cluster!r} has no stored replay yet: the daily replay task or `simulate --replay`"
        )
    return StoredReplay.parse(storage.read_bytes(uri, f"replay of cluster {cluster!r}"), f"stored replay {uri}")
