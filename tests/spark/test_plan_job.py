"""The Spark planning job: its averages equal Pulsar's update rule, its plan equals `shed` on the
LoadData it built, and hit counters carry across runs through the store."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest
from sqlalchemy import func, select

from planner.errors import InputError
from planner.orchestrate.runner import PlanRequest, commit_job_output, job_request, run_plan
from planner.plan.document import PlanDocument
from planner.plan.request import Averaging, JobRequest
from planner.pulsar.model import BundleData, NamespaceBundleStats
from planner.samples.dataset import read_dataset, samples_root, write_snapshot_samples
from planner.samples.reports import SnapshotReports
from planner.samples.time_average import update_bundle_data
from planner.store.database import Store
from planner.store.models import Cluster, Plan, Snapshot
from planner.store.plans import StaleStateError, commit_plan, read_state
from spark_jobs.averaging import ReportPositions, bundle_averages, read_reports
from spark_jobs.plan_job import plan_clusters
from spark_jobs.tables import read_table
from tests.builders import broker, bundle

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def write_history(home, cluster, snapshots, reports_at, first_id=1):
    for index in range(snapshots):
        write_snapshot_samples(home, cluster, first_id + index, T0 + timedelta(minutes=index), reports_at(index))


def replay(samples):
    data = BundleData()
    for sample in samples:
        data = update_bundle_data(data, sample)
    return data


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def test_sample_count_averages_equal_pulsars_update_rule(spark, tmp_path):
    rng = random.Random(11)
    names = [bundle(i) for i in range(4)]
    history = {name: [] for name in names}

    def reports_at(index):
        stats = {}
        for position, name in enumerate(names):
            # bundle 3 is missing from some snapshots: it gets no sample then, as on Pulsar's leader
            if position == 3 and index % 7 == 0:
                continue
            sample = NamespaceBundleStats(
                msg_rate_in=rng.uniform(0, 5000),
                msg_rate_out=rng.uniform(0, 5000),
                msg_throughput_in=rng.uniform(0, 1e8),
                msg_throughput_out=rng.uniform(0, 1e8),
                topics=position + 2,
            )
            history[name].append(sample)
            stats[name] = sample
        return {"a:8080": broker(bundles=stats, last_stats=stats), "b:8080": broker()}

    write_history(tmp_path, "eq", 1040, reports_at)
    results = plan_clusters(
        spark,
        samples_root(tmp_path),
        JobRequest(clusters=["eq"], strategy="UniformLoadShedder", as_of=T0 + timedelta(days=1), emit_load_data=True),
    )
    built = results["eq"].load_data["bundleData"]
    for name in names:
        expected = replay(history[name])
        for term, got in (("short", built[name]["shortTermData"]), ("long", built[name]["longTermData"])):
            want = expected.short_term_data if term == "short" else expected.long_term_data
            assert got["numSamples"] == want.num_samples
            for field, value in (
                ("msgRateIn", want.msg_rate_in),
                ("msgRateOut", want.msg_rate_out),
                ("msgThroughputIn", want.msg_throughput_in),
                ("msgThroughputOut", want.msg_throughput_out),
            ):
                assert close(got[field], value), (name, term, field, got[field], value)
        assert built[name]["topics"] == history[name][-1].topics


def replay_in_collector_order(rows):
    """Per (cluster, bundle): Pulsar's update rule over the rows in the collector's replay order
    (snapshot id, then broker)."""
    averages = {}
    for row in sorted(rows, key=lambda r: (r["snapshot_id"], r["broker"])):
        key = (row["cluster"], row["bundle"])
        sample = NamespaceBundleStats(**{f: row[f] for f in (*RATE_FIELDS, "topics")})
        averages[key] = update_bundle_data(averages.get(key, BundleData()), sample)
    return averages


RATE_FIELDS = ("msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out")
REPORT_COLUMNS = ("snapshot_id", "taken_at", "broker")


@pytest.mark.slow  # CI time: the regular-history equality below stays in CI
def test_sample_count_averages_on_irregular_histories(spark, tmp_path):
    """Every bundle's averages, also those no longer reported: bundles with fewer than 10 samples, exactly
    10, 1000 and 1001, gaps, a bundle that came and went, one two brokers reported in the same snapshots
    (two samples each, broker order), one on a broker whose report is missing from some snapshots, one
    moving to that broker, snapshot ids with jumps, snapshots taken at the same time, three date partitions
    and a snapshot whose id is larger than the next day's first ones; placed by the reports of the brokers
    table, without it (every row ranked), by a quarter fewer reports, and by reports the bundles table has no
    rows of (every broker in every snapshot)."""
    rng = random.Random(5)
    snapshots = 1150

    def present(name, index):
        return {
            "steady": True,
            "late": index >= snapshots - 7,
            "ten": index >= snapshots - 10,
            "thousand": index >= snapshots - 1000,
            "thousand-one": index >= snapshots - 1001,
            "came-and-went": 100 <= index < 113,
            "gappy": index % 7 != 3 and not 500 <= index < 700,
            "moving": True,
            "unreported": True,
            "hopping": True,
        }[name]

    def c_reports(index):
        return not (index % 5 == 2 or 800 <= index < 830)

    def owners(name, index):
        if name == "unreported":  # its broker's report is missing from some snapshots
            return ["c:8080"] if c_reports(index) else []
        if name == "hopping":
            # To c:8080 one id into the chunk of ids 1152-1215 (index 1040 on), where long-term weights still decay:
            # the chunk's rows are then just where c:8080 reported, though the first is a:8080's, whose reports differ.
            return ["a:8080"] if index < 1041 else ["c:8080"] if c_reports(index) else []
        if name != "moving":
            return ["a:8080"]
        return ["a:8080"] if index < 600 else ["a:8080", "b:8080"] if index < 603 else ["b:8080"]

    rows = []
    for index in range(snapshots):
        snapshot_id = 1 + index + (index // 300) * 37  # id jumps, as when other clusters take ids in between
        # Two snapshots every 6 minutes (ties in time), over three date partitions; one snapshot taken before
        # midnight got a larger id than the next day's first ones (collects overlapping).
        taken_at = T0 + timedelta(minutes=6 * (index // 2))
        if index == 700:
            taken_at = T0 + timedelta(days=1, minutes=-1)
        per_broker = {"a:8080": {}, "b:8080": {}, "c:8080": {}}
        for cluster in ("irr", "other"):
            if cluster == "other" and index % 50:
                continue
            names = ("steady", "late", "ten", "thousand", "thousand-one", "came-and-went", "gappy", "moving")
            for name in (*names, "unreported", "hopping"):
                if not present(name, index) or (cluster == "other" and name != "steady"):
                    continue
                for owner in owners(name, index):
                    sample = {f: rng.uniform(0, 1e4 if "rate" in f else 1e8) for f in RATE_FIELDS}
                    sample["topics"] = rng.randint(1, 9)
                    per_broker[owner][bundle(len(name), f"t/{name}")] = NamespaceBundleStats(**sample)
                    rows.append(
                        {
                            "cluster": cluster,
                            "snapshot_id": snapshot_id,
                            "broker": owner,
                            "bundle": bundle(len(name), f"t/{name}"),
                        }
                        | sample
                    )
            reports = {owner: broker(bundles=stats, last_stats=stats) for owner, stats in per_broker.items() if stats}
            write_snapshot_samples(tmp_path, cluster, snapshot_id, taken_at, reports)
            per_broker = {"a:8080": {}, "b:8080": {}, "c:8080": {}}

    as_of = T0 + timedelta(days=3)
    samples = samples_root(tmp_path)
    frame = read_table(spark, samples, "bundles", ["irr", "other"], as_of)
    expected = replay_in_collector_order(rows)
    assert len(expected) == 11
    clusters = ("irr", "other")
    tables = {cluster: read_dataset(samples, "brokers", cluster, columns=REPORT_COLUMNS) for cluster in clusters}
    # A quarter of the reports unknown, and reports of snapshots where the broker sampled nothing.
    lacking = {c: t.filter(pc.not_equal(pc.bit_wise_and(t["snapshot_id"], 3), 1)) for c, t in tables.items()}
    everyone = {c: SnapshotReports.from_brokers_table(t).model_copy(update={"missing": {}}) for c, t in tables.items()}
    variants = {
        "by the brokers table": read_reports(samples, clusters, T0 - timedelta(days=1), as_of),
        "by nothing (every row ranked)": None,
        "by a quarter fewer reports": {c: SnapshotReports.from_brokers_table(t) for c, t in lacking.items()},
        "by every broker in every snapshot": everyone,
    }
    for label, reports in variants.items():
        placed_by = None if reports is None else ReportPositions.of_reports(reports)
        averages = bundle_averages(frame, Averaging(), as_of, placed_by).collect()
        got = {(r["cluster"], r["bundle"]): r for r in averages}
        assert set(got) == set(expected)
        for key, want in expected.items():
            row = got[key]
            assert row["topics"] == want.topics, key
            for term, data in (("short", want.short_term_data), ("long", want.long_term_data)):
                assert row[f"{term}_samples"] == data.num_samples, (key, term)
                for field in RATE_FIELDS:
                    assert close(row[f"{term}_{field}"], getattr(data, field)), (key, term, field, label)


def test_window_averages_are_plain_means_over_wall_clock_windows(spark, tmp_path):
    name = bundle(0)

    def reports_at(index):
        stats = {name: NamespaceBundleStats(msg_rate_in=float(index), topics=2)}
        return {"a:8080": broker(bundles=stats, last_stats=stats)}

    write_history(tmp_path, "win", 120, reports_at)  # one sample a minute, values 0..119
    as_of = T0 + timedelta(minutes=119)
    results = plan_clusters(
        spark,
        samples_root(tmp_path),
        JobRequest(
            clusters=["win"],
            strategy="UniformLoadShedder",
            as_of=as_of,
            averaging=Averaging.parse("window:10m,1h"),
            emit_load_data=True,
        ),
    )
    data = results["win"].load_data["bundleData"][name]
    assert data["shortTermData"]["msgRateIn"] == pytest.approx(sum(range(110, 120)) / 10)
    assert data["longTermData"]["msgRateIn"] == pytest.approx(sum(range(60, 120)) / 60)
    assert data["longTermData"]["numSamples"] == 60


def skewed_reports(gap):
    """Two brokers with a stable score gap; the hot one has 8 bundles of 1000 msg/s."""
    hot_names = [bundle(i, "t/hot") for i in range(8)]
    stats = {n: NamespaceBundleStats(msg_rate_in=800, msg_rate_out=200, topics=3) for n in hot_names}
    cold = {bundle(0, "t/cold"): NamespaceBundleStats(msg_rate_in=50, topics=2)}
    return lambda _index: {
        "hot:8080": broker(cpu=(20 + gap, 100), rate_in=6400, rate_out=1600, bundles=stats, last_stats=stats),
        "cold:8080": broker(cpu=(20, 100), rate_in=50, bundles=cold, last_stats=cold),
    }


def test_the_plan_equals_shed_on_the_load_data_the_job_built(spark, tmp_path):
    write_history(tmp_path, "same", 12, skewed_reports(50))
    state = {"strategy": "AvgShedder", "highHitCount": {"hot:8080": 1, "cold:8080": 1}, "lowHitCount": {}}
    results = plan_clusters(
        spark,
        samples_root(tmp_path),
        JobRequest(
            clusters=["same"],
            strategy="AvgShedder",
            emit_load_data=True,
            as_of=T0 + timedelta(hours=1),
            inputs={"same": {"state": state}},
        ),
    )
    plan = results["same"].plan.to_json()
    (tmp_path / "load-data.json").write_text(json.dumps(results["same"].load_data))
    (tmp_path / "state.json").write_text(json.dumps(state))
    shed = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner.cli",
            "shed",
            "--load-data",
            str(tmp_path / "load-data.json"),
            "--strategy",
            "AvgShedder",
            "--state-in",
            str(tmp_path / "state.json"),
            "--state-out",
            str(tmp_path / "after.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    unloads = json.loads(shed.stdout)["runs"][0]["unloads"]
    assert unloads, "a 50-point gap with a primed counter must fire"
    assert [(a["source"], a["bundle"], a["destination"]) for a in plan["actions"] if a["kind"] == "unload"] == [
        (u["broker"], u["bundle"], u["destination"]) for u in unloads
    ]
    assert plan["stateAfter"] == json.loads((tmp_path / "after.json").read_text())
    hot, cold = (next(b for b in plan["brokers"] if b["broker"] == name) for name in ("hot:8080", "cold:8080"))
    assert hot["msgRateAfter"] < hot["msgRateBefore"] and cold["msgRateAfter"] > cold["msgRateBefore"]
    assert hot["scoreAfter"] < hot["scoreBefore"]


def register(store, home, cluster, snapshot_id, declarations=None):
    """The store rows the collector would have written for this history (cluster and latest snapshot), its archive
    holding `declarations` when given (what the collect read of the cluster)."""
    archive = home / f"{cluster}.json.gz"
    content: dict = {"bundleBoundaries": {}}
    if declarations is not None:
        content["declarations"] = declarations
    with gzip.open(archive, "wt") as handle:
        json.dump(content, handle)
    with store.session() as session:
        row = Cluster(name=cluster, admin_url="http://127.0.0.1:1")
        session.add(row)
        session.flush()
        session.add(
            Snapshot(
                id=snapshot_id,
                cluster_id=row.id,
                taken_at=T0,
                brokers=2,
                bundles=9,
                partial=False,
                missing_brokers={},
                archive_path=str(archive),
            )
        )


def test_hit_counters_persist_in_the_store_and_fire_on_the_run_they_dictate(spark, tmp_path):
    write_history(tmp_path, "high", 12, skewed_reports(50))  # gap >= 40: fires on the 2nd run
    write_history(tmp_path, "mid", 12, skewed_reports(25), first_id=101)  # 15 <= gap < 40: fires on the 8th run
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    register(store, tmp_path, "high", 12)
    register(store, tmp_path, "mid", 112)
    request = PlanRequest(clusters=("high", "mid"), strategy="AvgShedder", settings={}, history=timedelta(days=30))
    fired = {"high": [], "mid": []}
    for run in range(8):
        outcome = run_plan(store, samples_root(tmp_path), request, spark=spark, run_id=f"run-{run}")
        for cluster, (commit, result) in outcome.items():
            assert commit.created and commit.state_version == run + 1
            fired[cluster].append(any(action.kind == "unload" for action in result.plan.actions))
        low = read_state(store, "mid", "AvgShedder").state["lowHitCount"]
        assert low == ({} if run == 7 else {"hot:8080": run + 1, "cold:8080": run + 1})
    assert fired["high"] == [False, True, False, True, False, True, False, True]
    assert fired["mid"] == [False] * 7 + [True]

    # A retried commit of the same run changes nothing.
    document = job_request(store, request)
    again = run_plan(store, samples_root(tmp_path), request, spark=spark, run_id="run-7")
    assert all(not commit.created for commit, _ in again.values())
    assert read_state(store, "mid", "AvgShedder").version == 8
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Plan)) == 16
    assert document.state_versions == {"high": 8, "mid": 8}


def test_samples_written_with_another_store_are_refused_with_nothing_committed(spark, tmp_path):
    """A store replaced while its samples stayed: the samples' newest snapshot is unknown to the new store."""
    write_history(tmp_path, "high", 12, skewed_reports(50))
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    register(store, tmp_path, "high", 3)  # the new store has collected three snapshots so far
    request = PlanRequest(clusters=("high",), strategy="AvgShedder", settings={}, history=timedelta(days=30))
    with pytest.raises(InputError, match="snapshot 12 is in the samples files but not in this store"):
        run_plan(store, samples_root(tmp_path), request, spark=spark, run_id="run-0")
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Plan)) == 0
    assert read_state(store, "high", "AvgShedder").version == 0


