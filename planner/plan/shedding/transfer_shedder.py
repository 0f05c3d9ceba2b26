"""TransferShedder, the extensible load manager's shedding strategy (PIP-192,
`org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder.findBundlesForUnloading`).

Read in the 3.0.2, 3.0.7, 3.1.2, 3.2.0, 3.2.3, 3.3.2, 3.3.5, 4.0.0, 4.0.1, 4.0.8 and 4.2.4 sources. Each cycle:

1. The brokers are sorted by `weightedMaxEMA` (ascending, stable: ties keep the load data store's order; the
   sorted list holds every broker with load data, those whose data is outdated too).
2. Load statistics over the brokers whose data is younger than `loadBalancerBrokerLoadDataTTLInSeconds`: the mean
   and standard deviation of `weightedMaxEMA`. A broker unloaded from within `loadBalanceSheddingDelayInSeconds`
   of its data's update stops the cycle (CoolDown); so do no usable data (OutDatedData, NoBrokers) and an
   available broker without load data (NoLoadData).
3. The shedding condition (std above `loadBalancerBrokerLoadTargetStd`, the least loaded broker underloaded, or
   the most loaded overloaded) must hold on more than `loadBalancerSheddingConditionHitCountThreshold`
   consecutive cycles.
4. Then, up to `loadBalancerMaxNumberOfBrokerSheddingPerCycle` times, the most loaded broker gives the least
   loaded one half their load gap, in bytes/s: its top bundles, least busy first, until the next would pass
   that amount; a bundle that would pass it may still go when a swap (bundles of the least loaded broker moved
   the other way) keeps both brokers below the busiest's throughput. The last reported bundle never goes.
   With `loadBalancerTransferEnabled` each unload names its destination (a transfer).

Pure: the hit counter is an explicit state value, `now` an input. Where Java's arithmetic gives NaN or an
infinity (a broker with zero load or throughput), so does this code. Offline there is no ownership channel.

`isTransferable`: with the cluster's policies read, `transferable` is Pulsar's check of each candidate bundle
(`planner.plan.extensible_filters.transfer_refusal`: a bundle with isolation or anti-affinity policies only
with `loadBalancerSheddingBundlesWithPoliciesEnabled`, the destination among the brokers its filter pipeline
leaves), asked where Pulsar asks it: after the excluded and recently unloaded bundles, before the last-bundle
rule, for the busiest broker's bundles and for the least loaded one's swap candidates. Without it (policies not
read) every bundle counts as transferable, as Pulsar's shedder does when it has no PulsarService.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from planner.errors import InputError
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import BrokerLoadData, ExtensibleLoadData, TopBundleLoadData

NAME = "TransferShedder"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder"


class Reason(StrEnum):
    """`UnloadDecision.Reason`: why bundles were unloaded (Overloaded, Underloaded) or why a cycle unloaded none."""

    OVERLOADED = "Overloaded"
    UNDERLOADED = "Underloaded"
    HIT_COUNT = "HitCount"
    NO_BUNDLES = "NoBundles"
    COOL_DOWN = "CoolDown"
    OUTDATED_DATA = "OutDatedData"
    NO_LOAD_DATA = "NoLoadData"
    NO_BROKERS = "NoBrokers"


def _count(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"invalid {NAME} state: field {field_name} must be a non-negative integer, got {value!r}")
    return value


# (bundle, source, destination) -> None when Pulsar's isTransferable lets the bundle go from source to destination,
# else why not, in one line naming the policy or filter.
Transferable = Callable[[str, str, str], str | None]


@dataclass(frozen=True, slots=True)
class TransferShedderState:
    """The consecutive cycles the shedding condition held (`unloadConditionHitCount`), and per broker and bundle
    those its split condition held (each broker's split strategy keeps its own `bundleHighTrafficFrequency`,
    carried beside it by the planner)."""

    hit_count: int = 0
    split_hit_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TransferShedderState:
        splits = document.get("splitHitCounts", {})
        if not isinstance(splits, Mapping) or not all(isinstance(counts, Mapping) for counts in splits.values()):
            raise InputError(f"invalid {NAME} state: field splitHitCounts must map brokers to objects")
        counts = {
            str(broker): {
                str(bundle): _count(count, f"splitHitCounts.{broker}.{bundle}") for bundle, count in bundles.items()
            }
            for broker, bundles in splits.items()
        }
        return cls(_count(document.get("hitCount", 0), "hitCount"), counts)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"strategy": NAME, "hitCount": self.hit_count}
        splits = {broker: dict(sorted(counts.items())) for broker, counts in sorted(self.split_hit_counts.items())}
        if any(splits.values()):
            document["splitHitCounts"] = {broker: counts for broker, counts in splits.items() if counts}
        return document


@dataclass(frozen=True, slots=True)
class TransferDecision:
    """One unload (`Unload(sourceBroker, serviceUnit, destBroker)`) and why."""

    source: str
    bundle: str
    destination: str | None
    reason: Reason
    throughput: float  # the bundle's bytes/s in + out, as its broker reported it

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.source, "bundle": self.bundle, "destination": self.destination, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class TransferOutcome:
    """The cycle's unloads in the order decided (Pulsar returns them as a set), why none when there are none, its
    next state, the recently unloaded brokers as the cycle leaves them (it forgets those past the delay), and the
    load statistics it computed (the mean and std of `weightedMaxEMA`)."""

    decisions: tuple[TransferDecision, ...]
    skipped: Reason | None
    state: TransferShedderState
    recently_unloaded_brokers: dict[str, int]
    average: float = 0.0
    std: float = 0.0
    notes: tuple[str, ...] = field(default=())
    # The bundles `isTransferable` kept where they are, each once with why (only with the cluster's policies read).
    held: tuple[str, ...] = field(default=())


def _java_sqrt(value: float) -> float:
    return math.sqrt(value) if value >= 0 else math.nan


def _java_div(numerator: float, denominator: float) -> float:
    """A Java double division: by zero it is an infinity, or NaN for 0/0 and NaN operands."""
    if denominator != 0:
        return numerator / denominator
    if numerator == 0 or math.isnan(numerator):
        return math.nan
    return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)


def _java_max(a: float, b: float) -> float:
    """`Math.max`: NaN if either is NaN."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _double_compare_key(value: float) -> tuple[int, float, int]:
    """The order of `Double.compare`: -0.0 before 0.0, NaN after everything."""
    if math.isnan(value):
        return (1, 0.0, 0)
    return (0, value, 1 if math.copysign(1.0, value) > 0 else 0)


