"""What a run is judged by: time and rounds to balance, moves, over-unloading, over-placement, peaks.

These are the costs a platform team pays for rebalancing: every move disconnects the bundle's
clients, moves caused by a two-minute spike are pure waste, and a source pushed far below the
average (or a destination pushed far above it) means the next round has to move traffic back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.simulator.violations import PolicyViolations


@dataclass(frozen=True, slots=True)
class MoveRecord:
    minute: int
    bundle: str
    source: str | None
    destination: str
    topics: int
    forced: bool  # reassigned because its broker stopped, not chosen by the policy
    spike: bool  # the source hosted a spiking bundle within the scenario's spike lag

    def to_json(self) -> dict[str, Any]:
        return {
            "minute": self.minute,
            "bundle": self.bundle,
            "source": self.source,
            "destination": self.destination,
            "topics": self.topics,
            "forced": self.forced,
            "spike": self.spike,
        }


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """A shedding cycle or an executed plan that moved at least one bundle."""

    minute: int
    sources: tuple[str, ...]
    destinations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Metrics:
    minutes_to_balance: int | None  # first minute from which the spread stays below the target; None: never
    plans_to_balance: int | None  # rounds with moves before that minute
    moves: int  # bundles the policy moved
    spike_moves: int
    forced_moves: int  # bundles reassigned because their broker stopped (same for every policy, roughly)
    disconnections: int  # topics whose clients were disconnected by the policy's moves
    over_unloading: int  # (round, source) pairs where the source ended below average - threshold
    over_placement: int  # (round, destination) pairs where the destination ended above average + threshold
    peak_score: float
    final_spread: float
    rounds: int
    # The first round that moved bundles: the spread the minute after, its moves, and the fewest moves any
    # plan needs for that spread from the same start (`move_bound`); None without such a round.
    spread_after_first_plan: float | None = None
    moves_first_plan: int | None = None
    moves_lower_bound: int | None = None
    # Offline plans: per executed plan, the largest gap between a broker's predicted score after it and its
    # measured score the minute after it was executed, in the order they ran.
    plan_errors: tuple[float, ...] = ()
    # Offline policies: the scheduled runs whose plan was empty, and those of them where the strategy found the
    # cluster within its thresholds (the others wait for a gap's consecutive hits).
    empty_plans: int | None = None
    balanced_plans: int | None = None
    # Scenarios that declare cluster policies only (`planner.simulator.violations`).
    policy_violations: PolicyViolations | None = None

    @property
    def prediction_error(self) -> float | None:
        """The largest per-plan error, over all executed plans."""
        return max(self.plan_errors) if self.plan_errors else None

    def prediction_error_percentile(self, percent: float) -> float | None:
        """The per-plan errors' percentile (linear between the plans' errors), None without executed plans."""
        return float(np.percentile(self.plan_errors, percent)) if self.plan_errors else None

    def to_json(self) -> dict[str, Any]:
        document = {
            "minutesToBalance": self.minutes_to_balance,
            "plansToBalance": self.plans_to_balance,
            "moves": self.moves,
            "spikeMoves": self.spike_moves,
            "overUnloading": self.over_unloading,
            "overPlacement": self.over_placement,
            "finalSpread": round(self.final_spread, 2),
            "peakScore": round(self.peak_score, 2),
            "disconnections": self.disconnections,
            "forcedMoves": self.forced_moves,
            "rounds": self.rounds,
            "spreadAfterFirstPlan": (
                round(self.spread_after_first_plan, 2) if self.spread_after_first_plan is not None else None
            ),
            "movesFirstPlan": self.moves_first_plan,
            "movesLowerBound": self.moves_lower_bound,
            "predictionError": _rounded(self.prediction_error),
            "predictionErrorP50": _rounded(self.prediction_error_percentile(50)),
            "predictionErrorP90": _rounded(self.prediction_error_percentile(90)),
            "planErrors": [round(error, 2) for error in self.plan_errors],
            "emptyPlans": self.empty_plans,
            "balancedPlans": self.balanced_plans,
        }
        violations = self.policy_violations
        if violations is not None:
            document["isolationViolations"] = violations.isolation
            document["antiAffinityViolations"] = violations.anti_affinity
            document["forbiddenMoves"] = violations.forbidden_moves
            document["refusedMoves"] = violations.refused_moves
        return document


def _rounded(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


def spreads(scores: np.ndarray) -> np.ndarray:
    """max - min live score per row, over the brokers that are up (0 with fewer than two)."""
    up = ~np.isnan(scores)
    result = np.zeros(len(scores))
    for row in np.flatnonzero(up.sum(axis=1) >= 2).tolist():
        values = scores[row, up[row]]
        result[row] = float(values.max() - values.min())
    return result


def compute_metrics(
    scores: np.ndarray,
    moves: Sequence[MoveRecord],
    rounds: Sequence[RoundRecord],
    *,
    target_spread: float,
    threshold: float,
    broker_ids: Sequence[str],
    moves_lower_bound: int | None = None,
    plan_errors: Sequence[float] = (),
    empty_plans: int | None = None,
    balanced_plans: int | None = None,
    policy_violations: PolicyViolations | None = None,
) -> Metrics:
    """`scores[t]` is the live score of each broker at minute t (NaN while down); row t + 1 is what a
    round at minute t ended with."""
    spread = spreads(scores)
    above = np.flatnonzero(spread >= target_spread)
    balanced_from: int | None
    if len(above) == 0:
        balanced_from = 0
    elif above[-1] == len(spread) - 1:
        balanced_from = None
    else:
        balanced_from = int(above[-1]) + 1
    plans = None if balanced_from is None else sum(1 for r in rounds if r.minute < balanced_from)

    over_unloading = over_placement = 0
    column = {broker_id: index for index, broker_id in enumerate(broker_ids)}
    for record in rounds:
        after = scores[min(record.minute + 1, len(scores) - 1)]
        average = float(np.nanmean(after))
        for source in sorted(set(record.sources)):
            value = after[column[source]]
            if not np.isnan(value) and value < average - threshold:
                over_unloading += 1
        for destination in sorted(set(record.destinations)):
            value = after[column[destination]]
            if not np.isnan(value) and value > average + threshold:
                over_placement += 1

    policy_moves = [move for move in moves if not move.forced]
    first = rounds[0] if rounds else None
    return Metrics(
        minutes_to_balance=balanced_from,
        plans_to_balance=plans,
        moves=len(policy_moves),
        spike_moves=sum(1 for move in policy_moves if move.spike),
        forced_moves=len(moves) - len(policy_moves),
        disconnections=sum(move.topics for move in policy_moves),
        over_unloading=over_unloading,
        over_placement=over_placement,
        peak_score=float(np.nanmax(scores)) if np.any(~np.isnan(scores)) else 0.0,
        final_spread=float(spread[-1]),
        rounds=len(rounds),
        spread_after_first_plan=float(spread[min(first.minute + 1, len(spread) - 1)]) if first else None,
        moves_first_plan=len(first.sources) if first else None,
        moves_lower_bound=moves_lower_bound,
        plan_errors=tuple(plan_errors),
        empty_plans=empty_plans,
        balanced_plans=balanced_plans,
        policy_violations=policy_violations,
    )
