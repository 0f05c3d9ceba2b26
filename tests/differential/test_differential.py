"""The planner against Pulsar's own Java code on thousands of random inputs (one JVM per batch and version).

`DIFFERENTIAL_CASES` (default 1000) sets the number of shedding cases, each of which runs all four shedders;
there are as many split-candidate cases, four times as many split-position cases (about as many per split
algorithm), as many TransferShedder and extensible split-strategy cases (the extensible load manager,
several cycles each), as many whole shedding cycles (`doLoadShedding` with placement) and as many series of a
client's lookups (`selectBrokerForAssignment`); three quarters of these last two carry random isolation policies,
failure domains and anti-affinity groups, written into the load manager's metadata store.
`DIFFERENTIAL_SEED` (default 1) moves the whole batch to other seeds. On a difference the test shrinks the first
failing shedding case, writes it to a file and prints the path, a command that replays it and both answers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.differential import generator, planner_side
from tests.differential.conftest import JavaHarness

pytestmark = pytest.mark.differential

CASES = int(os.environ.get("DIFFERENTIAL_CASES", "1000"))
SEED = int(os.environ.get("DIFFERENTIAL_SEED", "1"))


@dataclass
class Batch:
    workdir: Path
    cases: list[dict[str, Any]]  # shed cases name their LoadData by loadDataFile
    java: dict[str, dict[str, Any]]
    planner: dict[str, dict[str, Any]]
    harness: JavaHarness


def build_batch(harness: JavaHarness, workdir: Path, count: int, seed: int) -> Batch:
    """`count` cases of each kind from `seed` (four times as many split positions), answered by Pulsar's JVM and the
    planner side by side."""
    cases: list[dict[str, Any]] = []
    for index in range(count):
        case = generator.shed_case(seed + index, harness.pulsar_version)
        path = workdir / f"{case['id']}.load-data.json"
        path.write_text(json.dumps(case.pop("loadData")))
        cases.append({**case, "loadDataFile": str(path)})
    cases += [generator.split_candidates_case(seed + index) for index in range(count)]
    cases += [generator.split_positions_case(seed + index) for index in range(4 * count)]
    cases += [generator.transfer_case(seed + index) for index in range(count)]
    cases += [generator.extensible_split_case(seed + index) for index in range(count)]
    cases += [generator.extensible_placement_case(seed + index) for index in range(count)]
    cases += [generator.extensible_filters_case(seed + index) for index in range(count)]
    cases += [generator.avg_shedder_sort_case(seed + index) for index in range(count)]
    for index in range(count):  # each cycle case and the lookups on its cluster, one LoadData file for both
        cycle = generator.cycle_case(seed + index, harness.pulsar_version)
        lookups = generator.placement_case(seed + index, harness.pulsar_version, cycle)
        path = workdir / f"{cycle['id']}.load-data.json"
        path.write_text(json.dumps(cycle.pop("loadData")))
        lookups.pop("loadData")
        cases += [{**cycle, "loadDataFile": str(path)}, {**lookups, "loadDataFile": str(path)}]
    java_run = harness.start(cases, workdir / "java")  # the JVM and the planner run side by side
    version = harness.pulsar_version
    config_logger = logging.getLogger("planner.pulsar.config")
    level = config_logger.level
    # Before 4.0 the planner warns about every case's 4.0-only bandwidth keys (Pulsar ignores them silently).
    config_logger.setLevel(logging.ERROR)
    try:
        planner = {case["id"]: planner_side.run(case, version) for case in cases}
    except BaseException:
        java_run.process.kill()
        java_run.process.wait()
        raise
    finally:
        config_logger.setLevel(level)
    return Batch(workdir, cases, java_run.results(), planner, harness)


@pytest.fixture(scope="module")
def batch(java_harness: JavaHarness, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    return build_batch(java_harness, tmp_path_factory.mktemp("differential"), CASES, SEED)


def _mismatches(batch: Batch, kind: str, strategy: str | None = None) -> list[dict[str, Any]]:
    failing = []
    for case in batch.cases:
        if case["kind"] != kind:
            continue
        found = planner_side.differences(case, batch.java[case["id"]], batch.planner[case["id"]])
        if (strategy is None and found) or (strategy is not None and (strategy in found or "error" in found)):
            failing.append(case)
    return failing


def _only(case: dict[str, Any], strategy: str) -> dict[str, Any]:
    return {**case, "strategies": {strategy: case["strategies"][strategy]}}


def _shrunk(batch: Batch, case: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The failing shed case, inlined and shrunk while it still fails, for the report."""
    version = batch.harness.pulsar_version
    full = _only({key: value for key, value in case.items() if key != "loadDataFile"}, strategy)
    full["loadData"] = json.loads(Path(case["loadDataFile"]).read_text())
    rounds = iter(range(10**6))

    def still_fails(candidates: list[dict[str, Any]]) -> int | None:
        named = [{**candidate, "id": f"shrink-{next(rounds)}"} for candidate in candidates]
        java = batch.harness.run(named, batch.workdir / "shrink")
        for index, candidate in enumerate(named):
            if planner_side.differences(candidate, java[candidate["id"]], planner_side.shed(candidate, version)):
                return index
        return None

    return planner_side.shrink(full, still_fails)


