"""What the DAG tasks do. DAG files only wire these together; Airflow is imported lazily so the
planner works without it.

Pulsar admin endpoints and credentials come from one Airflow Connection per cluster
(`pulsar_<cluster>`): host = admin URL, password = token (or login + password for basic auth),
extra `{"ca_file": ..., "verify_tls": true}`. The store URL comes from the `pulsar_rebalance_db`
Connection or `PULSAR_REBALANCE_DB_URL`. Task return values (XCom) carry ids and summaries only,
never credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from planner.clusters import ClusterSettings
from planner.collector import collect
from planner.executor import ExecutorSettings, execute_plan, record_decision
from planner.paths import planner_home
from planner.plan_document import JobResult, PlanDocument, PlanSummary
from planner.plan_runner import PlanRequest, commit_job_output, job_request
from planner.plan_store import record_measurement, show_plan
from planner.samples import read_samples, samples_root, snapshot_broker_load
from planner.store.database import Store, default_database_url

CONNECTION_PREFIX = "pulsar_"
DB_CONNECTION = "pulsar_rebalance_db"


def configured_clusters() -> list[str]:
    """The clusters the DAGs serve (`PULSAR_REBALANCE_CLUSTER_NAMES`, comma-separated; default `local`)."""
    names = os.environ.get("PULSAR_REBALANCE_CLUSTER_NAMES", "local")
    return [name.strip() for name in names.split(",") if name.strip()]


def approvers() -> list[dict[str, str]]:
    """Users allowed to answer the approval gate (`PULSAR_REBALANCE_APPROVERS`); empty means anyone."""
    names = [name.strip() for name in os.environ.get("PULSAR_REBALANCE_APPROVERS", "").split(",") if name.strip()]
    return [{"id": name, "name": name} for name in names]


def samples_asset_name(cluster: str) -> str:
    """The Asset the collect DAG emits for a cluster after each snapshot."""
    return f"pulsar-rebalance-samples-{cluster}"


def plan_schedule(cluster: str) -> Any:
    """`PULSAR_REBALANCE_PLAN_PROFILE`: `hourly` (default), `nightly`, `assets` (after each fresh collect
    of the cluster), `hourly+assets` (whichever comes first), or a cron expression."""
    from airflow.sdk import Asset
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

    profile = os.environ.get("PULSAR_REBALANCE_PLAN_PROFILE", "hourly")
    crons = {"hourly": "0 * * * *", "nightly": "0 2 * * *"}
    samples = Asset(samples_asset_name(cluster))
    if profile == "assets":
        return [samples]
    if profile.endswith("+assets"):
        cron = crons.get(profile.removesuffix("+assets"), profile.removesuffix("+assets"))
        return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=samples)
    return crons.get(profile, profile)


def cluster_settings(cluster: str) -> ClusterSettings:
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(f"{CONNECTION_PREFIX}{cluster}")
    host = connection.host or ""
    if "://" not in host:
        scheme = "https" if (connection.conn_type or "").endswith("s") else "http"
        host = f"{scheme}://{host}"
    if connection.port:
        host = f"{host.rstrip('/')}:{connection.port}"
    extra = connection.extra_dejson
    basic = extra.get("auth") == "basic"
    return ClusterSettings(
        name=cluster,
        admin_url=host.rstrip("/"),
        token=SecretStr(connection.password) if connection.password and not basic else None,
        username=connection.login if basic else None,
        password=SecretStr(connection.password) if basic and connection.password else None,
        ca_file=extra.get("ca_file"),
        verify_tls=extra.get("verify_tls", True),
    )


def store() -> Store:
    url = os.environ.get("PULSAR_REBALANCE_DB_URL")
    if not url:
        from airflow.exceptions import AirflowNotFoundException
        from airflow.sdk import BaseHook

        try:
            url = BaseHook.get_connection(DB_CONNECTION).get_uri()
        except AirflowNotFoundException:
            url = default_database_url()
    return Store(url)


def collect_cluster(cluster: str) -> dict[str, Any]:
    settings = cluster_settings(cluster)
    with settings.client() as client:
        return collect(client, store(), planner_home(), cluster, actor="airflow:collect").to_json()


def run_directory_name(run_id: str) -> str:
    """A safe, collision-free directory name for an Airflow run id: the readable part keeps what a file
    name may hold, and a hash of the whole id tells apart ids that read alike (`a:b` and `a_b`)."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:80].lstrip(".") or "run"
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}"


