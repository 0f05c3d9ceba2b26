"""Random but valid inputs for the differential tests, seeded, and free of the ties Java breaks by hash order.

Kinds of case, each a JSON-ready dict that both the Java harness and the planner read:

- `shed_case(seed)`: a LoadData (2-50 brokers, 0-200 bundles each, traffic over several orders of magnitude,
  system-namespace bundles, bundles without bundle data, recently unloaded bundles) plus config overrides, for
  AvgShedder (3-6 consecutive runs), UniformLoadShedder, ThresholdShedder (2-4 runs) and OverloadShedder;
- `split_candidates_case(seed)`: a LoadData and the namespaces' bundle counts for BundleSplitterTask;
- `split_positions_case(seed)`: one bundle, the namespace's topics (with stats) and a split algorithm;
- `transfer_case(seed)`: the extensible load manager's load data for TransferShedder, several cycles;
- `extensible_split_case(seed)`: one broker's bundle stats over several cycles for the extensible load
  manager's split strategy (`DefaultNamespaceBundleSplitStrategyImpl`);
- `extensible_placement_case(seed)`: candidates and their load data for its placement
  (`extensions.strategy.LeastResourceUsageWithWeight`);
- `extensible_filters_case(seed)`: a lookup through the extensible load manager's broker filters, cluster policies
  included;
- `cycle_case(seed)`: a whole `doLoadShedding` cycle of the modular load manager, and `placement_case(seed)`: a
  client's lookups through its `selectBrokerForAssignment`, both mostly with random cluster policies
  (`cluster_policies`: isolation policies, the drain fence, failure domains, anti-affinity groups) written into
  its metadata store.

Tie rules. Pulsar keeps brokers and bundles in hash maps, so where two values are exactly equal the answer
depends on HashMap iteration order; the planner breaks those ties by name. The generator avoids them:

1. Broker scores (weighted max usage, float32 percentages) are pairwise distinct (AvgShedder's sort and
   pairing; ThresholdShedder's lower-boundary pick, where the first of equal maxima wins). For releases
   whose AvgShedder compares `(int)(a - b)` (3.0.x, 4.0.0-4.0.7, 4.1.x), at least one point apart: scores
   less than a point apart compare as equal there, and the sort's answer depends on HashMap order. A
   clashing broker gets new resources (in an even cluster, its level moved up by one to two points).
2. The largest broker message rate and the largest broker throughput are each held by one broker only
   (UniformLoadShedder's overloaded broker).
3. Within one broker, the candidate bundles' short-term message rates are pairwise distinct, and so are their
   short-term throughputs, zero included (the shedders' descending sorts are stable over hash order).
4. No two bundles have equal BundleData: AvgShedder remembers planned destinations in a HashMap keyed by the
   BundleData value (`@EqualsAndHashCode`), so equal values would share one destination.
5. Each bundle is reported by one broker only, and a namespace's bundle count is either at the split limit
   already or leaves room for every bundle it reports: when only some bundles fit, which ones win depends on
   broker (ConcurrentHashMap) and `lastStats` order.
6. Topic hashes in a split case are distinct, except for deliberate CRC-32 collisions (found by a birthday
   search) in a tenth of the split-position cases; with those the cases check that the planner handles equal
   hashes exactly as Pulsar's list-and-HashMap code does.
7. Failure domains are disjoint, as the admin API keeps them (a broker in two domains would map to the one read
   last). Isolation policies are written in the case's order, which is the order Pulsar reads them back in (the
   first policy matching a namespace applies).

Not avoided, because random data practically never meets it: ThresholdShedder sums the brokers' averages in
ConcurrentHashMap order, the planner in id order, so the mean can differ in its last bit; a broker would have to
sit within that bit of `avg + threshold` for the decision to change.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import zlib
from collections.abc import Callable
from typing import Any

from planner.execute.fence import fence_name, fence_policy
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, MODULAR_LOAD_MANAGER, PulsarConfig
from planner.pulsar.model import LocalBrokerData
from planner.pulsar.versions import PulsarVersion

FULL_UPPER = 0xFFFFFFFF
MIB = 1024 * 1024
CLUSTER = "dc1"

SHED_STRATEGIES = ("AvgShedder", "UniformLoadShedder", "ThresholdShedder", "OverloadShedder")
SPLIT_ALGORITHMS = (
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
)


# --- shared helpers ----------------------------------------------------------------------------------------


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return 10 ** rng.uniform(math.log10(low), math.log10(high))


def _bundle(namespace: str, lower: int, upper: int) -> str:
    return f"{namespace}/0x{lower:08x}_0x{upper:08x}"


def _ranges(rng: random.Random, count: int) -> list[tuple[int, int]]:
    """`count` consecutive ranges covering the whole hash space, cut at random boundaries."""
    cuts = sorted(rng.sample(range(1, FULL_UPPER), count - 1))
    boundaries = [0, *cuts, FULL_UPPER]
    return list(itertools.pairwise(boundaries))


def _broker_ids(rng: random.Random, count: int) -> list[str]:
    ids: set[str] = set()
    while len(ids) < count:
        if rng.random() < 0.5:
            ids.add(f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:8080")
        else:
            ids.add(f"broker-{rng.randint(0, 999)}.pulsar.svc.cluster.local:{rng.choice([8080, 8443, 9080])}")
    ids_list = sorted(ids)
    rng.shuffle(ids_list)
    return ids_list


def _fmt(value: float, digits: int = 3) -> str:
    """A config value as broker.conf would hold it (Java and Python parse it to the same double)."""
    return f"{value:.{digits}f}"


# --- shedding ----------------------------------------------------------------------------------------------


def _shed_config(rng: random.Random) -> dict[str, str]:
    """Overrides of the shedders' settings, each present about half the time, within sensible ranges."""
    low = rng.randint(0, 30)
    candidates: dict[str, Any] = {
        "maxUnloadPercentage": lambda: _fmt(rng.uniform(0.05, 1.0)),
        "minUnloadMessage": lambda: str(rng.choice([0, 1, 100, 1000, 5000, int(_log_uniform(rng, 1, 20000))])),
        "minUnloadMessageThroughput": lambda: str(rng.choice([0, MIB, int(_log_uniform(rng, 1000, 50 * MIB))])),
        "loadBalancerAvgShedderLowThreshold": lambda: str(low),
        "loadBalancerAvgShedderHighThreshold": lambda: str(rng.randint(low, low + 50)),
        "loadBalancerAvgShedderHitCountLowThreshold": lambda: str(rng.randint(1, 8)),
        "loadBalancerAvgShedderHitCountHighThreshold": lambda: str(rng.randint(1, 4)),
        "loadBalancerMsgRateDifferenceShedderThreshold": lambda: rng.choice(["0", "-1", _fmt(rng.uniform(1, 300), 2)]),
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": lambda: rng.choice(
            ["0", _fmt(rng.uniform(1, 20), 2)]
        ),
        "maxUnloadBundleNumPerShedding": lambda: str(rng.choice([-1, 1, 2, 3, 5, 10])),
        "loadBalancerBrokerThresholdShedderPercentage": lambda: str(rng.randint(0, 40)),
        "loadBalancerHistoryResourcePercentage": lambda: rng.choice(["0", "1", _fmt(rng.uniform(0, 1))]),
        "loadBalancerBundleUnloadMinThroughputThreshold": lambda: rng.choice(["0", _fmt(rng.uniform(0, 30), 2)]),
        "lowerBoundarySheddingEnabled": lambda: rng.choice(["true", "false"]),
        "loadBalancerBrokerOverloadedThresholdPercentage": lambda: str(rng.randint(30, 100)),
        "loadBalancerCPUResourceWeight": lambda: _fmt(rng.uniform(0.1, 2), 2),
        "loadBalancerDirectMemoryResourceWeight": lambda: rng.choice(["0", "1", _fmt(rng.uniform(0, 2), 2)]),
        "loadBalancerMemoryResourceWeight": lambda: _fmt(rng.uniform(0, 2), 2),
        "loadBalancerBandwidthInResourceWeight": lambda: rng.choice(["1.0", _fmt(rng.uniform(0, 2), 2)]),
        "loadBalancerBandwidthOutResourceWeight": lambda: rng.choice(["1.0", _fmt(rng.uniform(0, 2), 2)]),
        "loadBalancerBandwithInResourceWeight": lambda: rng.choice(["1.0", _fmt(rng.uniform(0, 2), 2)]),
        "loadBalancerBandwithOutResourceWeight": lambda: rng.choice(["1.0", _fmt(rng.uniform(0, 2), 2)]),
    }
    return {key: make() for key, make in candidates.items() if rng.random() < 0.5}


