"""The store's side of the accuracy figures: executed plans' outcomes rebuilt from their measurements, a cluster's
figures over a window, and the alert's state, kept as the audit events that changed it (`accuracy.bound`)."""

from __future__ import annotations

from datetime import datetime

from planner.audit.accuracy import AccuracyAlert, AccuracyBound, AlertState, ClusterAccuracy, cluster_accuracy, crossing
from planner.errors import NotFoundError
from planner.plan.outcome import PlanOutcome, plan_outcome
from planner.settings import PlannerSettings
from planner.store.audit_log import AuditRecord, latest_cluster_event, record_after_latest
from planner.store.database import Store
from planner.store.models import AuditEvent, audit_event
from planner.store.plans import latest_measurement, measured_plans, plan_record

BOUND_EVENT = "accuracy.bound"


def configured_bound(settings: PlannerSettings) -> AccuracyBound:
    """The bound and window of the settings (`accuracy_p90_bound`, `accuracy_window`)."""
    return AccuracyBound(settings.accuracy_p90_bound, settings.accuracy_window)


def outcome_of_plan(store: Store, plan_id: int) -> PlanOutcome:
    """The plan's outcome from its newest measurement; NotFoundError when it was never measured."""
    record = plan_record(store, plan_id)
    measurement = latest_measurement(store, plan_id)
    if measurement is None:
        raise NotFoundError(f"plan {plan_id} has no measurement: it was not executed, or not measured after it ran")
    return plan_outcome(record, measurement)


def cluster_outcomes(store: Store, cluster: str, since: datetime, until: datetime) -> list[PlanOutcome]:
    """The cluster's plans measured in [since, until], oldest first."""
    return [
        plan_outcome(measured.record, measured.measurement)
        for measured in measured_plans(store, cluster, since=since, until=until)
    ]


def cluster_accuracy_of(store: Store, cluster: str, since: datetime, until: datetime) -> ClusterAccuracy:
    return cluster_accuracy(cluster, cluster_outcomes(store, cluster, since, until), since, until)


def _state_of(last: AuditRecord | None) -> AlertState | None:
    return AlertState(last.details["state"]) if last is not None else None


def bound_state(store: Store, cluster: str) -> AlertState | None:
    """The state the last crossing left (None: never crossed)."""
    return _state_of(latest_cluster_event(store, cluster, BOUND_EVENT))


def check_bound(store: Store, cluster: str, bound: AccuracyBound, now: datetime, *, actor: str) -> AccuracyAlert | None:
    """The cluster's accuracy over the window ending now against the bound: a crossing since the last one is
    recorded (audited as `accuracy.bound`) and returned for the caller to tell; None when nothing changed. Two
    checks at once (two report tasks, a task and the CLI) record and return one crossing between them."""
    accuracy = cluster_accuracy_of(store, cluster, now - bound.window, now)
    alerts: list[AccuracyAlert] = []

    def decide(last: AuditRecord | None) -> AuditEvent | None:
        alert = crossing(_state_of(last), accuracy, bound)
        if alert is None:
            return None
        alerts.append(alert)
        details = {key: value for key, value in alert.to_json().items() if key != "cluster"}
        return audit_event(cluster, actor, BOUND_EVENT, **details)

    record_after_latest(store, cluster, BOUND_EVENT, decide)
    return alerts[0] if alerts else None
