"""Java numeric conversions the strategies depend on."""

from __future__ import annotations

import math

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
