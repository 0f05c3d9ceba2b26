"""Java's numeric and sort semantics where Python's differ: saturating casts, NaN in max, and List.sort with a
comparator that is not transitive (AvgShedder's `(int)(a - b)` before 4.2)."""

from __future__ import annotations

import functools
import math
import random

import pytest

from planner.config import PulsarConfig
from planner.java_numbers import INT_MAX, java_int, java_max, java_sort
from planner.plan.broker_score import max_resource_usage_with_weight
from planner.plan.shedding.avg_shedder import sort_brokers
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
