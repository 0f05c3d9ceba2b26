"""Behaviours found by running Pulsar's own classes on generated inputs (tests/differential), pinned here."""

from __future__ import annotations

import pytest

from planner.plan.bundles import flow_or_qps_equally_divide
from planner.plan.bundles.split_algorithm import TopicLoad
from planner.plan.shedding import avg_shedder, threshold_shedder, uniform_load_shedder
from planner.plan.shedding.avg_shedder import AvgShedderState
from planner.plan.shedding.threshold_shedder import ThresholdShedderState
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import PulsarConfig
from planner.pulsar.load_manager_shared import is_sla_or_heartbeat_namespace, is_system_service_namespace
from planner.pulsar.versions import PulsarVersion
from tests.builders import broker, bundle, bundle_data, load_data

# --- tests/unit/test_avg_shedder.py: replaces test_recently_unloaded_system_and_unknown_bundles_are_never_selected


def test_recently_unloaded_heartbeat_sla_monitor_and_unknown_bundles_are_never_selected():
    # getBundleDataForLoadShedding leaves out heartbeat and SLA-monitor bundles only: pulsar/system is sheddable.
    heartbeat_v1 = "pulsar/standalone/hot:8080/0x00000000_0xffffffff"
    heartbeat = "pulsar/hot:8080/0x00000000_0xffffffff"
    sla_monitor_v1 = "sla-monitor/standalone/hot:8080/0x00000000_0xffffffff"
    sla_monitor = "sla-monitor/hot:8080/0x00000000_0xffffffff"
    system = "pulsar/system/0x00000000_0xffffffff"
    ordinary = [bundle(i) for i in range(1, 4)]
    special = [heartbeat_v1, heartbeat, sla_monitor_v1, sla_monitor, system]
    data = load_data(
        {
            "hot:8080": broker(cpu=(90, 100), rate_in=100000, bundles=[*ordinary, *special, bundle(9)]),
            "cold:8080": broker(cpu=(10, 100)),
        },
        {name: bundle_data(100) for name in [*ordinary, *special]},
        recently_unloaded={bundle(1): 1},
    )

    def selected(version):
        config = PulsarConfig.from_settings({"pulsarVersion": version})
        outcome = avg_shedder.find_bundles_for_unloading(data, config, AvgShedderState(high_hit_count={"hot:8080": 1}))
        return sorted(unload.bundle for unload in outcome.unloads)

    # 4.2 no longer parses V1 names (tenant/cluster/ns, PIP-457), so it recognises neither V1 form.
    assert selected("4.2.4") == sorted([bundle(2), bundle(3), heartbeat_v1, sla_monitor_v1, system])
    # Before 4.2 the SLA-monitor namespace has a cluster part; `sla-monitor/<host:port>` is an ordinary one.
    assert selected("4.0.8") == sorted([bundle(2), bundle(3), sla_monitor, system])


# --- tests/unit/test_threshold_and_overload_shedders.py: replaces
#     test_departed_brokers_keep_their_average_but_do_not_count_in_the_mean


def threshold(data, settings=None, state=None):
    return threshold_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings or {}), state)


def test_departed_brokers_lose_their_average_and_start_afresh_when_back():
    # The leader calls onActiveBrokersChange before each cycle; ThresholdShedder drops departed brokers' averages.
    state = ThresholdShedderState({"gone:8080": 0.7, "a:8080": 0.5})
    outcome = threshold(load_data({"a:8080": broker(cpu=(10, 100))}), {}, state)
    assert "gone:8080" not in outcome.state.broker_avg_resource_usage
    assert abs(outcome.state.broker_avg_resource_usage["a:8080"] - (0.5 * 0.9 + (1 - 0.9) * 0.1)) < 1e-7
    assert ThresholdShedderState.from_json(outcome.state.to_json()) == outcome.state
    back = threshold(
        load_data({"a:8080": broker(cpu=(10, 100)), "gone:8080": broker(cpu=(30, 100))}), {}, outcome.state
    )
    assert back.state.broker_avg_resource_usage["gone:8080"] == pytest.approx(0.3, abs=1e-6)


# --- tests/unit/test_uniform_load_shedder.py: new


def test_pre_4_1_overshoot_is_int_arithmetic_that_wraps_near_the_int_limit():
    # Budget int((20e9 - 1) * 0.2) saturates at Integer.MAX_VALUE; Java's `remaining + 1000` then wraps negative.
    data = load_data(
        {"hot:8080": broker(throughput_in=20e9, bundles=[bundle(1), bundle(2)]), "idle:8080": broker()},
        {bundle(1): bundle_data(throughput_in=1e9), bundle(2): bundle_data(throughput_in=5e8)},
    )

    def selected(version):
        config = PulsarConfig.from_settings({"pulsarVersion": version})
        return [unload.bundle for unload in uniform_load_shedder.find_bundles_for_unloading(data, config).unloads]

    assert selected("4.2.4") == [bundle(1), bundle(2)]
    assert selected("4.0.8") == []


# --- tests/unit/test_bundles.py: new


