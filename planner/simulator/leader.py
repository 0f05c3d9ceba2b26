"""What the leader broker knows: written load reports and the bundles' short/long-term averages.

Pulsar's strategies never see live traffic. Each broker writes its `LocalBrokerData` only when its
load moved past `loadBalancerReportUpdateThresholdPercentage` or `loadBalancerReportUpdateMaxIntervalMinutes`
passed (`ModularLoadManagerImpl.needBrokerDataUpdate`), and every write makes the leader fold one sample of
*every* broker's last written bundle stats into the bundle averages (`ModularLoadManagerImpl.updateBundleData`).
This lag is the reason in-broker shedding misjudges moves, so the simulator keeps it exactly.

The averages of thousands of bundles are updated on every report event, so they live in numpy arrays
with the same arithmetic as `planner.samples.time_average` (tests check they agree bit for bit), and the
strategies get them through read-only mappings that build `BundleData` records only when asked.

With the cluster's policies, the leader also checks each unload its shedder chose before it places it
(`doLoadShedding`): `unload_refusal`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from planner.plan.placement.pipeline import allowed_brokers, excluded_namespaces, owned_namespaces
from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import MODULAR_LOAD_MANAGER, PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.model import (
    DEFAULT_MESSAGE_RATE,
    DEFAULT_MESSAGE_THROUGHPUT,
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageMessageData,
)
from planner.pulsar.policies import should_anti_affinity_namespace_unload
from planner.simulator.traffic import RATE_IN, RATE_OUT, THROUGHPUT_IN, THROUGHPUT_OUT

_DEFAULTS = np.array(
    [DEFAULT_MESSAGE_RATE, DEFAULT_MESSAGE_RATE, DEFAULT_MESSAGE_THROUGHPUT, DEFAULT_MESSAGE_THROUGHPUT]
)


def fold_samples(averages: np.ndarray, counts: np.ndarray, max_samples: int, mask: np.ndarray, x: np.ndarray) -> None:
    """`n = min(n + 1, max)`, `avg = ((n - 1) * avg + x) / n` for the rows in `mask`, in place (Pulsar's
    `TimeAverageMessageData.update`).

    Whole-array arithmetic (no gathers) with exactly the operations of `planner.samples.time_average`.
    """
    n = np.where(mask, np.minimum(counts + 1, max_samples), counts)
    n_float = np.maximum(n, 1).astype(float)[:, None]
    updated = ((n_float - 1.0) * averages + x) / n_float
    averages[:] = np.where(mask[:, None], updated, averages)
    counts[:] = n


class StatsView(Mapping[str, NamespaceBundleStats]):
    """A report's `lastStats`: bundle name -> NamespaceBundleStats, built on access."""

    __slots__ = ("_cache", "_index", "_names", "_stats", "_topics")

    def __init__(self, names: Sequence[str], stats: np.ndarray, topics: np.ndarray) -> None:
        self._names = names
        self._index: dict[str, int] | None = None
        self._stats = stats
        self._topics = topics
        self._cache: dict[str, NamespaceBundleStats] = {}

    def _rows(self) -> dict[str, int]:
        if self._index is None:
            self._index = {name: row for row, name in enumerate(self._names)}
        return self._index

    def __getitem__(self, name: str) -> NamespaceBundleStats:
        cached = self._cache.get(name)
        if cached is None:
            row = self._rows()[name]
            rate_in, rate_out, throughput_in, throughput_out = self._stats[row].tolist()
            cached = _EMPTY_STATS.model_copy(
                update={
                    "msg_rate_in": rate_in,
                    "msg_rate_out": rate_out,
                    "msg_throughput_in": throughput_in,
                    "msg_throughput_out": throughput_out,
                    "topics": int(self._topics[row]),
                }
            )
            self._cache[name] = cached
        return cached

    def __contains__(self, name: object) -> bool:
        return name in self._rows()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# Built once; reports are shallow copies with their own values (model_construct would deep-copy defaults).
