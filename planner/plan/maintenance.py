"""Maintenance plans: drain named brokers (before decommissioning or an upgrade), fill named or newly joined
ones (after a scale-out). Pure, like the strategies: LoadData in, a plan out.

Both place bundles on predicted load (`planner.plan.forecast`: the short-term averages move with a bundle,
resource usage changes by each broker's usage model). They balance message rate, in and out, which is what
moves with a bundle and what the forecast predicts best, and guard resources: a destination whose predicted
score would pass the overload threshold (`loadBalancerBrokerOverloadedThresholdPercentage`) is taken only when
no broker stays below it, and then the plan says, before anyone approves, that the cluster lacks the capacity.

Heartbeat and SLA-monitor bundles never move: Pulsar pins them to their broker.

With the cluster's policies (`planner.pulsar.policies`), each destination is one the executor's check at execution
time accepts (`destination_refusal`): one the namespace isolation policies allow (a broker still fenced by an earlier
drain takes nothing; a fill lifts its targets' fences first, as the executor does), and for a namespace in an
anti-affinity group, one Pulsar's anti-affinity filter keeps on the ownership the plan's earlier moves leave (the
executor sends them in order). A bundle no broker may take stays where it is, and each bundle the policies keep in
place or send elsewhere than the plan would without them gets a note.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import ValidationError

from planner.actions import ActionKind
from planner.errors import InputError, format_validation_error
from planner.plan.document import MaintenanceDocument, PlanDocument, PlannedAction, ScaleEventRef
from planner.plan.forecast import BrokerLoad, Move, after_move, bundle_traffic, forecast, starting_loads
from planner.plan.usage_model import ResourceFit, UsageModels, resolved_models
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.load_manager_shared import is_pinned_namespace
from planner.pulsar.model import LoadData
from planner.pulsar.policies import (
    anti_affinity_group,
    group_counts,
    isolation_candidates,
    isolation_policy,
    isolation_refusal,
    spread_destinations,
    without_fences,
)


class MaintenanceMode(StrEnum):
    DRAIN = "drain"
    FILL = "fill"


DEFAULT_MAX_MOVES = 200


@dataclass(frozen=True, slots=True)
class MaintenanceRequest:
    """What the operator asked for: the mode, the brokers (fill: none means the brokers owning no bundle),
    and the most unloads one fill plan may hold (a drain moves every bundle)."""

    mode: MaintenanceMode
    brokers: tuple[str, ...] = ()
    max_moves: int | None = None
    scale_event: ScaleEventRef | None = None  # the scale event it answers (`planner.plan.scale_events`)

    @classmethod
    def parse(cls, document: Mapping[str, object], what: str) -> MaintenanceRequest:
        mode = document.get("mode")
        if mode not in {m.value for m in MaintenanceMode}:
            raise InputError(f"{what}: mode {mode!r} is not one of {', '.join(m.value for m in MaintenanceMode)}")
        brokers = document.get("brokers") or []
        if not isinstance(brokers, list) or not all(isinstance(b, str) and b for b in brokers):
            raise InputError(f"{what}: brokers must be a list of broker ids, got {brokers!r}")
        max_moves = document.get("maxMoves")
        if max_moves is not None and (not isinstance(max_moves, int) or max_moves < 1):
            raise InputError(f"{what}: maxMoves must be a positive integer, got {max_moves!r}")
        event = document.get("scaleEvent")
        scale_event = None
        if event is not None:
            try:
                scale_event = ScaleEventRef.model_validate(event)
            except ValidationError as error:
                raise InputError(format_validation_error(error, f"{what} scaleEvent")) from None
        return cls(MaintenanceMode(mode), tuple(brokers), max_moves, scale_event)

    def to_json(self) -> dict[str, object]:
        document: dict[str, object] = {
            "mode": self.mode.value,
            "brokers": list(self.brokers),
            "maxMoves": self.max_moves,
        }
        if self.scale_event is not None:
            document["scaleEvent"] = self.scale_event.to_json()
        return document


def _msg_rate(load: BrokerLoad) -> float:
    return load.traffic.msg_rate_in + load.traffic.msg_rate_out


def _owned(load_data: LoadData, broker: str, owned: Mapping[str, Sequence[str]] | None = None) -> set[str]:
    """The broker's bundles: those its load report has stats for, and those the admin API lists (idle ones)."""
    return set(load_data.brokers[broker].last_stats) | set((owned or {}).get(broker, ()))