def _usage(rng: random.Random, limit: float, level: float, exact: bool, noise: float = 0.3) -> dict[str, float]:
    """A resource at about `level` of `limit`; `exact` gives round numbers that hit float32 boundaries."""
    if limit <= 0:
        return {"usage": round(rng.uniform(0, 1e6), 3), "limit": limit}
    if exact:
        return {"usage": float(round(level * 100)), "limit": 100.0}
    return {"usage": limit * level * rng.uniform(1 - noise, 1 + noise), "limit": limit}


def _resources(rng: random.Random, level: float | None = None) -> dict[str, dict[str, float]]:
    """Resource usage around one load level; a given level (an even cluster) keeps cpu close to it."""
    even = level is not None
    if level is None:
        level = rng.random() ** rng.choice([0.5, 1.0, 2.0]) * 1.15
    exact = not even and rng.random() < 0.2
    nic = 0.0 if rng.random() < 0.1 else _log_uniform(rng, 1e6, 2.5e7)
    others = (lambda: 0.3) if even else (lambda: rng.uniform(0.3, 1.1))
    return {
        "cpu": _usage(rng, 100.0 * rng.choice([2, 4, 8, 16, 32]), level, exact, 0.01 if even else 0.3),
        "memory": _usage(rng, float(rng.choice([2048, 4096, 8192])), rng.uniform(0.1, 1.0), False),
        "directMemory": _usage(rng, float(rng.choice([1024, 4096])), level * others(), exact and rng.random() < 0.5),
        "bandwidthIn": _usage(rng, nic, level * others(), False),
        "bandwidthOut": _usage(rng, nic, level * others(), False),
    }


def _traffic(rng: random.Random, scale: float, idle: bool) -> dict[str, float]:
    if idle:
        return {"msgRateIn": 0.0, "msgRateOut": 0.0, "msgThroughputIn": 0.0, "msgThroughputOut": 0.0}
    rate_in = _log_uniform(rng, 0.01, 3e4) * scale
    rate_out = 0.0 if rng.random() < 0.1 else rate_in * _log_uniform(rng, 0.1, 20)
    size = _log_uniform(rng, 20, 5e4)
    return {
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "msgThroughputIn": rate_in * size,
        "msgThroughputOut": rate_out * size * rng.uniform(0.9, 1.1),
    }


def _bundle_data(rng: random.Random, traffic: dict[str, float], topics: int) -> dict[str, Any]:
    # Long-term data is never zero, so no two bundles share a BundleData value (tie rule 4).
    long_term = {
        key: (value or _log_uniform(rng, 0.01, 10)) * _log_uniform(rng, 0.5, 2) for key, value in traffic.items()
    }
    return {
        "shortTermData": {"maxSamples": 10, "numSamples": rng.randint(1, 10), **traffic},
        "longTermData": {"maxSamples": 1000, "numSamples": rng.randint(1, 1000), **long_term},
        "topics": topics,
    }


def _system_bundles(rng: random.Random, broker_id: str) -> list[str]:
    """Heartbeat and SLA-monitor namespaces in the formats different releases use, and near misses."""
    names = [
        f"pulsar/{broker_id}",  # heartbeat (all releases)
        f"pulsar/{CLUSTER}/{broker_id}",  # heartbeat with cluster (V1 names, before 4.2)
        f"pulsar/{CLUSTER}:2/{broker_id}",  # the same, of a cluster whose name has a colon (NamedEntity allows it)
        f"sla-monitor/{broker_id}",  # SLA monitor from 4.2
        f"sla-monitor/{CLUSTER}/{broker_id}",  # SLA monitor before 4.2
        f"pulsar/{broker_id.replace(':', '-')}",  # no port: an ordinary namespace
    ]
    return [_bundle(name, 0, FULL_UPPER) for name in rng.sample(names, rng.randint(1, 3))]


def comparator_score_gap(version: str) -> float:
    """How far apart broker scores must be for `version`'s AvgShedder sort to be independent of hash order.

    Releases before PR #24954 compare `(int)(a - b)`: scores less than a point apart compare as equal (and the
    comparator is not transitive). Read in the released sources: 3.0.7 and 4.0.7 truncate, 4.0.8 and 4.2.4
    compare doubles; 4.1.x was not available to check.
    """
    parsed = PulsarVersion.parse(version)
    exact = parsed.at_least(4, 2) or ((parsed.major, parsed.minor) == (4, 0) and parsed.patch >= 8)
    return 0.0 if exact else 1.0


def shed_case(seed: int, version: str = "latest") -> dict[str, Any]:
    rng = random.Random(f"shed-{seed}")
    config = _shed_config(rng)
    num_brokers = 2 + round(48 * rng.random() ** 2)
    max_bundles = int(math.expm1(rng.uniform(0, math.log1p(200))))
    broker_ids = _broker_ids(rng, num_brokers)
    counts = [rng.randint(0, max_bundles) for _ in broker_ids]

    # Ordinary bundles: a few namespaces, each cut into consecutive ranges, dealt out to the brokers.
    total = sum(counts)
    namespaces = [f"tenant-{i % 3}/ns-{i}" for i in range(rng.randint(1, 8))]
    per_namespace = [0] * len(namespaces)
    for _ in range(total):
        per_namespace[rng.randrange(len(namespaces))] += 1
    bundles = [
        _bundle(namespace, lower, upper)
        for namespace, count in zip(namespaces, per_namespace, strict=True)
        if count
        for lower, upper in _ranges(rng, count)
    ]
    rng.shuffle(bundles)
    if rng.random() < 0.3:
        bundles += [_bundle("pulsar/system", lo, hi) for lo, hi in _ranges(rng, 4)]

    owned: dict[str, list[str]] = {}
    start = 0
    for broker_id, count in zip(broker_ids, counts, strict=True):
        owned[broker_id] = bundles[start : start + count]
        start += count
        if rng.random() < 0.2:
            owned[broker_id] += _system_bundles(rng, broker_id)
    for extra in bundles[start:]:  # pulsar/system bundles
        owned[rng.choice(broker_ids)].append(extra)

    # A third of the clusters are even but for one or two idle brokers: no broker is far above the mean, some
    # are far below it (ThresholdShedder's lower-boundary mode).
    levels: dict[str, float] = {}
    if rng.random() < 0.33:
        base = rng.uniform(0.3, 0.9)
        levels = {broker_id: base * rng.uniform(0.95, 1.05) for broker_id in broker_ids}
        for broker_id in rng.sample(broker_ids, rng.randint(1, 2)):
            levels[broker_id] = rng.uniform(0, 0.2)
        config["lowerBoundarySheddingEnabled"] = rng.choice(["true", "true", "false"])
        config["loadBalancerBundleUnloadMinThroughputThreshold"] = rng.choice(["0", "0.5", "2"])
    bundle_data: dict[str, Any] = {}
    brokers: dict[str, Any] = {}
    missing_data = rng.choice([0.0, 0.0, 0.05, 0.3])
    for broker_id in broker_ids:
        scale = _log_uniform(rng, 0.05, 20)
        last_stats: dict[str, Any] = {}
        idle_used = False
        for name in owned[broker_id]:
            idle = not idle_used and rng.random() < 0.05
            idle_used = idle_used or idle
            traffic = _traffic(rng, scale, idle)
            topics = rng.randint(1, 40)
            if rng.random() >= missing_data:
                bundle_data[name] = _bundle_data(rng, traffic, topics)
            last_stats[name] = {
                **{key: value * rng.uniform(0.9, 1.1) for key, value in traffic.items()},
                "consumerCount": rng.randint(0, 50),
                "producerCount": rng.randint(0, 50),
                "topics": topics,
                "cacheSize": 0,
            }
        totals = {key: sum(stats[key] for stats in last_stats.values()) for key in _traffic(rng, 1, True)}
        if rng.random() < 0.2:  # a report whose totals disagree with its bundles
            totals = {key: value * _log_uniform(rng, 0.1, 10) for key, value in totals.items()}
        brokers[broker_id] = {
            "webServiceUrl": f"http://{broker_id}",
            "pulsarServiceUrl": f"pulsar://{broker_id.rsplit(':', 1)[0]}:6650",
            **_resources(rng, levels.get(broker_id)),
            **totals,
            "lastUpdate": 1_790_000_000_000 + rng.randint(0, 10**6),
            "lastStats": last_stats,
            "numTopics": sum(stats["topics"] for stats in last_stats.values()),
            "numBundles": len(last_stats),
            "bundles": list(last_stats),
        }
    for _ in range(rng.choice([0, 0, 3])):  # bundle data of bundles nobody reports any more
        bundle_data[_bundle("tenant-9/gone", *_ranges(rng, 2)[0])] = _bundle_data(rng, _traffic(rng, 1, False), 1)

    recently_unloaded: dict[str, int] = {}
    if rng.random() < 0.5:
        share = rng.uniform(0, 0.3)
        for name in bundle_data:
            if rng.random() < share:
                recently_unloaded[name] = 1_790_000_000_000 - rng.randint(0, 3_600_000)

    load_data = {"brokers": brokers, "bundleData": bundle_data, "recentlyUnloadedBundles": recently_unloaded}
    _break_ties(rng, load_data, config, version, levels)
    strategies = {
        "AvgShedder": rng.randint(3, 6),
        "UniformLoadShedder": 1,
        "ThresholdShedder": rng.randint(2, 4),
        "OverloadShedder": 1,
    }
    case = {"id": f"shed-{seed}", "kind": "shed", "config": config, "loadData": load_data, "strategies": strategies}
    if num_brokers > 2 and rng.random() < 0.3:  # brokers leave and come back between runs
        case["absentBrokers"] = [
            [broker_id for broker_id in broker_ids if rng.random() < 0.2] for _ in range(max(strategies.values()))
        ]
    return case


