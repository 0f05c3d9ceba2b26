"""Bundle ranges, topic hashing, split detection and split algorithms: V19 is Pulsar's BundleSplitterTaskTest,
V20 the split algorithms' tests in `common/naming`."""

from __future__ import annotations

import itertools
import zlib

import pytest

from planner.errors import InputError
from planner.plan.bundles import (
    flow_or_qps_equally_divide,
    range_equally_divide,
    registry,
    specified_positions_divide,
    topic_count_equally_divide,
)
from planner.plan.bundles.bundle_splitter_task import find_bundles_to_split
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import (
    bundle_for_hash,
    bundle_for_topic,
    initial_boundaries,
    topic_hash,
)
from planner.plan.bundles.split import apply_split, can_split, equal_positions
from planner.plan.bundles.split_algorithm import TopicLoad
from planner.pulsar.bundle_range import BundleName, BundleNameError, BundleRange
from planner.pulsar.config import SPLIT_ALGORITHMS, PulsarConfig
from planner.pulsar.model import NamespaceBundleStats
from tests.builders import MIB, broker, bundle_data, load_data


def test_initial_boundaries_match_pulsar_layouts():
    assert initial_boundaries(4) == [0x00000000, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert initial_boundaries(3) == [0x00000000, 0x55555555, 0xAAAAAAAA, 0xFFFFFFFF]
    assert initial_boundaries(16)[1:3] == [0x10000000, 0x20000000]
    assert initial_boundaries(1) == [0, 0xFFFFFFFF]


def test_topic_hash_is_unsigned_crc32_and_picks_the_largest_lower_bound():
    topic = "persistent://public/default/my-topic"
    assert topic_hash(topic) == zlib.crc32(topic.encode()) & 0xFFFFFFFF
    boundaries = initial_boundaries(4)
    found = bundle_for_topic(topic, boundaries)
    assert found.lower <= topic_hash(topic) < found.upper
    assert bundle_for_hash(0x40000000, boundaries) == BundleRange(0x40000000, 0x80000000)
    assert bundle_for_hash(0x3FFFFFFF, boundaries) == BundleRange(0, 0x40000000)
    # The last bundle is closed: a hash equal to 0xffffffff belongs to it.
    assert bundle_for_hash(0xFFFFFFFF, boundaries) == BundleRange(0xC0000000, 0xFFFFFFFF)


def test_partitions_hash_separately():
    boundaries = initial_boundaries(16)
    ranges = {bundle_for_topic(f"persistent://t/ns/topic-partition-{i}", boundaries) for i in range(32)}
    assert len(ranges) > 1


def test_bundle_names_parse_and_refuse_malformed_ones():
    name = BundleName.parse("tenant/ns/0x40000000_0x80000000")
    assert (name.namespace, str(name.range)) == ("tenant/ns", "0x40000000_0x80000000")
    assert str(BundleName.parse("pulsar/standalone/127.0.0.1:8080/0x00000000_0xffffffff").range) == (
        "0x00000000_0xffffffff"
    )
    for bad in [
        "tenant/ns/0x4000000_0x80000000",
        "tenant/ns/0x40000000_0X80000000",
        "ns/0xAB000000_0xffffffff",
        "0x00000000_0xffffffff",
        "tenant/ns/0x80000000_0x40000000",
        "tenant/ns/0x10000000_0x10000000",
    ]:
        with pytest.raises(BundleNameError):
            BundleName.parse(bad)


def test_every_split_algorithm_pulsar_names_has_one_implementation_in_the_registry():
    assert tuple(algorithm.name for algorithm in registry.SPLIT_ALGORITHMS) == SPLIT_ALGORITHMS
    assert registry.split_algorithm("middle_divide") is None


def test_v20_range_equally_divide():
    assert range_equally_divide.split_positions(BundleRange(10, 0xFFFFFFFF)) == [0x80000004]
    assert range_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF)) == [0x7FFFFFFF]
    assert range_equally_divide.split_positions(BundleRange(0, 0x40000000)) == [0x20000000]
    assert range_equally_divide.split_positions(BundleRange(0xC0000000, 0xFFFFFFFF)) == [0xDFFFFFFF]


def test_v20_specified_positions_divide():
    bundle = BundleRange(1, 1000)
    positions = [-1, 0, 1, 100, 200, 500, 800, 1000, 1100]
    assert specified_positions_divide.split_positions(bundle, positions, ["topic", "topic2"]) == [100, 200, 500, 800]
    assert specified_positions_divide.split_positions(bundle, [1, 2], [], force=True) == [2]
    assert specified_positions_divide.split_positions(bundle, [100], ["topic"]) == []
    for empty in (None, []):
        with pytest.raises(InputError):
            specified_positions_divide.split_positions(bundle, empty, ["topic", "topic2"])


