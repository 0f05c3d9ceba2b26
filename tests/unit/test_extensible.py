"""The extensible load manager's side, offline: what a broker's admin API answers made into its load
(collect/extensible), TransferShedder's input built from snapshots (plan/extensible: top bundles in Java's order,
the split strategy's hit counts) and the plan made from it (planning.make_transfer_plan)."""

from __future__ import annotations

import pytest

from planner.collect.extensible import broker_load, bundle_stats_from_topics, load_balancing_metrics
from planner.errors import InputError
from planner.plan.extensible import (
    bundles_to_split,
    extensible_load_data,
    moving_average,
    top_k_bundles,
    weighted_max,
)
from planner.plan.placement.extensible_least_resource_usage import best_brokers
from planner.plan.planning import make_transfer_plan
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, PulsarConfig
from planner.pulsar.model import BrokerLoadData, NamespaceBundleStats
from tests.builders import broker, bundle, load_data

EXTENSIBLE = PulsarConfig().with_settings({"loadManagerClassName": EXTENSIBLE_LOAD_MANAGER})


def _metrics(cpu: float = 10.0, memory: float = 20.0, ema: float | None = 0.25) -> list[dict]:
    """The shape of `/admin/v2/broker-stats/metrics` on a 4.2.4 broker: other metrics around the load manager's."""
    entries = [
        {"dimensions": {"metric": "jvm"}, "metrics": {"jvm_heap_used": 123}},
        {
            "dimensions": {"broker": "127.0.0.1", "metric": "loadBalancing"},
            "metrics": {
                "brk_lb_cpu_usage": cpu,
                "brk_lb_memory_usage": memory,
                "brk_lb_directMemory_usage": 1.5,
                "brk_lb_bandwidth_in_usage": 3.0,
                "brk_lb_bandwidth_out_usage": 4.0,
            },
        },
    ]
    if ema is not None:
        entries.append(
            {
                "dimensions": {"broker": "127.0.0.1", "feature": "max_ema", "metric": "loadBalancing"},
                "metrics": {"brk_lb_resource_usage": ema},
            }
        )
    return entries


def _topic(rate_in: float, throughput_in: float, consumers: int = 1) -> dict:
    return {
        "msgRateIn": rate_in,
        "msgRateOut": rate_in,
        "msgThroughputIn": throughput_in,
        "msgThroughputOut": throughput_in,
        "producerCount": 1,
        "subscriptions": {"sub": {"consumers": [{}] * consumers}},
    }


TOPIC_STATS = {
    "tenant/ns": {
        "0x00000000_0x80000000": {
            "persistent": {"persistent://tenant/ns/a": _topic(10, 1000), "persistent://tenant/ns/b": _topic(5, 500, 2)},
            "non-persistent": {"non-persistent://tenant/ns/c": _topic(1, 100)},
        },
        "0x80000000_0xffffffff": {"persistent": {"persistent://tenant/ns/d": _topic(2, 200)}},
    }
}


def test_a_brokers_metrics_give_its_usage_in_percent_and_its_own_weighted_max_ema():
    usage, ema = load_balancing_metrics(_metrics(cpu=42.0), "b1:8080")
    assert usage == {"cpu": 42.0, "memory": 20.0, "direct_memory": 1.5, "bandwidth_in": 3.0, "bandwidth_out": 4.0}
    assert ema == 0.25
    assert load_balancing_metrics(_metrics(ema=None), "b1:8080")[1] is None


def test_metrics_without_the_load_managers_figures_or_with_a_bad_value_are_refused_by_name():
    jvm_only = [{"dimensions": {"metric": "jvm"}, "metrics": {}}, {"dimensions": {"metric": "loadBalancing"}}]
    with pytest.raises(InputError, match=r"broker b1:8080: no brk_lb_bandwidth_in.*extensible load manager"):
        load_balancing_metrics(jvm_only, "b1:8080")
    bad = _metrics()
    bad[1]["metrics"]["brk_lb_memory_usage"] = "high"
    with pytest.raises(InputError, match=r"metrics of broker b1:8080: brk_lb_memory_usage: .*'high'"):
        load_balancing_metrics(bad, "b1:8080")
    with pytest.raises(InputError, match="expected a JSON list"):
        load_balancing_metrics({"metrics": []}, "b1:8080")  # type: ignore[arg-type]


