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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from planner.approval.decisions import (
    record_approval_request,
    record_decision,
    recorded_decision,
    refuse_decision,
    refuse_execution,
    requested_hash,
)
from planner.audit.plan_records import plan_for_run, record_measurement, show_plan
from planner.collect.clusters import ClusterSettings
from planner.collect.collector import collect
from planner.errors import InputError
from planner.execute.executor import ExecutorSettings, execute_plan
from planner.paths import planner_home
from planner.plan.document import JobResult, PlanDocument, PlanSummary
from planner.plan.runner import PlanRequest, commit_job_output, job_request
from planner.samples.dataset import read_samples, samples_root, snapshot_broker_load
from planner.store.database import Store, default_database_url

CONNECTION_PREFIX = "pulsar_"
PLAN_DAG_PREFIX = "pulsar_rebalance_plan_"  # + the cluster's name: one plan DAG per cluster
DB_CONNECTION = "pulsar_rebalance_db"


def configured_clusters() -> list[str]:
    """The clusters the DAGs serve (`PULSAR_REBALANCE_CLUSTER_NAMES`, comma-separated; default `local`)."""
    names = os.environ.get("PULSAR_REBALANCE_CLUSTER_NAMES", "local")
    return [name.strip() for name in names.split(",") if name.strip()]


def approvers() -> list[dict[str, str]]:
    """Users allowed to answer the approval gate (`PULSAR_REBALANCE_APPROVERS`); empty means any user who
    may answer it in Airflow. Entries are `ID` or `ID:Display name`, comma-separated: the id is the auth
    manager's user id (the user name under the simple auth manager, the numeric id under FAB), which is
    what Airflow matches; the name is what people read."""
    entries = [entry.strip() for entry in os.environ.get("PULSAR_REBALANCE_APPROVERS", "").split(",") if entry.strip()]
    users = []
    for entry in entries:
        user_id, _, name = entry.partition(":")
        users.append({"id": user_id.strip(), "name": name.strip() or user_id.strip()})
    return users


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
        allow_insecure_http_credentials=extra.get("allow_insecure_http_credentials", False),
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


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    plan_id: int
    actions_hash: str
    subject: str
    markdown: str


def _run_plan(planner_store: Store, cluster: str, run_id: str) -> int:
    plan_id = plan_for_run(planner_store, run_id, cluster)
    if plan_id is None:
        raise InputError(f"run {run_id!r} committed no plan for cluster {cluster!r}")
    return plan_id


def request_approval(cluster: str, run_id: str, base_url: str) -> ApprovalRequest:
    """What the gate puts to the reviewer, from the plan in the store (never from XCom), and a record of
    which action hash that is: the decision will bind exactly it."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    shown = show_plan(planner_store, plan_id)
    plan = PlanDocument.parse(shown, f"stored plan {plan_id}")
    url = f"{base_url.rstrip('/')}/pulsar-planner/plans/{plan_id}"
    markdown = approval_markdown(plan, url) + f"\n\nPlan {plan_id}, actions hash `{plan.actions_hash}`."
    record_approval_request(planner_store, plan_id, plan.actions_hash, actor="airflow:approve")
    subject = f"Rebalance {cluster}: {len(plan.actions)} action(s) planned by {plan.strategy} (plan {plan_id})"
    return ApprovalRequest(plan_id, plan.actions_hash, subject, markdown)


def record_gate_decision(
    cluster: str,
    run_id: str,
    *,
    chosen: list[str],
    responder: Mapping[str, str] | None,
    responded_at: datetime | None,
    assigned: list[str],
) -> None:
    """The gate's answer, as Airflow recorded it, into the planner's store. A responder who is not an
    assigned approver is refused (Airflow refuses them too; this holds if its check is ever bypassed)."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    if responder is not None and assigned and responder.get("id") not in assigned:
        who = f"{responder.get('name')} (id {responder.get('id')})"
        refuse_decision(planner_store, plan_id, f"{who} is not an assigned approver")
        raise InputError(f"plan {plan_id}: {responder.get('name')} is not an assigned approver")
    record_decision(
        planner_store,
        plan_id,
        approved="Approve" in chosen,
        approver=(responder or {}).get("name"),
        approver_id=(responder or {}).get("id"),
        approved_hash=requested_hash(planner_store, plan_id),
        decided_at=responded_at,
        source="airflow-hitl",
    )


def execute_approved(cluster: str, run_id: str, claimed: object = None) -> dict[str, Any]:
    """Execute the run's plan if the gate recorded an approval in the store. `claimed` is what XCom says
    the gate decided: it decides nothing, and is audited when no recorded decision backs it."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    decision = recorded_decision(planner_store, plan_id)
    if decision is None or decision.source != "airflow-hitl":
        refuse_execution(planner_store, plan_id, "the approval gate recorded no decision", claimed=claimed)
        raise InputError(f"plan {plan_id}: the approval gate recorded no decision; refusing to execute")
    if decision.decision != "approved":
        return {"plan": plan_id, "status": "rejected"}
    settings = cluster_settings(cluster)
    executor_settings = ExecutorSettings()
    with settings.client() as client:
        # A retried task after a crash waits for the dead run's lease; a live concurrent run keeps it.
        report = execute_plan(
            planner_store,
            client,
            plan_id,
            executor_settings,
            actor=f"airflow:{decision.approver or decision.approver_id}",
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


def report_outcome(cluster: str, run_id: str) -> dict[str, Any]:
    """After the gate: the decision as the gate recorded it; after an execution, the load measured again."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    decision = recorded_decision(planner_store, plan_id)
    if decision is None:
        return {"plan": plan_id, "status": show_plan(planner_store, plan_id)["status"], "decision": None}
    if decision.decision != "approved":
        return {"plan": plan_id, "status": "rejected", "by": decision.approver or "timeout"}
    after = _collect_fresh_reports(cluster, since_millis=int(time.time() * 1000))
    measured = snapshot_broker_load(planner_home(), cluster, after["snapshot"])
    record_measurement(planner_store, plan_id, after["snapshot"], measured, actor="airflow:report")
    plan = show_plan(planner_store, plan_id)
    return {"plan": plan_id, "status": plan["status"], "snapshotAfter": after["snapshot"]}