def test_flow_or_qps_walks_colliding_hashes_as_the_last_topic_with_that_hash():
    # These two names have the same CRC-32 (0x6112266d); Pulsar keys topics by hash, the last one wins.
    first = "persistent://acme/telemetry/collide-0e7899110d32dc6d"
    second = "persistent://acme/telemetry/collide-1437867fe980a84c"
    topics = [
        TopicLoad(first, 600.0),
        TopicLoad("persistent://acme/telemetry/t-0", 300.0),  # 0x04d3251a
        TopicLoad(second, 700.0),
        TopicLoad("persistent://acme/telemetry/t-1", 200.0),  # 0x73d4158c
    ]
    config = PulsarConfig.from_settings({"loadBalancerNamespaceBundleMaxMsgRate": "1000"})
    # Walk: 300, +700 = 1000 (not over), +700 over -> cut after the collision, then 700 + 200. Pulsar 4.2.4 agrees.
    positions = flow_or_qps_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), topics, config)
    assert positions == [0x6112266E]


# --- tests/unit/test_bundles.py or a load_manager_shared test: new


@pytest.mark.parametrize(
    ("namespace", "latest", "before_4_2"),
    [
        ("pulsar/broker-1:8080", True, True),
        ("pulsar/cluster-a/broker-1:8080", False, True),
        ("sla-monitor/broker-1:8080", True, False),
        ("sla-monitor/cluster-a/broker-1:8080", False, True),
        ("pulsar/system", False, False),
        ("pulsar/broker-1", False, False),
        ("tenant/ns", False, False),
    ],
)
def test_sla_or_heartbeat_namespaces_by_release(namespace, latest, before_4_2):
    assert is_sla_or_heartbeat_namespace(namespace, PulsarVersion.parse("4.2.4")) is latest
    assert is_sla_or_heartbeat_namespace(namespace, PulsarVersion.parse("4.0.8")) is before_4_2


# --- found against Pulsar 3.0.7 (tests/differential with pulsarVersion=3.0.7)


def test_before_4_2_a_v1_heartbeat_namespace_may_have_a_colon_in_its_cluster_name():
    # Pulsar before 4.2 matches `pulsar/[^/]+/([^:]+:\d+)` as well as `pulsar/([^:]+:\d+)`; NamedEntity allows
    # a colon in a cluster name, which only the first pattern accepts. 4.2 parses no V1 name at all.
    namespace = "pulsar/dc1:2/broker-1:8080"
    assert is_sla_or_heartbeat_namespace(namespace, PulsarVersion.parse("3.0.7"))
    assert is_sla_or_heartbeat_namespace(namespace, PulsarVersion.parse("4.0.8"))
    assert not is_sla_or_heartbeat_namespace(namespace, PulsarVersion.parse("4.2.4"))
    assert is_system_service_namespace(namespace)

    heartbeat = f"{namespace}/0x00000000_0xffffffff"
    data = load_data(
        {
            "hot:8080": broker(rate_in=100000, bundles=[bundle(1), bundle(2), heartbeat]),
            "idle:8080": broker(),
        },
        {bundle(1): bundle_data(100), bundle(2): bundle_data(50), heartbeat: bundle_data(200)},
    )

    def selected(version):
        config = PulsarConfig.from_settings({"pulsarVersion": version})
        return [unload.bundle for unload in uniform_load_shedder.find_bundles_for_unloading(data, config).unloads]

    assert heartbeat not in selected("3.0.7")
    assert heartbeat in selected("4.2.4")


# --- found against Pulsar 3.0.0 (tests/differential/test_every_release.py, the slow run)


def test_before_3_0_2_shedding_leaves_out_pulsar_system_too():
    # 3.0.0's getBundleDataForLoadShedding filters by isSystemServiceNamespace (pulsar/system included); from 3.0.2
    # (3.0.1 is not on Maven Central) by isSLAOrHeartbeatNamespace, so pulsar/system is sheddable.
    assert is_sla_or_heartbeat_namespace("pulsar/system", PulsarVersion.parse("3.0.0"))
    assert not is_sla_or_heartbeat_namespace("pulsar/system", PulsarVersion.parse("3.0.2"))
    assert is_sla_or_heartbeat_namespace("pulsar/broker-1:8080", PulsarVersion.parse("3.0.0"))
    assert not is_sla_or_heartbeat_namespace("tenant/ns", PulsarVersion.parse("3.0.0"))


def test_the_3_1_line_took_direct_memory_out_of_the_score_from_3_1_1():
    # Found on 3.1.2 by the slow run (ThresholdShedder differed in 46 of 200 cases): PR #21168 (3.2.0) was
    # backported; the default is 1.0 in 3.1.0's ServiceConfiguration and 0.0 in 3.1.2's.
    assert PulsarVersion.parse("3.1.0").direct_memory_weight_default == 1.0
    assert PulsarVersion.parse("3.1.2").direct_memory_weight_default == 0.0
    assert PulsarVersion.parse("3.0.7").direct_memory_weight_default == 1.0
    assert PulsarVersion.parse("3.2.0").direct_memory_weight_default == 0.0