_RESOURCE_KEYS = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")


def _score(report: dict[str, Any], settings: PulsarConfig) -> float:
    """The broker's AvgShedder score (weighted max usage in points); only its resources count."""
    resources = {key: report[key] for key in _RESOURCE_KEYS if key in report}
    return broker_usage(LocalBrokerData.model_validate(resources), settings) * 100


def _break_ties(
    rng: random.Random,
    load_data: dict[str, Any],
    config: dict[str, str],
    version: str,
    levels: dict[str, float],
) -> None:
    """Apply tie rules 1-4 by nudging the values that collide."""
    settings = PulsarConfig.from_settings({**config, "pulsarVersion": version})
    gap = comparator_score_gap(version)
    brokers = load_data["brokers"]
    scores = {broker_id: _score(report, settings) for broker_id, report in brokers.items()}
    for attempt in range(2000):  # rule 1: distinct broker scores (at least `gap` points apart)
        ordered = sorted((score, broker_id) for broker_id, score in scores.items())
        clash = next((b for (x, _), (y, b) in itertools.pairwise(ordered) if y == x or y - x < gap), None)
        if clash is None:
            break
        if gap and clash in levels and attempt < 1000:
            # An even cluster stays even: move the broker up by about the gap instead of drawing a new level
            # (which would leave few even clusters for ThresholdShedder's lower boundary on such releases).
            levels[clash] += rng.uniform(1, 2) * gap / 100
            brokers[clash].update(_resources(rng, levels[clash]))
        else:
            brokers[clash].update(_resources(rng))
        scores[clash] = _score(brokers[clash], settings)
    else:
        raise AssertionError("could not make broker scores distinct")

    for pair in (("msgRateIn", "msgRateOut"), ("msgThroughputIn", "msgThroughputOut")):  # rule 2
        totals = sorted(((report[pair[0]] + report[pair[1]], broker_id) for broker_id, report in brokers.items()))
        if len(totals) > 1 and totals[-1][0] > 0 and totals[-1][0] == totals[-2][0]:
            brokers[totals[-1][1]][pair[0]] *= 1.001

    bundle_data = load_data["bundleData"]
    for report in brokers.values():  # rule 3
        for pair in (("msgRateIn", "msgRateOut"), ("msgThroughputIn", "msgThroughputOut")):
            seen_values: set[float] = set()
            for name in report["bundles"]:
                if name not in bundle_data:
                    continue
                short = bundle_data[name]["shortTermData"]
                while short[pair[0]] + short[pair[1]] in seen_values:
                    short[pair[0]] += rng.uniform(0.001, 1)
                seen_values.add(short[pair[0]] + short[pair[1]])
    values = [json.dumps(data, sort_keys=True) for data in bundle_data.values()]  # rule 4
    assert len(values) == len(set(values)), "two bundles share a BundleData value"
    reported = [name for report in brokers.values() for name in report["bundles"]]  # rule 5
    assert len(reported) == len(set(reported)), "a bundle is reported by two brokers"


# --- split candidates --------------------------------------------------------------------------------------


def split_candidates_case(seed: int) -> dict[str, Any]:
    """Bundles around every split threshold; namespace counts that are at the limit or leave room for all."""
    rng = random.Random(f"split-candidates-{seed}")
    max_topics = rng.choice([2, 10, 1000, rng.randint(2, 2000)])
    max_sessions = rng.choice([-1, 0, 1000, rng.randint(1, 200)])
    max_rate = rng.choice([30000, rng.randint(1, 50000)])
    max_mbytes = rng.choice([100, rng.randint(1, 200), 2048, 2049, 4096, 3000])  # >= 2048 overflows int in Java
    maximum_bundles = rng.choice([128, rng.randint(1, 64)])
    config = {
        "loadBalancerNamespaceBundleMaxTopics": str(max_topics),
        "loadBalancerNamespaceBundleMaxSessions": str(max_sessions),
        "loadBalancerNamespaceBundleMaxMsgRate": str(max_rate),
        "loadBalancerNamespaceBundleMaxBandwidthMbytes": str(max_mbytes),
        "loadBalancerNamespaceMaximumBundles": str(maximum_bundles),
    }
    broker_ids = _broker_ids(rng, rng.randint(1, 12))
    namespaces = [f"tenant-{i % 2}/ns-{i}" for i in range(rng.randint(1, 5))]
    brokers: dict[str, Any] = {}
    bundle_data: dict[str, Any] = {}
    reported: dict[str, int] = dict.fromkeys(namespaces, 0)
    ranges = {namespace: _ranges(rng, 64) for namespace in namespaces}
    for broker_id in broker_ids:
        last_stats: dict[str, Any] = {}
        for _ in range(rng.randint(0, 20)):
            namespace = rng.choice(namespaces)
            if not ranges[namespace]:
                continue
            name = _bundle(namespace, *ranges[namespace].pop())
            reported[namespace] += 1
            topics = rng.choice([0, 1, 2, max_topics, max_topics + 1, rng.randint(0, 3 * max_topics)])
            sessions = rng.choice([max_sessions, max_sessions + 1, rng.randint(0, 2500)])
            consumers = rng.randint(0, max(sessions, 0))
            last_stats[name] = {
                "msgRateIn": 1.0,
                "msgThroughputIn": 1.0,
                "consumerCount": consumers,
                "producerCount": max(sessions, 0) - consumers,
                "topics": topics,
            }
            if rng.random() < 0.85:
                rate = rng.choice([float(max_rate), max_rate * rng.uniform(0, 2)])
                throughput = rng.choice([float(max_mbytes * MIB), max_mbytes * MIB * rng.uniform(0, 2)])
                split = rng.random()
                traffic = {
                    "msgRateIn": rate * split,
                    "msgRateOut": rate - rate * split,
                    "msgThroughputIn": throughput * split,
                    "msgThroughputOut": throughput - throughput * split,
                }
                bundle_data[name] = _bundle_data(rng, traffic, topics)
                bundle_data[name]["longTermData"].update(traffic)
        order = list(last_stats)
        rng.shuffle(order)
        brokers[broker_id] = {"lastStats": {name: last_stats[name] for name in order}, "bundles": order}
    counts = {}
    for namespace in namespaces:  # tie rule 5: all fit, or none does
        if rng.random() < 0.3:
            counts[namespace] = maximum_bundles + rng.randint(0, 3)
        elif maximum_bundles - reported[namespace] >= 0:
            counts[namespace] = rng.randint(0, maximum_bundles - reported[namespace])
        else:
            counts[namespace] = maximum_bundles
    return {
        "id": f"split-candidates-{seed}",
        "kind": "splitCandidates",
        "config": config,
        "loadData": {"brokers": brokers, "bundleData": bundle_data},
        "namespaceBundleCounts": counts,
    }


