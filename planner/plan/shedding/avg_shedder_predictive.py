"""AvgShedderPredictive: AvgShedder's confirmation, then one consolidated plan on predicted scores.

An offline planning mode of this product, not a Pulsar class. In-broker AvgShedder moves a fifth of
a pair's traffic gap per firing and then waits for fresh load reports; an offline plan can instead
predict what each move does (`planner.plan.forecast` with the brokers' fitted usage models) and balance
the cluster in one approved plan:

1. Count hits and fire pairs exactly as AvgShedder does (`avg_shedder.find_bundles_for_unloading`).
   Its hit counters are this strategy's state; no pair fired means nothing moves, so spikes and
   short-lived gaps are filtered as in Pulsar.
2. Once a pair fired, start from the measured scores (each broker's recent samples,
   `forecast.starting_loads`) and repeat AvgShedder's pairing on the predicted state (i-th coolest
   with i-th hottest). For each pair whose predicted gap reaches the low threshold, move the hotter
   broker's bundles, the largest predicted relief first, while each move narrows the gap without
   overshooting it by more than `pair_tolerance` points. Stop when no pair reaches the low
   threshold, no move helps, or the move budget is spent.
3. Never move a bundle twice, and never push a destination above the overload threshold: when the
   pair's cooler broker cannot take a bundle, the next coolest broker that can is used instead.
4. With the cluster's policies (`policies`: isolation, anti-affinity groups, failure domains), choose only
   destinations they allow: one the placement pipeline keeps for the bundle on the snapshot's ownership
   (`policy_candidates`, which the plan then binds), and which the executor's check accepts once the plan's
   earlier moves are done (`destination_refusal`); a bundle the shedding cycle's own checks keep in place
   (`shouldAntiAffinityNamespaceUnload`) does not move. The prediction then moves the load where the plan
   sends it: predicting with a forbidden destination that the pipeline re-draws to the one allowed broker
   piles every predicted move onto that broker, and the next plan moves it all back.

The outcome carries every move's predicted source and destination scores and every broker's
predicted score before and after the whole plan.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.plan.document import PairEvaluation, PredictedMove
from planner.plan.forecast import BrokerLoad, Move, after_move, bundle_traffic, measured_loads, starting_loads
from planner.plan.placement.pipeline import allowed_brokers, owned_namespaces, policy_candidates
from planner.plan.placement.strategy import PlacementSession
from planner.plan.shedding import avg_shedder
from planner.plan.shedding.avg_shedder import AvgShedderState, sort_brokers
from planner.plan.shedding.outcome import SheddingOutcome, Unload
from planner.plan.usage_model import ResourceFit, UsageModels, resolved_models
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.load_manager_shared import sheddable_bundles
from planner.pulsar.model import LoadData
from planner.pulsar.policies import anti_affinity_group, destination_refusal, should_anti_affinity_namespace_unload

NAME = "AvgShedderPredictive"
# No Pulsar class exists: the registry's second name for the mode; brokers cannot be configured with it.
JAVA_CLASS = "pulsar_rebalance.AvgShedderPredictive"

# A pair is balanced once its predicted gap is within this many points: closer is not worth a move.
PAIR_TOLERANCE = 5.0
# At most this share of the cluster's bundles move in one plan.
MOVE_BUDGET_FRACTION = 0.5


@dataclass(frozen=True, slots=True)
class PredictiveState:
    """AvgShedder's hit counters, stored under this strategy's name."""

    hits: AvgShedderState = field(default_factory=AvgShedderState)

    def to_json(self) -> dict[str, Any]:
        return {**self.hits.to_json(), "strategy": NAME}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> PredictiveState:
        return cls(AvgShedderState.from_json(document))


@dataclass(frozen=True, slots=True)
class PredictiveOutcome(SheddingOutcome[PredictiveState]):
    pairs: tuple[PairEvaluation, ...] = ()  # AvgShedder's confirmation run
    moves: tuple[PredictedMove, ...] = ()
    scores_before: Mapping[str, float] = field(default_factory=dict)
    scores_after: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Plan:
    """The consolidation's running state: predicted loads, bundles moved so far, moves in order."""

    loads: Mapping[str, BrokerLoad]
    moved: frozenset[str] = frozenset()
    moves: tuple[PredictedMove, ...] = ()


