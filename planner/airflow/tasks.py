"""What the DAG tasks do. DAG files only wire these together (`planner.airflow.dags`).

A cluster's admin endpoint and credentials come from its `pulsar_<cluster>` connection
(`PulsarAdminHook`), the store from `PlannerStoreHook`, every other setting from `planner.settings`.
Task return values (XCom) carry ids, summaries and storage URIs only: never credentials, never a path
of the machine a task ran on, so each task may run on a different worker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from planner import storage
from planner.airflow import notifications
from planner.airflow.gate_text import approval_request_markdown, plan_subject, plan_summary_markdown
from planner.airflow.hooks import PlannerStoreHook, PulsarAdminHook
from planner.airflow.notifications import PlanEvent, PlanMessage, accuracy_event, execution_event
from planner.approval.decisions import POLICY_SOURCE, approve_by_policies
from planner.audit.outcomes import configured_bound
from planner.audit.plan_records import show_plan
from planner.audit.review.app import URL_PREFIX
from planner.collect.collector import collect
from planner.errors import InputError
from planner.execute.executor import execute_plan
from planner.lifecycle import Decision, PlanStatus
from planner.orchestrate import daily_replay, scale_events
from planner.orchestrate.measure import MeasuredOutcome, measure_plan
from planner.orchestrate.rollback import ROLLBACK, plan_rollback
from planner.orchestrate.runner import PlanRequest, commit_job_output, job_request
from planner.plan.document import JobResult, PlanDocument, PlanSummary
from planner.plan.maintenance import MaintenanceRequest
from planner.plan.request import JobRequest
from planner.samples.dataset import samples_root
from planner.settings import ExecutionBinding, ExecutorSettings, next_opening, planner_settings
from planner.store.approvals import (
    record_approval_request,
    record_decision,
    recorded_decision,
    refuse_decision,
    refuse_execution,
    requested_hash,
)
from planner.store.audit_log import record_events
from planner.store.database import Store
from planner.store.models import audit_event
from planner.store.plans import plan_for_run

HITL_SOURCE = "airflow-hitl"  # where a person's answer at the gate came from (policies: POLICY_SOURCE)


def store() -> Store:
    return PlannerStoreHook().get_conn()


def configured_clusters() -> list[str]:
    """The clusters the DAGs serve (setting `cluster_names`)."""
    return list(planner_settings(airflow=True).cluster_names)


def notify_plan(cluster: str, run_id: str, event: PlanEvent, context: Any, details: Sequence[str] = ()) -> PlanMessage:
    """Tell the configured channels (`planner.airflow.notifications`) about the run's plan; a channel that
    fails is audited (`plan.notification-failed`), and the task goes on."""
    message = plan_message(cluster, run_id, event, details)
    failed = notifications.send(message, context)
    if failed:
        notification_failed(message, failed)
    return message


def plan_message(
    cluster: str, run_id: str, event: PlanEvent, details: Sequence[str] = (), action_link: str | None = None
) -> PlanMessage:
    """The message about the run's plan, from the store; with `action_link` (the approval form) the review page is
    its second link."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    plan = show_plan(planner_store, plan_id).checked_document()
    review = plan_url(plan_id)
    if action_link is None:
        return PlanMessage(event, cluster, plan_id, plan_subject(plan), review, tuple(details))
    return PlanMessage(event, cluster, plan_id, plan_subject(plan), action_link, tuple(details), review_link=review)


def notification_failed(message: PlanMessage, channels: Sequence[str]) -> None:
    """Audit channels that could not tell of the message (`plan.notification-failed`)."""
    event = audit_event(
        message.cluster,
        "airflow:notify",
        "plan.notification-failed",
        plan=message.plan_id,
        notice=message.event,
        channels=list(channels),
    )
    record_events(store(), event)


def plan_url(plan_id: int) -> str:
    """The plan's review page under Airflow's configured `[api] base_url` (Airflow's own fallback if unset)."""
    return f"{notifications.ui_base_url().rstrip('/')}{URL_PREFIX}/plans/{plan_id}"


def collect_cluster(cluster: str) -> dict[str, Any]:
    settings = planner_settings(airflow=True)
    with PulsarAdminHook.for_cluster(cluster).get_conn() as client:
        return collect(client, store(), settings.storage_root, cluster, actor="airflow:collect").to_json()