# --- split positions ---------------------------------------------------------------------------------------

_COLLISIONS: dict[str, tuple[str, str]] = {}


def colliding_topics(namespace: str) -> tuple[str, str]:
    """Two topic names of `namespace` with the same CRC-32 (a birthday search over ~2^16 names)."""
    if namespace not in _COLLISIONS:
        # Random suffixes: names that differ only within 32 bits never collide (CRC-32 catches such bursts).
        rng = random.Random(namespace)
        seen: dict[int, str] = {}
        while True:
            name = f"persistent://{namespace}/collide-{rng.getrandbits(64):016x}"
            hashed = zlib.crc32(name.encode())
            if hashed in seen and seen[hashed] != name:
                _COLLISIONS[namespace] = (seen[hashed], name)
                break
            seen[hashed] = name
    return _COLLISIONS[namespace]


def _in_range(hashed: int, lower: int, upper: int) -> bool:
    return lower <= hashed < upper or (upper == FULL_UPPER and hashed == upper)


def split_positions_case(seed: int) -> dict[str, Any]:
    rng = random.Random(f"split-positions-{seed}")
    algorithm = rng.choice(SPLIT_ALGORITHMS)
    namespace = rng.choice(["tenant-a/ns-1", "tenant-b/orders", "acme/telemetry"])
    collision = algorithm in SPLIT_ALGORITHMS[1:] and rng.random() < 0.1
    if collision:
        first, _ = colliding_topics(namespace)
        hashed = zlib.crc32(first.encode())
        lower = rng.randint(max(0, hashed - 2**28), hashed)
        upper = min(FULL_UPPER, hashed + rng.randint(1, 2**28))
    elif rng.random() < 0.1:  # tiny ranges, the last bundle, the full range
        lower, upper = rng.choice([(5, 6), (5, 7), (5, 8), (FULL_UPPER - 3, FULL_UPPER), (0, FULL_UPPER)])
    else:
        width = (FULL_UPPER + 1) >> rng.randint(0, 7)
        lower = rng.randrange(0, FULL_UPPER + 1 - width + 1)
        upper = min(lower + width - rng.randint(0, 1000), FULL_UPPER)
    inside_wanted = rng.choice([0, 1, 2, 3, rng.randint(2, 40)])
    if inside_wanted * (FULL_UPPER + 1) / (upper - lower) > 200_000:  # too narrow to find topics by chance
        inside_wanted = 0
    outside_wanted = 3 if upper - lower <= 2**31 else 0
    names: list[str] = []
    seen_hashes: set[int] = set()
    inside = outside = 0
    while inside < inside_wanted or outside < outside_wanted:
        domain = rng.choice(["persistent", "persistent", "non-persistent"])
        local = f"t-{rng.getrandbits(40):x}" + (f"-partition-{rng.randint(0, 9)}" if rng.random() < 0.3 else "")
        name = f"{domain}://{namespace}/{local}"
        hashed = zlib.crc32(name.encode())
        if hashed in seen_hashes:
            continue
        if _in_range(hashed, lower, upper):
            if inside >= inside_wanted:
                continue
            inside += 1
        elif outside >= outside_wanted:
            continue
        else:
            outside += 1
        seen_hashes.add(hashed)
        names.append(name)
    if collision:
        names[rng.randrange(len(names) + 1) : 0] = colliding_topics(namespace)
    max_rate = rng.choice([1000, 30000, rng.randint(10, 5000)])
    max_mbytes = rng.choice([1, 10, 100])
    topics = []
    for name in names:
        topic: dict[str, Any] = {"name": name}
        if rng.random() < 0.9:
            traffic = _traffic(rng, max_rate / 3000, rng.random() < 0.1)
            if rng.random() < 0.1:  # traffic in one direction only
                traffic = dict.fromkeys(traffic, 0.0) | {"msgThroughputOut": traffic["msgThroughputOut"]}
            topic.update(traffic)
        topics.append(topic)
    case: dict[str, Any] = {
        "id": f"split-positions-{seed}",
        "kind": "splitPositions",
        "algorithm": algorithm,
        "namespace": namespace,
        "bundle": f"0x{lower:08x}_0x{upper:08x}",
        "topics": topics,
        "config": {
            "loadBalancerNamespaceBundleMaxMsgRate": str(max_rate),
            "loadBalancerNamespaceBundleMaxBandwidthMbytes": str(max_mbytes),
            "flowOrQpsDifferenceThresholdPercentage": str(rng.choice([0, 10, rng.randint(0, 100)])),
        },
    }
    if algorithm == "specified_positions_divide":
        case["force"] = rng.random() < 0.5
        if rng.random() < 0.9:
            choices = [lower, upper, lower + 1, upper - 1, *(rng.randint(lower, upper) for _ in range(3))]
            choices += [rng.randint(0, FULL_UPPER) for _ in range(2)]
            case["positions"] = [rng.choice(choices) for _ in range(rng.randint(0, 5))]
    return case


# --- TransferShedder (the extensible load manager) -----------------------------------------------------------

TRANSFER_NOW = 1_800_000_000_000  # the cases' clock: the harness shifts their times to its own
TRANSFER_TTL_MILLIS = 1800 * 1000


def _transfer_config(rng: random.Random) -> dict[str, str]:
    config = {
        "loadBalancerBrokerLoadTargetStd": _fmt(rng.choice([0.25, 0.25, rng.uniform(0.0, 0.5), 1.2])),
        "loadBalancerSheddingConditionHitCountThreshold": str(rng.choice([0, 0, 1, 3])),
        "loadBalancerMaxNumberOfBrokerSheddingPerCycle": str(rng.choice([1, 2, 3, 3, 5])),
        "loadBalancerTransferEnabled": rng.choice(["true", "true", "true", "false"]),
        "loadBalancerDebugModeEnabled": rng.choice(["true", "false"]),
        "loadBalancerBrokerOverloadedThresholdPercentage": str(rng.choice([85, 85, rng.randint(40, 95)])),
    }
    if rng.random() < 0.2:
        config["loadBalancerSheddingExcludedNamespaces"] = "t0/ns0"
    return config


def _transfer_top_bundles(rng: random.Random, broker_index: int, throughput: float) -> list[dict[str, Any]]:
    """A broker's top bundles as it publishes them: the least busy first (`TopKBundles`)."""
    count = rng.choice([0, 1, 2, 3, 5, 8, 10])
    shares = sorted(rng.random() ** 2 for _ in range(count))
    bundles = []
    for position, share in enumerate(shares):
        namespace = f"t{rng.randint(0, 1)}/ns{rng.randint(0, 2)}"
        lower = (broker_index * 16 + position) * 0x01000000
        idle = rng.random() < 0.1
        total = 0.0 if idle else share * throughput / max(1, count) * 2
        inbound = total * rng.uniform(0.2, 0.8)
        stats = {
            "msgThroughputIn": inbound,
            "msgThroughputOut": total - inbound,
            "msgRateIn": total / 1024,
            "msgRateOut": total / 2048,
            "topics": rng.randint(1, 50),
        }
        bundles.append({"bundleName": _bundle(namespace, lower, lower + 0x00FFFFFF), "stats": stats})
    return bundles


def _prone_to_swaps(rng: random.Random, brokers: dict[str, Any], top: dict[str, Any]) -> None:
    """The busiest broker's largest bundle alone passes half the gap and the least loaded broker has mid-sized
    bundles: TransferShedder then tries swaps (where its debug mode changes the answer)."""
    by_load = sorted(brokers, key=lambda broker: brokers[broker]["weightedMaxEMA"])
    least, busiest = by_load[0], by_load[-1]
    if least == busiest:
        return
    total = brokers[busiest]["msgThroughputIn"] + brokers[busiest]["msgThroughputOut"]
    # Brokers publish their top bundles ordered by msgThroughputIn first: a bundle mostly read (out) can come
    # early, so bundles follow the one that needed a swap.
    sizes = sorted(rng.uniform(0.01, 0.1) * total for _ in range(rng.randint(2, 5)))
    sizes.insert(rng.randint(0, len(sizes) - 1), rng.uniform(0.5, 0.9) * total)
    least_sizes = sorted(rng.uniform(0.05, 0.4) * total for _ in range(rng.randint(1, 6)))
    for broker, chosen, base in ((busiest, sizes, 0xA0), (least, least_sizes, 0xB0)):
        bundles = []
        for position, size in enumerate(chosen):
            lower = (base + position) * 0x01000000
            inbound = min(size / 2, total * 0.005)
            stats = {"msgThroughputIn": inbound, "msgThroughputOut": size - inbound, "topics": 1}
            bundles.append({"bundleName": _bundle("t1/ns1", lower, lower + 0x00FFFFFF), "stats": stats})
        top[broker] = {"topBundlesLoadData": bundles}


