"""Concise builders of Pulsar load data for tests (Pulsar's unit tests use names like `bundle-3`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planner.pulsar.config import MODULAR_LOAD_MANAGER
from planner.pulsar.model import (
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageMessageData,
)

MIB = 1024 * 1024


def bundle(index: int, namespace: str = "tenant/ns") -> str:
    """A valid full bundle name standing for Pulsar's test name `bundle-<index>`."""
    return f"{namespace}/0x{index:08x}_0x{index + 1:08x}"


def usage(used: float, limit: float) -> ResourceUsage:
    return ResourceUsage(usage=used, limit=limit)


def averages(
    rate_in: float = 0.0, rate_out: float = 0.0, throughput_in: float = 0.0, throughput_out: float = 0.0, *, long=False
) -> TimeAverageMessageData:
    return TimeAverageMessageData(
        max_samples=NUM_LONG_SAMPLES if long else NUM_SHORT_SAMPLES,
        num_samples=1,
        msg_rate_in=rate_in,
        msg_rate_out=rate_out,
        msg_throughput_in=throughput_in,
        msg_throughput_out=throughput_out,
    )


def bundle_data(
    rate_in: float = 0.0,
    rate_out: float = 0.0,
    throughput_in: float = 0.0,
    throughput_out: float = 0.0,
    *,
    long_rate: float | None = None,
    long_throughput: float | None = None,
    topics: int = 1,
) -> BundleData:
    """Short-term averages as given; long-term the same unless overridden (split into in/out halves)."""
    short = averages(rate_in, rate_out, throughput_in, throughput_out)
    if long_rate is None and long_throughput is None:
        long = averages(rate_in, rate_out, throughput_in, throughput_out, long=True)
    else:
        rate = long_rate if long_rate is not None else rate_in + rate_out
        throughput = long_throughput if long_throughput is not None else throughput_in + throughput_out
        long = averages(rate, 0.0, throughput, 0.0, long=True)
    return BundleData(short_term_data=short, long_term_data=long, topics=topics)


def broker(
    *,
    cpu: tuple[float, float] = (0, 0),
    memory: tuple[float, float] = (0, 0),
    direct_memory: tuple[float, float] = (0, 0),
    bandwidth_in: tuple[float, float] = (0, 0),
    bandwidth_out: tuple[float, float] = (0, 0),
    rate_in: float = 0.0,
    rate_out: float = 0.0,
    throughput_in: float = 0.0,
    throughput_out: float = 0.0,
    bundles: Iterable[str] = (),
    last_stats: Mapping[str, NamespaceBundleStats] | None = None,
    load_manager: str | None = MODULAR_LOAD_MANAGER,
    persistent_topics: bool = True,
) -> LocalBrokerData:
    """A broker's load report; it runs the modular load manager and loads persistent topics unless told."""
    bundles = frozenset(bundles)
    return LocalBrokerData(
        cpu=usage(*cpu),
        memory=usage(*memory),
        direct_memory=usage(*direct_memory),
        bandwidth_in=usage(*bandwidth_in),
        bandwidth_out=usage(*bandwidth_out),
        msg_rate_in=rate_in,
        msg_rate_out=rate_out,
        msg_throughput_in=throughput_in,
        msg_throughput_out=throughput_out,
        bundles=bundles,
        last_stats=dict(last_stats) if last_stats is not None else {name: NamespaceBundleStats() for name in bundles},
        num_bundles=len(bundles),
        load_manager_class_name=load_manager,
        persistent_topics_enabled=persistent_topics,
    )


def load_data(
    brokers: Mapping[str, LocalBrokerData],
    bundles: Mapping[str, BundleData] | None = None,
    recently_unloaded: Mapping[str, int] | None = None,
) -> LoadData:
    return LoadData(
        brokers=dict(brokers), bundle_data=dict(bundles or {}), recently_unloaded_bundles=dict(recently_unloaded or {})
    )