def prepare_plan(cluster: str, strategy: str, settings: dict[str, Any], run_id: str) -> dict[str, str]:
    """Write the Spark job's input for this run; returns the paths the job and the commit step use."""
    run_dir = planner_home() / "runs" / cluster / run_directory_name(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    request = PlanRequest(
        clusters=(cluster,), strategy=strategy, settings={key: str(value) for key, value in settings.items()}
    )
    (run_dir / "input.json").write_text(json.dumps(job_request(store(), request)))
    return {"samples": str(samples_root(planner_home())), "input": str(run_dir / "input.json"), "output": str(run_dir)}


def approval_markdown(plan: PlanDocument, plan_url: str) -> str:
    lines = [
        f"**{plan.strategy}** plan for cluster **{plan.cluster}**: {len(plan.actions)} action(s). "
        f"[Open the plan page]({plan_url})",
        "",
        "| # | kind | bundle | from | to | msg/s | bytes/s | reason |",
        "|---|---|---|---|---|---:|---:|---|",
    ]
    for index, action in enumerate(plan.actions, 1):
        lines.append(
            f"| {index} | {action.kind} | `{action.bundle}` | {action.source} | "
            f"{action.destination or '—'} | {action.msg_rate:.0f} | {action.throughput:.0f} | {action.reason} |"
        )
    lines += [
        "",
        "Predicted per-broker load:",
        "",
        "| broker | score before | score after | msg/s before | msg/s after |",
        "|---|---:|---:|---:|---:|",
    ]
    for broker in plan.brokers:
        lines.append(
            f"| {broker.broker} | {broker.score_before:.1f} | {broker.score_after:.1f} | "
            f"{broker.msg_rate_before:.0f} | {broker.msg_rate_after:.0f} |"
        )
    fired = [pair for pair in plan.pairs if pair.fired]
    if fired:
        lines += [
            "",
            "Firing AvgShedder pairs:",
            "",
            "| overloaded | underloaded | gap | low hits | high hits |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [
            f"| {pair.overloaded} | {pair.underloaded} | {pair.gap:.1f} | {pair.low_hits} | {pair.high_hits} |"
            for pair in fired
        ]
    return "\n".join(lines)


def commit_plan_output(cluster: str, paths: dict[str, str], run_id: str, base_url: str) -> dict[str, Any]:
    """Store the job's plan and the new state (idempotent per run); returns what the gate shows (XCom)."""
    output = Path(paths["output"]) / f"plan-{cluster}.json"
    result = JobResult.parse(output.read_bytes(), f"Spark job output {output.name}")
    request = json.loads(Path(paths["input"]).read_text())
    committed = commit_job_output(store(), request, {cluster: result}, run_id)[cluster]
    plan = result.plan
    plan_url = f"{base_url.rstrip('/')}/pulsar-planner/plans/{committed.plan_id}"
    return PlanSummary(
        plan=committed.plan_id,
        created=committed.created,
        actions=len(plan.actions),
        actions_hash=plan.actions_hash,
        subject=f"Rebalance {cluster}: {len(plan.actions)} action(s) planned by {plan.strategy}",
        markdown=approval_markdown(plan, plan_url),
    ).to_json()


def _decision(gate_output: dict[str, Any] | None) -> tuple[bool, str | None, datetime | None]:
    if not gate_output:
        return False, None, None
    approved = "Approve" in (gate_output.get("chosen_options") or [])
    user = gate_output.get("responded_by_user") or {}
    responded_at = gate_output.get("responded_at")
    if isinstance(responded_at, str):
        responded_at = datetime.fromisoformat(responded_at)
    return approved, user.get("name") or user.get("id"), responded_at


def execute_approved(cluster: str, summary: dict[str, Any], gate_output: dict[str, Any]) -> dict[str, Any]:
    approved, approver, decided_at = _decision(gate_output)
    if not approved:
        return {"plan": summary["plan"], "status": "rejected"}
    planner_store = store()
    record_decision(
        planner_store,
        summary["plan"],
        approved=True,
        approver=approver,
        approved_hash=summary["actionsHash"],
        decided_at=decided_at,
    )
    settings = cluster_settings(cluster)
    executor_settings = ExecutorSettings()
    with settings.client() as client:
        # A retried task after a crash waits for the dead run's lease; a live concurrent run keeps it.
        report = execute_plan(
            planner_store,
            client,
            summary["plan"],
            executor_settings,
            actor=f"airflow:{approver}",
            claim_wait=executor_settings.lease.total_seconds() + 30,
        )
    return report.to_json()


def _collect_fresh_reports(cluster: str, since_millis: int) -> dict[str, Any]:
    """Collect until every broker's load report is newer than `since_millis` (the moves are in it), for at
    most `PULSAR_REBALANCE_MEASURE_WAIT` seconds (default 120); then the newest snapshot, fresh or not."""
    deadline = time.monotonic() + float(os.environ.get("PULSAR_REBALANCE_MEASURE_WAIT", 120))
    while True:
        after = collect_cluster(cluster)
        rows = read_samples(planner_home(), "brokers", cluster, snapshot=after["snapshot"])
        if min(rows.column("last_update").to_pylist(), default=0) >= since_millis or time.monotonic() >= deadline:
            return after
        time.sleep(5)


def report_outcome(cluster: str, summary: dict[str, Any], gate_output: dict[str, Any] | None) -> dict[str, Any]:
    """After the gate: record a rejection (or timeout), or measure the cluster again after execution."""
    approved, approver, decided_at = _decision(gate_output)
    planner_store = store()
    if not approved:
        record_decision(
            planner_store,
            summary["plan"],
            approved=False,
            approver=approver,
            approved_hash=summary["actionsHash"],
            decided_at=decided_at,
        )
        return {"plan": summary["plan"], "status": "rejected", "by": approver or "timeout"}
    after = _collect_fresh_reports(cluster, since_millis=int(time.time() * 1000))
    measured = snapshot_broker_load(planner_home(), cluster, after["snapshot"])
    record_measurement(planner_store, summary["plan"], after["snapshot"], measured, actor="airflow:report")
    plan = show_plan(planner_store, summary["plan"])
    return {"plan": summary["plan"], "status": plan["status"], "snapshotAfter": after["snapshot"]}