def transfer_case(seed: int) -> dict[str, Any]:
    """A cluster on the extensible load manager: brokers' load data in a random store order (ties in load keep
    it), some outdated, some without load data or top bundles, recent unloads, and TransferShedder's settings;
    several cycles in a row so the hit counter decides."""
    rng = random.Random(f"transfer-{seed}")
    count = rng.randint(2, 8)
    ids = _broker_ids(rng, count)
    level = rng.uniform(0.05, 0.95)
    brokers: dict[str, Any] = {}
    top: dict[str, Any] = {}
    loads = [min(1.5, max(0.0, rng.gauss(level, rng.choice([0.05, 0.2, 0.4])))) for _ in ids]
    if rng.random() < 0.15:  # equal loads: the store order breaks the tie
        loads[1] = loads[0]
    for index, (broker, load) in enumerate(zip(ids, loads, strict=True)):
        throughput = 0.0 if rng.random() < 0.05 else _log_uniform(rng, 1e4, 1e9) * (0.2 + load)
        inbound = throughput * rng.uniform(0.3, 0.7)
        # Ages a second or more from the TTL: the JVM judges them a few milliseconds later.
        age = rng.choice(
            [rng.randint(0, 600_000), rng.randint(0, 600_000), TRANSFER_TTL_MILLIS + rng.randint(1000, 10**6)]
        )
        brokers[broker] = {
            "weightedMaxEMA": 0.0 if load == 0 else load,
            "msgThroughputIn": inbound,
            "msgThroughputOut": throughput - inbound,
            "msgThroughputEMA": throughput * rng.uniform(0.5, 1.5),
            "updatedAt": TRANSFER_NOW - age,
        }
        if rng.random() < 0.9:
            top[broker] = {"topBundlesLoadData": _transfer_top_bundles(rng, index, throughput)}
    if rng.random() < 0.3:
        _prone_to_swaps(rng, brokers, top)
    available = list(brokers)
    if rng.random() < 0.1:  # an available broker that has not published load data
        del brokers[available[-1]]
    if rng.random() < 0.1:
        available = available[:-1]
    all_bundles = [b["bundleName"] for entry in top.values() for b in entry["topBundlesLoadData"]]
    recent_bundles = {b: TRANSFER_NOW - rng.randint(0, 1_000_000) for b in all_bundles if rng.random() < 0.1}
    recent_brokers = {}
    for broker, data in brokers.items():
        if rng.random() < 0.04:  # unloaded from about the shedding delay (180 s) before its data's update
            recent_brokers[broker] = data["updatedAt"] - rng.randint(100_000, 260_000)
    data_document = {
        "brokers": brokers,
        "topBundles": top,
        "recentlyUnloadedBundles": recent_bundles,
        "recentlyUnloadedBrokers": recent_brokers,
    }
    if available != list(brokers):
        data_document["availableBrokers"] = available
    case = {
        "id": f"transfer-{seed}",
        "kind": "transfer",
        "now": TRANSFER_NOW,
        "runs": rng.randint(1, 5),
        "config": _transfer_config(rng),
        "extensibleLoadData": data_document,
    }
    # The policies come from a generator of their own, so the cluster above is the same with or without them.
    return _transfer_policies(random.Random(f"transfer-policies-{seed}"), case)


def _transfer_policies(rng: random.Random, case: dict[str, Any]) -> dict[str, Any]:
    """Half the TransferShedder cases get what its `isTransferable` reads once the cluster's policies are read:
    random cluster policies, the ownership channel (each broker owns its top bundles, and a few more bundles of the
    same namespaces), the available brokers' lookup data, topic counts, and the settings that switch the checks."""
    if rng.random() >= 0.5:
        return case
    data = case["extensibleLoadData"]
    case = _share_hosts(rng, case, sorted(set(data["brokers"]) | set(data.get("availableBrokers", []))))
    data = case["extensibleLoadData"]
    available = data.get("availableBrokers", list(data["brokers"]))
    owners = {
        bundle["bundleName"]: broker
        for broker, top in data["topBundles"].items()
        for bundle in top["topBundlesLoadData"]
    }
    namespaces = sorted({namespace_of(bundle) for bundle in owners} | {"t0/ns0", "t1/ns1"})
    for index in range(rng.randint(0, 8)):
        lower = (0xD0 + index) * 0x01000000
        owners[_bundle(rng.choice(namespaces), lower, lower + 0x00FFFFFF)] = rng.choice(available)
    case["owners"] = owners
    case["lookupData"] = {
        broker: {
            "webServiceUrl": f"http://{broker}",
            "pulsarServiceUrl": f"pulsar://{_host(broker)}:6650",
            "persistentTopicsEnabled": rng.random() < 0.95,
            "nonPersistentTopicsEnabled": True,
            "loadManagerClassName": EXTENSIBLE_LOAD_MANAGER if rng.random() < 0.95 else None,
            "startTimestamp": 1,
            "brokerVersion": rng.choice(_RELEASES),
        }
        for broker in available
    }
    for load in data["brokers"].values():
        load["topics"] = rng.randint(0, 2000)
    config = case["config"]
    config["loadManagerClassName"] = EXTENSIBLE_LOAD_MANAGER
    config["loadBalancerSheddingBundlesWithPoliciesEnabled"] = rng.choice(["true", "true", "false"])
    if rng.random() < 0.2:
        config["preferLaterVersions"] = "true"
    if rng.random() < 0.2:
        config["loadBalancerBrokerMaxTopics"] = str(rng.choice([500, 1000, 1500]))
    movable = sorted({namespace_of(bundle["bundleName"]) for top in data["topBundles"].values()
                      for bundle in top["topBundlesLoadData"]})  # fmt: skip
    case["policies"] = cluster_policies(rng, sorted(set(available) | set(data["brokers"])), namespaces, movable)
    if case["policies"]["failure_domains"] or rng.random() < 0.2:
        config["failureDomainsEnabled"] = rng.choice(["true", "true", "true", "false"])
    return case


# --- the extensible load manager's split strategy ------------------------------------------------------------


def _extensible_split_config(rng: random.Random) -> dict[str, str]:
    return {
        "loadBalancerNamespaceBundleMaxTopics": str(rng.choice([4, 20, 1000])),
        "loadBalancerNamespaceBundleMaxSessions": str(rng.choice([0, 10, 1000])),
        "loadBalancerNamespaceBundleMaxMsgRate": str(rng.choice([100, 1000, 30000])),
        "loadBalancerNamespaceBundleMaxBandwidthMbytes": str(rng.choice([1, 10, 100])),
        "loadBalancerMaxNumberOfBundlesToSplitPerCycle": str(rng.choice([0, 1, 2, 10])),
        "loadBalancerNamespaceBundleSplitConditionHitCountThreshold": str(rng.choice([0, 1, 3])),
        "loadBalancerNamespaceMaximumBundles": str(rng.choice([2, 4, 16, 128])),
        "loadBalancerDebugModeEnabled": rng.choice(["true", "false"]),
    }


def _extensible_split_stats(rng: random.Random, level: float) -> dict[str, Any]:
    """A bundle's stats around the split limits `_extensible_split_config` draws (level 1 is about the middle)."""
    rate = _log_uniform(rng, 1, 3e4) * level
    throughput = _log_uniform(rng, 1e4, 1e8) * level
    inbound = rng.uniform(0.2, 0.8)
    return {
        "msgRateIn": rate * inbound,
        "msgRateOut": rate * (1 - inbound),
        "msgThroughputIn": throughput * inbound,
        "msgThroughputOut": throughput * (1 - inbound),
        "consumerCount": rng.randint(0, 12),
        "producerCount": rng.randint(0, 12),
        "topics": rng.choice([0, 1, 2, rng.randint(2, 30)]),
        "cacheSize": rng.randint(0, 1000),
    }


