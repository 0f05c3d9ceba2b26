"""Time windows: when an approval policy may approve, and when an approved plan may execute.

A window opens at each time its cron expression names, in its time zone, and stays open for its
duration: `{"cron": "0 1 * * *", "duration": "PT3H", "timezone": "Europe/Paris"}` is 01:00 to 04:00
Paris time every night, daylight saving included (croniter resolves the local times).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from planner.durations import Seconds

# Just after `now`, so that a window opening exactly now counts as open.
_INSTANT = timedelta(microseconds=1)


class TimeWindow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cron: str = Field(description="When the window opens: a five-field cron expression, e.g. `0 1 * * *`.")
    duration: Seconds = Field(description="How long it stays open: seconds, or an ISO 8601 duration such as `PT3H`.")
    timezone: str = Field("UTC", description="The IANA time zone the cron expression is read in.")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (minute hour day-of-month month day-of-week)")
        return value

    @field_validator("duration")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Paris)") from None
        return value

    def opened_at(self, now: datetime) -> datetime | None:
        """When the window `now` falls in opened (UTC), or None when it is closed."""
        local = now.astimezone(ZoneInfo(self.timezone))
        opened: datetime = croniter(self.cron, local + _INSTANT).get_prev(datetime)
        return opened.astimezone(UTC) if now < opened + self.duration else None

    def next_opening(self, now: datetime) -> datetime:
        """The first time after `now` the window opens (UTC)."""
        local = now.astimezone(ZoneInfo(self.timezone))
        opening: datetime = croniter(self.cron, local).get_next(datetime)
        return opening.astimezone(UTC)

    def describe(self) -> str:
        hours = self.duration.total_seconds() / 3600
        return f"`{self.cron}` ({self.timezone}) for {hours:g} h"


class ExecutionWindow(TimeWindow):
    """When approved plans of the matching clusters may execute."""

    clusters: tuple[str, ...] = Field(("*",), description="Cluster names or shell patterns (`prod-*`).")


def cluster_matches(patterns: Iterable[str], cluster: str) -> bool:
    return any(fnmatch.fnmatchcase(cluster, pattern) for pattern in patterns)


def is_open(windows: Sequence[TimeWindow], now: datetime) -> bool:
    """No window configured means always open."""
    return not windows or any(window.opened_at(now) is not None for window in windows)


def next_opening(windows: Sequence[TimeWindow], now: datetime) -> datetime | None:
    """None when a window is open now (or none is configured); else the earliest opening after `now`."""
    if is_open(windows, now):
        return None
    return min(window.next_opening(now) for window in windows)