@dataclass(frozen=True, slots=True)
class _Allowed:
    """Where the cluster's policies let the plan send a bundle. Read once from the snapshot: the brokers the placement
    pipeline keeps for each namespace (which the plan then binds) and the namespaces the shedding cycle leaves on a
    broker; the executor's check runs on the ownership the plan's earlier moves leave."""

    load_data: LoadData
    config: PulsarConfig
    policies: ClusterPolicies
    brokers: tuple[str, ...]
    owners: Mapping[str, str]  # bundle -> broker, as the snapshot reports them
    kept: Mapping[str, frozenset[str]]  # namespace -> `policy_candidates` on the snapshot
    held: frozenset[tuple[str, str]]  # (namespace, broker): `shouldAntiAffinityNamespaceUnload` keeps it there

    @classmethod
    def of(cls, load_data: LoadData, config: PulsarConfig, policies: ClusterPolicies) -> _Allowed:
        owners = {
            bundle: broker
            for broker, report in sorted(load_data.brokers.items())
            for bundle in sorted({*report.bundles, *report.last_stats})
        }
        version = config.pulsar_version
        # A shedding cycle places its unloads on one view: nothing preallocated, and these filters draw nothing.
        session = PlacementSession(random.Random(0))
        one_bundle = {namespace_of(bundle): bundle for bundle in owners}
        kept = {
            namespace: frozenset(policy_candidates(bundle, load_data, config, session, policies))
            for namespace, bundle in one_bundle.items()
        }
        owned = owned_namespaces(load_data, session)
        held = frozenset(
            (namespace, broker)
            for broker, namespaces in owned.items()
            for namespace in namespaces
            if anti_affinity_group(namespace, policies) is not None
            and not should_anti_affinity_namespace_unload(
                namespace, broker, allowed_brokers(load_data, namespace, policies, version), policies, owned
            )
        )
        return cls(load_data, config, policies, tuple(sorted(load_data.brokers)), owners, kept, held)

    def allows(self, moves: tuple[PredictedMove, ...], bundle: str, source: str, destination: str) -> bool:
        """Whether the plan may move `bundle` from `source` to `destination` after `moves`: the shedding cycle unloads
        it, the placement pipeline keeps the destination, and the executor's check accepts it then."""
        namespace = namespace_of(bundle)
        if (namespace, source) in self.held or destination not in self.kept.get(namespace, frozenset()):
            return False
        owners = self.owners
        if moves and anti_affinity_group(namespace, self.policies) is not None:
            owners = {**owners, **{move.bundle: move.destination for move in moves}}
        refusal = destination_refusal(
            bundle, destination, self.policies, owners, brokers=self.brokers, config=self.config
        )
        return refusal is None


def find_bundles_for_unloading(
    load_data: LoadData,
    config: PulsarConfig,
    state: PredictiveState | None = None,
    usage_models: UsageModels | None = None,
    *,
    pair_tolerance: float = PAIR_TOLERANCE,
    move_budget: int | None = None,
    policies: ClusterPolicies | None = None,
) -> PredictiveOutcome:
    """One run: AvgShedder's confirmation, then the consolidated plan. `policies`: the cluster's isolation policies,
    failure domains and anti-affinity groups (None: not read, every broker may take any bundle)."""
    state = state or PredictiveState()
    confirmation = avg_shedder.find_bundles_for_unloading(load_data, config, state.hits)
    next_state = PredictiveState(confirmation.state)
    weights = config.resource_weights
    scores_before = {broker: load.score(weights) for broker, load in measured_loads(load_data).items()}
    if not any(pair.fired for pair in confirmation.pairs):
        return PredictiveOutcome(
            unloads=(),
            state=next_state,
            reasons=confirmation.reasons or ("no pair fired: nothing is confirmed to move",),
            pairs=confirmation.pairs,
            scores_before=scores_before,
            scores_after=scores_before,
        )

    budget = move_budget if move_budget is not None else _default_budget(load_data)
    fits = resolved_models(load_data, usage_models)
    plan = _Plan(starting_loads(load_data, fits))
    allowed = _Allowed.of(load_data, config, policies) if policies is not None else None
    while len(plan.moves) < budget:
        improved = _consolidation_round(plan, load_data, config, fits, pair_tolerance, budget, allowed)
        if improved is None:
            break
        plan = improved

    reasons = list(confirmation.reasons)
    if len(plan.moves) >= budget:
        reasons.append(f"the move budget of {budget} bundles is spent; the rest waits for the next plan")
    return PredictiveOutcome(
        unloads=tuple(Unload(move.source, move.bundle, move.destination) for move in plan.moves),
        state=next_state,
        reasons=tuple(reasons),
        pairs=confirmation.pairs,
        moves=plan.moves,
        scores_before=scores_before,
        scores_after={broker: load.score(weights) for broker, load in plan.loads.items()},
    )


def _default_budget(load_data: LoadData) -> int:
    bundles = sum(len(report.bundles) for report in load_data.brokers.values())
    return max(1, math.ceil(bundles * MOVE_BUDGET_FRACTION))


