"""Broker score (`LocalBrokerData.getMaxResourceUsageWithWeight`), time averages (V21:
`TimeAverageMessageData.update`) and configuration."""

from __future__ import annotations

import logging

import pytest

from planner.errors import InputError
from planner.pulsar.broker_score import broker_usage, max_resource_usage
from planner.pulsar.config import PulsarConfig, load_config, read_properties
from planner.pulsar.java_numbers import percent_usage
from planner.pulsar.model import NamespaceBundleStats, TimeAverageMessageData, default_bundle_data
from planner.samples.time_average import update_bundle_data, update_time_average
from tests.builders import broker, usage


def test_percentages_are_float32():
    # The float32 value Java prints as 60.00000381469727.
    assert percent_usage(usage(60, 100)) == 60.000003814697266
    assert percent_usage(usage(40, 100)) == 40.0
    assert percent_usage(usage(5, 0)) == 0.0 and percent_usage(usage(5, -1)) == 0.0
    assert percent_usage(usage(140, 100)) == pytest.approx(140.0, abs=1e-4)


def test_score_is_the_weighted_maximum_without_heap_memory_or_direct_memory_on_4x():
    reported = broker(cpu=(20, 100), memory=(99, 100), direct_memory=(90, 100), bandwidth_in=(30, 100))
    assert broker_usage(reported, PulsarConfig()) == pytest.approx(0.30)
    # 3.0.x counts direct memory with weight 1.0 by default.
    assert broker_usage(reported, PulsarConfig.from_settings({"pulsarVersion": "3.0.8"})) == pytest.approx(0.90)
    assert max_resource_usage(reported) == pytest.approx(0.90)
    heavy_cpu = PulsarConfig.from_settings({"loadBalancerCPUResourceWeight": "2"})
    assert broker_usage(reported, heavy_cpu) == pytest.approx(0.40)


def test_misspelled_bandwidth_keys_apply_when_the_new_key_keeps_its_default():
    reported = broker(bandwidth_in=(50, 100))
    legacy = PulsarConfig.from_settings({"loadBalancerBandwithInResourceWeight": "0.5"})
    assert legacy.resource_weights.bandwidth_in == 0.5
    both = PulsarConfig.from_settings(
        {"loadBalancerBandwithInResourceWeight": "0.5", "loadBalancerBandwidthInResourceWeight": "0.2"}
    )
    assert both.resource_weights.bandwidth_in == 0.2
    assert broker_usage(reported, both) == pytest.approx(0.10)


def test_v21_time_average_update_rule():
    average = TimeAverageMessageData(max_samples=10)
    values = []
    for rate in (100, 200, 300):
        average = update_time_average(average, NamespaceBundleStats(msg_rate_in=rate))
        values.append(average.msg_rate_in)
    assert values == [100, 150, 200]
    saturated = TimeAverageMessageData(max_samples=10, num_samples=10, msg_rate_in=200)
    assert update_time_average(saturated, NamespaceBundleStats(msg_rate_in=1200)).msg_rate_in == 300
    long_term = TimeAverageMessageData(max_samples=1000, num_samples=1000, msg_rate_in=200)
    assert update_time_average(long_term, NamespaceBundleStats(msg_rate_in=1200)).msg_rate_in == 201


def test_first_sample_replaces_the_defaults_of_an_unseen_bundle():
    fresh = default_bundle_data()
    assert fresh.short_term_data.msg_rate_in == 50 and fresh.long_term_data.msg_throughput_out == 50000
    updated = update_bundle_data(fresh, NamespaceBundleStats(msg_rate_in=7, msg_throughput_out=9, topics=3))
    assert updated.short_term_data.msg_rate_in == 7 and updated.long_term_data.msg_throughput_out == 9
    assert updated.short_term_data.msg_rate_out == 0 and updated.topics == 3


def test_config_defaults_follow_the_version():
    latest = PulsarConfig()
    assert latest.max_unload_percentage == 0.2 and latest.direct_memory_weight == 0.0
    assert str(latest.pulsar_version) == "4.2.4"
    old = PulsarConfig.from_settings({"pulsarVersion": "3.0"})
    assert old.direct_memory_weight == 1.0 and old.pulsar_version.uniform_shedder_overshoot == 1000
    assert PulsarConfig.from_settings({"pulsarVersion": "3.2.4"}).direct_memory_weight == 0.0
    # another version through with_settings takes that version's defaults, and keeps what was set
    moved = PulsarConfig.from_settings({"pulsarVersion": "4.2.4", "maxUnloadPercentage": "0.3"})
    moved = moved.with_settings({"pulsarVersion": "3.0.7"})
    assert (moved.direct_memory_weight, moved.memory_weight, moved.max_unload_percentage) == (1.0, 1.0, 0.3)


def test_bad_values_name_the_key():
    cases = {
        "maxUnloadPercentage": "lots",
        "loadBalancerAvgShedderHitCountHighThreshold": "1.5",
        "lowerBoundarySheddingEnabled": "yes",
        "pulsarVersion": "2.11",
        "maxUnloadPercentage ": "2",
    }
    for key, value in cases.items():
        with pytest.raises(InputError, match=key.strip()):
            PulsarConfig.from_settings({key.strip(): value})


def test_unknown_keys_are_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = PulsarConfig.from_settings({"loadBalancerAvgShedderLowTreshold": "5"})
    assert config.avg_shedder_low_threshold == 15
    assert "loadBalancerAvgShedderLowTreshold" in caplog.text


def test_broker_conf_is_read_like_java_properties_and_set_wins(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# comment\n! another comment\n"
        "maxUnloadPercentage=0.5\n"
        "loadBalancerAvgShedderLowThreshold : 20\n"
        "loadBalancerSheddingExcludedNamespaces=public/a, public/b\n"
        "loadBalancerAvgShedderHighThreshold=\n"
        "loadBalancerLoadSheddingStrategy=org.apache.pulsar.broker.loadbalance.impl.\\\n"
        "    AvgShedder\n"
        "brokerServicePort=6650\n"
    )
    assert read_properties(conf)["loadBalancerLoadSheddingStrategy"] == (
        "org.apache.pulsar.broker.loadbalance.impl.AvgShedder"
    )
    config = load_config(conf, ["loadBalancerAvgShedderLowThreshold=25"])
    assert config.max_unload_percentage == 0.5
    assert config.avg_shedder_low_threshold == 25
    assert config.avg_shedder_high_threshold == 40  # blank keeps the default
    assert config.shedding_excluded_namespaces == frozenset({"public/a", "public/b"})


def test_set_needs_key_equals_value():
    with pytest.raises(InputError, match="KEY=VALUE"):
        load_config(None, ["maxUnloadPercentage"])