class _LoadStats:
    """`TransferShedder.LoadStats`."""

    def __init__(self, brokers: Sequence[tuple[str, BrokerLoadData]], max_shedding: int) -> None:
        self.sorted = sorted(brokers, key=lambda entry: _double_compare_key(entry[1].weighted_max_ema))
        self.max_index = len(self.sorted) - 1
        self.min_index = 0
        self.shedding = 0
        self.max_shedding = max_shedding
        self.sq_sum = 0.0
        self.total = 0
        self.average = 0.0
        self.std = 0.0

    def update(self, total: float, sq_sum: float, brokers: int) -> None:
        self.sq_sum, self.total = sq_sum, brokers
        if brokers == 0:
            self.average = self.std = 0.0
        else:
            self.average = total / brokers
            self.std = _java_sqrt(sq_sum / brokers - self.average * self.average)  # no abs(), as in Java

    def offload(self, max_load: float, min_load: float, offload: float) -> None:
        self.sq_sum -= max_load * max_load + min_load * min_load
        max_after = _java_max(0.0, max_load - offload)
        min_after = min_load + offload
        self.sq_sum += max_after * max_after + min_after * min_after
        self.std = _java_sqrt(abs(self.sq_sum / self.total - self.average * self.average))
        self.shedding += 1
        self.min_index += 1

    def has_transferable_brokers(self) -> bool:
        return self.shedding < self.max_shedding and self.min_index < self.max_index

    def peek_min(self) -> str:
        return self.sorted[self.min_index][0]

    def peek_max(self) -> str:
        return self.sorted[self.max_index][0]

    def poll_max(self) -> str:
        broker = self.sorted[self.max_index][0]
        self.max_index -= 1
        return broker


