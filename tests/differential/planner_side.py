"""The planner's answers to the differential cases, in the Java harness's output shape, and their comparison.

Shapes (both sides):
- shed: `{"strategies": {name: {"runs": [{"unloads": [{broker, bundle, destination}], "state": {...}}]}}}`;
- splitCandidates: `{"bundles": [...]}` (sorted; Java returns a HashMap);
- splitPositions: `{"positions": [...] | null}`;
- transfer: `{"runs": [{"unloads": [{broker, bundle, destination, reason}], "skipped", "hitCount",
  "recentlyUnloadedBrokers", "average", "std"}]}`;
- extensibleSplit: `{"runs": [{"splits": [{bundle, reason}], "hitCounts": {bundle: count}}]}`;
- cycle: `{"runs": [{"unloads": [{bundle, destination}], "state": {...}}]}` (Java adds each run's number of placement
  ties and of AvgShedder's re-drawn destinations);
- placement: `{"placements": [{bundle, broker}]}` (Java adds the number of placement ties);
- avgShedderSort: `{"scores": {broker: score}, "sorted": [...]}`, Java adds `arrival` (its HashMap's order, which the
  comparison hands to the planner's sort) and the planner `version`;
- extensiblePlacement: `{"best": [...], "chosen": broker | null}` (the planner names no chosen broker: Pulsar picks
  among the best at random);
- extensibleFilters: `{"candidates": [...], "failed": [filter name, ...]}` (candidates sorted);
- any of them `{"error": "..."}` when the side refused the input.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.plan.bundles.bundle_splitter_task import find_bundles_to_split
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash
from planner.plan.bundles.registry import split_algorithm
from planner.plan.bundles.split_algorithm import SplitInputs, TopicLoad
from planner.plan.extensible import bundles_to_split
from planner.plan.extensible_filters import ExtensibleCluster, placement_candidates, transfer_refusal
from planner.plan.placement.extensible_least_resource_usage import best_brokers
from planner.plan.placement.pipeline import select_broker
from planner.plan.placement.strategy import PlacementSession
from planner.plan.planning import make_plan
from planner.plan.shedding import avg_shedder
from planner.plan.shedding.registry import shedding_strategy
from planner.plan.shedding.transfer_shedder import Transferable
from planner.pulsar.bundle_range import FULL_RANGE_UPPER, BundleRange
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.model import BrokerLoadData, ExtensibleLoadData, LoadData, LocalBrokerData, load_data_from_mapping


def config_for(case: dict[str, Any], version: str) -> PulsarConfig:
    return PulsarConfig.from_settings({**case.get("config", {}), "pulsarVersion": version})


def load_data_of(case: dict[str, Any]) -> LoadData:
    if "loadDataFile" in case:
        return _load_data_file(case["loadDataFile"])
    return load_data_from_mapping(case["loadData"])


@functools.lru_cache(maxsize=8)
def _load_data_file(path: str) -> LoadData:
    """A case's LoadData file, parsed once for the runs of that case in a row (the records are immutable)."""
    return load_data_from_mapping(json.loads(Path(path).read_text()))


def policies_of(case: dict[str, Any]) -> ClusterPolicies | None:
    """The case's cluster policies (the harness wrote the same into Pulsar's metadata store); None without."""
    return ClusterPolicies.model_validate(case["policies"]) if "policies" in case else None


def shed(case: dict[str, Any], version: str) -> dict[str, Any]:
    """Each strategy of the case, `runs` times in a row with its state carried over (library API).

    Run `i` sees the LoadData without the brokers `absentBrokers[i]` lists.
    """
    all_brokers = load_data_of(case)
    absent = case.get("absentBrokers", [])
    snapshots = [
        all_brokers.model_copy(
            update={"brokers": {b: r for b, r in all_brokers.brokers.items() if b not in set(absent[i])}}
        )
        if i < len(absent)
        else all_brokers
        for i in range(max(case["strategies"].values()))
    ]
    config = config_for(case, version)
    results: dict[str, Any] = {}
    for name, runs in case["strategies"].items():
        strategy = shedding_strategy(name)
        state = strategy.initial_state()
        try:
            outputs = []
            for load_data in snapshots[:runs]:
                outcome = strategy.run(load_data, config, state)
                state = outcome.state
                document = strategy.dump_state(state)
                document.pop("strategy", None)
                outputs.append({"unloads": [unload.to_json() for unload in outcome.unloads], "state": document})
            results[name] = {"runs": outputs}
        except (InputError, ValueError, ArithmeticError, KeyError, TypeError) as error:
            results[name] = {"error": f"{type(error).__name__}: {error}"}
    return {"strategies": results}


