"""Durations in settings and rules: seconds ("60", from the environment or a form) or ISO 8601 ("PT3H")."""

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