def _skip_reason(
    stats: _LoadStats,
    brokers: Sequence[tuple[str, BrokerLoadData]],
    available: Sequence[str],
    recently_unloaded_brokers: dict[str, int],
    config: PulsarConfig,
    now: int,
) -> Reason | None:
    """`LoadStats.update`: the statistics over the usable brokers, or why the cycle stops before shedding."""
    outdated, total, sq_sum, count = False, 0.0, 0.0, 0
    missing = set(available)
    for broker, data in brokers:
        missing.discard(broker)
        if now - data.updated_at > config.broker_load_data_ttl_seconds * 1000:
            outdated = True
            continue
        if broker in recently_unloaded_brokers:
            if data.updated_at - recently_unloaded_brokers[broker] < config.shedding_delay_seconds * 1000:
                stats.update(0.0, 0.0, 0)
                return Reason.COOL_DOWN
            del recently_unloaded_brokers[broker]
        load = data.weighted_max_ema
        total += load
        sq_sum += load * load
        count += 1
    if count == 0:
        stats.update(0.0, 0.0, 0)
        return Reason.OUTDATED_DATA if outdated else Reason.NO_BROKERS
    if missing:
        stats.update(0.0, 0.0, 0)
        return Reason.NO_LOAD_DATA
    stats.update(total, sq_sum, count)
    return None


def _underloaded_multiplier(config: PulsarConfig) -> float:
    return min(0.5, max(0.0, config.broker_load_target_std / 2.0))


def _is_underloaded(broker: str, stats: _LoadStats, load: Mapping[str, BrokerLoadData], config: PulsarConfig) -> bool:
    data = load.get(broker)
    if data is None:
        return False
    multiplier = _underloaded_multiplier(config)
    if not config.pulsar_version.transfer_shedder_compares_throughput_ema:
        return data.msg_throughput_ema < 1 or data.weighted_max_ema < stats.average * multiplier
    if data.weighted_max_ema < stats.average * multiplier:
        return True
    busiest = load.get(stats.peek_max())
    if busiest is None:
        return False
    return data.msg_throughput_ema < busiest.msg_throughput_ema * multiplier


def _is_overloaded(broker: str, average: float, load: Mapping[str, BrokerLoadData], config: PulsarConfig) -> bool:
    data = load.get(broker)
    if data is None:
        return False
    value = data.weighted_max_ema
    return value > config.overload_threshold and value > average + config.broker_load_target_std


def _throughput(bundle: TopBundleLoadData) -> float:
    return bundle.stats.msg_throughput_in + bundle.stats.msg_throughput_out


