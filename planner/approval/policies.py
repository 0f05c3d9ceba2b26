"""Approval policies: declarative rules under which a plan is approved without a person.

A policy names the clusters it covers and limits what a plan may do; a plan is approved by the first
policy of its cluster whose every rule holds, and that decision is audited as approved by
`policy:<name>` with each rule's limit and the plan's value. Any other plan goes to a person, whose
gate says why no policy matched. With no policy configured (the default) every plan goes to a person.

Two plans never pass a policy, whatever its rules: an empty plan (nothing to approve), and a
maintenance plan predicted to leave brokers over the overload threshold (a person must accept that). A plan made
while the brokers' own load shedding or automatic bundle splitting was on (its cluster view's
`competing_controllers`) passes only a policy that allows it (`allow_beside_broker_controllers`): two controllers
would move the same bundles.
A `scale_events` rule holds only for the plan proposed for a scale event of those kinds (`planner.plan.scale_events`:
the fill of a broker that joined, the drain of one marked for removal), which the plan carries as resolved from the
store when it was asked for.
A share rule holds only on traffic that is known: an unload without measured traffic, or a cluster total that
is missing or zero, fails it with a reason saying what is unknown.

Pure: the plan document and the time in, a verdict out. The policies' rules are settings
(`planner.settings`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planner.actions import ActionKind
from planner.plan.balance import spread
from planner.plan.document import PlanDocument
from planner.pulsar.bundle_range import namespace_of
from planner.settings import ApprovalPolicy, is_open, matches_any


@dataclass(frozen=True, slots=True)
class RuleCheck:
    rule: str
    limit: Any
    value: Any
    holds: bool
    # Said instead of the value and limit when the rule fails, where those alone would not say why.
    why: str = ""

    def describe(self) -> str:
        if self.why and not self.holds:
            return f"{self.rule}: {self.why}"
        return f"{self.rule} {self.value} (limit {self.limit})"

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "limit": self.limit, "value": self.value, "holds": self.holds}


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    policy: str
    checks: tuple[RuleCheck, ...]

    @property
    def approves(self) -> bool:
        return all(check.holds for check in self.checks)

    @property
    def failed(self) -> list[RuleCheck]:
        return [check for check in self.checks if not check.holds]

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "approves": self.approves, "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """Every covering policy's verdict, in order; `approved_by` is the first that approves, if any."""

    verdicts: tuple[PolicyVerdict, ...] = field(default=())

    @property
    def approved_by(self) -> PolicyVerdict | None:
        return next((verdict for verdict in self.verdicts if verdict.approves), None)

    def why_not(self) -> str:
        """For the gate: why a person is asked."""
        if not self.verdicts:
            return "No approval policy covers this cluster."
        reasons = [
            f"{verdict.policy} ({'; '.join(check.describe() for check in verdict.failed)})" for verdict in self.verdicts
        ]
        return "No approval policy approves this plan: " + ", ".join(reasons) + "."

    def to_json(self) -> dict[str, Any]:
        approved = self.approved_by
        return {
            "approvedBy": f"policy:{approved.policy}" if approved else None,
            "verdicts": [verdict.to_json() for verdict in self.verdicts],
        }


# The share rules' units, for the reason a share cannot be told.
_UNITS = {"msg_rate": "msg/s", "throughput": "bytes/s"}