def _report(batch: Batch, failing: list[dict[str, Any]], total: int, what: str, strategy: str | None) -> str:
    first = failing[0]
    version = batch.harness.pulsar_version
    if first["kind"] == "shed" and strategy is not None:
        case = _shrunk(batch, first, strategy)
        java = batch.harness.run([case], batch.workdir / "replay")[case["id"]]
        planner = planner_side.shed(case, version)
        path = batch.workdir / "failures" / f"{first['id']}-{strategy}.json"
        path.parent.mkdir(exist_ok=True)
        load_path = path.with_suffix(".load-data.json")
        load_path.write_text(json.dumps(case["loadData"], indent=1))
        path.write_text(json.dumps(case, indent=1))
        settings = " ".join(f"--set {key}={value}" for key, value in sorted(case["config"].items()))
        replay = (
            f"pulsar-rebalance shed --load-data {load_path} --strategy {strategy} "
            f"--runs {case['strategies'][strategy]} --set pulsarVersion={version} {settings}"
        )
        java_part = java["strategies"][strategy] if "strategies" in java else java
        planner_part = planner["strategies"][strategy]
    else:
        path = batch.workdir / "failures" / f"{first['id']}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(first, indent=1))
        replay = "(split case: see the file)"
        java_part, planner_part = batch.java[first["id"]], batch.planner[first["id"]]
    return (
        f"{what} differs from Pulsar {version} on {len(failing)} of {total} cases "
        f"({', '.join(case['id'] for case in failing[:10])})\n"
        f"minimal failing input: {path}\nreplay: {replay}\n"
        f"Pulsar:  {json.dumps(java_part)}\nplanner: {json.dumps(planner_part)}"
    )


def _count(batch: Batch, kind: str) -> int:
    return sum(1 for case in batch.cases if case["kind"] == kind)


@pytest.mark.parametrize("strategy", generator.SHED_STRATEGIES)
def test_shedding_strategy_matches_pulsar(batch: Batch, strategy: str) -> None:
    failing = _mismatches(batch, "shed", strategy)
    assert not failing, _report(batch, failing, _count(batch, "shed"), strategy, strategy)


def test_split_candidates_match_pulsar(batch: Batch) -> None:
    failing = _mismatches(batch, "splitCandidates")
    assert not failing, _report(batch, failing, _count(batch, "splitCandidates"), "BundleSplitterTask", None)


@pytest.mark.parametrize("algorithm", generator.SPLIT_ALGORITHMS)
def test_split_positions_match_pulsar(batch: Batch, algorithm: str) -> None:
    cases = [case for case in batch.cases if case["kind"] == "splitPositions" and case["algorithm"] == algorithm]
    failing = [case for case in _mismatches(batch, "splitPositions") if case["algorithm"] == algorithm]
    assert not failing, _report(batch, failing, len(cases), algorithm, None)


def test_transfer_shedder_matches_pulsar(batch: Batch) -> None:
    failing = _mismatches(batch, "transfer")
    assert not failing, _report(batch, failing, _count(batch, "transfer"), "TransferShedder", None)