def test_a_concurrent_run_fails_cleanly_on_the_state_version(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan = {"cluster": "c", "strategy": "AvgShedder", "actions": [], "stateAfter": {"lowHitCount": {"a:1": 1}}}
    first = commit_plan(
        store, PlanDocument.parse(plan, "plan"), admin_url="http://x:1", run_key="one", expected_version=0
    )
    assert first.created and first.state_version == 1
    with pytest.raises(StaleStateError, match="another plan run committed first"):
        commit_plan(
            store,
            PlanDocument.parse({**plan, "stateAfter": {"lowHitCount": {"a:1": 5}}}, "plan"),
            admin_url="http://x:1",
            run_key="two",
            expected_version=0,
        )
    assert read_state(store, "c", "AvgShedder").state == {"lowHitCount": {"a:1": 1}}
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Plan)) == 1
    assert commit_job_output  # the DAG's commit entry point exists alongside


def costed_reports(index):
    """Three 4-core brokers with the same costs, their own background and traffic that varies per
    snapshot: `cool` carries little, `hot` a lot, and `late` joins at snapshot 20 with no traffic."""
    rng = random.Random(index)
    reports = {}
    hardware = {
        "cool:8080": (400.0, 0.01, 10.0, 500),
        "hot:8080": (400.0, 0.01, 3.0, 1500),
        "late:8080": (400.0, 0.01, 2.0, 0),
    }
    for name, (cores_percent, cpu_per_msg, background, rate) in hardware.items():
        if name == "late:8080" and index < 20:
            continue
        count = 1 if name == "late:8080" else 6
        names = [bundle(i, f"t/{name.split(':')[0]}") for i in range(count)]
        stats = {
            n: NamespaceBundleStats(
                msg_rate_in=rng.uniform(0.6, 1.4) * rate,
                msg_rate_out=0.0,
                msg_throughput_in=0.0,
                msg_throughput_out=0.0,
                topics=2,
            )
            for n in names
        }
        stats = {
            n: s.model_copy(update={"msg_rate_out": s.msg_rate_in, "msg_throughput_in": s.msg_rate_in * 1024})
            for n, s in stats.items()
        }
        rate_in = sum(s.msg_rate_in for s in stats.values())
        cpu_percent = background + 2 * rate_in * cpu_per_msg * 100 / cores_percent
        reports[name] = broker(
            cpu=(cpu_percent * cores_percent / 100, cores_percent),
            bandwidth_in=(rate_in * 1024 * 8 / 1024, 10_000_000),
            rate_in=rate_in,
            rate_out=rate_in,
            throughput_in=rate_in * 1024,
            bundles=stats,
            last_stats=stats,
        )
    return reports