def _consolidation_round(
    plan: _Plan,
    load_data: LoadData,
    config: PulsarConfig,
    fits: Mapping[str, Mapping[str, ResourceFit]],
    pair_tolerance: float,
    budget: int,
    allowed: _Allowed | None,
) -> _Plan | None:
    """One pass of AvgShedder's pairing on the predicted scores; None when no pair could be narrowed."""
    weights = config.resource_weights
    scores = {broker: load.score(weights) for broker, load in plan.loads.items()}
    brokers = sort_brokers(scores, config)
    start = len(plan.moves)
    for i in range(len(brokers) // 2):
        underloaded, overloaded = brokers[i], brokers[-1 - i]
        if scores[overloaded] - scores[underloaded] < config.avg_shedder_low_threshold:
            continue
        plan = _balance_pair(plan, load_data, config, fits, overloaded, underloaded, pair_tolerance, budget, allowed)
    return plan if len(plan.moves) > start else None


def _balance_pair(
    plan: _Plan,
    load_data: LoadData,
    config: PulsarConfig,
    fits: Mapping[str, Mapping[str, ResourceFit]],
    overloaded: str,
    underloaded: str,
    pair_tolerance: float,
    budget: int,
    allowed: _Allowed | None,
) -> _Plan:
    """Move the hot broker's bundles, largest predicted relief first, until the pair is within tolerance."""
    weights = config.resource_weights
    for bundle in _by_relief(plan, load_data, config, fits, overloaded):
        gap = plan.loads[overloaded].score(weights) - plan.loads[underloaded].score(weights)
        if gap <= pair_tolerance or len(plan.moves) >= budget:
            break
        destination = _destination(
            plan, load_data, config, fits, bundle, overloaded, underloaded, pair_tolerance, allowed
        )
        if destination is not None:
            plan = _with_move(plan, load_data, config, fits, Move(bundle, overloaded, destination))
    return plan


def _by_relief(
    plan: _Plan,
    load_data: LoadData,
    config: PulsarConfig,
    fits: Mapping[str, Mapping[str, ResourceFit]],
    broker: str,
) -> list[str]:
    """The broker's movable bundles (sheddable, not moved yet), by predicted score relief, largest first."""
    weights = config.resource_weights
    load = plan.loads[broker]
    score = load.score(weights)
    relief = {
        bundle: score - load.changed_by(bundle_traffic(load_data, bundle), -1.0, fits[broker]).score(weights)
        for bundle, _ in sheddable_bundles(load_data, broker, config.pulsar_version)
        if bundle not in plan.moved
    }
    return sorted((bundle for bundle, points in relief.items() if points > 0), key=lambda b: (-relief[b], b))


def _destination(
    plan: _Plan,
    load_data: LoadData,
    config: PulsarConfig,
    fits: Mapping[str, Mapping[str, ResourceFit]],
    bundle: str,
    source: str,
    paired: str,
    pair_tolerance: float,
    allowed: _Allowed | None,
) -> str | None:
    """The pair's cooler broker if the move suits it, else the coolest broker it suits; None if none does.

    A move suits a destination that is cooler than the source by more than the tolerance, stays at or
    below the overload threshold, does not end hotter than the source by more than the tolerance, and
    that the cluster's policies allow (`allowed`; None: not read).
    """
    weights = config.resource_weights
    threshold = float(config.broker_overloaded_threshold_percentage)
    traffic = bundle_traffic(load_data, bundle)
    source_before = plan.loads[source].score(weights)
    source_after = plan.loads[source].changed_by(traffic, -1.0, fits[source]).score(weights)

    def suits(destination: str) -> bool:
        before = plan.loads[destination].score(weights)
        after = plan.loads[destination].changed_by(traffic, 1.0, fits[destination]).score(weights)
        return (
            after <= threshold
            and source_before - before > pair_tolerance
            and source_after - after >= -pair_tolerance
            and (allowed is None or allowed.allows(plan.moves, bundle, source, destination))
        )

    if suits(paired):
        return paired
    others = sorted(
        (b for b in plan.loads if b not in (source, paired)), key=lambda b: (plan.loads[b].score(weights), b)
    )
    return next((destination for destination in others if suits(destination)), None)


def _with_move(
    plan: _Plan,
    load_data: LoadData,
    config: PulsarConfig,
    fits: Mapping[str, Mapping[str, ResourceFit]],
    move: Move,
) -> _Plan:
    weights = config.resource_weights
    loads = after_move(plan.loads, move, bundle_traffic(load_data, move.bundle), fits)
    predicted = PredictedMove(
        bundle=move.bundle,
        source=move.source,
        destination=move.destination,
        source_before=plan.loads[move.source].score(weights),
        source_after=loads[move.source].score(weights),
        destination_before=plan.loads[move.destination].score(weights),
        destination_after=loads[move.destination].score(weights),
    )
    return _Plan(loads, plan.moved | {move.bundle}, (*plan.moves, predicted))
