"""A cluster's plan from its LoadData: the strategy's unloads (with destinations), split candidates,
the predicted load before and after, and the strategy's next state. Pure: the Spark job, the CLI and
the simulator all call `make_plan`, so they always agree. Usage models fitted from the brokers'
history (`planner.plan.usage_model`) make the predictions per broker; without them the forecast uses the
snapshot's average costs.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from planner.actions import ActionKind
from planner.errors import InputError
from planner.plan.balance import balance_report, transfer_balance_report
from planner.plan.bundles.bundle_splitter_task import find_bundles_to_split
from planner.plan.bundles.registry import split_algorithm
from planner.plan.bundles.split import can_split
from planner.plan.document import PairEvaluation, PlanDocument, PlannedAction
from planner.plan.extensible import bundles_kept_off_the_top, bundles_to_split
from planner.plan.extensible_filters import ExtensibleCluster, placement_candidates, transfer_refusal
from planner.plan.forecast import Move, forecast
from planner.plan.placement import extensible_least_resource_usage
from planner.plan.placement.pipeline import (
    allowed_brokers,
    excluded_namespaces,
    owned_namespaces,
    policy_candidates,
    select_broker,
)
from planner.plan.placement.registry import DEFAULT_PLACEMENT, configured_placement
from planner.plan.placement.strategy import PlacementSession
from planner.plan.shedding import transfer_shedder
from planner.plan.shedding.avg_shedder import AvgShedderOutcome
from planner.plan.shedding.avg_shedder_predictive import PredictiveOutcome
from planner.plan.shedding.registry import SheddingStrategy, shedding_strategy
from planner.plan.usage_model import UsageModels
from planner.pulsar.bundle_range import BundleName, namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.load_manager_shared import remove_expired_recently_unloaded
from planner.pulsar.model import ExtensibleLoadData, LoadData
from planner.pulsar.policies import (
    anti_affinity_group,
    isolation_policy,
    isolation_refusal,
    should_anti_affinity_namespace_unload,
)


def _split_action(
    bundle: str,
    broker: str,
    config: PulsarConfig,
    topics_by_bundle: Mapping[str, Sequence[str]],
    load: tuple[float | None, float | None],
    reason: str,
) -> PlannedAction:
    """A split of `bundle` on `broker` by the configured algorithm, with its positions where the planner knows
    them (None: Pulsar computes them itself, from the topics it has loaded); `load` is its msg/s and bytes/s."""
    algorithm = config.default_namespace_bundle_split_algorithm
    known = split_algorithm(algorithm)
    positions = known.planned_positions(BundleName.parse(bundle).range, topics_by_bundle.get(bundle)) if known else None
    return PlannedAction(
        kind=ActionKind.SPLIT,
        bundle=bundle,
        source=broker,
        destination=None,
        msg_rate=load[0],
        throughput=load[1],
        reason=reason,
        split_algorithm=algorithm,
        split_positions=tuple(positions) if positions is not None else None,
    )


def _split_actions(
    load_data: LoadData,
    config: PulsarConfig,
    namespace_bundle_counts: Mapping[str, int] | None,
    topics_by_bundle: Mapping[str, Sequence[str]],
) -> list[PlannedAction]:
    actions = []
    owners = {bundle: broker for broker, report in load_data.brokers.items() for bundle in report.last_stats}
    for bundle in find_bundles_to_split(load_data, config, namespace_bundle_counts):
        if not can_split(BundleName.parse(bundle).range):
            continue
        long_term = load_data.bundle_data[bundle].long_term_data if bundle in load_data.bundle_data else None
        load = (long_term.total_msg_rate, long_term.total_msg_throughput) if long_term else (None, None)
        reason = "over the namespace bundle limits (BundleSplitterTask rules, long-term averages)"
        actions.append(_split_action(bundle, owners[bundle], config, topics_by_bundle, load, reason))
    return actions


def placement_config(strategy: SheddingStrategy, config: PulsarConfig) -> PulsarConfig:
    """`config` with the placement strategy Pulsar would pair with `strategy`.

    A strategy whose class places too (AvgShedder, PIP-364) is set up as both shedding and placement strategy, and
    Pulsar then binds the two into one instance, whose placement side returns the destinations its shedding side
    planned: a plan with it and no `loadBalancerLoadPlacementStrategy` in its settings takes that setup. With another
    placement named, Pulsar places its unloads with that, and so does the plan. Such a placement under another
    shedder is refused before 5.0, as Pulsar refuses it at startup; from 5.0 Pulsar places with its default
    (LeastLongTermMessageRate) instead, and so does the plan."""
    if strategy.binds_own_placement and "placement_strategy" not in config.model_fields_set:
        return config.with_settings({"loadBalancerLoadPlacementStrategy": strategy.java_class})
    placement = configured_placement(config)
    bound = placement.bound_shedder
    if bound is not None and bound != strategy.name and strategy.in_pulsar:
        if config.pulsar_version.placement_shedder_mismatch_falls_back:
            return config.with_settings({"loadBalancerLoadPlacementStrategy": DEFAULT_PLACEMENT.java_class})
        raise InputError(
            f"loadBalancerLoadPlacementStrategy: {placement.name} places only what {bound} sheds, not {strategy.name} "
            f"(Pulsar refuses the pair at startup); name another placement strategy or plan with {bound}"
        )
    return config


def make_plan(
    cluster: str,
    load_data: LoadData,
    config: PulsarConfig,
    strategy_name: str,
    state: Mapping[str, Any] | None,
    *,
    now_millis: int | None = None,
    include_splits: bool = True,
    namespace_bundle_counts: Mapping[str, int] | None = None,
    topics_by_bundle: Mapping[str, Sequence[str]] | None = None,
    seed: int = 0,
    usage_models: UsageModels | None = None,
    placement_rng: random.Random | None = None,
    policies: ClusterPolicies | None = None,
) -> PlanDocument:
    """One planning run: one run of the strategy (one AvgShedder "run" for its hit counters).

    Placement draws among equally good brokers with `placement_rng`, or with a generator seeded from `seed`.

    `policies`: the cluster's isolation policies, failure domains and anti-affinity groups as the snapshot read
    them. With them, each unload passes `doLoadShedding`'s checks (`shouldNamespacePoliciesUnload`,
    `shouldAntiAffinityNamespaceUnload`) and is placed by the pipeline with the policies' filters; a destination the
    strategy planned itself (AvgShedder) that the policies forbid is re-drawn as Pulsar's pipeline would, its placement
    side getting the filtered candidates; AvgShedderPredictive plans and predicts with allowed destinations only. A
    note names each bundle left in place or placed differently because of them. None (not read): planned as on a
    cluster without policies."""
    strategy = shedding_strategy(strategy_name)
    strategy.require_available(config)  # with one broker too: such a broker would not start
    config = placement_config(strategy, config)
    if now_millis is not None:
        load_data = remove_expired_recently_unloaded(load_data, now_millis, config.shedding_grace_period_millis)
    if len(load_data.brokers) <= 1:
        # ModularLoadManagerImpl neither runs the strategy (its state stays as it was) nor splits with one broker.
        unchanged = strategy.dump_state(strategy.load_state(state))
        return _single_broker_plan(cluster, strategy.name, unchanged, load_data, config, usage_models)
    outcome = strategy.run(load_data, config, strategy.load_state(state), usage_models, policies)
    predicted_moves = outcome.moves if isinstance(outcome, PredictiveOutcome) else ()
    predicted = {(move.bundle, move.source): move for move in predicted_moves}
    session = PlacementSession(placement_rng or random.Random(seed))
    if policies is not None and strategy.placement_memory is not None:
        # One Java instance sheds and places: its placement side holds the destinations it planned for a re-draw.
        session.remember(strategy.placement_memory(outcome))
    allowed = set(allowed_brokers(load_data))
    placement = config.placement_short_name
    actions: list[PlannedAction] = []
    notes = list(outcome.reasons)
    excluded = excluded_namespaces(config)
    for unload in outcome.unloads:
        if namespace_of(unload.bundle) in excluded:
            # Dropped after the strategy chose it, as doLoadShedding does: its share of the budget is not re-spent.
            notes.append(f"{unload.bundle}: its namespace is in loadBalancerSheddingExcludedNamespaces; not unloaded")
            continue
        if policies is not None:
            held = _held_by_policies(unload.bundle, unload.broker, load_data, config, session, policies)
            if held is not None:
                notes.append(held)
                continue
        elif not allowed - {unload.broker}:
            # shouldNamespacePoliciesUnload: no other broker may own it.
            notes.append(f"{unload.bundle}: no broker but {unload.broker} loads its topics; not unloaded")
            continue
        # doLoadShedding places every unload through the placement pipeline. A plan binds the destinations a strategy
        # planned where its placement side would return them: AvgShedder as its own placement (Pulsar's
        # even-distribution filter may still re-draw one there: docs/fidelity.md), and the planner's own strategies.
        binds = unload.destination is not None and (
            configured_placement(config).bound_shedder is not None or not strategy.in_pulsar
        )
        if policies is not None:
            destination, note = _placed_with_policies(
                unload.bundle, unload.destination if binds else None, load_data, config, session, policies
            )
            notes.extend([note] if note else [])
        else:
            destination = (
                unload.destination
                if binds
                else select_broker(unload.bundle, load_data, config, session, preallocate=False)
            )
        if destination is None or destination == unload.broker:
            notes.append(f"{unload.bundle}: placement keeps it on {unload.broker}; Pulsar would skip this unload")
            continue
        short = load_data.bundle_data[unload.bundle].short_term_data
        if unload.destination is None:
            reason = f"{strategy.name}: shed from {unload.broker}; destination chosen by {placement}"
        elif destination == unload.destination:
            reason = f"{strategy.name}: {unload.broker} is the overloaded side of a fired pair"
        else:
            reason = (
                f"{strategy.name}: {unload.broker} is the overloaded side of a fired pair with {unload.destination}; "
                f"placed by {placement}, the placement strategy"
            )
        move = predicted.get((unload.bundle, unload.broker))
        if move is not None:
            reason = (
                f"{strategy.name}: predicted {move.source} {move.source_before:.1f} -> {move.source_after:.1f}, "
                f"{move.destination} {move.destination_before:.1f} -> {move.destination_after:.1f}"
            )
        actions.append(
            PlannedAction(
                kind=ActionKind.UNLOAD,
                bundle=unload.bundle,
                source=unload.broker,
                destination=destination,
                msg_rate=short.total_msg_rate,
                throughput=short.total_msg_throughput,
                reason=reason,
            )
        )
    if include_splits:
        actions.extend(_split_actions(load_data, config, namespace_bundle_counts, topics_by_bundle or {}))
    pairs: tuple[PairEvaluation, ...] = ()
    if isinstance(outcome, AvgShedderOutcome | PredictiveOutcome):
        pairs = outcome.pairs
    brokers = tuple(forecast(load_data, config, _moves(actions), usage_models))
    return PlanDocument(
        cluster=cluster,
        strategy=strategy.name,
        actions=tuple(actions),
        brokers=brokers,
        state_before=strategy.dump_state(strategy.load_state(state)),
        state_after=strategy.dump_state(outcome.state),
        pairs=pairs,
        notes=tuple(notes),
        usage_models=_usage_models_json(usage_models),
        predicted_moves=predicted_moves,
        balance=balance_report(strategy.name, config, load_data, brokers, pairs, notes, len(actions)),
        load_manager=config.load_manager_short_name,
    )


def _held_by_policies(
    bundle: str,
    broker: str,
    load_data: LoadData,
    config: PulsarConfig,
    session: PlacementSession,
    policies: ClusterPolicies,
) -> str | None:
    """`doLoadShedding`'s checks of an unload against the policies, before placing it: the note when one keeps the
    bundle on `broker`, else None."""
    namespace = namespace_of(bundle)
    candidates = allowed_brokers(load_data, namespace, policies, config.pulsar_version)
    if not set(candidates) - {broker}:
        found = isolation_policy(namespace, policies)
        why = (
            f"its isolation policy {found[0]} allows no other available broker"
            if found is not None
            else "no other broker that loads persistent topics is shared (primary in no isolation policy)"
        )
        return f"{bundle}: not unloaded from {broker}: {why} (shouldNamespacePoliciesUnload)"
    group = anti_affinity_group(namespace, policies)
    owned = owned_namespaces(load_data, session)
    if group is not None and not should_anti_affinity_namespace_unload(namespace, broker, candidates, policies, owned):
        return (
            f"{bundle}: not unloaded from {broker}: every broker {namespace} may go to holds as many namespaces of its "
            f"anti-affinity group {group} as {broker}, so it would come back (shouldAntiAffinityNamespaceUnload)"
        )
    return None


def _placed_with_policies(
    bundle: str,
    planned: str | None,
    load_data: LoadData,
    config: PulsarConfig,
    session: PlacementSession,
    policies: ClusterPolicies,
) -> tuple[str | None, str | None]:
    """Where an unload goes with the cluster's policies, and the note when they place it elsewhere than it would go
    without them. `planned`: the destination the strategy bound (kept while the policies allow it, else re-drawn by
    the pipeline); None: the pipeline places it (compared with its pick on the same draws without the policies)."""
    if planned is not None:
        if planned in policy_candidates(bundle, load_data, config, session, policies):
            return planned, None
        destination = select_broker(bundle, load_data, config, session, preallocate=False, policies=policies)
        why = _policy_objection(bundle, planned, load_data, config, session, policies)
        return destination, (
            f"{bundle}: planned for {planned}, which the cluster's policies forbid ({why}); Pulsar's placement "
            f"re-draws it: {destination or 'no broker'}"
        )
    shadow = copy.deepcopy(session)
    destination = select_broker(bundle, load_data, config, session, preallocate=False, policies=policies)
    without = select_broker(bundle, load_data, config, shadow, preallocate=False)
    if without is None or without == destination:
        return destination, None
    why = _policy_objection(bundle, without, load_data, config, session, policies)
    if not why:
        kept = policy_candidates(bundle, load_data, config, session, policies)
        why = f"they narrow its candidates to {', '.join(kept)}"
    return destination, f"{bundle}: placed on {destination}, not on {without} as without the cluster's policies: {why}"


def _policy_objection(
    bundle: str,
    broker: str,
    load_data: LoadData,
    config: PulsarConfig,
    session: PlacementSession,
    policies: ClusterPolicies,
) -> str:
    """Why the policies keep `broker` from the bundle's candidates ('' when they do not): its isolation, else its
    anti-affinity group."""
    namespace = namespace_of(bundle)
    loads = {b: report.persistent_topics_enabled for b, report in load_data.brokers.items()}
    refused = isolation_refusal(
        namespace, broker, sorted(load_data.brokers), policies, persistent_topics=loads, version=config.pulsar_version
    )
    if refused is not None:
        return refused
    kept = policy_candidates(bundle, load_data, config, session, policies)
    if broker in kept:
        return ""
    group = anti_affinity_group(namespace, policies)
    by = "its failure domain holds" if config.failure_domains_enabled and policies.failure_domains else "it holds"
    return f"{by} more namespaces of anti-affinity group {group} than {', '.join(kept)}"


def _moves(actions: Sequence[PlannedAction]) -> list[Move]:
    """The unloads with a destination: what the forecast moves."""
    return [
        Move(action.bundle, action.source, action.destination)
        for action in actions
        if action.kind is ActionKind.UNLOAD and action.destination
    ]


def _usage_models_json(usage_models: UsageModels | None) -> dict[str, Any] | None:
    return usage_models.to_json() if usage_models is not None else None


def make_transfer_plan(
    cluster: str,
    load_data: LoadData,
    extensible: ExtensibleLoadData,
    config: PulsarConfig,
    state: Mapping[str, Any] | None,
    *,
    now_millis: int,
    include_splits: bool = True,
    namespace_bundle_counts: Mapping[str, int] | None = None,
    topics_by_bundle: Mapping[str, Sequence[str]] | None = None,
    usage_models: UsageModels | None = None,
    requested_strategy: str | None = None,
    policies: ClusterPolicies | None = None,
) -> PlanDocument:
    """One planning run on a cluster of the extensible load manager: one TransferShedder cycle on `extensible`
    (its brokers' load data and top bundles) and one cycle of its split strategy; `load_data` (the same
    snapshot's reports and bundle averages) feeds the forecast. Every unload is a transfer to the destination
    TransferShedder chose. `requested_strategy`: the strategy the run was asked for (by its registry name).

    `policies`: the cluster's isolation policies, failure domains and anti-affinity groups as the snapshot read
    them. With them, each bundle TransferShedder would move is checked as Pulsar's `isTransferable` checks it
    (its policies, the destination through the broker filters) and an unload without a destination is placed
    among the brokers the filters leave; a bundle kept in place or placed elsewhere because of them gets a note.
    None (not read): planned without them."""
    strategy = shedding_strategy(transfer_shedder.NAME)
    before = strategy.load_state(state)
    grace = config.shedding_grace_period_millis
    recent = {bundle: at for bundle, at in extensible.recently_unloaded_bundles.items() if at >= now_millis - grace}
    extensible = extensible.model_copy(update={"recently_unloaded_bundles": recent})
    notes: list[str] = []
    if requested_strategy and requested_strategy != strategy.name:
        notes.append(
            f"the cluster runs the extensible load manager: planned with {strategy.name}, not {requested_strategy}"
        )
    declared = _extensible_cluster(load_data, extensible, config, policies) if policies is not None else None
    transferable = _transferable(extensible.available, declared) if declared is not None else None
    if declared is not None:
        notes.extend(_policy_notes(load_data, config, declared))
    if len(extensible.available) <= 1:
        # UnloadScheduler skips the cycle with one available broker; the strategy's counter stays as it was.
        outcome = transfer_shedder.TransferOutcome((), None, before, dict(extensible.recently_unloaded_brokers))
        notes.append(f"{len(extensible.available)} broker(s) available: Pulsar does not shed with fewer than two")
    else:
        outcome = strategy.run_extensible(extensible, config, before, now_millis, transferable)
        notes.extend(outcome.notes)
        notes.extend(outcome.held)
    # Without a transfer the bundle is placed when next looked up: at random among these brokers.
    placed_among = extensible_least_resource_usage.best_brokers(extensible.available, extensible.brokers, config)
    placements = (
        _policy_placements(outcome.decisions, extensible, config, declared, placed_among, notes)
        if declared is not None
        else {}
    )
    actions = [
        PlannedAction(
            kind=ActionKind.UNLOAD,
            bundle=decision.bundle,
            source=decision.source,
            destination=decision.destination,
            msg_rate=_current_msg_rate(load_data, decision.source, decision.bundle),
            throughput=decision.throughput,
            reason=f"{strategy.name} ({decision.reason.value}): from {decision.source}, the most loaded of its pair, "
            + (
                f"to {decision.destination}"
                if decision.destination
                else placements.get(
                    decision.bundle,
                    f"placed by {extensible_least_resource_usage.NAME} at random among {', '.join(placed_among)}",
                )
            ),
        )
        for decision in outcome.decisions
    ]
    split_hits = {broker: dict(counts) for broker, counts in outcome.state.split_hit_counts.items()}
    if include_splits:
        choices, split_hits = bundles_to_split(load_data.brokers, config, split_hits, namespace_bundle_counts)
        for choice in choices:
            stats = load_data.brokers[choice.broker].last_stats[choice.bundle]
            load = (stats.msg_rate_in + stats.msg_rate_out, stats.msg_throughput_in + stats.msg_throughput_out)
            reason = f"over the namespace bundle limit on {choice.reason} (the extensible split strategy)"
            actions.append(_split_action(choice.bundle, choice.broker, config, topics_by_bundle or {}, load, reason))
    after = dataclasses.replace(outcome.state, split_hit_counts=split_hits)
    brokers = tuple(forecast(load_data, config, _moves(actions), usage_models))
    splits = sum(action.kind is ActionKind.SPLIT for action in actions)
    return PlanDocument(
        cluster=cluster,
        strategy=strategy.name,
        actions=tuple(actions),
        brokers=brokers,
        state_before=strategy.dump_state(before),
        state_after=strategy.dump_state(after),
        notes=tuple(notes),
        usage_models=_usage_models_json(usage_models),
        balance=transfer_balance_report(outcome, config, brokers, splits),
        load_manager=config.load_manager_short_name,
    )


def _extensible_cluster(
    load_data: LoadData, extensible: ExtensibleLoadData, config: PulsarConfig, policies: ClusterPolicies
) -> ExtensibleCluster:
    """What the extensible load manager's filters read, from the snapshot: the bundles each broker owns (its
    reported bundles, idle ones too), its load data's topics, and its lookup data (load manager class, release,
    whether it loads persistent topics) as its report gave them; a release the snapshot lacks was not read."""
    owners = {
        bundle: broker
        for broker, report in sorted(load_data.brokers.items())
        for bundle in sorted(report.bundles | report.last_stats.keys())
    }
    reports = load_data.brokers
    return ExtensibleCluster(
        config=config,
        policies=policies,
        owners=owners,
        topics={broker: data.topics for broker, data in extensible.brokers.items()},
        load_manager_classes={broker: report.load_manager_class_name for broker, report in reports.items()},
        versions={
            broker: report.broker_version_string
            for broker, report in reports.items()
            if report.broker_version_string is not None
        },
        persistent_topics={broker: report.persistent_topics_enabled for broker, report in reports.items()},
    )


def _transferable(available: Sequence[str], cluster: ExtensibleCluster) -> transfer_shedder.Transferable:
    def refusal(bundle: str, source: str, destination: str) -> str | None:
        return transfer_refusal(bundle, source, destination, available, cluster)

    return refusal


def _policy_notes(load_data: LoadData, config: PulsarConfig, cluster: ExtensibleCluster) -> list[str]:
    """What the policies keep off the table before the cycle: the busiest bundles TopKBundles leaves out, and the
    version filter when the brokers' releases were not read."""
    notes = [
        f"{broker}: {len(bundles)} of its busiest bundles are not shed, their namespaces have isolation or "
        f"anti-affinity policies and loadBalancerSheddingBundlesWithPoliciesEnabled is false: {', '.join(bundles)}"
        for broker, bundles in bundles_kept_off_the_top(load_data.brokers, config, cluster.policies).items()
    ]
    if config.prefer_later_versions and not set(load_data.brokers) <= set(cluster.versions):
        notes.append("preferLaterVersions is on but the brokers' releases were not read: planned without the filter")
    return notes