def test_the_transfer_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: TransferShedder unloads, swaps, plain unloads and every skip reason occur."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "transfer":
            continue
        for run in batch.java[case["id"]]["runs"]:
            unloads = run["unloads"]
            outcomes[run.get("skipped") or "unloads"] += 1
            sources = {unload["broker"] for unload in unloads}
            outcomes["swaps"] += any(unload["destination"] in sources for unload in unloads)
            outcomes["plain unloads"] += any(unload["destination"] is None for unload in unloads)
            outcomes["underloaded"] += any(unload["reason"] == "Underloaded" for unload in unloads)
    cases = _count(batch, "transfer")
    print(f"\n{batch.harness.pulsar_version}: {cases} transfer cases, runs by outcome {dict(outcomes)}")
    assert outcomes["unloads"] >= cases // 2, outcomes
    for branch in ("swaps", "plain unloads", "underloaded", "HitCount", "NoBundles", "CoolDown", "NoLoadData"):
        assert outcomes[branch] >= cases // 100, (branch, outcomes)
    assert outcomes["OutDatedData"] >= cases // 100, outcomes


def test_extensible_split_strategy_matches_pulsar(batch: Batch) -> None:
    failing = _mismatches(batch, "extensibleSplit")
    assert not failing, _report(
        batch, failing, _count(batch, "extensibleSplit"), "DefaultNamespaceBundleSplitStrategyImpl", None
    )


def test_the_extensible_split_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: splits for every reason, hit counts that wait, the namespace limit and the per-cycle
    limit each hold a bundle back."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "extensibleSplit":
            continue
        per_cycle = int(case["config"]["loadBalancerMaxNumberOfBundlesToSplitPerCycle"])
        for run in batch.java[case["id"]]["runs"]:
            outcomes.update(split["reason"] for split in run["splits"])
            outcomes["waiting"] += bool(run["hitCounts"])
            outcomes["per-cycle limit"] += per_cycle > 0 and len(run["splits"]) == per_cycle
        threshold = int(case["config"]["loadBalancerNamespaceBundleSplitConditionHitCountThreshold"])
        limit = int(case["config"]["loadBalancerNamespaceMaximumBundles"])
        full = {namespace for namespace, count in case["namespaceBundleCounts"].items() if count >= limit}
        outcomes["namespace limit"] += any(
            count > threshold and bundle.rsplit("/", 1)[0] in full
            for run in batch.java[case["id"]]["runs"]
            for bundle, count in run["hitCounts"].items()
        )
    cases = _count(batch, "extensibleSplit")
    print(f"\n{batch.harness.pulsar_version}: {cases} extensible split cases, outcomes {dict(outcomes)}")
    for branch in ("Topics", "Sessions", "MsgRate", "Bandwidth", "waiting", "per-cycle limit", "namespace limit"):
        assert outcomes[branch] >= cases // 100, (branch, outcomes)


def test_extensible_placement_matches_pulsar(batch: Batch) -> None:
    failing = _mismatches(batch, "extensiblePlacement")
    cases = _count(batch, "extensiblePlacement")
    assert not failing, _report(batch, failing, cases, "LeastResourceUsageWithWeight (extensible)", None)


def test_the_extensible_placement_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: some brokers under the mean, none (all candidates), and a broker exactly on it."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "extensiblePlacement":
            continue
        best, candidates = batch.java[case["id"]]["best"], case["candidates"]
        outcomes["some best" if 0 < len(best) < len(candidates) else "all candidates" if best else "none"] += 1
        with_data = [case["brokers"][broker]["weightedMaxEMA"] for broker in candidates if broker in case["brokers"]]
        difference = int(case["config"]["loadBalancerAverageResourceUsageDifferenceThresholdPercentage"]) / 100.0
        mean = sum(with_data) / len(with_data) if with_data else None
        outcomes["on the threshold"] += any(ema + difference == mean for ema in with_data)
        outcomes["without load data"] += any(broker not in case["brokers"] for broker in candidates)
    cases = _count(batch, "extensiblePlacement")
    print(f"\n{batch.harness.pulsar_version}: {cases} extensible placement cases, outcomes {dict(outcomes)}")
    for branch in ("some best", "all candidates", "on the threshold", "without load data"):
        assert outcomes[branch] >= cases // 50, (branch, outcomes)