def test_topic_stats_sum_per_bundle_as_the_broker_sums_its_bundle_stats():
    stats = bundle_stats_from_topics(TOPIC_STATS, "b1:8080")
    first = stats["tenant/ns/0x00000000_0x80000000"]
    assert (first.msg_rate_in, first.msg_throughput_out, first.topics) == (16, 1600, 3)
    assert (first.producer_count, first.consumer_count) == (3, 4)
    assert stats["tenant/ns/0x80000000_0xffffffff"].msg_throughput_in == 200
    bad = {"tenant/ns": {"0x00000000_0xffffffff": {"persistent": {"persistent://tenant/ns/x": {"msgRateIn": -1}}}}}
    with pytest.raises(InputError, match=r"broker b1:8080: persistent://tenant/ns/x: msgRateIn"):
        bundle_stats_from_topics(bad, "b1:8080")


def test_topic_rates_add_up_one_after_the_other_as_the_brokers_sum_does():
    """Java adds each topic's rate to the bundle's in turn; a compensated sum (Python 3.12's `sum` of floats) would
    give 1e16 + 2 here, a figure the broker never reports."""
    topics = {f"persistent://t/ns/t{index}": {"msgRateIn": rate} for index, rate in enumerate([1e16, 1.0, 1.0])}
    stats = bundle_stats_from_topics({"t/ns": {"0x00000000_0xffffffff": {"persistent": topics}}}, "b1:8080")
    assert stats["t/ns/0x00000000_0xffffffff"].msg_rate_in == 1e16


def test_a_brokers_load_counts_its_idle_owned_bundles_and_says_which_load_manager():
    idle = "tenant/ns/0xc0000000_0xffffffff"
    load = broker_load("b1:8080", _metrics(), bundle_stats_from_topics(TOPIC_STATS, "b1:8080"), [idle], 1_000)
    report = load.report
    assert report.load_manager_class_name == EXTENSIBLE_LOAD_MANAGER
    assert report.num_bundles == 3 and idle in report.bundles and report.num_topics == 4
    assert report.msg_throughput_in == 1800 and report.cpu.usage == 10.0 and report.cpu.limit == 100.0
    assert load.weighted_max_ema == 0.25


def test_pulsars_moving_average_starts_at_the_first_value():
    assert moving_average([], 0.9) == 0.0
    assert moving_average([10.0], 0.9) == 10.0
    assert moving_average([10.0, 20.0, 0.0], 0.9) == pytest.approx((10 * 0.9 + 2) * 0.9)


def test_the_weighted_max_weighs_memory_and_the_max_usage_leaves_it_out():
    report = broker(cpu=(10, 100), memory=(90, 100), bandwidth_in=(30, 100))
    # from 4.0 memory weighs 0 by default (1.0 before)
    assert weighted_max(report, EXTENSIBLE) == pytest.approx(0.3)
    assert weighted_max(report, EXTENSIBLE.with_settings({"pulsarVersion": "3.3.9"})) == pytest.approx(0.9)
    assert weighted_max(report, EXTENSIBLE.with_settings({"loadBalancerMemoryResourceWeight": "0.5"})) == 0.45


def _stats(throughput: float, topics: int = 1, rate: float = 0.0) -> NamespaceBundleStats:
    return NamespaceBundleStats(msg_throughput_in=throughput, msg_rate_in=rate, topics=topics)


def test_top_bundles_are_the_busiest_k_least_busy_first_without_system_or_idle_bundles():
    bundles = {bundle(i): _stats(i * 1e6) for i in range(1, 13)}
    bundles["pulsar/system/0x00000000_0xffffffff"] = _stats(9e9)
    bundles["pulsar/127.0.0.1:8080/0x00000000_0xffffffff"] = _stats(9e9)  # a heartbeat namespace
    bundles[bundle(40)] = _stats(0.0)
    top = [entry.bundle_name for entry in top_k_bundles(bundles, EXTENSIBLE).top_bundles_load_data]
    assert top == [bundle(i) for i in range(3, 13)]  # the 10 busiest, ascending
    # 3.0.x ranks idle bundles too; 4.2.4 leaves them out
    old = EXTENSIBLE.with_settings({"pulsarVersion": "3.0.7", "loadBalancerMaxNumberOfBundlesInBundleLoadReport": "20"})
    assert bundle(40) in [e.bundle_name for e in top_k_bundles(bundles, old).top_bundles_load_data]