def test_topic_count_equally_divide_splits_between_the_middle_hashes():
    topics = [f"persistent://t/ns/topic-{i}" for i in range(6)]
    hashes = sorted(topic_hash(topic) for topic in topics)
    expected = hashes[2] + (hashes[3] - hashes[2]) // 2
    assert topic_count_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), topics) == [expected]
    assert topic_count_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), topics[:1]) == []


def test_flow_or_qps_equally_divide_cuts_where_the_rate_limit_would_be_passed():
    config = PulsarConfig.from_settings({"loadBalancerNamespaceBundleMaxMsgRate": "100"})
    topics = [TopicLoad(f"persistent://t/ns/topic-{i}", 60, 0) for i in range(4)]
    hashes = sorted(topic_hash(topic.name) for topic in topics)
    positions = flow_or_qps_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), topics, config)
    # 60 + 60 > 100 at every step: a cut between each pair of neighbouring hashes.
    assert positions == [a + (b - a) // 2 + 1 for a, b in itertools.pairwise(hashes)]
    # Below maxMsgRate * 1.1 in total: no split.
    calm = [TopicLoad(topic.name, 20, 0) for topic in topics]
    assert flow_or_qps_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), calm, config) == []
    idle = [TopicLoad(topics[0].name, 500, 0), TopicLoad(topics[1].name, 0, 0)]
    assert flow_or_qps_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), idle, config) == []


def test_applying_positions_replaces_the_bundle_by_its_parts():
    boundaries = initial_boundaries(4)
    bundle = BundleRange(0x40000000, 0x80000000)
    assert apply_split(boundaries, bundle, [0x60000000]) == [
        0,
        0x40000000,
        0x60000000,
        0x80000000,
        0xC0000000,
        0xFFFFFFFF,
    ]
    assert equal_positions(bundle, 4) == [0x50000000, 0x60000000, 0x70000000]
    assert not can_split(BundleRange(5, 6)) and can_split(BundleRange(5, 7))
    with pytest.raises(InputError):
        apply_split(boundaries, bundle, [0x90000000])
    with pytest.raises(InputError):
        apply_split(boundaries, BundleRange(0x40000000, 0xC0000000), [0x60000000])


def splitter_data(
    topics=5,
    rate=60001,
    names=("ten/ns/0x00000000_0x40000000", "ten/ns/0x40000000_0x80000000", "ten/ns/0x80000000_0xffffffff"),
):
    stats = {name: NamespaceBundleStats(topics=topics) for name in names}
    return load_data(
        {"b:8080": broker(bundles=names, last_stats=stats), "c:8080": broker()},
        {name: bundle_data(long_rate=rate) for name in names},
    )


def test_v19_a_bundle_with_one_topic_is_never_split():
    data = splitter_data(topics=1, rate=30001, names=("ten/ns/0x00000000_0x80000000",))
    assert find_bundles_to_split(data, PulsarConfig()) == []


def test_v19_namespace_maximum_bundles_caps_the_selection():
    config = PulsarConfig.from_settings({"loadBalancerNamespaceMaximumBundles": "3"})
    data = splitter_data()
    assert find_bundles_to_split(data, config) == []  # the namespace already has 3 bundles
    assert len(find_bundles_to_split(data, config, {"ten/ns": 1})) == 2
    assert len(find_bundles_to_split(data, PulsarConfig(), {"ten/ns": 3})) == 3


def test_split_thresholds_are_strict():
    config = PulsarConfig()
    assert find_bundles_to_split(splitter_data(rate=30000), config) == []
    assert len(find_bundles_to_split(splitter_data(rate=30000.5), config)) == 3
    throughput = load_data(
        {
            "b:8080": broker(
                bundles=["t/n/0x00000000_0xffffffff"],
                last_stats={"t/n/0x00000000_0xffffffff": NamespaceBundleStats(topics=2)},
            )
        },
        {"t/n/0x00000000_0xffffffff": bundle_data(long_throughput=100 * MIB + 1)},
    )
    assert find_bundles_to_split(throughput, config) == ["t/n/0x00000000_0xffffffff"]
    sessions = load_data(
        {
            "b:8080": broker(
                bundles=["t/n/0x00000000_0xffffffff"],
                last_stats={
                    "t/n/0x00000000_0xffffffff": NamespaceBundleStats(topics=2, consumer_count=600, producer_count=401)
                },
            )
        },
    )
    assert find_bundles_to_split(sessions, config) == ["t/n/0x00000000_0xffffffff"]
    no_limit = PulsarConfig.from_settings({"loadBalancerNamespaceBundleMaxSessions": "0"})
    assert find_bundles_to_split(sessions, no_limit) == []
