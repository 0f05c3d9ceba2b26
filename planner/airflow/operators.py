"""The plan DAG's approval gate: Airflow's ApprovalOperator, bound to the stored plan and writing the
decision into the planner's store itself.

Nothing the gate shows or records comes from XCom, which Airflow's `user` role can write:
- `execute` finds the plan the run committed in the planner's store (by the run id and the cluster),
  renders the subject and body from it, and records which action hash is put to the reviewer;
- `execute_complete` receives the response as Airflow built it from its own HITL record (on 3.3 the
  Core API's response handler or the scheduler's timeout sweep packs `HITLDetail.as_resume_event_payload()`
  into the task's resume arguments; no public API writes those), checks the responder is an assigned
  approver, and records the decision (user id and name) in the planner's store before the operator acts on it.
A gate marked "success" by hand never reaches `execute_complete`, so no decision is recorded and the
execute task refuses (`planner.airflow.tasks.execute_approved`).

The body links to the plan's review page under Airflow's `[api] base_url`. The request is told through the
operator's own `notifiers`, which Airflow calls once the Required Action exists: the planner's channels, the
deployment's notifiers for this DAG (setting `approval_notifiers`) and any the DAG's code passed, each guarded so that
a notification that fails is audited and never fails the gate; the message links to the Required Action's form
(`planner.airflow.notifications.approval_form_url`), then to the review page. A plan an approval policy approves
(`planner.approval.policies`) is recorded as approved by `policy:<name>` and asks nobody.

`ExecutionWindowOperator` holds an approved plan until an execution window of its cluster opens,
deferred to the triggerer: it holds no worker slot, and the deferral is in Airflow's database, so
restarting the scheduler (or the triggerer) does not lose it.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseOperator

from planner.airflow import notifications
from planner.airflow import tasks as airflow_tasks
from planner.airflow.notifications import PlanEvent
from planner.settings import planner_settings


class PlanApprovalOperator(ApprovalOperator):
    template_fields = ()  # subject and body are rendered from the stored plan, not from templates

    def __init__(self, *, cluster: str, **kwargs: Any) -> None:
        super().__init__(subject=f"Rebalance {cluster}", **kwargs)
        self.cluster = cluster
        self.declared_notifiers = tuple(self.notifiers)  # the DAG's own; the planner's are added when it asks

    def _apply_settings(self) -> None:
        # The DAG's parse sets the environment's timeout and approvers (it reads no Variable); the gate asks and
        # checks the answer under the settings as they are when it runs. A resumed gate reads them again, so an
        # approver removed meanwhile no longer decides (Airflow refuses answers from users not assigned at ask).
        settings = planner_settings(airflow=True)
        self.response_timeout = settings.approval_timeout
        self.assigned_users = [approver.model_dump() for approver in settings.approvers] or None

    def execute(self, context: Any) -> Any:
        self._apply_settings()
        request = airflow_tasks.request_approval(self.cluster, context["run_id"])
        if request.approved_by is not None:
            # An approval policy approved the plan: no request for a person, the downstream tasks run.
            details = [f"Approved by {request.approved_by}.", *request.policy_checks]
            airflow_tasks.notify_plan(self.cluster, context["run_id"], PlanEvent.APPROVED, context, details)
            responder = {"id": request.approved_by, "name": request.approved_by}
            return {"chosen_options": [self.APPROVE], "params_input": {}, "responded_by_user": responder}
        self.subject, self.body = request.subject, request.markdown
        timeout = self.response_timeout
        waits = [f"Without an answer within {timeout} it is rejected."] if timeout else []
        form = notifications.approval_form_url(context)
        message = airflow_tasks.plan_message(self.cluster, context["run_id"], PlanEvent.AWAITING_APPROVAL, waits, form)
        context[notifications.CONTEXT_KEY] = message

        def failed(channel: str) -> None:
            airflow_tasks.notification_failed(message, [channel])

        # Airflow calls them once it has stored the request (its form exists), then parks the task.
        self.notifiers = notifications.gate_notifiers(message, self.dag_id, self.declared_notifiers, failed)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        self._apply_settings()
        if "error" not in event:
            chosen = list(event.get("chosen_options") or [])
            responder = event.get("responded_by_user")
            airflow_tasks.record_gate_decision(
                self.cluster,
                context["run_id"],
                chosen=chosen,
                responder=responder,
                responded_at=event.get("responded_at"),
                assigned=[user["id"] for user in self.assigned_users or []],
            )
            if responder is None:  # the timeout applied the default, Reject
                notice, details = PlanEvent.TIMED_OUT, [f"Nobody answered within {self.response_timeout}."]
            else:
                approved = "Approve" in chosen
                notice = PlanEvent.APPROVED if approved else PlanEvent.REJECTED
                details = [
                    f"{'Approved' if approved else 'Rejected'} by {responder.get('name') or responder.get('id')}."
                ]
            airflow_tasks.notify_plan(self.cluster, context["run_id"], notice, context, details)
        return super().execute_complete(context, event)


class ExecutionWindowOperator(BaseOperator):
    """Go on when the cluster's execution window is open (or none is set); else wait for its opening,
    deferred, and check again then (the windows may have changed while it waited)."""

    def __init__(self, *, cluster: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster

    def execute(self, context: Any) -> None:
        self._go_or_wait(context, first=True)

    def execute_complete(self, context: Any, event: Any = None) -> None:
        self._go_or_wait(context, first=False)

    def _go_or_wait(self, context: Any, *, first: bool) -> None:
        run_id = context["run_id"]
        opening = airflow_tasks.execution_wait(
            self.cluster, run_id, airflow_tasks.executor_overrides(context["params"])
        )
        if opening is None:
            return
        self.log.info("Outside the execution windows; waiting until %s", opening.isoformat())
        if first:
            details = [f"It executes when the next execution window opens, at {opening:%Y-%m-%d %H:%M} UTC."]
            airflow_tasks.notify_plan(self.cluster, run_id, PlanEvent.WAITING_FOR_WINDOW, context, details)
        self.defer(trigger=DateTimeTrigger(moment=opening), method_name="execute_complete")