def propose_scale_events() -> list[dict[str, Any]]:
    """After the collects: each cluster's latest snapshot observed for brokers that joined, and the maintenance runs
    to trigger for its open scale events (`planner.orchestrate.scale_events`), as `TriggerDagRunOperator` arguments
    (XCom). A cluster whose observation fails is logged and left to the next collect's; the others go on."""
    settings = planner_settings(airflow=True)
    planner_store = store()
    triggers: list[dict[str, Any]] = []
    for cluster in settings.cluster_names:
        try:
            scale_events.observe_latest(
                planner_store, settings.storage_root, cluster, settings.scale_event_rejoin_after, "airflow:collect"
            )
            if settings.scale_event_proposals:
                proposed = scale_events.proposals(planner_store, cluster, "airflow:collect")
                triggers += [proposal.trigger_kwargs() for proposal in proposed]
        except InputError as error:
            logging.getLogger(__name__).warning("scale events of cluster %s: %s", cluster, error)
    return triggers


def replay_cluster(cluster: str) -> dict[str, Any]:
    """The cluster's last week replayed and its live plans checked, stored for the review's replay page
    (`planner.orchestrate.daily_replay`). A cluster with no snapshot in the week is skipped, said in the result."""
    settings = planner_settings(airflow=True)
    try:
        return daily_replay.replay_last_week(store(), settings.storage_root, cluster, datetime.now(UTC)).to_json()
    except InputError as error:
        return {"cluster": cluster, "skipped": str(error)}


def run_directory_name(run_id: str) -> str:
    """A safe, collision-free directory name for an Airflow run id: the readable part keeps what a file
    name may hold, and a hash of the whole id tells apart ids that read alike (`a:b` and `a_b`)."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:80].lstrip(".") or "run"
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}"


def prepare_plan(
    cluster: str,
    strategy: str,
    settings: dict[str, Any],
    run_id: str,
    recompute_averages: bool = False,
    maintenance: Mapping[str, Any] | None = None,
    scale_event: int | None = None,
) -> dict[str, str]:
    """Write the Spark job's input for this run under the storage root; returns the URIs the job and the
    commit step use (XCom). `maintenance`: a drain or fill (`mode`, `brokers`, `maxMoves`) instead of the
    strategy's plan; `scale_event`: the one that answers that event, its mode and broker the store's."""
    root = planner_settings(airflow=True).storage_root
    run_uri = storage.join(storage.to_uri(root), "runs", cluster, run_directory_name(run_id))
    asked = MaintenanceRequest.parse(maintenance, f"run {run_id} params") if maintenance else None
    if scale_event is not None:
        asked = scale_events.event_request(store(), cluster, scale_event, asked.max_moves if asked else None)
    request = PlanRequest(
        clusters=(cluster,),
        strategy=strategy,
        settings={key: str(value) for key, value in settings.items()},
        recompute_averages=recompute_averages,
        maintenance=asked,
        calibration_window=planner_settings(airflow=True).calibration_window,
        calibrate=planner_settings(airflow=True).calibration,
    )
    input_uri = storage.join(run_uri, "input.json")
    storage.write_bytes(input_uri, json.dumps(job_request(store(), request).to_json()).encode())
    return {"samples": storage.to_uri(samples_root(root)), "input": input_uri, "output": run_uri}


def commit_plan_output(cluster: str, uris: dict[str, str], run_id: str) -> dict[str, Any]:
    """Store the job's plan and the new state (idempotent per run); returns what the gate shows (XCom)."""
    from spark_jobs.plan_job import plan_output_uri

    output = plan_output_uri(uris["output"], cluster)
    result = JobResult.parse(storage.read_bytes(output, "the Spark job's output"), f"Spark job output {output}")
    input_uri = uris["input"]
    request = JobRequest.parse(storage.read_bytes(input_uri, "the Spark job's input"), f"Spark job input {input_uri}")
    committed = commit_job_output(store(), request, {cluster: result}, run_id)[cluster]
    return _summary(committed.plan_id, committed.created, result.plan)


def commit_rollback(cluster: str, plan_id: int | None, run_id: str) -> dict[str, Any]:
    """Commit the rollback of an executed plan of this cluster as this run's plan (idempotent per run)."""
    if plan_id is None:
        raise InputError(f'run {run_id}: trigger the rollback DAG with the plan to roll back, e.g. {{"plan": 12}}')
    planner_store = store()
    if show_plan(planner_store, plan_id).cluster != cluster:
        raise InputError(f"plan {plan_id} is not a plan of cluster {cluster!r}")
    with PulsarAdminHook.for_cluster(cluster).get_conn() as client:
        committed, plan = plan_rollback(
            planner_store, client, plan_id, actor="airflow:rollback", run_key=f"{run_id}:{cluster}:{ROLLBACK}"
        )
    return _summary(committed.plan_id, committed.created, plan)


