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

The body links to the plan's review page under Airflow's `[api] base_url`.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator

from planner.airflow import tasks as airflow_tasks
from planner.airflow.notifications import PlanEvent


class PlanApprovalOperator(ApprovalOperator):
    template_fields = ()  # subject and body are rendered from the stored plan, not from templates

    def __init__(self, *, cluster: str, **kwargs: Any) -> None:
        super().__init__(subject=f"Rebalance {cluster}", **kwargs)
        self.cluster = cluster

    def execute(self, context: Any) -> Any:
        request = airflow_tasks.request_approval(self.cluster, context["run_id"])
        self.subject, self.body = request.subject, request.markdown
        timeout = self.response_timeout
        waits = [f"Without an answer within {timeout} it is rejected."] if timeout else []
        airflow_tasks.notify_plan(self.cluster, context["run_id"], PlanEvent.AWAITING_APPROVAL, context, waits)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
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