def extensible_split_case(seed: int) -> dict[str, Any]:
    """One broker's bundles over several cycles for the extensible load manager's split strategy: bundles that
    stay over a limit, hover around it, leave (moved away) and come back, bundles with fewer than two topics,
    unsplittable one-hash ranges, and namespaces at, near and far below their bundle limit."""
    rng = random.Random(f"extensible-split-{seed}")
    config = _extensible_split_config(rng)
    namespaces = [f"t{tenant}/ns{index}" for tenant in range(2) for index in range(rng.randint(1, 3))]
    limit = int(config["loadBalancerNamespaceMaximumBundles"])
    counts = {namespace: rng.choice([1, max(1, limit - 1), limit, rng.randint(1, limit)]) for namespace in namespaces}
    bundles = []
    for index in range(rng.randint(1, 12)):
        lower = index * 0x10000000
        upper = lower + (1 if rng.random() < 0.05 else 0x0FFFFFFF)
        bundles.append(_bundle(rng.choice(namespaces), lower, upper))
    levels = {bundle: rng.choice([0.01, 0.3, 1.0, 3.0]) for bundle in bundles}
    runs = []
    for _ in range(rng.randint(1, 6)):
        stats = {}
        for bundle in bundles:
            if rng.random() < 0.1:  # moved away this cycle
                continue
            level = levels[bundle] if rng.random() < 0.8 else rng.choice([0.01, 1.0, 3.0])
            stats[bundle] = _extensible_split_stats(rng, level)
        runs.append(stats)
    return {
        "id": f"extensible-split-{seed}",
        "kind": "extensibleSplit",
        "config": config,
        "namespaceBundleCounts": counts,
        "runs": runs,
    }


# --- the extensible load manager's placement -----------------------------------------------------------------


def extensible_placement_case(seed: int) -> dict[str, Any]:
    """Candidates for an unowned bundle and their brokers' load data: spread, clustered and exactly on the
    threshold (dyadic loads and differences, so `usage + difference == mean` holds in binary), some candidates
    without load data."""
    rng = random.Random(f"extensible-placement-{seed}")
    exact = rng.random() < 0.3
    difference = rng.choice([25, 50]) if exact else rng.choice([10, 10, 0, rng.randint(0, 60)])
    count = rng.randint(1, 8)
    ids = _broker_ids(rng, count)
    level = rng.uniform(0.05, 0.9)
    brokers = {}
    for broker in ids:
        if rng.random() < 0.1:
            continue  # no load data
        ema = rng.randint(0, 8) / 8 if exact else max(0.0, rng.gauss(level, rng.choice([0.02, 0.1, 0.3])))
        brokers[broker] = {"weightedMaxEMA": ema, "msgThroughputEMA": rng.uniform(0, 1e8), "updatedAt": 1}
    candidates = [broker for broker in ids if rng.random() < 0.9] or ids[:1]
    if rng.random() < 0.02:
        candidates = []
    return {
        "id": f"extensible-placement-{seed}",
        "kind": "extensiblePlacement",
        "config": {
            "loadBalancerAverageResourceUsageDifferenceThresholdPercentage": str(difference),
            "loadBalancerBrokerOverloadedThresholdPercentage": str(rng.choice([85, rng.randint(40, 95)])),
            "loadBalancerDebugModeEnabled": rng.choice(["true", "false"]),
        },
        "brokers": brokers,
        "candidates": candidates,
    }


# --- the extensible load manager's broker filters, with the cluster's policies ------------------------------------

_RELEASES = ("4.2.4", "4.2.4", "4.2.3", "4.0.8", "3.0.7", "4.2.4-rc1")


def extensible_filters_case(seed: int) -> dict[str, Any]:
    """A lookup of one bundle on a cluster of the extensible load manager: the available brokers' lookup data (load
    manager class, release, persistent topics; brokers sharing hosts), their topic counts, the bundles each owns,
    and random cluster policies (`cluster_policies`), with `failureDomainsEnabled`, `preferLaterVersions` and
    `loadBalancerBrokerMaxTopics` at random."""
    rng = random.Random(f"extensible-filters-{seed}")
    brokers = _broker_ids(rng, rng.randint(1, 9))
    if len(brokers) > 1 and rng.random() < 0.5:  # brokers sharing a host (isolation matches hosts only)
        host, taken = brokers[0].rsplit(":", 1)
        ports = [port for port in _PORTS if str(port) != taken]
        brokers[1:3] = [f"{host}:{port}" for port in rng.sample(ports, len(brokers[1:3]))]
    namespaces = [f"tenant-{index % 3}/ns-{index}" for index in range(rng.randint(1, 6))]
    lookup: dict[str, Any] = {}
    loads: dict[str, Any] = {}
    for broker in brokers:
        release = rng.choice(_RELEASES) if rng.random() < 0.97 else ""
        lookup[broker] = {
            "webServiceUrl": f"http://{broker}",
            "pulsarServiceUrl": f"pulsar://{_host(broker)}:6650",
            "persistentTopicsEnabled": rng.random() < 0.92,
            "nonPersistentTopicsEnabled": True,
            "loadManagerClassName": EXTENSIBLE_LOAD_MANAGER if rng.random() < 0.92 else rng.choice([None, "Other"]),
            "startTimestamp": 1,
            "brokerVersion": release,
        }
        if rng.random() < 0.9:
            loads[broker] = {"topics": rng.randint(0, 2000)}
    owners = {}
    for index in range(rng.randint(0, 24)):
        lower = index * 0x08000000
        owners[_bundle(rng.choice(namespaces), lower, lower + 0x07FFFFFF)] = rng.choice(
            [*brokers, "10.254.0.9:8080"] if rng.random() < 0.05 else brokers
        )
    if rng.random() < 0.8:
        bundle = _bundle(rng.choice(namespaces), 0xF0000000, FULL_UPPER)
    else:
        bundle = _bundle(f"tenant-{rng.randint(0, 2)}/new-ns", 0, FULL_UPPER)
    config = {"loadManagerClassName": EXTENSIBLE_LOAD_MANAGER, "preferLaterVersions": rng.choice(["true", "false"])}
    if rng.random() < 0.3:
        config["loadBalancerBrokerMaxTopics"] = str(rng.choice([1, 500, 1000, 1500]))
    case: dict[str, Any] = {
        "id": f"extensible-filters-{seed}",
        "kind": "extensibleFilters",
        "config": config,
        "brokers": lookup,
        "brokerLoadData": loads,
        "owners": owners,
        "bundle": bundle,
    }
    policy_rng = random.Random(f"extensible-filters-policies-{seed}")
    if policy_rng.random() < POLICY_SHARE:
        case["policies"] = cluster_policies(policy_rng, brokers, namespaces, [namespace_of(bundle)])
        if case["policies"]["failure_domains"] or policy_rng.random() < 0.2:
            config["failureDomainsEnabled"] = policy_rng.choice(["true", "true", "true", "false"])
    return case


# --- the modular load manager's shedding cycle ------------------------------------------------------------------

CYCLE_NOW = 1_790_000_000_000  # shed_case's clock; the harness shifts the case's times to its own
IMPL_PACKAGE = "org.apache.pulsar.broker.loadbalance.impl."


def _drop_bundles(load_data: dict[str, Any], dropped: Callable[[str], bool]) -> None:
    for report in load_data["brokers"].values():
        for bundle in [name for name in report["lastStats"] if dropped(name)]:
            report["numTopics"] -= report["lastStats"].pop(bundle)["topics"]
        report["bundles"] = list(report["lastStats"])
        report["numBundles"] = len(report["bundles"])
    for key in ("bundleData", "recentlyUnloadedBundles"):
        load_data[key] = {name: value for name, value in load_data[key].items() if not dropped(name)}