def test_extensible_filters_match_pulsar(batch: Batch) -> None:
    """The extensible load manager's broker filters for a lookup, isolation and anti-affinity (with failure domains)
    among them, on the cluster policies in Pulsar's metadata store."""
    failing = _mismatches(batch, "extensibleFilters")
    cases = _count(batch, "extensibleFilters")
    assert not failing, _report(batch, failing, cases, "the extensible load manager's broker filters", None)


def test_the_extensible_filter_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: lookups where the filters remove some brokers, all of them, none, and where the version
    filter fails."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "extensibleFilters":
            continue
        java = batch.java[case["id"]]
        left, available = len(java["candidates"]), len(case["brokers"])
        outcomes["all removed" if not left else "some removed" if left < available else "none removed"] += 1
        outcomes["version filter failed"] += bool(java["failed"])
    cases = _count(batch, "extensibleFilters")
    print(f"\n{batch.harness.pulsar_version}: {cases} extensible filter cases, outcomes {dict(outcomes)}")
    for branch in ("all removed", "some removed", "none removed", "version filter failed"):
        assert outcomes[branch] >= cases // 50, (branch, outcomes)


def test_the_cases_exercise_every_strategy(batch: Batch) -> None:
    """Guards the generator: enough runs select bundles, and the interesting modes occur."""
    selected: Counter[str] = Counter()
    lower_boundary = 0
    for case in batch.cases:
        if case["kind"] != "shed":
            continue
        for name, result in batch.java[case["id"]]["strategies"].items():
            if any(run["unloads"] for run in result.get("runs", [])):
                selected[name] += 1
        first_run = batch.java[case["id"]]["strategies"]["ThresholdShedder"]["runs"][0]["unloads"]
        if case["config"].get("lowerBoundarySheddingEnabled") == "true" and first_run:
            # Did the lower boundary select them? Without it the planner (which agrees with Pulsar) selects none.
            without = {**case["config"], "lowerBoundarySheddingEnabled": "false"}
            only_first = {**case, "config": without, "strategies": {"ThresholdShedder": 1}}
            result = planner_side.shed(only_first, batch.harness.pulsar_version)["strategies"]["ThresholdShedder"]
            lower_boundary += not result["runs"][0]["unloads"]
    shed_cases = _count(batch, "shed")
    for name in generator.SHED_STRATEGIES:
        assert selected[name] >= shed_cases // 10, f"only {selected[name]} of {shed_cases} cases unload with {name}"
    assert lower_boundary >= shed_cases // 100, f"the lower boundary selects bundles in only {lower_boundary} cases"
    splits = [batch.java[c["id"]] for c in batch.cases if c["kind"] == "splitCandidates"]
    assert sum(1 for result in splits if result.get("bundles")) >= len(splits) // 4
    positions = [batch.java[c["id"]] for c in batch.cases if c["kind"] == "splitPositions"]
    assert sum(1 for result in positions if result.get("positions")) >= len(positions) // 4