def _summary(plan_id: int, created: bool, plan: PlanDocument) -> dict[str, Any]:
    return PlanSummary(
        plan=plan_id,
        created=created,
        actions=len(plan.actions),
        actions_hash=plan.actions_hash,
        subject=plan_subject(plan),
        markdown=plan_summary_markdown(plan, plan_url(plan_id)),
        balance=plan.balance.summary if plan.balance is not None else "",
    ).to_json()


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    plan_id: int
    actions_hash: str
    subject: str
    markdown: str
    approved_by: str | None = None  # `policy:<name>` when an approval policy approved the plan
    policy_checks: tuple[str, ...] = ()  # the approving policy's rules, for the notification


def _run_plan(planner_store: Store, cluster: str, run_id: str) -> int:
    plan_id = plan_for_run(planner_store, run_id, cluster)
    if plan_id is None:
        raise InputError(f"run {run_id!r} committed no plan for cluster {cluster!r}")
    return plan_id


def request_approval(cluster: str, run_id: str) -> ApprovalRequest:
    """The cluster's approval policies decide first: a plan inside one is approved by it (audited as
    `policy:<name>` with its checks). Otherwise what the gate puts to the reviewer, from the plan in the
    store (never from XCom), and a record of which action hash that is: the decision will bind exactly it."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    plan = show_plan(planner_store, plan_id).checked_document()
    subject = f"{plan_subject(plan)} (plan {plan_id})"
    recorded = recorded_decision(planner_store, plan_id)
    if recorded is not None and recorded.source == POLICY_SOURCE:  # a retried gate: the policy approved already
        return ApprovalRequest(plan_id, plan.actions_hash, subject, "", approved_by=recorded.approver)
    policies = planner_settings(airflow=True).approval_policies
    decision = approve_by_policies(
        planner_store, plan_id, plan, policies, datetime.now(UTC), binding=decision_binding(cluster, run_id)
    )
    verdict = decision.approved_by
    if verdict is not None:
        checks = tuple(check.describe() for check in verdict.checks)
        approver = f"policy:{verdict.policy}"
        return ApprovalRequest(plan_id, plan.actions_hash, subject, "", approved_by=approver, policy_checks=checks)
    why_not = decision.why_not() if decision.verdicts else None
    markdown = approval_request_markdown(plan, plan_url(plan_id), plan_id, why_not)
    verdicts = decision.to_json() if decision.verdicts else None
    record_approval_request(planner_store, plan_id, plan.actions_hash, actor="airflow:approve", policies=verdicts)
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
        Decision.APPROVED if "Approve" in chosen else Decision.REJECTED,
        approver=(responder or {}).get("name"),
        approver_id=(responder or {}).get("id"),
        approved_hash=requested_hash(planner_store, plan_id),
        decided_at=responded_at,
        source=HITL_SOURCE,
        binding=decision_binding(cluster, run_id),
    )


def decision_binding(cluster: str, run_id: str) -> ExecutionBinding:
    """What a decision taken now binds: the TTL and resume window configured for the cluster (settings, then the
    connection's extras) and the execution windows that match it. A run's params may shorten them later."""
    configured = planner_settings(airflow=True)
    executor = _executor_settings(PulsarAdminHook.for_cluster(cluster), run_id, None)
    return ExecutionBinding.of(executor, configured.execution_windows, cluster)


def execute_approved(
    cluster: str, run_id: str, claimed: object = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Execute the run's plan if the gate recorded an approval in the store. `claimed` is what XCom says
    the gate decided: it decides nothing, and is audited when no recorded decision backs it. `overrides` are the
    run's executor settings (DAG params)."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    decision = recorded_decision(planner_store, plan_id)
    if decision is None or decision.source not in (HITL_SOURCE, POLICY_SOURCE):
        refuse_execution(planner_store, plan_id, "the approval gate recorded no decision", claimed=claimed)
        raise InputError(f"plan {plan_id}: the approval gate recorded no decision; refusing to execute")
    if decision.decision is not Decision.APPROVED:
        return {"plan": plan_id, "status": Decision.REJECTED.value}
    admin = PulsarAdminHook.for_cluster(cluster)
    executor_settings = _executor_settings(admin, run_id, overrides)
    with admin.get_conn() as client:
        # A retried task after a crash waits for the dead run's lease; a live concurrent run keeps it.
        report = execute_plan(
            planner_store,
            client,
            plan_id,
            executor_settings,
            actor=f"airflow:{decision.approver or decision.approver_id}",
            claim_wait=executor_settings.lease.total_seconds() + 30,
            allow_beside_broker_controllers=admin.cluster_settings().allow_beside_broker_controllers,
        )
    return report.to_json()


def executor_overrides(params: Mapping[str, Any]) -> dict[str, Any]:
    """The run's executor settings from its DAG params (None: not set for this run)."""
    return {name: params.get(name) for name in ExecutorSettings.model_fields}


def _executor_settings(admin: PulsarAdminHook, run_id: str, overrides: Mapping[str, Any] | None) -> ExecutorSettings:
    """Defaults and the environment or Variable, then the connection's extras, then this run's params."""
    configured = planner_settings(airflow=True).executor
    return admin.executor_settings(configured).overridden(overrides or {}, f"run {run_id} params")


def execution_wait(cluster: str, run_id: str, overrides: Mapping[str, Any] | None = None) -> datetime | None:
    """When the run's approved plan may execute: None for now (a window the approval bound is open, it bound
    none, or the plan was not approved: `execute` decides then), else the next opening. A plan that would pass
    its TTL before that opening fails here, at once, instead of waiting to be refused. The executor checks the
    windows again itself, so a cleared wait runs nothing outside them."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    decision = recorded_decision(planner_store, plan_id)
    if decision is None or decision.decision is not Decision.APPROVED:
        return None
    now = datetime.now(UTC)
    opening = next_opening(decision.binding.windows, now)
    if opening is None:
        return None
    ttl = decision.binding.bound(_executor_settings(PulsarAdminHook.for_cluster(cluster), run_id, overrides)).ttl
    expires = show_plan(planner_store, plan_id).created_at_utc + ttl
    if opening > expires:
        record_events(
            planner_store,
            audit_event(
                cluster,
                "airflow:window",
                "plan.window-missed",
                plan=plan_id,
                opens=opening.isoformat(),
                expires=expires.isoformat(),
            ),
        )
        raise InputError(
            f"plan {plan_id} expires at {expires:%Y-%m-%d %H:%M} UTC (executor ttl {ttl}), before the next "
            f"execution window opens at {opening:%Y-%m-%d %H:%M} UTC: raise the executor's ttl or widen the windows"
        )
    return opening


def report_outcome(cluster: str, run_id: str, context: Any = None) -> dict[str, Any]:
    """After the gate: the decision as the gate recorded it; after an execution, the load measured again, and
    the notification of how the execution ended (the gate told of its own decision)."""
    planner_store = store()
    plan_id = _run_plan(planner_store, cluster, run_id)
    decision = recorded_decision(planner_store, plan_id)
    if decision is None:
        return {"plan": plan_id, "status": show_plan(planner_store, plan_id).status.value, "decision": None}
    if decision.decision is not Decision.APPROVED:
        return {"plan": plan_id, "status": Decision.REJECTED.value, "by": decision.approver or "timeout"}
    settings = planner_settings(airflow=True)
    with PulsarAdminHook.for_cluster(cluster).get_conn() as client:
        measured = measure_plan(
            planner_store,
            client,
            settings.storage_root,
            plan_id,
            since=datetime.now(UTC),
            wait_seconds=settings.measure_wait,
            bound=configured_bound(settings),
            actor="airflow:report",
            cluster_name=cluster,
        )
    status = show_plan(planner_store, plan_id).status
    tell_outcome(cluster, run_id, status, measured, context or {})
    return {
        "plan": plan_id,
        "status": status.value,
        "snapshotAfter": measured.measurement.snapshot_id,
        **measured.to_json(),
    }


def tell_outcome(cluster: str, run_id: str, status: PlanStatus, measured: MeasuredOutcome, context: Any) -> None:
    """How the execution ended, to the notifiers; and a crossing of the accuracy bound, when this measurement made
    one (told once per crossing: the store remembers the last)."""
    snapshot = measured.measurement.snapshot_id
    details = [f"Status {status.value}; the load measured again is in snapshot {snapshot}."]
    notify_plan(cluster, run_id, execution_event(status), context, details)
    if measured.alert is not None:
        notify_plan(cluster, run_id, accuracy_event(measured.alert.state), context, [measured.alert.text])
