"""One planning run for clusters, end to end: what the store knows → Spark job → commit.

The DAG runs the job with spark-submit and calls `job_request` and `commit_job_output` around it;
the CLI runs the job in-process with `run_plan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from planner import progress, storage
from planner.collect.collector import read_archive, snapshot_reports
from planner.errors import InputError
from planner.orchestrate.calibrate import cluster_calibration
from planner.plan.document import JobResult
from planner.plan.maintenance import MaintenanceRequest
from planner.plan.request import DEFAULT_HISTORY, Averaging, ClusterInputs, JobRequest, span_text
from planner.plan.shedding import transfer_shedder
from planner.plan.shedding.registry import shedding_strategy
from planner.pulsar.config import is_extensible_load_manager
from planner.store.clusters import cluster_admin_url
from planner.store.database import Store
from planner.store.plans import CommitResult, commit_plan_once, read_state, recently_unloaded_brokers
from planner.store.scale_events import record_planned
from planner.store.snapshots import (
    StoredSnapshot,
    archive_declarations,
    list_snapshots,
    recently_unloaded_bundles,
    snapshot_cluster,
    unpublished_snapshot_ids,
)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What a plan run is asked for. The strategy is taken by its short or Java class name and kept by the
    registry's name."""

    clusters: tuple[str, ...]
    strategy: str
    settings: Mapping[str, str]
    averaging: Averaging = field(default_factory=Averaging)
    history: timedelta = DEFAULT_HISTORY
    include_splits: bool = True
    recompute_averages: bool = False  # rather than fold onto the stored averages state
    maintenance: MaintenanceRequest | None = None  # a drain or fill plan instead of the strategy's
    # The measured plans each cluster's calibration learns from (`calibration_window`); None: no calibration asked
    # for. `calibrate` False: learnt and recorded, not applied (`calibration` off).
    calibration_window: int | None = None
    calibrate: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", shedding_strategy(self.strategy).name)

    @property
    def planner_name(self) -> str:
        """Whose state the plan reads and commits: the strategy's, or the maintenance mode's (always empty)."""
        return self.maintenance.mode.value if self.maintenance else self.strategy

    def planner_name_on(self, load_manager: str | None) -> str:
        """`planner_name` on a cluster of `load_manager`: the extensible one's plans are TransferShedder's whatever
        strategy was asked for."""
        if self.maintenance is None and is_extensible_load_manager(load_manager):
            return transfer_shedder.NAME
        return self.planner_name


def _latest_snapshot(store: Store, cluster: str) -> StoredSnapshot:
    latest = list_snapshots(store, cluster, limit=1)
    if not latest:
        raise InputError(f"cluster {cluster!r} has no snapshots yet: run `pulsar-rebalance collect` first")
    return latest[0]


def cluster_inputs(
    store: Store, request: PlanRequest, as_of: datetime
) -> tuple[dict[str, ClusterInputs], dict[str, int]]:
    """Per cluster: stored state, settings, recently unloaded bundles, namespace bundle counts and the snapshots
    within the history window up to `as_of`; and the state version each was read at."""
    inputs: dict[str, ClusterInputs] = {}
    versions: dict[str, int] = {}
    for cluster in request.clusters:
        snapshot = _latest_snapshot(store, cluster)
        stored = read_state(store, cluster, request.planner_name_on(snapshot.load_manager))
        archive = read_archive(snapshot.archive_path)
        recent = recently_unloaded_bundles(store, cluster)
        maintenance = request.maintenance
        inputs[cluster] = ClusterInputs(
            state=stored.state,
            settings=dict(request.settings),
            recently_unloaded_bundles=recent,
            namespace_bundle_counts={ns: len(b) - 1 for ns, b in archive.get("bundleBoundaries", {}).items()},
            include_splits=request.include_splits,
            # The job reads the samples files itself: it must skip every snapshot that is not published.
            excluded_snapshots=unpublished_snapshot_ids(store, cluster),
            # Which load reports those files hold: the job places each sample among its broker's by them.
            reports=snapshot_reports(store, cluster, as_of - request.history, as_of),
            # The brokers' load manager at the latest snapshot: the extensible one plans with TransferShedder.
            load_manager=snapshot.load_manager,
            recently_unloaded_brokers=recently_unloaded_brokers(store, cluster, as_of),
            maintenance=maintenance,
            # Every bundle each broker owned at the latest snapshot, idle ones included (absent from load reports).
            owned_bundles=archive.get("ownedBundles", {}) if maintenance is not None else {},
            # What the cluster declared at the latest snapshot: its releases, configuration and policies.
            declarations=archive_declarations(archive, snapshot.id),
            calibration=(
                cluster_calibration(store, cluster, request.calibration_window, enabled=request.calibrate)
                if request.calibration_window
                else None
            ),
        )
        versions[cluster] = stored.version
    return inputs, versions