def test_cli_agrees_with_pulsar_on_a_few_cases(batch: Batch) -> None:
    """The console script, not just the library, gives Pulsar's answer (AvgShedder, several runs)."""
    script = shutil.which("pulsar-rebalance") or str(Path(sys.executable).with_name("pulsar-rebalance"))
    version = batch.harness.pulsar_version
    checked = 0
    for case in batch.cases[:CASES]:
        java_runs = batch.java[case["id"]]["strategies"]["AvgShedder"]["runs"]
        if "absentBrokers" in case or not any(run["unloads"] for run in java_runs):
            continue
        settings = [f"--set={key}={value}" for key, value in {**case["config"], "pulsarVersion": version}.items()]
        command = [script, "shed", "--load-data", case["loadDataFile"], "--strategy", "AvgShedder"]
        command += ["--runs", str(len(java_runs)), *settings]
        completed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        assert completed.returncode == 0, completed.stderr
        cli_runs = json.loads(completed.stdout)["runs"]
        cli_unloads = [planner_side.per_broker(run["unloads"]) for run in cli_runs]
        assert cli_unloads == [planner_side.per_broker(run["unloads"]) for run in java_runs], case["id"]
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_cli_runs_transfer_shedder_as_pulsar_does(batch: Batch) -> None:
    """`pulsar-rebalance shed --strategy TransferShedder` on an ExtensibleLoadData file: Pulsar's unloads."""
    script = shutil.which("pulsar-rebalance") or str(Path(sys.executable).with_name("pulsar-rebalance"))
    version = batch.harness.pulsar_version
    checked = 0
    for case in batch.cases:
        if case["kind"] != "transfer" or not any(run["unloads"] for run in batch.java[case["id"]]["runs"]):
            continue
        if "policies" in case:  # the command reads load data only: the policies come from a snapshot
            continue
        path = batch.workdir / f"{case['id']}.extensible-load-data.json"
        path.write_text(json.dumps(case["extensibleLoadData"]))
        settings = [f"--set={key}={value}" for key, value in {**case["config"], "pulsarVersion": version}.items()]
        command = [script, "shed", "--load-data", str(path), "--strategy", "TransferShedder"]
        command += ["--runs", str(case["runs"]), "--now", str(case["now"]), *settings]
        completed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        assert completed.returncode == 0, completed.stderr
        got = [
            sorted(json.dumps(u, sort_keys=True) for u in run["unloads"])
            for run in json.loads(completed.stdout)["runs"]
        ]
        want = [sorted(json.dumps(u, sort_keys=True) for u in run["unloads"]) for run in batch.java[case["id"]]["runs"]]
        assert got == want, case["id"]
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_shedding_cycle_matches_pulsar(batch: Batch) -> None:
    """ModularLoadManagerImpl.doLoadShedding around the strategies: excluded namespaces, the namespace checks, the
    grace period and every unload's destination through selectBroker (ties broken alike on both sides)."""
    failing = _mismatches(batch, "cycle")
    assert not failing, _report(batch, failing, _count(batch, "cycle"), "doLoadShedding", None)


def test_the_cycle_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: unloads, bundles the strategy chose but the cycle did not unload, placement ties, and
    every placement strategy."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "cycle":
            continue
        java = batch.java[case["id"]]
        outcomes[case["config"]["loadBalancerLoadPlacementStrategy"].rsplit(".", 1)[-1]] += 1
        if "error" in java:
            outcomes["error"] += 1
            continue
        runs = java["runs"]
        outcomes["unloads"] += any(run["unloads"] for run in runs)
        outcomes["not unloaded"] += any(run["selected"] > len(run["unloads"]) for run in runs)
        outcomes["ties"] += any(run["ties"] for run in runs)
    cases = _count(batch, "cycle")
    print(f"\n{batch.harness.pulsar_version}: {cases} cycle cases, by outcome {dict(outcomes)}")
    assert outcomes["error"] == 0, outcomes
    for branch in ("unloads", "ties", "LeastLongTermMessageRate", "LeastResourceUsageWithWeight", "AvgShedder"):
        assert outcomes[branch] >= cases // 20, (branch, outcomes)
    # Fewer before 4.1, which has no excluded namespaces: there the policies and placement keep bundles.
    assert outcomes["not unloaded"] >= cases // 50, outcomes


def test_avg_shedder_sorts_near_ties_as_pulsar_does(batch: Batch) -> None:
    """Near-ties under AvgShedder's comparator: given the order Pulsar's HashMap hands the scores to its sort, the
    planner's sort (java_sort for the truncating releases) returns Pulsar's list, on any CPython."""
    failing = _mismatches(batch, "avgShedderSort")
    assert not failing, _report(batch, failing, _count(batch, "avgShedderSort"), "AvgShedder's sort", None)
    disordered = sum(
        1
        for case in batch.cases
        if case["kind"] == "avgShedderSort"
        and batch.java[case["id"]]["sorted"]
        != sorted(batch.java[case["id"]]["sorted"], key=batch.java[case["id"]]["scores"].__getitem__)
    )
    print(f"\n{batch.harness.pulsar_version}: Pulsar's sorted list is out of score order in {disordered} clusters")