_EMPTY_REPORT = LocalBrokerData(load_manager_class_name=MODULAR_LOAD_MANAGER)  # the simulated brokers' leader


def usage_report(
    *, cpu_usage: float, cpu_limit: float, bandwidth_in: float, bandwidth_out: float, bandwidth_limit: float
) -> LocalBrokerData:
    """A report with just the resource usages: enough for the score, cheap enough for every broker-minute."""
    return _EMPTY_REPORT.model_copy(
        update={
            "cpu": ResourceUsage.model_construct(usage=cpu_usage, limit=cpu_limit),
            "bandwidth_in": ResourceUsage.model_construct(usage=bandwidth_in, limit=bandwidth_limit),
            "bandwidth_out": ResourceUsage.model_construct(usage=bandwidth_out, limit=bandwidth_limit),
        }
    )


def full_report(
    usage: LocalBrokerData, *, names: Sequence[str], stats: np.ndarray, topics: np.ndarray, now_millis: int
) -> LocalBrokerData:
    """The `LocalBrokerData` the broker writes; totals are sums over `lastStats`, as in Pulsar."""
    totals = stats.sum(axis=0).tolist() if len(names) else [0.0, 0.0, 0.0, 0.0]
    return usage.model_copy(
        update={
            "msg_rate_in": totals[RATE_IN],
            "msg_rate_out": totals[RATE_OUT],
            "msg_throughput_in": totals[THROUGHPUT_IN],
            "msg_throughput_out": totals[THROUGHPUT_OUT],
            "last_stats": StatsView(names, stats, topics),
            "bundles": frozenset(names),
            "num_bundles": len(names),
            "num_topics": int(topics.sum()),
            "last_update": now_millis,
        }
    )