def job_request(store: Store, request: PlanRequest, as_of: datetime | None = None) -> JobRequest:
    """What the Spark job takes (`--input`), with the state versions the commit checks."""
    as_of = as_of or datetime.now(UTC)
    inputs, versions = cluster_inputs(store, request, as_of)
    return JobRequest(
        clusters=request.clusters,
        strategy=request.strategy,
        inputs=inputs,
        state_versions=versions,
        averaging=request.averaging,
        history=request.history,
        recompute_averages=request.recompute_averages,
        as_of=as_of,
    )


def commit_job_output(
    store: Store,
    request: JobRequest,
    results: Mapping[str, JobResult],
    run_id: str | None = None,
) -> dict[str, CommitResult]:
    """Store each cluster's plan and new state.

    The run key makes a retried commit of the same run a no-op: the orchestrator's run id, or else
    the snapshot planned and the state version read (the same inputs are one run).
    """
    for cluster, result in results.items():
        if snapshot_cluster(store, result.snapshot) != cluster:
            # Checked for every cluster before any commit, so a refused run writes nothing.
            raise InputError(
                f"plan of cluster {cluster!r}: snapshot {result.snapshot} is in the samples files but not in this "
                "store; the samples were written with another database (was it replaced?). Point the samples "
                "location at this store's own, or collect into a fresh one"
            )
    committed = {}
    for cluster, result in results.items():
        version = request.state_versions[cluster]
        run = run_id or f"snapshot-{result.snapshot}.state-v{version}"
        admin_url = cluster_admin_url(store, cluster) or ""
        committed[cluster] = commit_plan_once(
            store,
            result.plan,
            admin_url=admin_url,
            run_key=f"{run}:{cluster}:{result.plan.strategy}",
            expected_version=version,
            snapshot_id=result.snapshot,
        )
        maintenance = result.plan.maintenance
        if maintenance is not None and maintenance.scale_event is not None:
            # The event is planned, linked to its plan (a retried commit links the same plan: no change).
            record_planned(store, maintenance.scale_event.id, cluster, committed[cluster].plan_id, "planner:commit")
    return committed


def run_plan(
    store: Store,
    samples: str | Path,
    request: PlanRequest,
    *,
    master: str = "local[*]",
    spark_conf: Mapping[str, str] | None = None,
    run_id: str | None = None,
    spark: SparkSession | None = None,
) -> dict[str, tuple[CommitResult, JobResult]]:
    """Run the Spark job with this process as its driver and commit; returns each cluster's commit result and
    the job's result (the plan, and how its averages were come by).

    A given Spark session is used and left running; otherwise one is started on `master` (a local master, a
    cluster's, or a Spark Connect endpoint) with `spark_conf`, and stopped.
    """
    from spark_jobs.plan_job import plan_clusters
    from spark_jobs.session import spark_session

    job = job_request(store, request)
    own_session = spark is None
    spark = spark or spark_session(master, conf=spark_conf, storage_root=storage.to_uri(samples))
    try:
        with progress.spark_stages(spark, f"Spark job ({master})"):
            results = plan_clusters(spark, samples, job)
    finally:
        if own_session:
            spark.stop()
    missing = sorted(set(request.clusters) - set(results))
    if missing:
        raise InputError(f"no samples in the last {span_text(request.history)} for {', '.join(missing)}")
    committed = commit_job_output(store, job, results, run_id)
    return {cluster: (committed[cluster], results[cluster]) for cluster in results}