def test_placement_for_lookups_matches_pulsar(batch: Batch) -> None:
    """ModularLoadManagerImpl.selectBrokerForAssignment, lookup after lookup with each pick preallocated: namespace
    isolation, anti-affinity and failure domains, the broker filters, the placement strategy (ties broken alike)."""
    failing = _mismatches(batch, "placement")
    assert not failing, _report(batch, failing, _count(batch, "placement"), "selectBrokerForAssignment", None)


def test_the_placement_cases_reach_every_branch(batch: Batch) -> None:
    """Guards the generator: ties, lookups nobody may take, and lookups placed beside earlier ones."""
    outcomes: Counter[str] = Counter()
    for case in batch.cases:
        if case["kind"] != "placement":
            continue
        java = batch.java[case["id"]]
        if "error" in java:
            outcomes["error"] += 1
            continue
        brokers = [placement["broker"] for placement in java["placements"]]
        outcomes["ties"] += java["ties"] > 0
        outcomes["no broker"] += None in brokers
        outcomes["several on one broker"] += len(set(brokers) - {None}) < len([b for b in brokers if b])
        outcomes["spread"] += len(set(brokers) - {None}) > 1
    cases = _count(batch, "placement")
    print(f"\n{batch.harness.pulsar_version}: {cases} placement cases, by outcome {dict(outcomes)}")
    assert outcomes["error"] == 0, outcomes
    for branch in ("ties", "no broker", "several on one broker", "spread"):
        assert outcomes[branch] >= cases // 50, (branch, outcomes)


# How many policy cases of each modular kind the policies' effect is checked on (the planner runs each up to four
# times more); the other kinds are checked on all of theirs.
POLICY_SAMPLE = int(os.environ.get("DIFFERENTIAL_POLICY_SAMPLE", "150"))
# The kinds whose cases carry cluster policies.
POLICY_KINDS = ("cycle", "placement", "transfer", "extensibleFilters")
# What a planner that ignored part of the policies would be given: the case's policies without that part.
IGNORED_POLICIES: dict[str, tuple[str, ...]] = {
    "all policies": ("isolation", "anti_affinity_groups", "failure_domains"),
    "isolation": ("isolation",),
    "anti-affinity": ("anti_affinity_groups",),
    "failure domains": ("failure_domains",),
}


def test_the_policies_change_what_pulsar_does(batch: Batch) -> None:
    """The policies are evidence only where they change Pulsar's answer, and a planner ignoring them must be caught:
    per kind, the policy cases where the planner, given the case without (part of) its policies, no longer agrees
    with Pulsar. Each part must be caught on its own (`docs/fidelity.md`, "Policies in the differential"). The
    modular kinds, whose plans take longest, are checked on their first `POLICY_SAMPLE` policy cases."""
    version = batch.harness.pulsar_version
    caught: Counter[tuple[str, str]] = Counter()
    checked: Counter[str] = Counter()
    for case in batch.cases:
        kind = case["kind"]
        if kind not in POLICY_KINDS or "policies" not in case:
            continue
        if kind in ("cycle", "placement") and checked[kind] >= POLICY_SAMPLE:
            continue
        checked[kind] += 1
        java = batch.java[case["id"]]
        for ignored, parts in IGNORED_POLICIES.items():
            if not any(case["policies"][part] for part in parts):
                continue  # nothing to ignore: the same answer
            stripped = {**case, "policies": {**case["policies"], **{part: {} for part in parts}}}
            caught[(kind, ignored)] += bool(planner_side.differences(case, java, planner_side.run(stripped, version)))
    print(f"\n{version}: policy cases checked {dict(checked)}; answers that differ from Pulsar's when the planner "
          f"ignores them: {dict(sorted(caught.items()))}")  # fmt: skip
    for kind in POLICY_KINDS:
        cases = checked[kind]
        assert caught[(kind, "all policies")] >= cases // 10, (kind, caught)
        assert caught[(kind, "isolation")] >= cases // 20, (kind, caught)
        assert caught[(kind, "anti-affinity")] >= cases // 50, (kind, caught)
        # Failure domains count only beside anti-affinity groups, and TransferShedder rarely meets them there.
        assert caught[(kind, "failure domains")] >= (cases >= 200), (kind, caught)
