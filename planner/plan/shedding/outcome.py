"""What a shedding strategy returns: the selected unloads, in selection order, and its next state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

StateT = TypeVar("StateT")


@dataclass(frozen=True, slots=True)
class Unload:
    """Move `bundle` away from `broker`; `destination` is set only when the strategy plans one (AvgShedder)."""

    broker: str
    bundle: str
    destination: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"broker": self.broker, "bundle": self.bundle, "destination": self.destination}


@dataclass(frozen=True, slots=True)
class SheddingOutcome(Generic[StateT]):
    unloads: tuple[Unload, ...]
    state: StateT
    # Human-readable reasons for what was and was not selected, for plan review and logs.
    reasons: tuple[str, ...] = field(default=())