def _policy_placements(
    decisions: Sequence[transfer_shedder.TransferDecision],
    extensible: ExtensibleLoadData,
    config: PulsarConfig,
    cluster: ExtensibleCluster,
    without_policies: Sequence[str],
    notes: list[str],
) -> dict[str, str]:
    """Per unload without a destination, where its next lookup places it (`selectAsync`: the broker filters, then
    LeastResourceUsageWithWeight), on the ownership the cycle leaves (its unloaded bundles owned by nobody); a note
    for each bundle the filters place elsewhere than they would without the policies."""
    unloaded = {decision.bundle for decision in decisions if decision.destination is None}
    after = dataclasses.replace(
        cluster, owners={bundle: owner for bundle, owner in cluster.owners.items() if bundle not in unloaded}
    )
    name = extensible_least_resource_usage.NAME
    placements = {}
    for bundle in sorted(unloaded):
        filtered = placement_candidates(bundle, extensible.available, after)
        removed = "; ".join(f"{broker}: {filtered.why_not(broker)}" for broker in sorted(filtered.removed_by))
        if not filtered.candidates:
            placements[bundle] = "and no broker passes Pulsar's filters for it: its next lookup finds no owner"
            notes.append(f"{bundle}: no broker may own it after the unload ({removed})")
            continue
        best = extensible_least_resource_usage.best_brokers(filtered.candidates, extensible.brokers, config)
        placements[bundle] = f"placed by {name} at random among {', '.join(best)}"
        if best != list(without_policies):
            notes.append(f"{bundle}: placed among {', '.join(best)} by the broker filters ({removed})")
    return placements


def _current_msg_rate(load_data: LoadData, broker: str, bundle: str) -> float | None:
    """The bundle's msg/s as its broker last reported it; None when it reported no stats for it (not measured)."""
    stats = load_data.brokers[broker].last_stats.get(bundle) if broker in load_data.brokers else None
    return stats.msg_rate_in + stats.msg_rate_out if stats is not None else None


def _single_broker_plan(
    cluster: str,
    strategy: str,
    state: dict[str, Any],
    load_data: LoadData,
    config: PulsarConfig,
    usage_models: UsageModels | None,
) -> PlanDocument:
    brokers = tuple(forecast(load_data, config, [], usage_models))
    notes = (f"{len(load_data.brokers)} broker(s) reported: Pulsar neither sheds nor splits with fewer than two",)
    return PlanDocument(
        cluster=cluster,
        strategy=strategy,
        actions=(),
        brokers=brokers,
        state_before=state,
        state_after=state,
        notes=notes,
        usage_models=_usage_models_json(usage_models),
        balance=balance_report(strategy, config, load_data, brokers, (), notes, 0),
        load_manager=config.load_manager_short_name,
    )