def _movable(load_data: LoadData, broker: str, owned: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The broker's bundles a plan may move, the busiest first (ties by name, so plans are reproducible)."""
    bundles = [bundle for bundle in _owned(load_data, broker, owned) if not is_pinned_namespace(namespace_of(bundle))]
    return sorted(bundles, key=lambda bundle: (-_bundle_rate(load_data, bundle), bundle))


def _bundle_rate(load_data: LoadData, bundle: str) -> float:
    traffic = bundle_traffic(load_data, bundle)
    return traffic.msg_rate_in + traffic.msg_rate_out


def _unknown_brokers(load_data: LoadData, brokers: Sequence[str], cluster: str, mode: MaintenanceMode) -> None:
    unknown = [broker for broker in brokers if broker not in load_data.brokers]
    if unknown:
        known = ", ".join(sorted(load_data.brokers)) or "none"
        raise InputError(
            f"{mode.value} of cluster {cluster!r}: broker {', '.join(map(repr, unknown))} is not one of the brokers "
            f"in its latest snapshot ({known})"
        )


class _Placement:
    """Predicted loads while a plan's moves are chosen one by one."""

    def __init__(self, load_data: LoadData, config: PulsarConfig, usage_models: UsageModels | None) -> None:
        self.load_data, self.config = load_data, config
        self.fits: dict[str, dict[str, ResourceFit]] = resolved_models(load_data, usage_models)
        self.loads: dict[str, BrokerLoad] = starting_loads(load_data, self.fits)
        self.moves: list[Move] = []

    def after(self, move: Move) -> dict[str, BrokerLoad]:
        return after_move(self.loads, move, bundle_traffic(self.load_data, move.bundle), self.fits)

    def score(self, loads: Mapping[str, BrokerLoad], broker: str) -> float:
        return loads[broker].score(self.config.resource_weights)

    def apply(self, move: Move) -> None:
        self.loads = self.after(move)
        self.moves.append(move)

    @property
    def threshold(self) -> float:
        return self.config.overload_threshold * 100


class _Policies:
    """The cluster's policies while a maintenance plan's moves are chosen: the destinations they allow each bundle
    on the ownership the plan's earlier moves leave. Isolation candidates are kept per namespace (the brokers do not
    change within a plan), anti-affinity counts per group until a bundle of a grouped namespace moves."""

    def __init__(
        self, load_data: LoadData, config: PulsarConfig, policies: ClusterPolicies, owners: dict[str, str]
    ) -> None:
        self.config, self.policies, self.owners = config, policies, owners
        self.brokers = sorted(load_data.brokers)
        self.loads = {broker: report.persistent_topics_enabled for broker, report in load_data.brokers.items()}
        self._candidates: dict[str, list[str]] = {}
        self._counts: dict[str, dict[str, int] | None] = {}

    def candidates(self, namespace: str) -> list[str]:
        """`applyNamespacePolicies` over every broker of the snapshot (those being drained too: they are up)."""
        if namespace not in self._candidates:
            self._candidates[namespace] = isolation_candidates(
                namespace, self.brokers, self.policies, persistent_topics=self.loads, version=self.config.pulsar_version
            )
        return self._candidates[namespace]

    def destinations(self, bundle: str, leaving: Collection[str] = ()) -> list[str]:
        """The brokers the policies let take `bundle` from its owner: its isolation candidates but `leaving` (the
        brokers a drain empties), then those keeping its anti-affinity group spread."""
        namespace = namespace_of(bundle)
        candidates = [broker for broker in self.candidates(namespace) if broker not in leaving]
        group = anti_affinity_group(namespace, self.policies)
        if group is None or not candidates:
            return [broker for broker in candidates if broker != self.owners.get(bundle)]
        if group not in self._counts:
            self._counts[group] = group_counts(namespace, self.policies, self.owners, self.config)
        return spread_destinations(self.owners.get(bundle), candidates, self._counts[group], self.policies, self.config)

    def why_not(self, bundle: str, broker: str, leaving: Collection[str] = ()) -> str:
        """Why the policies keep `broker` from taking `bundle` (naming the policy), for the plan's notes."""
        namespace = namespace_of(bundle)
        refused = isolation_refusal(
            namespace,
            broker,
            self.brokers,
            self.policies,
            persistent_topics=self.loads,
            version=self.config.pulsar_version,
        )
        if refused is not None:
            return refused
        kept = self.destinations(bundle, leaving)
        group = anti_affinity_group(namespace, self.policies)
        return f"{broker} holds more of anti-affinity group {group} than {', '.join(kept)}"

    def why_stays(self, bundle: str, leaving: Collection[str]) -> str:
        """Why no broker but `leaving` may take `bundle` (naming the policy), for the plan's notes."""
        found = isolation_policy(namespace_of(bundle), self.policies)
        if found is not None:
            return f"its isolation policy {found[0]} allows no broker that stays"
        return "no broker that stays is shared (primary in no isolation policy) and loads persistent topics"

    def move(self, bundle: str, destination: str) -> None:
        self.owners[bundle] = destination
        if anti_affinity_group(namespace_of(bundle), self.policies) is not None:
            self._counts.clear()  # a group's counts changed


def _owners(load_data: LoadData, owned: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """Bundle -> owner over every broker's bundles (`_owned`), as the policies' anti-affinity counts read them."""
    return {
        bundle: broker for broker in sorted(load_data.brokers) for bundle in sorted(_owned(load_data, broker, owned))
    }


def _result(
    cluster: str,
    request: MaintenanceRequest,
    placement: _Placement,
    actions: list[PlannedAction],
    notes: list[str],
    usage_models: UsageModels | None,
    over_capacity: Collection[str] = (),
) -> PlanDocument:
    return PlanDocument(
        cluster=cluster,
        strategy=request.mode.value,
        actions=tuple(actions),
        brokers=tuple(forecast(placement.load_data, placement.config, placement.moves, usage_models)),
        notes=tuple(notes),
        usage_models=usage_models.to_json() if usage_models is not None else None,
        maintenance=MaintenanceDocument(
            mode=request.mode.value,
            brokers=list(request.brokers),
            max_moves=request.max_moves,
            over_capacity=sorted(over_capacity),
        ),
        load_manager=placement.config.load_manager_short_name,
    )


def _unload(placement: _Placement, move: Move, reason: str) -> PlannedAction:
    traffic = bundle_traffic(placement.load_data, move.bundle)
    # A bundle the load reports leave out (idle, listed by the admin API only) is placed as moving nothing, but its
    # traffic was not measured: the action says so rather than claim a measured zero.
    measured = move.bundle in placement.load_data.bundle_data
    placement.apply(move)
    return PlannedAction(
        kind=ActionKind.UNLOAD,
        bundle=move.bundle,
        source=move.source,
        destination=move.destination,
        msg_rate=traffic.msg_rate_in + traffic.msg_rate_out if measured else None,
        throughput=traffic.throughput_in + traffic.throughput_out if measured else None,
        reason=reason,
    )


def drain_plan(
    cluster: str,
    load_data: LoadData,
    config: PulsarConfig,
    brokers: Sequence[str],
    usage_models: UsageModels | None = None,
    owned: Mapping[str, Sequence[str]] | None = None,
    policies: ClusterPolicies | None = None,
) -> PlanDocument:
    """Every movable bundle of `brokers` onto the others, the busiest first, each to the broker whose predicted
    message rate after it is lowest among those staying below the overload threshold (ties: the fewest bundles
    planned onto it). `owned`: each broker's bundles as the admin API lists them, idle ones included, which load
    reports leave out; they move too, with no traffic. `policies`: the cluster's (None: not read); with them each
    bundle goes only where they allow, or stays."""
    mode = MaintenanceMode.DRAIN
    if not brokers:
        raise InputError(f"drain of cluster {cluster!r}: name the brokers to drain")
    _unknown_brokers(load_data, brokers, cluster, mode)
    draining = set(brokers)
    remaining = sorted(set(load_data.brokers) - draining)
    if not remaining:
        raise InputError(f"drain of cluster {cluster!r}: it would leave no broker to take the bundles")
    placement = _Placement(load_data, config, usage_models)
    bundles = sorted(
        {(bundle, broker) for broker in sorted(draining) for bundle in _movable(load_data, broker, owned)},
        key=lambda item: (-_bundle_rate(load_data, item[0]), item[0]),
    )
    actions, over, planned = [], set(), dict.fromkeys(remaining, 0)
    guard = _Policies(load_data, config, policies, _owners(load_data, owned)) if policies is not None else None
    policy_notes: list[str] = []
    for bundle, source in bundles:
        options = []
        for destination in remaining:
            loads = placement.after(Move(bundle, source, destination))
            score = placement.score(loads, destination)
            rate = _msg_rate(loads[destination])
            options.append((score > placement.threshold, rate, planned[destination], score, destination))
        if guard is not None:
            allowed = set(guard.destinations(bundle, draining))
            unbound = min(options)[-1]
            options = [option for option in options if option[-1] in allowed]
            if not options:
                policy_notes.append(f"{bundle}: stays on {source}: {guard.why_stays(bundle, draining)}")
                continue
        too_high, _, _, score, destination = min(options)
        if guard is not None:
            if destination != unbound:
                why = guard.why_not(bundle, unbound, draining)
                policy_notes.append(
                    f"{bundle}: to {destination}, not {unbound} as without the cluster's policies: {why}"
                )
            guard.move(bundle, destination)
        planned[destination] += 1
        if too_high:
            over.add(destination)
        reason = f"drain {source}: to {destination}, predicted {score:.1f} points after"
        actions.append(_unload(placement, Move(bundle, source, destination), reason))
    pinned = sum(len(_owned(load_data, b, owned)) for b in draining) - len(bundles)
    held = len(bundles) - len(actions)
    notes = [
        f"drain {', '.join(sorted(draining))}: {len(actions)} bundles, "
        f"{sum(a.msg_rate or 0.0 for a in actions):.1f} msg/s onto {len(remaining)} brokers"
        + (f"; {pinned} heartbeat/SLA-monitor bundles stay (Pulsar pins them to their broker)" if pinned else "")
        + (f"; {held} bundles stay: no broker that stays may own them under the cluster's policies" if held else ""),
        *policy_notes,
    ]
    if over:
        notes.append(
            f"capacity: the remaining brokers cannot take the load below the overload threshold "
            f"({placement.threshold:.0f}%): predicted over it: "
            + ", ".join(f"{b} {placement.score(placement.loads, b):.1f}%" for b in sorted(over))
        )
    request = MaintenanceRequest(mode, tuple(sorted(draining)))
    return _result(cluster, request, placement, actions, notes, usage_models, over)


def _fill_targets(load_data: LoadData, brokers: Sequence[str]) -> list[str]:
    if brokers:
        return sorted(set(brokers))
    return sorted(broker for broker in load_data.brokers if not _movable(load_data, broker))


def fill_plan(
    cluster: str,
    load_data: LoadData,
    config: PulsarConfig,
    brokers: Sequence[str],
    max_moves: int = DEFAULT_MAX_MOVES,
    usage_models: UsageModels | None = None,
    policies: ClusterPolicies | None = None,
) -> PlanDocument:
    """Bring `brokers` (none named: those owning no movable bundle, the newly joined) up to the cluster's
    balanced share of message rate in one plan: repeatedly, the least loaded of them takes from the busiest
    other broker the bundle that brings both closest to the share, until no move improves or `max_moves`.
    `policies`: the cluster's (None: not read); with them a target takes only the bundles they allow it, its own
    drain fence lifted as the executor lifts it."""
    mode = MaintenanceMode.FILL
    _unknown_brokers(load_data, brokers, cluster, mode)
    targets = _fill_targets(load_data, brokers)
    if not targets:
        raise InputError(f"fill of cluster {cluster!r}: no broker owns nothing; name the brokers to fill")
    donors = sorted(set(load_data.brokers) - set(targets))
    if not donors:
        raise InputError(f"fill of cluster {cluster!r}: every broker is to be filled; nothing to take bundles from")
    placement = _Placement(load_data, config, usage_models)
    share = sum(_msg_rate(load) for load in placement.loads.values()) / len(placement.loads)
    moved: set[str] = set()
    actions: list[PlannedAction] = []
    guard = (
        _Policies(load_data, config, without_fences(policies, targets), _owners(load_data))
        if policies is not None
        else None
    )
    policy_notes: dict[str, str] = {}
    while len(actions) < max_moves:
        target = min(targets, key=lambda b: (_msg_rate(placement.loads[b]), b))
        gap = share - _msg_rate(placement.loads[target])
        best = None
        refused: tuple[float, str] | None = None  # the best move the policies forbid, for the note
        for donor in sorted(donors, key=lambda b: (-_msg_rate(placement.loads[b]), b)):
            surplus = _msg_rate(placement.loads[donor]) - share
            for bundle in _movable(load_data, donor):
                rate = _bundle_rate(load_data, bundle)
                if bundle in moved or rate <= 0:
                    continue
                # The imbalance of the two brokers after the move, against before: it must shrink.
                after = abs(gap - rate) + abs(surplus - rate)
                if after >= abs(gap) + abs(surplus) - 1e-9:
                    continue
                move = Move(bundle, donor, target)
                if placement.score(placement.after(move), target) > placement.threshold:
                    continue
                if guard is not None and target not in guard.destinations(bundle):
                    if refused is None or after < refused[0]:
                        refused = (after, bundle)
                    continue
                if best is None or after < best[0]:
                    best = (after, move)
            if best is not None:
                break  # the busiest donor that has a fitting bundle gives
        if guard is not None and refused is not None and (best is None or refused[0] < best[0]):
            policy_notes.setdefault(
                refused[1], f"{refused[1]}: not moved to {target}: {guard.why_not(refused[1], target)}"
            )
        if best is None:
            break
        move = best[1]
        moved.add(move.bundle)
        if guard is not None:
            guard.move(move.bundle, move.destination)
        reason = f"fill {target}: from {move.source}, towards the balanced share of {share:.1f} msg/s"
        actions.append(_unload(placement, move, reason))
    notes = [
        f"fill {', '.join(targets)}: balanced share {share:.1f} msg/s per broker; predicted after: "
        + ", ".join(f"{b} {_msg_rate(placement.loads[b]):.1f}" for b in targets)
    ]
    if len(actions) >= max_moves:
        notes.append(f"the move budget ({max_moves}) ran out before every target reached its share")
    notes.extend(policy_notes.values())
    request = MaintenanceRequest(mode, tuple(targets), max_moves)
    return _result(cluster, request, placement, actions, notes, usage_models)


def maintenance_plan(
    cluster: str,
    load_data: LoadData,
    config: PulsarConfig,
    request: MaintenanceRequest,
    usage_models: UsageModels | None = None,
    owned: Mapping[str, Sequence[str]] | None = None,
    policies: ClusterPolicies | None = None,
) -> PlanDocument:
    """The drain or fill `request` asks for; `policies`: the cluster's (None: not read, planned without them)."""
    if request.mode is MaintenanceMode.DRAIN:
        plan = drain_plan(cluster, load_data, config, request.brokers, usage_models, owned, policies)
    else:
        budget = request.max_moves or DEFAULT_MAX_MOVES
        plan = fill_plan(cluster, load_data, config, request.brokers, budget, usage_models, policies)
    if request.scale_event is None or plan.maintenance is None:
        return plan
    # The scale event it answers, for the approval policies and the pages (not hashed: it moves nothing).
    maintenance = plan.maintenance.model_copy(update={"scale_event": request.scale_event})
    return plan.model_copy(update={"maintenance": maintenance})