def cycle_case(seed: int, version: str = "latest", *, policies: bool = True) -> dict[str, Any]:
    """A shedding case run through the whole `doLoadShedding` cycle: one strategy with its placement strategy
    (LeastLongTermMessageRate, LeastResourceUsageWithWeight, or AvgShedder as its own), excluded namespaces, the
    grace period, the topic-count and even-distribution filters, brokers of another load manager class or not loading
    persistent topics, and one-broker clusters."""
    rng = random.Random(f"cycle-{seed}")
    case = shed_case(10**7 + seed, version)
    load_data, config = case["loadData"], case["config"]
    brokers = load_data["brokers"]
    if PulsarVersion.parse(version).at_least(4, 2):
        # V1 namespaces (tenant/cluster/name) cannot exist from 4.2, whose NamespaceName refuses the name:
        # doLoadShedding would stop at the first one.
        _drop_bundles(load_data, lambda bundle: bundle.count("/") == 3)
    strategy = rng.choice(SHED_STRATEGIES)
    placement = rng.choice(["LeastLongTermMessageRate"] * 3 + ["LeastResourceUsageWithWeight"])
    bound = strategy == "AvgShedder" and rng.random() < 0.7
    config["loadBalancerLoadSheddingStrategy"] = IMPL_PACKAGE + strategy
    config["loadBalancerLoadPlacementStrategy"] = IMPL_PACKAGE + ("AvgShedder" if bound else placement)
    if rng.random() < 0.5:
        config["loadBalancerDistributeBundlesEvenlyEnabled"] = rng.choice(["true", "false"])
    if rng.random() < 0.3:
        topics = sorted(report["numTopics"] for report in brokers.values())
        config["loadBalancerBrokerMaxTopics"] = str(rng.choice(topics))
    namespaces = sorted({name.rsplit("/", 1)[0] for report in brokers.values() for name in report["bundles"]})
    if namespaces and rng.random() < 0.4:
        config["loadBalancerSheddingExcludedNamespaces"] = ",".join(
            rng.sample(namespaces, rng.randint(1, max(1, len(namespaces) // 2)))
        )
    grace_minutes = rng.choice([1, 5, 30, 60])
    if rng.random() < 0.5:
        config["loadBalancerSheddingGracePeriodMinutes"] = str(grace_minutes)
    else:
        grace_minutes = 30
    for bundle, at in list(load_data["recentlyUnloadedBundles"].items()):
        if abs(CYCLE_NOW - at - grace_minutes * 60_000) < 2000:  # not on the boundary: the two clocks differ by ms
            load_data["recentlyUnloadedBundles"][bundle] = at - 5000

    for report in brokers.values():
        report["loadManagerClassName"] = MODULAR_LOAD_MANAGER
    if rng.random() < 0.25:  # a broker of another load manager (a migration), or one too old to say
        for broker in rng.sample(sorted(brokers), rng.randint(1, min(2, len(brokers)))):
            if rng.random() < 0.5:
                brokers[broker].pop("loadManagerClassName")
            else:
                brokers[broker]["loadManagerClassName"] = EXTENSIBLE_LOAD_MANAGER
    if rng.random() < 0.1:  # a broker for non-persistent topics only
        brokers[rng.choice(sorted(brokers))]["persistentTopicsEnabled"] = False
    if bound:  # AvgShedder keeps its planned pairs only where every broker stays a candidate (docs/fidelity.md)
        config["loadBalancerDistributeBundlesEvenlyEnabled"] = "false"
        _drop_bundles(load_data, lambda bundle: bundle.startswith("pulsar/system/"))  # always evenly distributed
        config.pop("loadBalancerBrokerMaxTopics", None)
        for report in brokers.values():
            report["loadManagerClassName"] = MODULAR_LOAD_MANAGER
            report.pop("persistentTopicsEnabled", None)
    if rng.random() < 0.05:  # one broker: no shedding at all
        kept = rng.choice(sorted(brokers))
        load_data["brokers"] = {kept: brokers[kept]}
    # LeastResourceUsageWithWeight remembers usage across picks: the planner's memory starts with each plan.
    runs = 1 if placement == "LeastResourceUsageWithWeight" and not bound else rng.randint(1, 4)
    if strategy == "AvgShedder":
        runs = rng.randint(2, 6)
        if not bound and placement == "LeastResourceUsageWithWeight":
            config["loadBalancerLoadPlacementStrategy"] = IMPL_PACKAGE + "LeastLongTermMessageRate"
    case = {
        "id": f"cycle-{seed}",
        "kind": "cycle",
        "config": config,
        "loadData": load_data,
        "now": CYCLE_NOW,
        "runs": runs,
    }
    if not policies:
        return case
    # The policies come from a generator of their own, so the cluster above is the same with or without them.
    return with_policies(random.Random(f"cycle-policies-{seed}"), case)


# --- the cluster's policies: isolation, failure domains, anti-affinity groups ---------------------------------------

POLICY_SHARE = 0.75  # of the cycle and placement cases, those that get policies (the others run without, as before)
_PORTS = (8080, 8081, 8443, 9080)


def _host(broker: str) -> str:
    """The host of a broker id (`host:port`), as `LoadManagerShared.parseBrokerHost` takes it."""
    return broker.rsplit(":", 1)[0]


def _literal(text: str) -> str:
    """`text` as a regular expression matching only itself, in Java's syntax and Python's alike."""
    return text.replace(".", "\\.")


def _rename_brokers(case: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """The case with each broker id renamed wherever it occurs (report keys, URLs, heartbeat namespaces)."""
    if not renames:
        return case
    ids = re.compile(rf"(?<![\w.-])({'|'.join(map(re.escape, renames))})(?!\d)")
    renamed: dict[str, Any] = json.loads(ids.sub(lambda found: renames[found[1]], json.dumps(case)))
    return renamed


def _share_hosts(rng: random.Random, case: dict[str, Any], brokers: list[str]) -> dict[str, Any]:
    """Moves a few of the case's `brokers` onto the host of another, on another port: isolation policies match
    hosts, never ports, so such brokers stand and fall together."""
    if len(brokers) < 2 or rng.random() < 0.4:
        return case
    used = {(_host(broker), broker.rsplit(":", 1)[1]) for broker in brokers}
    renames = {}
    for broker in rng.sample(brokers, rng.randint(1, min(4, len(brokers) - 1))):
        host = _host(rng.choice([b for b in brokers if b != broker and b not in renames]))
        free = [port for port in _PORTS if (host, str(port)) not in used]
        if free:
            port = str(rng.choice(free))
            used.add((host, port))
            renames[broker] = f"{host}:{port}"
    return _rename_brokers(case, renames)


def _host_pattern(rng: random.Random, host: str) -> str:
    """A regular expression over broker hosts that matches `host`, and often other hosts too."""
    if host.startswith("10."):
        first, second = host.split(".")[:2]
        options = [_literal(host), _literal(host), f"{first}\\.{second}\\..*", host, "10\\..*"]
    else:
        name = host.split(".")[0]  # broker-123
        options = [_literal(host), _literal(host), f"{name}\\..*", f"{name[:8]}.*", "broker-[0-4].*", ".*\\.svc.*"]
    return rng.choice(options)


def _host_patterns(rng: random.Random, hosts: list[str], count: int) -> list[str]:
    patterns = [_host_pattern(rng, rng.choice(hosts)) for _ in range(count)]
    if rng.random() < 0.1:  # a host the cluster does not have
        patterns.append(rng.choice(["10\\.255\\.0\\.1", "gone-broker-.*"]))
    return list(dict.fromkeys(patterns))


def _namespace_pattern(rng: random.Random, namespace: str) -> str:
    """A regular expression over namespace names that matches `namespace`, and often others too."""
    tenant, _, local = namespace.partition("/")
    options = [namespace, namespace, f"{tenant}/.*", f".*/{local}", f"{tenant}/({local}|missing-ns)"]
    if tenant.startswith("tenant-"):
        options.append("tenant-[01]/ns-[0-4]")
    return rng.choice(options)


def _isolation(rng: random.Random, hosts: list[str], namespaces: list[str]) -> dict[str, Any]:
    """One namespace isolation policy, valid as the admin API requires (`NamespaceIsolationDataImpl.validate`):
    namespaces and primaries given, secondaries possibly none, an auto-failover policy with both parameters."""
    if namespaces and rng.random() < 0.85:
        patterns = [_namespace_pattern(rng, rng.choice(namespaces)) for _ in range(rng.randint(1, 2))]
    else:  # a policy for namespaces the cluster does not have (yet)
        patterns = [rng.choice(["tenant-9/.*", "missing/ns-1", "pulsar/.*"])]
    secondary = [] if rng.random() < 0.4 else _host_patterns(rng, hosts, rng.randint(1, 2))
    return {
        "namespaces": list(dict.fromkeys(patterns)),
        "primary": _host_patterns(rng, hosts, rng.randint(1, 2)),
        "secondary": secondary,
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {
                "min_limit": str(rng.choice([0, 1, 1, 2, 3, 5])),
                "usage_threshold": str(rng.choice([100, 80, 50, 0])),
            },
        },
    }


def _failure_domains(rng: random.Random, brokers: list[str]) -> dict[str, Any]:
    """Disjoint domains (the admin API refuses a broker already in another domain), some brokers in none, and now
    and then a broker the cluster does not have."""
    names = [f"zone-{letter}" for letter in "abc"[: rng.randint(1, 3)]]
    members: dict[str, list[str]] = {name: [] for name in names}
    for broker in brokers:
        if rng.random() < 0.8:
            members[rng.choice(names)].append(broker)
    if rng.random() < 0.2:
        members[names[0]].append("10.254.0.1:8080")
    return {name: {"brokers": sorted(listed)} for name, listed in members.items()}


def _anti_affinity(rng: random.Random, namespaces: list[str], favoured: list[str]) -> dict[str, str]:
    """Namespaces in one or two groups, `favoured` ones (those a case places) first; groups compare ignoring case, so
    a name is sometimes written differently."""
    chosen = rng.sample(favoured, min(len(favoured), rng.randint(1, 2)))
    others = [namespace for namespace in namespaces if namespace not in chosen]
    chosen += rng.sample(others, min(len(others), rng.randint(2, 5) - len(chosen)))
    if rng.random() < 0.2:
        chosen.append("tenant-9/not-loaded")
    groups = ["replicated-a", "replicated-b"][: rng.randint(1, 2)]
    assigned = {namespace: rng.choice(groups) for namespace in chosen}
    if assigned and rng.random() < 0.2:
        namespace = rng.choice(sorted(assigned))
        assigned[namespace] = assigned[namespace].upper()
    return assigned


def cluster_policies(
    rng: random.Random, brokers: list[str], namespaces: list[str], favoured: list[str]
) -> dict[str, Any]:
    """Random policies in the planner's `ClusterPolicies` JSON (Pulsar's own JSON for each policy): isolation
    policies, the drain fence's policy, failure domains and anti-affinity groups, each present in part of the
    cases (domains mostly beside anti-affinity groups, the only place they count). Isolation policies keep their
    order: where two match a namespace, the first one applies."""
    hosts = sorted({_host(broker) for broker in brokers})
    ordinary = [namespace for namespace in namespaces if not namespace.startswith(("pulsar/", "sla-monitor/"))]
    policies: dict[str, Any] = {"isolation": {}, "failure_domains": {}, "anti_affinity_groups": {}}
    if rng.random() < 0.6:
        for index in range(rng.randint(1, 3)):
            policies["isolation"][f"policy-{index}"] = _isolation(rng, hosts, ordinary)
    if rng.random() < 0.25:  # the executor's drain fence (planner/execute/fence.py), as it writes it
        fenced = rng.choice(brokers)
        policies["isolation"][fence_name(fenced)] = fence_policy(fenced)
    if len(ordinary) >= 2 and rng.random() < 0.6:
        policies["anti_affinity_groups"] = _anti_affinity(rng, ordinary, [n for n in favoured if n in ordinary])
    if rng.random() < (0.8 if policies["anti_affinity_groups"] else 0.3):
        policies["failure_domains"] = _failure_domains(rng, brokers)
    return policies


def with_policies(rng: random.Random, case: dict[str, Any], *, share_hosts: bool = True) -> dict[str, Any]:
    """The modular case with random cluster policies (`POLICY_SHARE` of the cases), `failureDomainsEnabled` set at
    random, and (`share_hosts`) some brokers moved onto another's host."""
    if rng.random() >= POLICY_SHARE:
        return case
    if share_hosts:
        case = _share_hosts(rng, case, sorted(case["loadData"]["brokers"]))
    brokers = sorted(case["loadData"]["brokers"])
    reported = {namespace_of(bundle) for report in case["loadData"]["brokers"].values() for bundle in report["bundles"]}
    wanted = sorted({namespace_of(bundle) for bundle in case.get("bundles", [])})
    case["policies"] = cluster_policies(rng, brokers, sorted(reported | set(wanted)), wanted)
    if case["policies"]["failure_domains"] or rng.random() < 0.2:
        case["config"]["failureDomainsEnabled"] = rng.choice(["true", "true", "true", "false"])
    return case


# --- the modular load manager's placement for a client's lookups -------------------------------------------------


def placement_case(seed: int, version: str = "latest", cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """A client's lookups of a few bundles, one after the other (`selectBrokerForAssignment`, each pick
    preallocated): bundles of namespaces the cluster serves (new ranges, and bundles with bundle data), of a new
    namespace, of `pulsar/system`, and bundles of excluded namespaces (placed round robin), with policies of its
    own. The cluster is `cycle_case(seed)`'s (pass it as `cluster` to share its LoadData: the batch writes it once,
    and each side reads it once for both cases)."""
    rng = random.Random(f"placement-{seed}")
    cluster = cluster if cluster is not None else cycle_case(seed, version)
    config = dict(cluster["config"])
    config["loadBalancerLoadSheddingStrategy"] = IMPL_PACKAGE + "ThresholdShedder"
    config["loadBalancerLoadPlacementStrategy"] = IMPL_PACKAGE + rng.choice(
        ["LeastLongTermMessageRate"] * 2 + ["LeastResourceUsageWithWeight"]
    )
    load_data = cluster["loadData"]
    reported = sorted(
        {namespace_of(bundle) for report in load_data["brokers"].values() for bundle in report["bundles"]}
    )
    ordinary = [namespace for namespace in reported if not namespace.startswith(("pulsar/", "sla-monitor/"))]
    if rng.random() < 0.3 and config.get("loadBalancerSheddingExcludedNamespaces") is None and ordinary:
        config["loadBalancerSheddingExcludedNamespaces"] = rng.choice(ordinary)
    with_data = [bundle for bundle in load_data["bundleData"] if namespace_of(bundle) in ordinary]
    bundles: list[str] = []
    for index in range(rng.randint(1, 10)):
        kind = rng.random()
        if kind < 0.2 and with_data:
            bundles.append(rng.choice(with_data))
        elif kind < 0.75 and ordinary:
            lower = 0xF0000000 + index * 0x00100000
            bundles.append(_bundle(rng.choice(ordinary), lower, lower + 0x000FFFFF))
        elif kind < 0.95:
            bundles.append(_bundle(f"tenant-{rng.randint(0, 2)}/new-ns-{rng.randint(0, 1)}", 0, FULL_UPPER))
        else:
            lower = 0xE0000000 + index * 0x00100000
            bundles.append(_bundle("pulsar/system", lower, lower + 0x000FFFFF))
    case: dict[str, Any] = {
        "id": f"placement-{seed}",
        "kind": "placement",
        "config": config,
        "loadData": load_data,
        "now": cluster["now"],
        "bundles": list(dict.fromkeys(bundles)),  # a second lookup of a bundle returns its preallocation
    }
    case["config"].pop("failureDomainsEnabled", None)
    # The cluster's brokers share hosts already when the cycle case got policies: no renaming here.
    return with_policies(random.Random(f"placement-policies-{seed}"), case, share_hosts=False)


# --- AvgShedder's sort on near-ties ----------------------------------------------------------------------------


def avg_shedder_sort_case(seed: int) -> dict[str, Any]:
    """A balanced cluster of 2 to 31 brokers whose AvgShedder scores lie within a few points of each other, many
    less than one point apart: the near-ties the truncating comparator (before 4.0.8) cannot order consistently.
    Broker ids are random, so Pulsar's HashMap hands the scores to its sort in an order unrelated to their names."""
    rng = random.Random(f"avg-shedder-sort-{seed}")
    count = rng.randint(2, 31)
    base = rng.uniform(0.2, 0.8)
    spread = rng.choice([0.005, 0.01, 0.03])
    brokers = {}
    for broker_id in _broker_ids(rng, count):
        level = base + rng.uniform(0, spread) if rng.random() < 0.9 else rng.uniform(0.05, 0.95)
        brokers[broker_id] = {
            "cpu": {"usage": 100.0 * level * 8, "limit": 800.0},
            "memory": {"usage": 512.0, "limit": 8192.0},
            "directMemory": {"usage": 64.0, "limit": 4096.0},
            "bandwidthIn": {"usage": 1e5, "limit": 1.25e8},
            "bandwidthOut": {"usage": 1e5, "limit": 1.25e8},
            "lastUpdate": 1_790_000_000_000,
        }
    return {
        "id": f"avg-shedder-sort-{seed}",
        "kind": "avgShedderSort",
        "config": {},
        "loadData": {"brokers": brokers, "bundleData": {}, "recentlyUnloadedBundles": {}},
    }
