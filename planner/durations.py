"""Durations in settings and rules: seconds ("60", from the environment or a form) or ISO 8601 ("PT3H"); and
spans of the samples read (`7d`: the history window, the averaging windows)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator


def _seconds(value: object) -> object:
    if isinstance(value, str):
        try:
            return timedelta(seconds=float(value))
        except ValueError:
            return value
    return value


Seconds = Annotated[timedelta, BeforeValidator(_seconds)]


def parse_duration(text: str) -> timedelta:
    """A span such as `30m` or `7d` (units s, m, h, d): the history window, the averaging windows."""
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    text = text.strip()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"duration {text!r}: expected a number and one of s, m, h, d (e.g. 30m, 7d)")
    try:
        return timedelta(**{units[text[-1]]: int(text[:-1])})
    except OverflowError:
        raise ValueError(f"duration {text[:40]!r}: too long") from None
