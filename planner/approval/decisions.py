"""Decisions on plans taken outside the gate's person: by the approval policies, and by an OS user from the command
line. The store records them (`planner.store.approvals`), checking that an approval binds the action rows the plan
holds; this decides who decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from planner.approval.policies import PolicyDecision, decide
from planner.errors import InputError
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.settings import ENV_PREFIX, OS_USER_PREFIX, ApprovalPolicy, Approver, ExecutionBinding
from planner.store.approvals import record_decision, refuse_decision
from planner.store.database import Store

POLICY_SOURCE = "policy"  # the source of a decision an approval policy took


def approve_by_policies(
    store: Store,
    plan_id: int,
    plan: PlanDocument,
    policies: Sequence[ApprovalPolicy],
    now: datetime,
    *,
    record: bool = True,
    binding: ExecutionBinding | None = None,
) -> PolicyDecision:
    """The configured policies' verdicts on stored plan `plan_id` (`plan`, as read from the store); with
    `record`, the approval of the first policy that approves it, bound to the plan's actions hash (checked against
    the stored rows again) and audited as `policy:<name>` with its checks."""
    decision = decide(policies, plan, now)
    verdict = decision.approved_by
    if verdict is not None and record:
        record_decision(
            store,
            plan_id,
            Decision.APPROVED,
            approver=f"policy:{verdict.policy}",
            approved_hash=plan.actions_hash,
            source=POLICY_SOURCE,
            details={"policy": verdict.to_json()},
            binding=binding,
        )
    return decision


def os_user_approver(
    store: Store, plan_id: int, approvers: Sequence[Approver], os_user: str, as_name: str | None
) -> str:
    """The name an OS user's decision from the command line is recorded under. With approvers configured, the OS
    user must be one (the entry whose id is `os:<user>`), and `--as` may name only that approver; anything else is
    refused and audited. Without approvers, any OS user decides, under `--as` or their own name."""
    if not approvers:
        return as_name or os_user
    approver = next((entry for entry in approvers if entry.id == f"{OS_USER_PREFIX}{os_user}"), None)
    if approver is None:
        reason = f"OS user {os_user!r} is not an approver ({ENV_PREFIX}APPROVERS has no {OS_USER_PREFIX}{os_user})"
    elif as_name not in (None, approver.name, approver.id):
        reason = f"OS user {os_user!r} decides as {approver.name!r} ({ENV_PREFIX}APPROVERS), not as {as_name!r}"
    else:
        return approver.name
    refuse_decision(store, plan_id, reason)
    raise InputError(f"plan {plan_id}: {reason}")
