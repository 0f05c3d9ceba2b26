"""Java numeric conversions the strategies depend on.

No imports but the standard library: the Spark job's executors import this through the usage models, with
nothing installed but numpy, pandas and pyarrow."""

from __future__ import annotations

import math
import struct
from typing import Protocol

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


def java_int(value: float) -> int:
    """`(int) value`: truncate toward zero, saturate at the int range, NaN becomes 0."""
    if math.isnan(value):
        return 0
    if value >= INT_MAX:
        return INT_MAX
    if value <= INT_MIN:
        return INT_MIN
    return int(value)


def wrap_int32(value: int) -> int:
    """Java `int` arithmetic: keep the low 32 bits, signed."""
    return (value + 2**31) % 2**32 - 2**31


class Usage(Protocol):
    """A resource's usage and limit, as in a load report (`ResourceUsage`)."""

    usage: float
    limit: float


_FLOAT32 = struct.Struct("f")


def to_float32(value: float) -> float:
    """Round a double to the nearest float32, as a Java `(float)` cast does."""
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def percent_usage(resource: Usage) -> float:
    """`ResourceUsage.percentUsage()`: float32 `usage / limit * 100`, 0 when the limit is unknown (<= 0)."""
    if resource.limit <= 0:
        return 0.0
    usage, limit = to_float32(resource.usage), to_float32(resource.limit)
    if limit == 0.0:
        # A positive limit below float32's smallest value: Java's float division gives Infinity (NaN for a
        # zero usage, which the planner counts as 0 rather than let it poison every comparison).
        return float("inf") if usage > 0 else 0.0
    proportion = to_float32(usage / limit)
    return to_float32(proportion * 100)
