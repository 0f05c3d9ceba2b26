"""Java numeric conversions the strategies depend on.

No imports but the standard library: the Spark job's executors import this through the usage models, with
nothing installed but numpy, pandas and pyarrow."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")

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


# java.util.TimSort sorts arrays shorter than this by a run and a binary insertion sort, with no merge.
JAVA_TIMSORT_MIN_MERGE = 32


def java_sort(items: Sequence[T], compare: Callable[[T, T], int]) -> list[T]:
    """`List.sort(comparator)` as Java runs it, for comparators that are not transitive (AvgShedder's truncating
    one): Python's own sort gives other answers there, and they changed between CPython releases.

    Below 32 elements this is java.util.TimSort's path step for step (`countRunAndMakeAscending`, then
    `binarySort`). From 32 on Java merges runs, and with such a comparator may throw ("Comparison method violates
    its general contract"); there a stable top-down merge sort gives one answer on every CPython (not Java's).
    """
    result = list(items)
    if len(result) < 2:
        return result
    if len(result) >= JAVA_TIMSORT_MIN_MERGE:
        return _merge_sort(result, compare)
    run = 1
    if compare(result[1], result[0]) < 0:  # a strictly descending run, reversed in place
        run = 2
        while run < len(result) and compare(result[run], result[run - 1]) < 0:
            run += 1
        result[:run] = result[:run][::-1]
    else:
        run = 2
        while run < len(result) and compare(result[run], result[run - 1]) >= 0:
            run += 1
    for start in range(run, len(result)):
        pivot, left, right = result[start], 0, start
        while left < right:
            middle = (left + right) >> 1
            if compare(pivot, result[middle]) < 0:
                right = middle
            else:
                left = middle + 1
        result[left + 1 : start + 1] = result[left:start]
        result[left] = pivot
    return result


def _merge_sort(items: list[T], compare: Callable[[T, T], int]) -> list[T]:
    if len(items) < 2:
        return items
    middle = len(items) // 2
    left, right = _merge_sort(items[:middle], compare), _merge_sort(items[middle:], compare)
    merged: list[T] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if compare(right[j], left[i]) < 0:
            merged.append(right[j])
            j += 1
        else:
            merged.append(left[i])
            i += 1
    return [*merged, *left[i:], *right[j:]]


def java_max(*values: float) -> float:
    """`LocalBrokerData.max`: the largest value by `>` from negative infinity, so a NaN is skipped (Python's
    `max` keeps a leading NaN), and all-NaN gives negative infinity."""
    largest = -math.inf
    for value in values:
        if value > largest:
            largest = value
    return largest


def wrap_int32(value: int) -> int:
    """Java `int` arithmetic: keep the low 32 bits, signed."""
    return (value + 2**31) % 2**32 - 2**31


class Usage(Protocol):
    """A resource's usage and limit, as in a load report (`ResourceUsage`); read-only, as the report's models are."""

    @property
    def usage(self) -> float: ...

    @property
    def limit(self) -> float: ...


_FLOAT32 = struct.Struct("f")


def to_float32(value: float) -> float:
    """Round a double to the nearest float32, as a Java `(float)` cast does."""
    try:
        rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
        return rounded
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


def java_string_hash(text: str) -> int:
    """`String.hashCode()`: 31-based over UTF-16 code units, wrapped to an int."""
    encoded = text.encode("utf-16-le")
    value = 0
    for unit in struct.unpack(f"<{len(encoded) // 2}H", encoded):
        value = (31 * value + unit) & 0xFFFFFFFF
    return wrap_int32(value)


# java.util.concurrent.ConcurrentHashMap's table: 16 bins at first, doubled when the size reaches three quarters.
_CHM_INITIAL_BINS = 16


def concurrent_hash_map_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a `new ConcurrentHashMap<>()` after `put`s of `keys` (strings) in this order: bins in
    index order, each bin's list in its order, with the list splits of `transfer` on every resize (the run at a
    bin's tail keeps its order, the nodes before it are prepended). Bins long enough to become trees (over 8 nodes
    while the table has 64 bins or more) are not modelled; below 64 bins Java resizes instead, and so does this."""
    bins: list[list[tuple[int, str]]] = [[] for _ in range(_CHM_INITIAL_BINS)]
    size_control = _CHM_INITIAL_BINS - (_CHM_INITIAL_BINS >> 2)
    size = 0

    def transfer() -> None:
        nonlocal bins, size_control
        old = len(bins)
        grown: list[list[tuple[int, str]]] = [[] for _ in range(2 * old)]
        for index, nodes in enumerate(bins):
            if not nodes:
                continue
            last_run = 0
            for position in range(1, len(nodes)):
                if nodes[position][0] & old != nodes[position - 1][0] & old:
                    last_run = position
            low = [node for node in reversed(nodes[:last_run]) if not node[0] & old]
            high = [node for node in reversed(nodes[:last_run]) if node[0] & old]
            (high if nodes[last_run][0] & old else low).extend(nodes[last_run:])
            grown[index], grown[index + old] = low, high
        bins = grown
        size_control = 2 * old - (old >> 1)

    for key in keys:
        hashed = java_string_hash(key)
        spread = (hashed ^ ((hashed & 0xFFFFFFFF) >> 16)) & 0x7FFFFFFF
        nodes = bins[spread & (len(bins) - 1)]
        if any(existing == key for _, existing in nodes):
            continue  # a put of a present key keeps its place
        nodes.append((spread, key))
        size += 1
        if len(nodes) > 8 and len(bins) < 64:
            # treeifyBin on a small table: tryPresize(n << 1) grows to the power of two at or over 3n + 1 and on
            # until three quarters of the table reach it.
            wanted = 1 << (3 * len(bins)).bit_length()
            while wanted > size_control:
                transfer()
        if size >= size_control:
            transfer()
    return [key for nodes in bins for _, key in nodes]