def _is_measured(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 0


def _moved_share(plan: PlanDocument, attribute: str) -> float | str:
    """The unloads' share of the cluster's load before the plan, or what is unknown so that it cannot be told.

    Unknown is never counted as zero: an unload whose traffic was not measured, or a cluster total that is missing
    (no forecast) or zero, would otherwise make a share look small and pass the rule unseen."""
    unit = _UNITS[attribute]
    unknown = []
    unloads = [action for action in plan.actions if action.kind is ActionKind.UNLOAD]
    unmeasured = [action.bundle for action in unloads if not _is_measured(getattr(action, attribute))]
    if unmeasured:
        shown = ", ".join(unmeasured[:3]) + (f" and {len(unmeasured) - 3} more" if len(unmeasured) > 3 else "")
        unknown.append(f"no measured {unit} for {len(unmeasured)} of {len(unloads)} unloads ({shown})")
    total = sum(getattr(broker, f"{attribute}_before") for broker in plan.brokers)
    if not plan.brokers:
        unknown.append(f"no forecast of the cluster's {unit}")
    elif not (math.isfinite(total) and total > 0):
        # A share of a zero total is no share, even when nothing moves.
        unknown.append(f"the cluster's {unit} before the plan is {total:g}")
    if unknown:
        return "unknown: " + "; ".join(unknown)
    return sum(getattr(action, attribute) for action in unloads) / total


def evaluate(policy: ApprovalPolicy, plan: PlanDocument, now: datetime) -> PolicyVerdict:
    """Each rule the policy sets, checked against the plan (and `now` for its windows)."""
    checks = [
        RuleCheck("actions", "at least 1", len(plan.actions), bool(plan.actions)),
        RuleCheck("mode", list(policy.modes), plan.mode, plan.mode in policy.modes),
    ]
    if plan.maintenance is not None:
        over = list(plan.maintenance.over_capacity)
        checks.append(RuleCheck("overCapacity", [], over, not over))
    competing = list(plan.cluster_view.competing_controllers) if plan.cluster_view is not None else []
    if competing:
        allowed = policy.allow_beside_broker_controllers
        why = (
            f"the brokers' own load balancing is still on ({', '.join(competing)}): it would act on the same bundles "
            "as this plan; turn it off, or set allow_beside_broker_controllers in the policy"
        )
        checks.append(RuleCheck("brokerControllers", "allowed" if allowed else "off", competing, allowed, why))
    if policy.strategies is not None:
        checks.append(
            RuleCheck("strategies", list(policy.strategies), plan.strategy, plan.strategy in policy.strategies)
        )
    if policy.scale_events is not None:
        event = plan.maintenance.scale_event if plan.maintenance is not None else None
        kind = event.kind if event is not None else None
        why = f"not proposed for a scale event of {', '.join(policy.scale_events)}" + (
            f" (it answers a {kind})" if kind else " (no scale event asked for it)"
        )
        checks.append(RuleCheck("scaleEvents", list(policy.scale_events), kind, kind in policy.scale_events, why))
    if policy.max_actions is not None:
        checks.append(
            RuleCheck("maxActions", policy.max_actions, len(plan.actions), len(plan.actions) <= policy.max_actions)
        )
    for rule, attribute, limit in (
        ("maxMsgRateShare", "msg_rate", policy.max_msg_rate_share),
        ("maxThroughputShare", "throughput", policy.max_throughput_share),
    ):
        if limit is not None:
            share = _moved_share(plan, attribute)
            if isinstance(share, str):
                checks.append(RuleCheck(rule, limit, share, False))
            else:
                checks.append(RuleCheck(rule, limit, round(share, 4), share <= limit))
    if policy.min_spread_improvement is not None:
        improvement = None
        if plan.brokers:
            # From the scores the prediction starts from: a report's noise, smoothed away, is no improvement.
            before = spread([broker.score_predicted_from for broker in plan.brokers])
            after = spread([broker.score_after for broker in plan.brokers])
            improvement = round(before - after, 4)
        holds = improvement is not None and improvement >= policy.min_spread_improvement
        checks.append(RuleCheck("minSpreadImprovement", policy.min_spread_improvement, improvement, holds))
    if policy.excluded_namespaces:
        namespaces = {namespace_of(action.bundle) for action in plan.actions}
        touched = sorted(name for name in namespaces if matches_any(policy.excluded_namespaces, name))
        checks.append(RuleCheck("excludedNamespaces", list(policy.excluded_namespaces), touched, not touched))
    if policy.windows:
        checks.append(
            RuleCheck(
                "windows",
                [window.describe() for window in policy.windows],
                now.isoformat(timespec="seconds"),
                is_open(policy.windows, now),
            )
        )
    return PolicyVerdict(policy.name, tuple(checks))


def decide(policies: Sequence[ApprovalPolicy], plan: PlanDocument, now: datetime) -> PolicyDecision:
    """The verdicts of the policies covering the plan's cluster, in their configured order."""
    covering = [policy for policy in policies if matches_any(policy.clusters, plan.cluster)]
    return PolicyDecision(tuple(evaluate(policy, plan, now) for policy in covering))