def split_candidates(case: dict[str, Any], version: str) -> dict[str, Any]:
    bundles = find_bundles_to_split(load_data_of(case), config_for(case, version), case["namespaceBundleCounts"])
    return {"bundles": sorted(bundles)}


def owned_topics(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's topics that the bundle owns: same namespace, hash inside the range (the last range closed)."""
    bundle = BundleRange.parse(case["bundle"])
    owned = []
    for topic in case["topics"]:
        namespace = topic["name"].partition("://")[2].rpartition("/")[0]
        hashed = topic_hash(topic["name"])
        inside = bundle.lower <= hashed < bundle.upper or (bundle.upper == FULL_RANGE_UPPER == hashed)
        if namespace == case["namespace"] and inside:
            owned.append(topic)
    return owned


def split_positions(case: dict[str, Any], version: str) -> dict[str, Any]:
    bundle = BundleRange.parse(case["bundle"])
    topics = [
        TopicLoad(
            topic["name"],
            topic.get("msgRateIn", 0.0) + topic.get("msgRateOut", 0.0),
            topic.get("msgThroughputIn", 0.0) + topic.get("msgThroughputOut", 0.0),
        )
        for topic in owned_topics(case)
    ]
    algorithm = split_algorithm(case["algorithm"])
    assert algorithm is not None, case["algorithm"]
    try:
        config = config_for(case, version)
        positions = algorithm.positions(
            SplitInputs(bundle, topics, config, case.get("positions"), case.get("force", False))
        )
    except InputError as error:
        return {"error": str(error)}
    return {"positions": positions or None}


def extensible_cluster(case: dict[str, Any], version: str, topics: dict[str, int]) -> ExtensibleCluster:
    """What the extensible load manager's broker filters read, from the case: its policies, the ownership channel
    (`owners`), the brokers' topic counts and their lookup data (`brokers` or `lookupData`, Pulsar's JSON)."""
    lookup = case.get("lookupData", case.get("brokers", {}))
    return ExtensibleCluster(
        config=config_for(case, version),
        policies=policies_of(case) or ClusterPolicies(),
        owners=case["owners"],
        topics=topics,
        load_manager_classes={broker: data["loadManagerClassName"] for broker, data in lookup.items()},
        versions={broker: data["brokerVersion"] for broker, data in lookup.items()},
        persistent_topics={broker: data["persistentTopicsEnabled"] for broker, data in lookup.items()},
    )


def transfer(case: dict[str, Any], version: str) -> dict[str, Any]:
    """TransferShedder `runs` times in a row, the hit counter and the recently unloaded brokers carried over; with the
    case's policies, each bundle it would move checked as Pulsar's `isTransferable` checks it."""
    load_data = ExtensibleLoadData.model_validate(case["extensibleLoadData"])
    config = config_for(case, version)
    strategy = shedding_strategy("TransferShedder")
    state = strategy.initial_state()
    transferable: Transferable | None = None
    if "policies" in case:
        cluster = extensible_cluster(case, version, {b: data.topics for b, data in load_data.brokers.items()})
        available = load_data.available

        def check(bundle: str, source: str, destination: str) -> str | None:
            return transfer_refusal(bundle, source, destination, available, cluster)

        transferable = check
    runs = []
    for _ in range(case["runs"]):
        outcome = strategy.run_extensible(load_data, config, state, case["now"], transferable)
        state = outcome.state
        load_data = load_data.model_copy(update={"recently_unloaded_brokers": outcome.recently_unloaded_brokers})
        run: dict[str, Any] = {
            "unloads": [decision.to_json() for decision in outcome.decisions],
            "hitCount": state.hit_count,
            "recentlyUnloadedBrokers": dict(sorted(outcome.recently_unloaded_brokers.items())),
            "average": outcome.average,
            "std": outcome.std,
        }
        if outcome.skipped is not None:
            run["skipped"] = outcome.skipped.value
        runs.append(run)
    return {"runs": runs}


def extensible_split(case: dict[str, Any], version: str) -> dict[str, Any]:
    """The extensible split strategy on one broker's bundle stats, cycle after cycle, its hit counts carried over."""
    config = config_for(case, version)
    broker = "broker"
    hit_counts: dict[str, dict[str, int]] = {}
    runs = []
    for stats in case["runs"]:
        reports = {broker: LocalBrokerData.model_validate({"lastStats": stats})}
        chosen, hit_counts = bundles_to_split(reports, config, hit_counts, case["namespaceBundleCounts"])
        runs.append(
            {
                "splits": [{"bundle": choice.bundle, "reason": choice.reason} for choice in chosen],
                "hitCounts": hit_counts.get(broker, {}),
            }
        )
    return {"runs": runs}


class LowestOfTies(random.Random):
    """Placement's draw among equally good brokers, made deterministic as the harness makes Pulsar's: the lowest."""

    def choice(self, seq: Sequence[Any]) -> Any:
        return min(seq)


def cycle(case: dict[str, Any], version: str) -> dict[str, Any]:
    """`make_plan` (no splits) `runs` times on the case's LoadData, as doLoadShedding runs each minute: the strategy's
    state carried over, each run's unloads added to the recently unloaded bundles at the case's clock."""
    config = config_for(case, version)
    load_data = load_data_of(case)
    policies = policies_of(case)
    strategy = config.shedding_strategy.rsplit(".", 1)[-1]
    state: dict[str, Any] | None = None
    runs = []
    try:
        for _ in range(case["runs"]):
            plan = make_plan(
                "dc1", load_data, config, strategy, state, now_millis=case["now"], include_splits=False,
                placement_rng=LowestOfTies(), policies=policies,
            )  # fmt: skip
            state = plan.state_after
            unloads = [
                {"bundle": action.bundle, "destination": action.destination}
                for action in plan.actions
                if action.kind == "unload"
            ]
            document = dict(state)
            document.pop("strategy", None)
            runs.append({"unloads": unloads, "state": document})
            unloaded = {unload["bundle"]: case["now"] for unload in unloads}
            load_data = load_data.model_copy(
                update={"recently_unloaded_bundles": {**load_data.recently_unloaded_bundles, **unloaded}}
            )
    except InputError as error:
        return {"error": str(error)}
    return {"runs": runs}


def placement(case: dict[str, Any], version: str) -> dict[str, Any]:
    """A client's lookups of the case's bundles in order, each pick preallocated for the next (one placement
    session, ties to the lowest broker as in the harness)."""
    config = config_for(case, version)
    load_data = load_data_of(case)
    policies = policies_of(case)
    session = PlacementSession(LowestOfTies())
    placements = []
    try:
        for bundle in case["bundles"]:
            broker = select_broker(bundle, load_data, config, session, policies=policies)
            placements.append({"bundle": bundle, "broker": broker})
    except InputError as error:
        return {"error": str(error)}
    return {"placements": placements}


def cycle_runs(result: dict[str, Any]) -> Any:
    """Per cycle: the unload calls as a set (Pulsar's order follows a HashMap's) and the strategy's state after."""
    return [
        (sorted((unload["bundle"], unload["destination"]) for unload in run["unloads"]), run["state"])
        for run in result["runs"]
    ]


def avg_shedder_sort(case: dict[str, Any], version: str, arrival: Sequence[str] | None = None) -> dict[str, Any]:
    """AvgShedder's broker scores and its sorted broker list, the brokers handed to the sort in `arrival` order."""
    config = config_for(case, version)
    try:
        shedding_strategy(avg_shedder.NAME).require_available(config)
    except InputError as error:
        return {"error": str(error), "version": version}
    scores = avg_shedder.broker_scores(load_data_of(case), config)
    return {"scores": scores, "sorted": avg_shedder.sort_brokers(scores, config, arrival), "version": version}


def extensible_placement(case: dict[str, Any], version: str) -> dict[str, Any]:
    """The brokers the extensible placement picks among, for the case's candidates."""
    brokers = {broker: BrokerLoadData.model_validate(data) for broker, data in case["brokers"].items()}
    return {"best": best_brokers(case["candidates"], brokers, config_for(case, version)), "chosen": None}


def extensible_filters(case: dict[str, Any], version: str) -> dict[str, Any]:
    """The brokers the extensible load manager's filters leave for a lookup of the case's bundle, and the filter that
    failed (the planner names the first only; only the version filter can fail)."""
    topics = {broker: data["topics"] for broker, data in case["brokerLoadData"].items()}
    filtered = placement_candidates(case["bundle"], list(case["brokers"]), extensible_cluster(case, version, topics))
    failed = [filtered.failed[0].value] if filtered.failed is not None else []
    return {"candidates": sorted(filtered.candidates), "failed": failed}


RUNNERS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "shed": shed,
    "splitCandidates": split_candidates,
    "splitPositions": split_positions,
    "transfer": transfer,
    "extensibleSplit": extensible_split,
    "extensiblePlacement": extensible_placement,
    "extensibleFilters": extensible_filters,
    "cycle": cycle,
    "placement": placement,
    "avgShedderSort": avg_shedder_sort,
}