def test_the_job_fits_the_pure_functions_usage_models_and_plans_predictively(spark, tmp_path):
    from planner.plan.usage_model import UsageModels, planning_models
    from planner.samples.dataset import read_samples

    write_history(tmp_path, "fit", 30, costed_reports)
    state = {"strategy": "AvgShedderPredictive", "highHitCount": {"hot:8080": 1, "late:8080": 1}, "lowHitCount": {}}
    results = plan_clusters(
        spark,
        samples_root(tmp_path),
        JobRequest(
            clusters=["fit"],
            strategy="AvgShedderPredictive",
            as_of=T0 + timedelta(hours=1),
            inputs={"fit": {"state": state}},
        ),
    )
    plan = results["fit"].plan.to_json()
    got = UsageModels.from_json(plan["usageModels"])
    expected = planning_models(read_samples(tmp_path, "brokers", "fit").to_pydict())
    assert set(got.brokers) == set(expected.brokers) == {"cool:8080", "hot:8080", "late:8080"}
    for broker_id, fits in expected.brokers.items():
        assert set(got.brokers[broker_id]) == set(fits)
        for resource, fit in fits.items():
            mine = got.brokers[broker_id][resource]
            assert mine.source == fit.source and mine.samples == fit.samples, (broker_id, resource)
            for field in ("intercept", "per_msg", "per_byte", "r_squared"):
                assert getattr(mine, field) == pytest.approx(getattr(fit, field), rel=1e-9, abs=1e-12)
            # The recent load runs up to the newest snapshot in the executors' timestamps as in pyarrow's.
            assert mine.recent is not None and fit.recent is not None, (broker_id, resource)
            assert mine.recent.samples == fit.recent.samples, (broker_id, resource)
            assert mine.recent.usage == pytest.approx(fit.recent.usage, rel=1e-9, abs=1e-12)
    # The brokers with varied traffic get their own CPU costs and background;
    # `late` has 10 samples at no traffic and falls back to the cluster's costs with its own background.
    for broker_id, background in (("cool:8080", 10.0), ("hot:8080", 3.0)):
        fit = got.brokers[broker_id]["cpu"]
        assert fit.source == "broker" and fit.samples == 30 and fit.r_squared > 0.999
        assert fit.intercept == pytest.approx(background, abs=1e-3)
        # 1,000 msg/s in and out (1 KiB in per message): 2,000 msg/s x 0.01 % of a core each / 4 cores = 5 %.
        assert fit.per_msg * 2000 + fit.per_byte * 2000 * 512 == pytest.approx(5.0, rel=1e-3)
    late = got.brokers["late:8080"]["cpu"]
    assert late.source == "cluster" and late.intercept == pytest.approx(2.0, abs=1e-6)

    # The predictive plan fired (the primed high hit) and moved from the hot broker to the idle one.
    assert plan["strategy"] == "AvgShedderPredictive"
    unloads = [a for a in plan["actions"] if a["kind"] == "unload"]
    assert unloads and {(a["source"], a["destination"]) for a in unloads} == {("hot:8080", "late:8080")}
    by_broker = {b["broker"]: b for b in plan["brokers"]}
    assert set(by_broker) == {"cool:8080", "hot:8080", "late:8080"}
    assert by_broker["hot:8080"]["scoreAfter"] < by_broker["hot:8080"]["scoreBefore"]
    assert by_broker["late:8080"]["scoreAfter"] > by_broker["late:8080"]["scoreBefore"]
    assert abs(by_broker["hot:8080"]["scoreAfter"] - by_broker["late:8080"]["scoreAfter"]) <= 5
    assert plan["stateAfter"]["strategy"] == "AvgShedderPredictive"
    assert len(plan["predictedMoves"]) == len(unloads)