def find_bundles_for_unloading(
    load_data: ExtensibleLoadData,
    config: PulsarConfig,
    state: TransferShedderState,
    now_millis: int,
    transferable: Transferable | None = None,
) -> TransferOutcome:
    """One shedding cycle over `load_data` at `now_millis`; `transferable`: Pulsar's `isTransferable` over the
    cluster's policies and broker filters (None: every bundle is transferable)."""
    brokers = list(load_data.brokers.items())
    load = load_data.brokers
    recent_brokers = dict(load_data.recently_unloaded_brokers)
    stats = _LoadStats(brokers, config.max_number_of_broker_shedding_per_cycle)
    skipped = _skip_reason(stats, brokers, load_data.available, recent_brokers, config, now_millis)
    if skipped is not None:
        return TransferOutcome((), skipped, state, recent_brokers, stats.average, stats.std)

    average, std = stats.average, stats.std  # as computed, before the cycle's offloads change the std
    target_std = config.broker_load_target_std
    condition = (
        stats.std > target_std
        or _is_underloaded(stats.peek_min(), stats, load, config)
        or _is_overloaded(stats.peek_max(), stats.average, load, config)
    )
    hit_count = state.hit_count + 1 if condition else 0
    if hit_count <= config.shedding_condition_hit_count_threshold:
        note = f"the shedding condition held {hit_count} cycle(s) in a row; it must hold more than " + str(
            config.shedding_condition_hit_count_threshold
        )
        return TransferOutcome(
            (), Reason.HIT_COUNT, replace(state, hit_count=hit_count), recent_brokers, average, std, (note,)
        )

    version = config.pulsar_version
    excluded = config.shedding_excluded_namespaces if version.has_shedding_excluded_namespaces else frozenset()
    skip_idle = version.transfer_shedder_skips_idle_bundles
    transfer = config.transfer_enabled
    decisions: list[TransferDecision] = []
    empty_load_data = few_bundles = 0
    held: dict[str, str] = {}  # bundle -> why isTransferable kept it, the first time it did

    def refused(bundle: str, source: str, destination: str) -> bool:
        reason = transferable(bundle, source, destination) if transferable is not None else None
        if reason is not None:
            held.setdefault(bundle, f"{bundle}: not transferred from {source} to {destination}: {reason}")
        return reason is not None

    while stats.has_transferable_brokers():
        if stats.std > target_std:
            reason = Reason.OVERLOADED
        elif _is_underloaded(stats.peek_min(), stats, load, config):
            reason = Reason.UNDERLOADED
        elif _is_overloaded(stats.peek_max(), stats.average, load, config):
            reason = Reason.OVERLOADED
        else:
            break
        busiest, least = stats.poll_max(), stats.peek_min()
        if busiest not in load or least not in load:
            empty_load_data += 1
            continue
        max_load, min_load = load[busiest].weighted_max_ema, load[least].weighted_max_ema
        offload = (max_load - min_load) / 2
        max_throughput, min_throughput = load[busiest].msg_throughput, load[least].msg_throughput
        offload_throughput = _java_div(max_throughput * offload, max_load)
        marked_to_offload = marked_to_gain = 0.0
        top = load_data.top_bundles.get(busiest)
        if top is None or not top.top_bundles_load_data:
            empty_load_data += 1
            continue
        bundles = top.top_bundles_load_data
        if len(bundles) == 1:
            few_bundles += 1
            continue
        least_top = load_data.top_bundles.get(least)
        swap_candidates = iter(least_top.top_bundles_load_data) if least_top is not None else None
        remaining = len(bundles)
        for entry in bundles:
            bundle = entry.bundle_name
            if namespace_of(bundle) in excluded or bundle in load_data.recently_unloaded_bundles:
                continue
            if refused(bundle, busiest, least):
                continue
            if remaining <= 1:
                break
            throughput = _throughput(entry)
            if skip_idle and throughput == 0:
                continue
            swapped, swaps, swap_throughput = False, [], 0.0
            if marked_to_offload - marked_to_gain + throughput > offload_throughput:
                if transfer and swap_candidates is not None:
                    max_after = max_throughput - marked_to_offload + marked_to_gain - throughput
                    min_after = min_throughput + marked_to_offload - marked_to_gain + throughput
                    for candidate in swap_candidates:
                        if refused(candidate.bundle_name, least, busiest):
                            continue
                        candidate_throughput = _throughput(candidate)
                        if skip_idle and candidate_throughput == 0:
                            continue
                        max_with, min_with = max_after + candidate_throughput, min_after - candidate_throughput
                        if max_with < max_throughput and min_with < max_throughput:
                            swaps.append(
                                TransferDecision(least, candidate.bundle_name, busiest, reason, candidate_throughput)
                            )
                            max_after, min_after = max_with, min_with
                            swap_throughput += candidate_throughput
                            if min_after <= max_after and max_after < max_throughput * 0.75:
                                swapped = True
                                break
                if not swapped:
                    break
            if transfer:
                if swapped:
                    decisions.extend(swaps)
                    # Pulsar counts the swapped traffic as gained only in debug mode (a bug in every release
                    # read): with debug off, later bundles and the offload below ignore it.
                    if config.debug_mode_enabled:
                        marked_to_gain += swap_throughput
                decisions.append(TransferDecision(busiest, bundle, least, reason, throughput))
            else:
                decisions.append(TransferDecision(busiest, bundle, None, reason, throughput))
            marked_to_offload += throughput
            remaining -= 1
        if marked_to_offload > 0:
            adjusted = _java_div((marked_to_offload - marked_to_gain) * max_load, max_throughput)
            stats.offload(max_load, min_load, adjusted)
        else:
            few_bundles += 1

    unique = list(dict.fromkeys(decisions))  # a set in Pulsar
    kept = tuple(held.values())
    if not unique:
        reason = Reason.NO_LOAD_DATA if empty_load_data else Reason.NO_BUNDLES if few_bundles else Reason.HIT_COUNT
        next_state = replace(state, hit_count=hit_count)
        return TransferOutcome((), reason, next_state, recent_brokers, average, std, held=kept)
    return TransferOutcome(tuple(unique), None, replace(state, hit_count=0), recent_brokers, average, std, held=kept)
