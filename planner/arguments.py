"""The command line's value types: every number and id a command takes is bounded here, in the parser, so an
extreme value (inf, nan, 1e308, a negative count, a 30-digit id) or a malformed URL is refused as bad input
before a command opens the store or connects to a cluster."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from urllib.parse import urlsplit

from planner.durations import parse_duration

# Ids are the store's 64-bit integer keys.
MAX_ID = 2**63 - 1
# A count or limit larger than a Java int has no use here and would only make a command run (or allocate) forever.
MAX_COUNT = 2**31 - 1
# Durations: ten years is past any TTL, lease or wait anyone means, and far within what timedelta can hold.
MAX_SECONDS = 10 * 366 * 24 * 3600
MAX_EPOCH_MILLIS = 2**63 - 1


@dataclass(frozen=True)
class Bounded:
    """An argparse `type`: a whole number (`integral`) or a finite number within [minimum, maximum]."""

    integral: bool
    minimum: float
    maximum: float
    unit: str = ""

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return "whole number" if self.integral else "number"

    def __call__(self, text: str) -> int | float:
        try:
            value: int | float = int(text, 10) if self.integral else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {self.__name__}, got {text[:40]!r}") from None
        if not self.minimum <= value <= self.maximum:  # also false for nan
            low, high = (f"{bound}" if self.integral else f"{bound:.15g}" for bound in (self.minimum, self.maximum))
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}{self.unit}, got {text[:40]!r}")
        return value


def bounded_int(minimum: int = 1, maximum: int = MAX_COUNT) -> Bounded:
    return Bounded(integral=True, minimum=minimum, maximum=maximum)


ID = bounded_int(1, MAX_ID)
COUNT = bounded_int(1, MAX_COUNT)
SECONDS = Bounded(integral=False, minimum=0.0, maximum=MAX_SECONDS, unit=" seconds")
EPOCH_MILLIS = bounded_int(0, MAX_EPOCH_MILLIS)
SEED = bounded_int(0, MAX_ID)
# One action a millisecond is past anything an admin API takes; 0 means no pacing.
RATE_PER_MINUTE = Bounded(integral=False, minimum=0.0, maximum=60_000.0, unit=" a minute")
SPREAD_POINTS = Bounded(integral=False, minimum=0.0, maximum=1e6, unit=" points")


def duration(text: str) -> str:
    """A span such as `7d` (`planner.durations`), kept as written, no longer than MAX_SECONDS."""
    try:
        span = parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if span.total_seconds() > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text[:40]!r}: longer than {MAX_SECONDS // 86400} days")
    return text


def admin_url(text: str) -> str:
    """An admin URL, `http(s)://host[:port]`, parsed now rather than when the first request fails."""
    try:
        parts = urlsplit(text)
        port = parts.port  # raises for a port that is not a number or out of range
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"malformed URL {text[:80]!r}: {error}") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected http(s)://host:port, got {text[:80]!r}")
    if port == 0 or parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        raise argparse.ArgumentTypeError(f"expected http(s)://host:port and nothing more, got {text[:80]!r}")
    return text