def run(case: dict[str, Any], version: str) -> dict[str, Any]:
    """The planner's answer; a crash becomes an answer too, so it is reported like any other difference."""
    try:
        return RUNNERS[case["kind"]](case, version)
    except Exception as error:  # reported as a difference from Pulsar
        return {"error": f"planner crashed: {type(error).__name__}: {error}"}


# --- comparison --------------------------------------------------------------------------------------------


def per_broker(unloads: list[dict[str, Any]]) -> dict[str, list[tuple[str, str | None]]]:
    """Unloads by source broker, each broker's bundles (and destinations) in selection order.

    Pulsar returns a Guava ArrayListMultimap, whose brokers iterate in HashMap order (not insertion order), so
    the order across brokers carries no meaning; the planner lists them in pair (AvgShedder) or id order.
    """
    grouped: dict[str, list[tuple[str, str | None]]] = {}
    for unload in unloads:
        grouped.setdefault(unload["broker"], []).append((unload["bundle"], unload["destination"]))
    return grouped


# Skips before the load statistics are computed: Pulsar's counter then keeps the previous cycle's figures.
_SKIPPED_BEFORE_STATISTICS = {"CoolDown", "OutDatedData", "NoLoadData", "NoBrokers"}


def transfer_runs(result: dict[str, Any]) -> Any:
    """Per TransferShedder run: the unloads as a set (Pulsar returns a HashSet), why none, the hit counter, the
    recently unloaded brokers left, and the load statistics where the run computed them."""
    runs = []
    for run in result["runs"]:
        unloads = sorted((u["broker"], u["bundle"], u["destination"] or "", u["reason"]) for u in run["unloads"])
        figures = None
        if run.get("skipped") not in _SKIPPED_BEFORE_STATISTICS:
            figures = (run["average"], run["std"])
        runs.append((unloads, run.get("skipped"), run["hitCount"], run["recentlyUnloadedBrokers"], figures))
    return runs