def test_top_bundles_rank_by_javas_coarse_comparison_with_math_round():
    # 150 kB/s and 250 kB/s round to 2 and 3 (Java's Math.round, half up), 140 kB/s to 1
    bundles = {bundle(1): _stats(250_000), bundle(2): _stats(150_000), bundle(3): _stats(140_000, rate=0)}
    top = [entry.bundle_name for entry in top_k_bundles(bundles, EXTENSIBLE).top_bundles_load_data]
    assert top == [bundle(3), bundle(2), bundle(1)]
    # equal under the comparison (both round to 2): the topic count's 500-step does not separate 1 and 2 topics
    tied = {bundle(5): _stats(160_000, topics=2), bundle(4): _stats(200_000, topics=1)}
    assert [e.bundle_name for e in top_k_bundles(tied, EXTENSIBLE).top_bundles_load_data] == [bundle(4), bundle(5)]


def test_the_split_strategy_needs_more_consecutive_hits_than_the_threshold_and_respects_the_namespace_cap():
    config = EXTENSIBLE.with_settings(
        {
            "loadBalancerNamespaceBundleMaxMsgRate": "100",
            "loadBalancerNamespaceBundleSplitConditionHitCountThreshold": "2",
        }
    )
    # wide ranges (a one-hash range cannot split); a one-topic bundle never splits
    wide, single = "tenant/ns/0x00000000_0x40000000", "tenant/ns/0x40000000_0x80000000"
    hot = {wide: _stats(0, topics=4, rate=500), single: _stats(0, topics=1, rate=500)}
    reports = {"b1:8080": broker(bundles=hot, last_stats=hot)}
    hits: dict[str, dict[str, int]] = {}
    for cycle in range(1, 3):
        chosen, hits = bundles_to_split(reports, config, hits)
        assert chosen == [] and hits == {"b1:8080": {wide: cycle}}
    chosen, hits = bundles_to_split(reports, config, hits)
    assert [(c.bundle, c.broker, c.reason) for c in chosen] == [(wide, "b1:8080", "MsgRate")] and hits == {}
    # the namespace already has the most bundles it may have
    capped = config.with_settings({"loadBalancerNamespaceMaximumBundles": "4"})
    assert bundles_to_split(reports, capped, {"b1:8080": {wide: 5}}, {"tenant/ns": 4})[0] == []
    # a bundle that moved starts afresh on its new broker (each broker counts its own)
    moved = {"b2:8080": broker(bundles=hot, last_stats=hot)}
    assert bundles_to_split(moved, config, {"b1:8080": {wide: 2}}) == ([], {"b2:8080": {wide: 1}})
    # a bundle back under every limit loses its hits
    calm = {wide: _stats(0, topics=4, rate=5)}
    assert bundles_to_split({"b1:8080": broker(bundles=calm, last_stats=calm)}, config, {"b1:8080": {wide: 2}}) == (
        [],
        {},
    )


def _skewed(hot_ema: float = 0.9) -> tuple:
    bundles = {bundle(i): _stats((i + 1) * 1e6, topics=1) for i in range(4)}
    reports = {
        "b1:8080": broker(cpu=(90, 100), throughput_in=10e6, bundles=bundles, last_stats=bundles),
        "b2:8080": broker(cpu=(10, 100)),
        "b3:8080": broker(cpu=(10, 100)),
    }
    data = load_data(reports)
    extensible = extensible_load_data(
        reports, {"b1:8080": hot_ema, "b2:8080": 0.1, "b3:8080": 0.1}, {}, 1_000_000, EXTENSIBLE
    )
    return data, extensible


def test_a_transfer_plan_moves_bundles_from_the_hot_broker_to_named_destinations():
    data, extensible = _skewed()
    config = EXTENSIBLE.with_settings({"loadBalancerSheddingConditionHitCountThreshold": "0"})
    plan = make_transfer_plan(
        "c", data, extensible, config, None, now_millis=1_000_000, requested_strategy="AvgShedder"
    )
    unloads = [action for action in plan.actions if action.kind == "unload"]
    assert unloads and {action.source for action in unloads} == {"b1:8080"}
    assert all(action.destination in {"b2:8080", "b3:8080"} for action in unloads)
    assert plan.strategy == "TransferShedder" and plan.load_manager == "ExtensibleLoadManagerImpl"
    assert any("planned with TransferShedder, not AvgShedder" in note for note in plan.notes)
    assert plan.model_dump(by_alias=True)["loadManager"] == "ExtensibleLoadManagerImpl"


