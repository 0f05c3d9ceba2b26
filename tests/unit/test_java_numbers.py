"""Java's numeric and sort semantics where Python's differ: saturating casts, NaN in max, List.sort with a
comparator that is not transitive (AvgShedder's `(int)(a - b)` before 4.2), and a ConcurrentHashMap's order."""

from __future__ import annotations

import functools
import math
import random

import pytest

from planner.plan.shedding.avg_shedder import sort_brokers
from planner.pulsar.broker_score import max_resource_usage_with_weight
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import (
    INT_MAX,
    concurrent_hash_map_order,
    java_int,
    java_max,
    java_sort,
    java_string_hash,
)
from tests.builders import broker


def truncating(scores):
    return lambda first, second: java_int(scores[first] - scores[second])


@pytest.mark.parametrize("size", [0, 1, 2, 5, 31, 32, 100])
def test_with_a_total_order_it_sorts_like_python(size):
    rng = random.Random(size)
    values = [rng.randint(0, 20) for _ in range(size)]
    compare = lambda a, b: (a > b) - (a < b)  # noqa: E731
    assert java_sort(values, compare) == sorted(values, key=functools.cmp_to_key(compare))


def test_near_ties_follow_javas_run_and_binary_insertion_steps():
    # Traced through java.util.TimSort.countRunAndMakeAscending and binarySort by hand:
    # c < a starts a descending run [c, a], reversed to [a, c]; b (0.6 from a, 0.6 from c: "equal" to both)
    # is inserted after c, where binarySort's `compare(pivot, a[mid]) < 0` stops.
    scores = {"a": 0.0, "b": 0.6, "c": 1.2}
    assert java_sort(["c", "a", "b"], truncating(scores)) == ["a", "c", "b"]
    # An ascending run by the comparator covers everything: Java leaves the order as it is.
    assert java_sort(["a", "b", "c"], truncating(scores)) == ["a", "b", "c"]
    assert java_sort(["b", "a", "c"], truncating(scores)) == ["b", "a", "c"]


def test_an_infinite_score_saturates_instead_of_raising():
    scores = {"a:8080": math.inf, "b:8080": 10.0, "c:8080": 50.0}
    assert java_int(math.inf) == INT_MAX and java_int(math.nan) == 0
    config = PulsarConfig.from_settings({"pulsarVersion": "3.0.7"})
    assert sort_brokers(scores, config) == ["b:8080", "c:8080", "a:8080"]
    with pytest.raises(OverflowError):
        int(scores["a:8080"] - scores["b:8080"])  # what the comparator did before


def test_a_nan_usage_is_skipped_by_javas_max():
    assert java_max(math.nan, 5.0, 3.0) == 5.0 and math.isnan(max(math.nan, 5.0, 3.0))
    assert java_max(math.nan) == -math.inf
    # A limit below float32's range makes the CPU percentage infinite; with the CPU weight at 0 that is NaN.
    odd = broker(cpu=(1, 1e-50), bandwidth_in=(40, 100))
    weights = PulsarConfig.from_settings({"loadBalancerCPUResourceWeight": "0"}).resource_weights
    assert max_resource_usage_with_weight(odd, weights) == pytest.approx(0.4)


# Printed by OpenJDK 17 (jshell): `String.join(",", map.keySet())` after the puts.
JAVA_ORDER_13 = (
    "10.0.6.81:8080,10.0.1.62:8080,10.0.8.93:8080,10.0.12.50:8080,10.0.3.89:8080,"
    "10.0.2.27:8080,10.0.10.23:8080,10.0.0.0:8080,10.0.11.85:8080,10.0.4.54:8080,"
    "10.0.9.58:8080,10.0.5.19:8080,10.0.7.31:8080"
)
JAVA_ORDER_40 = (
    "10.0.4.69:8080,10.0.0.30:8080,10.0.8.93:8080,10.0.5.49:8080,10.0.12.50:8080,"
    "10.0.7.46:8080,10.0.9.88:8080,10.0.3.89:8080,10.0.2.27:8080,10.0.10.23:8080,"
    "10.0.9.73:8080,10.0.11.85:8080,10.0.1.92:8080,10.0.3.22:8080,10.0.11.18:8080,"
    "10.0.2.57:8080,10.0.9.58:8080,10.0.2.42:8080,10.0.10.38:8080,10.0.12.65:8080,"
    "10.0.6.14:8080,10.0.4.84:8080,10.0.6.81:8080,10.0.1.62:8080,10.0.0.15:8080,"
    "10.0.12.80:8080,10.0.5.34:8080,10.0.8.11:8080,10.0.7.61:8080,10.0.1.77:8080,"
    "10.0.11.3:8080,10.0.0.45:8080,10.0.0.0:8080,10.0.4.54:8080,10.0.3.7:8080,10.0.6.96:8080,"
    "10.0.10.53:8080,10.0.8.26:8080,10.0.5.19:8080,10.0.7.31:8080"
)


def test_string_hash_is_javas():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB")  # a known collision
    assert java_string_hash("x" * 40) == 847293440  # wrapped many times (jshell)


def test_concurrent_hash_map_order_is_javas_through_resizes_and_collisions():
    keys = [f"10.0.{i * 7 % 13}.{i * 31 % 97}:8080" for i in range(40)]
    assert ",".join(concurrent_hash_map_order(keys[:13])) == JAVA_ORDER_13  # one resize, 16 -> 32 bins
    assert ",".join(concurrent_hash_map_order(keys)) == JAVA_ORDER_40  # and 32 -> 64
    # Equal hashes share a bin in put order; "C#" and "Bb" are in the next bins.
    colliding = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "BBAa", "C#", "Bb"]
    assert concurrent_hash_map_order(colliding) == ["Aa", "BB", "C#", "Bb", "AaAa", "BBBB", "AaBB", "BBAa"]
    assert concurrent_hash_map_order(["b", "a", "b"]) == ["a", "b"]  # a second put keeps its place