def extensible_split_runs(result: dict[str, Any]) -> Any:
    """Per cycle: the splits as a set (Pulsar returns a HashSet of decisions) and the hit counts left."""
    return [
        (sorted((split["bundle"], split["reason"]) for split in run["splits"]), dict(sorted(run["hitCounts"].items())))
        for run in result["runs"]
    ]


def normalized_runs(result: dict[str, Any]) -> Any:
    """What must be equal for one strategy: per run, the unloads per broker and the strategy's state."""
    if "error" in result:
        return "error"
    return [{"unloads": per_broker(run["unloads"]), "state": run["state"]} for run in result["runs"]]


def differences(case: dict[str, Any], java: dict[str, Any], planner: dict[str, Any]) -> list[str]:
    """Names of the parts that differ (empty when the planner agrees with Pulsar)."""
    kind = case["kind"]
    if "error" in java or "error" in planner:
        return [] if ("error" in java) == ("error" in planner) else ["error"]
    if kind == "shed":
        return [
            name
            for name in case["strategies"]
            if normalized_runs(java["strategies"][name]) != normalized_runs(planner["strategies"][name])
        ]
    if kind == "splitCandidates":
        return [] if sorted(java["bundles"]) == planner["bundles"] else ["bundles"]
    if kind == "transfer":
        return [] if transfer_runs(java) == transfer_runs(planner) else ["runs"]
    if kind == "extensibleSplit":
        return [] if extensible_split_runs(java) == extensible_split_runs(planner) else ["runs"]
    if kind == "cycle":
        return [] if cycle_runs(java) == cycle_runs(planner) else ["runs"]
    if kind == "placement":
        return [] if java["placements"] == planner["placements"] else ["placements"]
    if kind == "extensibleFilters":
        return [part for part in ("candidates", "failed") if java[part] != planner[part]]
    if kind == "avgShedderSort":
        # Pulsar's HashMap decides the order the scores reach its sort; given that order, the sort must agree.
        given = avg_shedder_sort(case, planner["version"], java["arrival"])
        return [name for name in ("scores", "sorted") if java[name] != given[name]]
    if kind == "extensiblePlacement":
        picked_among_best = java["chosen"] is None or java["chosen"] in java["best"]
        return [] if java["best"] == planner["best"] and picked_among_best else ["best"]
    return [] if expected_positions(case, java) == planner["positions"] else ["positions"]