def test_a_transfer_plan_waits_for_the_condition_to_hold_and_says_so():
    data, extensible = _skewed()
    first = make_transfer_plan("c", data, extensible, EXTENSIBLE, None, now_millis=1_000_000)
    assert first.actions == () and first.balance is not None and not first.balance.balanced
    assert "consecutive cycles" in first.balance.summary and first.state_after["hitCount"] == 1
    # an even cluster is balanced and its counter is reset
    even, level = _skewed(hot_ema=0.1)
    balanced = make_transfer_plan("c", even, level, EXTENSIBLE, first.state_after, now_millis=1_000_000)
    assert balanced.balance is not None and balanced.balance.balanced and balanced.state_after["hitCount"] == 0


def test_one_available_broker_plans_nothing_and_keeps_the_counter():
    data, extensible = _skewed()
    alone = extensible.model_copy(update={"available_brokers": ["b1:8080"]})
    plan = make_transfer_plan("c", data, alone, EXTENSIBLE, {"hitCount": 3}, now_millis=1_000_000)
    assert plan.actions == () and plan.state_after["hitCount"] == 3
    assert any("Pulsar does not shed with fewer than two" in note for note in plan.notes)


def test_a_broker_unloaded_within_the_shedding_delay_holds_the_cycle_and_the_plan_says_why():
    data, extensible = _skewed()
    cooling = extensible.model_copy(update={"recently_unloaded_brokers": {"b1:8080": 1_000_000 - 60_000}})
    config = EXTENSIBLE.with_settings({"loadBalancerSheddingConditionHitCountThreshold": "0"})
    plan = make_transfer_plan("c", data, cooling, config, None, now_millis=1_000_000)
    assert plan.actions == () and plan.balance is not None
    assert plan.balance.summary.startswith("Nothing planned (CoolDown): a broker was unloaded less than")
    assert "(180 s)" in plan.balance.summary and "std" not in plan.balance.summary
    # past the delay the broker is forgotten and the cycle sheds
    later = extensible.model_copy(update={"recently_unloaded_brokers": {"b1:8080": 1_000_000 - 181_000}})
    assert make_transfer_plan("c", data, later, config, None, now_millis=1_000_000).actions


def test_with_transfers_off_the_plan_names_no_destination_and_pulsar_places_the_bundles():
    data, extensible = _skewed()
    config = EXTENSIBLE.with_settings(
        {"loadBalancerSheddingConditionHitCountThreshold": "0", "loadBalancerTransferEnabled": "false"}
    )
    plan = make_transfer_plan("c", data, extensible, config, None, now_millis=1_000_000)
    unloads = [action for action in plan.actions if action.kind == "unload"]
    assert unloads and all(action.destination is None for action in unloads)
    # Pulsar's placement: the brokers at least 10 points under the mean weightedMaxEMA (0.9, 0.1, 0.1)
    assert all(
        action.reason.endswith("placed by LeastResourceUsageWithWeight at random among b2:8080, b3:8080")
        for action in unloads
    )


def test_extensible_placement_picks_among_brokers_under_the_mean_else_among_all():
    def loads(**emas: float) -> dict[str, BrokerLoadData]:
        return {name: BrokerLoadData.model_validate({"weightedMaxEMA": ema}) for name, ema in emas.items()}

    config = EXTENSIBLE  # 10 points under the mean
    assert best_brokers(["a", "b", "c"], loads(a=0.9, b=0.1, c=0.5), config) == ["b"]
    # exactly the difference under the mean counts (<=): mean 0.5, 0.4 + 0.1 <= 0.5
    assert best_brokers(["a", "b"], loads(a=0.6, b=0.4), config) == ["b"]
    # nobody far enough under: all candidates, a broker without load data among them
    assert best_brokers(["a", "b", "x"], loads(a=0.5, b=0.45), config) == ["a", "b", "x"]
    # a broker without load data is not in the mean and never among the best
    assert best_brokers(["x", "a", "b"], loads(a=0.9, b=0.1), config) == ["b"]
    wider = config.with_settings({"loadBalancerAverageResourceUsageDifferenceThresholdPercentage": "50"})
    assert best_brokers(["a", "b", "c"], loads(a=0.9, b=0.1, c=0.5), wider) == ["a", "b", "c"]
