"""The plan DAG's approval gate: Airflow's ApprovalOperator, with its decision kept in XCom either way.

On Reject the operator skips its downstream tasks and Airflow keeps no return value, so the report task
could not tell a reviewer's Reject from a timeout. The gate therefore also writes the decision (options,
who, when) under the XCom key `decision` before the operator acts on it.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator

DECISION_KEY = "decision"


class PlanApprovalOperator(ApprovalOperator):
    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if "error" not in event:
            responded_at = event.get("responded_at")
            context["ti"].xcom_push(
                key=DECISION_KEY,
                value={
                    "chosen_options": list(event.get("chosen_options") or []),
                    "responded_by_user": event.get("responded_by_user"),
                    "responded_at": responded_at.isoformat() if responded_at is not None else None,
                },
            )
        return super().execute_complete(context, event)