def expected_positions(case: dict[str, Any], java: dict[str, Any]) -> list[int] | None:
    """Pulsar's positions, or None (no split) where Pulsar returns a position its own splitBundles rejects.

    topic_count_equally_divide and flow_or_qps_equally_divide do not check that their positions fall strictly
    inside the bundle; applying such a position fails the whole split. The planner plans no split instead
    (README, "Split positions").
    """
    positions = java["positions"] or None
    bundle = BundleRange.parse(case["bundle"])
    algorithm = split_algorithm(case["algorithm"])
    if algorithm is None or algorithm.pulsar_checks_positions:
        return positions
    if positions and not all(bundle.lower < position < bundle.upper for position in positions):
        return None
    return positions


# --- shrinking ---------------------------------------------------------------------------------------------


def _without_brokers(case: dict[str, Any], brokers: set[str]) -> dict[str, Any]:
    load = case["loadData"]
    kept = {broker: report for broker, report in load["brokers"].items() if broker not in brokers}
    return {**case, "loadData": {**load, "brokers": kept}}


def _without_bundles(case: dict[str, Any], bundles: set[str]) -> dict[str, Any]:
    load = case["loadData"]
    brokers = {}
    for broker, report in load["brokers"].items():
        stats = {name: value for name, value in report.get("lastStats", {}).items() if name not in bundles}
        owned = [name for name in report.get("bundles", []) if name not in bundles]
        brokers[broker] = {**report, "lastStats": stats, "bundles": owned}
    bundle_data = {name: data for name, data in load["bundleData"].items() if name not in bundles}
    recent = {name: at for name, at in load.get("recentlyUnloadedBundles", {}).items() if name not in bundles}
    return {**case, "loadData": {"brokers": brokers, "bundleData": bundle_data, "recentlyUnloadedBundles": recent}}


def _without_settings(case: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {**case, "config": {key: value for key, value in case["config"].items() if key not in keys}}


def _without_keys(case: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {key: value for key, value in case.items() if key not in keys}


def _chunks(items: list[str], count: int) -> list[set[str]]:
    size = math.ceil(len(items) / count)
    return [set(items[start : start + size]) for start in range(0, len(items), size)]


def shrink(
    case: dict[str, Any],
    still_fails: Callable[[list[dict[str, Any]]], int | None],
) -> dict[str, Any]:
    """A smaller shed case that still fails (delta debugging over brokers, bundles, then settings).

    `still_fails(candidates)` runs a batch of candidate cases (one JVM) and returns the index of the first one
    that still shows the difference, or None.
    """
    dimensions: list[tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any], set[str]], Any]]] = [
        (lambda c: sorted(c["loadData"]["brokers"]), _without_brokers),
        (lambda c: sorted(c["loadData"]["bundleData"]), _without_bundles),
        (lambda c: sorted(c["config"]), _without_settings),
        (lambda c: ["absentBrokers"] if "absentBrokers" in c else [], _without_keys),
    ]
    for items_of, remove in dimensions:
        granularity = 2
        while len(items := items_of(case)) >= 1:
            granularity = min(granularity, len(items))
            candidates = [remove(case, chunk) for chunk in _chunks(items, granularity)]
            found = still_fails(candidates)
            if found is not None:
                case = candidates[found]
                granularity = max(granularity - 1, 2)
            elif granularity >= len(items):
                break
            else:
                granularity = min(granularity * 2, len(items))
    return case