class BundleAverages:
    """The leader's `bundleData`: short (10-sample) and long (1000-sample) averages per bundle."""

    def __init__(self, names: Sequence[str]) -> None:
        count = len(names)
        self.names = names
        self.index = {name: row for row, name in enumerate(names)}
        self.short = np.tile(_DEFAULTS, (count, 1))
        self.long = np.tile(_DEFAULTS, (count, 1))
        self.short_count = np.zeros(count, dtype=np.int64)
        self.long_count = np.zeros(count, dtype=np.int64)
        self.topics = np.zeros(count, dtype=np.int64)
        self.present = np.zeros(count, dtype=bool)
        self.version = 0

    def update_all(self, reports: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """One leader `updateAll()`: one sample per (broker, bundle) of the written reports, in broker order.

        `reports` holds (bundle rows, stats, topics) of each written report. A bundle in two reports
        (moved, the old owner not re-reported yet) gets two samples, as Pulsar's loop gives it. Bundles
        in no report are dropped; if they come back they start from Pulsar's defaults with no samples.
        """
        reports = [report for report in reports if len(report[0])]
        if not reports:
            self.present[:] = False
            self.version += 1
            return
        rows = np.concatenate([report[0] for report in reports])
        multiplicity = np.bincount(rows, minlength=len(self.names))
        if multiplicity.max() <= 1:
            batches = [(rows, np.concatenate([r[1] for r in reports]), np.concatenate([r[2] for r in reports]))]
        else:
            batches = list(reports)  # a bundle reported twice: sample it once per report, in order
        fresh = (multiplicity > 0) & ~self.present
        self.short[fresh] = _DEFAULTS
        self.long[fresh] = _DEFAULTS
        self.short_count[fresh] = 0
        self.long_count[fresh] = 0
        for batch_rows, stats, topics in batches:
            mask = np.zeros(len(self.names), dtype=bool)
            mask[batch_rows] = True
            sample = np.zeros_like(self.short)
            sample[batch_rows] = stats
            fold_samples(self.short, self.short_count, NUM_SHORT_SAMPLES, mask, sample)
            fold_samples(self.long, self.long_count, NUM_LONG_SAMPLES, mask, sample)
            self.topics[batch_rows] = topics
        self.present = multiplicity > 0
        self.version += 1

    def bundle_data(self, row: int) -> BundleData:
        return _EMPTY_BUNDLE.model_copy(
            update={
                "short_term_data": _time_average(_EMPTY_SHORT, int(self.short_count[row]), self.short[row].tolist()),
                "long_term_data": _time_average(_EMPTY_LONG, int(self.long_count[row]), self.long[row].tolist()),
                "topics": int(self.topics[row]),
            }
        )


# Templates: shallow copies with new values are several times cheaper than model_construct.
_EMPTY_BUNDLE = BundleData()
_EMPTY_SHORT = TimeAverageMessageData(max_samples=NUM_SHORT_SAMPLES)
_EMPTY_LONG = TimeAverageMessageData(max_samples=NUM_LONG_SAMPLES)
_EMPTY_STATS = NamespaceBundleStats()


def _time_average(template: TimeAverageMessageData, num_samples: int, values: list[float]) -> TimeAverageMessageData:
    return template.model_copy(
        update={
            "num_samples": num_samples,
            "msg_rate_in": values[RATE_IN],
            "msg_rate_out": values[RATE_OUT],
            "msg_throughput_in": values[THROUGHPUT_IN],
            "msg_throughput_out": values[THROUGHPUT_OUT],
        }
    )


class BundleDataView(Mapping[str, BundleData]):
    """`LoadData.bundleData` over the current averages; records are built once per averages version."""

    __slots__ = ("_averages", "_cache", "_version")

    def __init__(self, averages: BundleAverages) -> None:
        self._averages = averages
        self._cache: dict[int, BundleData] = {}
        self._version = averages.version

    def __getitem__(self, name: str) -> BundleData:
        averages = self._averages
        row = averages.index.get(name)
        if row is None or not averages.present[row]:
            raise KeyError(name)
        if self._version != averages.version:
            self._cache.clear()
            self._version = averages.version
        cached = self._cache.get(row)
        if cached is None:
            cached = averages.bundle_data(row)
            self._cache[row] = cached
        return cached

    def __contains__(self, name: object) -> bool:
        row = self._averages.index.get(name) if isinstance(name, str) else None
        return row is not None and bool(self._averages.present[row])

    def __iter__(self) -> Iterator[str]:
        names = self._averages.names
        return (names[row] for row in np.flatnonzero(self._averages.present).tolist())

    def __len__(self) -> int:
        return int(self._averages.present.sum())


# --- doLoadShedding's checks of each unload ---------------------------------------------------------


def unload_refusal(
    bundle: str,
    broker: str,
    view: LoadData,
    session: PlacementSession,
    config: PulsarConfig,
    policies: ClusterPolicies,
) -> str | None:
    """Why the leader leaves `bundle` on `broker` although its shedder chose it, or None to place it
    (`ModularLoadManagerImpl.doLoadShedding`, the same in 3.0.7, 3.3.6, 4.0.8 and 4.2.4): its namespace is in
    `loadBalancerSheddingExcludedNamespaces` (4.1 on); `shouldNamespacePoliciesUnload`: no other broker may own it;
    `shouldAntiAffinityNamespaceUnload`: every broker it may go to holds as many namespaces of its anti-affinity
    group as its owner, so the unload would come back. The rules are `planner.pulsar.policies`'s, on what the
    leader sees: the written reports and the bundles it preallocated."""
    namespace = namespace_of(bundle)
    if namespace in excluded_namespaces(config):
        return f"{namespace} is in loadBalancerSheddingExcludedNamespaces"
    candidates = allowed_brokers(view, namespace, policies, config.pulsar_version)
    if not set(candidates) - {broker}:
        return f"no broker but {broker} may own {namespace} (shouldNamespacePoliciesUnload)"
    owned = owned_namespaces(view, session)
    if not should_anti_affinity_namespace_unload(namespace, broker, candidates, policies, owned):
        return f"every broker {namespace} may go to holds as many of its anti-affinity group as {broker}"
    return None
