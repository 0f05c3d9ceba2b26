"""The replay's consistency check: the plans that ran live in a window, planned again from the recording.

A replay's own offline plans run on the simulated cluster, whose ownership is the replay's own from its first move on,
so they cannot be compared with the live plans move for move. What can be: for each live plan of a strategy, the same
planner (`planner.plan.cluster_plan.plan_cluster`, which the Spark job calls) on the inputs rebuilt from what was
recorded when it ran:

- the load of the snapshot it planned, with Pulsar's 10/1000-sample bundle averages replayed over the recorded samples
  (`planner.collect.collector.load_data_for_snapshot`);
- the brokers' usage models fitted on the recorded reports of the history window before it (the plan job's default
  window), and on the extensible load manager their weightedMaxEMA and throughput history;
- the strategy state it read (its `stateBefore`), the team's settings it recorded (its cluster view's `team` values),
  the cluster's declarations and bundle boundaries archived with the snapshot;
- the bundles (and source brokers) whose unloads had been applied before it ran, from the execution records.

Equal means the same unloads (bundle, source, destination) and splits (bundle, source, algorithm). Splits are compared
only when the live plan has some: whether a run asked for splits is not recorded. What the check cannot reproduce is
said per plan: an executed unload the next snapshot shows was not applied, a strategy state that is not the one the
previous replanned plan left (another run committed in between), a plan whose snapshot is not published.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from planner.actions import ActionKind
from planner.audit.plan_records import StoredPlan, show_plan
from planner.audit.replays import LiveConsistency, LivePlanResult
from planner.collect.collector import load_data_for_snapshot
from planner.errors import InputError, NotFoundError
from planner.lifecycle import APPLIED_ATTEMPT_STATUSES
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.document import ConfigSource, PlanDocument, PlannedAction
from planner.plan.request import DEFAULT_HISTORY, ClusterInputs
from planner.plan.usage_model import planning_models
from planner.samples.dataset import read_samples
from planner.simulator.replay import RecordedHistory
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.plans import applied_unloads_before, list_plans, recently_unloaded_brokers
from planner.store.snapshots import archive_declarations, published_snapshot, read_archive, unpublished_snapshot_ids

# A week of plans every few minutes, with room: the window's plans are all read.
MOST_PLANS = 100_000


@dataclass(frozen=True, slots=True, order=True)
class ActionKey:
    """What makes two planned actions the same: the admin call and where it sends the bundle."""

    kind: str
    bundle: str
    source: str
    destination: str | None
    split_algorithm: str | None

    @classmethod
    def of(cls, action: PlannedAction) -> ActionKey:
        return cls(action.kind.value, action.bundle, action.source, action.destination, action.split_algorithm)

    def text(self) -> str:
        if self.kind == ActionKind.UNLOAD.value:
            return f"unload {self.bundle} {self.source} -> {self.destination}"
        return f"{self.kind} {self.bundle} on {self.source} ({self.split_algorithm})"


def action_keys(actions: Sequence[PlannedAction], *, splits: bool = True) -> tuple[ActionKey, ...]:
    """The actions as compared, sorted (a plan's order is its strategy's, not part of what it does)."""
    return tuple(sorted(ActionKey.of(a) for a in actions if splits or a.kind is ActionKind.UNLOAD))


@dataclass(frozen=True, slots=True)
class LivePlanCheck:
    """One live plan against its replanning from the recording."""

    plan: int
    strategy: str
    created_at: datetime
    minute: int  # the replay's minute it ran in
    snapshot: int | None
    status: str
    live: tuple[ActionKey, ...]
    replayed: tuple[ActionKey, ...] | None  # None: it could not be replanned (`notes` says why)
    notes: tuple[str, ...] = ()
    not_applied: tuple[str, ...] = ()  # executed unloads the recording shows did not take effect

    @property
    def checked(self) -> bool:
        return self.replayed is not None

    @property
    def equal(self) -> bool:
        return self.replayed is not None and self.live == self.replayed

    def to_json(self) -> dict[str, Any]:
        live, replayed = set(self.live), set(self.replayed or ())
        return {
            "plan": self.plan,
            "strategy": self.strategy,
            "createdAt": self.created_at.isoformat(),
            "minute": self.minute,
            "snapshot": self.snapshot,
            "status": self.status,
            "checked": self.checked,
            "equal": self.equal,
            "live": [key.text() for key in self.live],
            "onlyLive": [key.text() for key in sorted(live - replayed)] if self.checked else [],
            "onlyReplayed": [key.text() for key in sorted(replayed - live)],
            "notes": list(self.notes),
            "notApplied": list(self.not_applied),
        }


@dataclass(frozen=True, slots=True)
class LiveCheck:
    """Every live plan of the window, checked; consistent when each one that could be replanned is equal."""

    cluster: str
    plans: tuple[LivePlanCheck, ...] = field(default_factory=tuple)

    @property
    def checked(self) -> int:
        return sum(plan.checked for plan in self.plans)

    @property
    def consistent(self) -> bool:
        return all(plan.equal for plan in self.plans if plan.checked)

    def record(self) -> LiveConsistency:
        """As the stored replay keeps it."""
        return LiveConsistency(
            consistent=self.consistent,
            checked=self.checked,
            equal=sum(plan.equal for plan in self.plans),
            results=tuple(
                LivePlanResult(
                    plan=plan.plan,
                    strategy=plan.strategy,
                    created_at=plan.created_at,
                    checked=plan.checked,
                    equal=plan.equal,
                    only_live=tuple(plan.to_json()["onlyLive"]),
                    only_replayed=tuple(plan.to_json()["onlyReplayed"]),
                    notes=plan.notes,
                    not_applied=plan.not_applied,
                )
                for plan in self.plans
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "consistent": self.consistent,
            "plans": len(self.plans),
            "checked": self.checked,
            "equal": sum(plan.equal for plan in self.plans),
            "strategies": sorted({plan.strategy for plan in self.plans}),
            "results": [plan.to_json() for plan in self.plans],
        }


def team_settings(document: PlanDocument) -> dict[str, Any]:
    """The team's explicit settings a plan recorded using (its cluster view's `team` values)."""
    view = document.cluster_view
    if view is None:
        return {}
    return {value.key: value.value for value in view.configuration if value.source is ConfigSource.TEAM}


def _millis(moment: datetime) -> int:
    return int(as_utc(moment).timestamp() * 1000)


def replan(store: Store, root: str | Path, stored: StoredPlan) -> PlanDocument:
    """The live plan made again from the recording (see the module's list of inputs)."""
    document, cluster = stored.document, stored.cluster
    if stored.snapshot_id is None:
        raise InputError(f"plan {stored.id}: snapshot: none recorded")
    snapshot = published_snapshot(store, stored.snapshot_id)
    archive = read_archive(snapshot.archive_path)
    as_of = stored.created_at_utc
    recent = applied_unloads_before(store, cluster, as_of)
    load_data = load_data_for_snapshot(store, root, snapshot.id)
    load_data = load_data.model_copy(update={"recently_unloaded_bundles": recent})
    rows = read_samples(
        root,
        "brokers",
        cluster,
        after=as_of - DEFAULT_HISTORY,
        up_to_snapshot=snapshot.id,
        exclude=unpublished_snapshot_ids(store, cluster),
    )
    columns = rows.to_pydict()
    # The rows run up to the plan's snapshot, as the job's did when it planned.
    models = planning_models(columns) if rows.num_rows else None
    weighted: dict[str, float | None] = {}
    throughput: dict[str, list[tuple[int, float]]] = {}
    for index, broker in enumerate(columns.get("broker", [])):
        ema = columns["weighted_max_ema"][index]
        if columns["snapshot_id"][index] == snapshot.id:
            weighted[broker] = ema
        if ema is not None:
            total = columns["msg_throughput_in"][index] + columns["msg_throughput_out"][index]
            throughput.setdefault(broker, []).append((columns["snapshot_id"][index], total))
    splits = any(action.kind is not ActionKind.UNLOAD for action in document.actions)
    inputs = ClusterInputs(
        state=document.state_before,
        settings=team_settings(document),
        recently_unloaded_bundles=recent,
        namespace_bundle_counts={ns: len(b) - 1 for ns, b in archive.get("bundleBoundaries", {}).items()},
        include_splits=splits,
        load_manager=snapshot.load_manager,
        recently_unloaded_brokers=recently_unloaded_brokers(store, cluster, as_of),
        declarations=archive_declarations(archive, snapshot.id),
    )
    load = ClusterLoad(load_data, snapshot.id, weighted, throughput)
    return plan_cluster(cluster, load, inputs, document.strategy, now_millis=_millis(as_of), usage_models=models)


def recorded_owner(history: RecordedHistory, snapshot: int, bundle: str) -> str | None:
    """The broker that reported the bundle in that snapshot of the history (the last row when two did, mid-move).

    Looked up in the table's columns: a week of a large cluster has millions of rows, and a check asks a few."""
    table = history.bundles
    found = pc.and_(pc.equal(table.column("snapshot_id"), snapshot), pc.equal(table.column("bundle"), bundle))
    rows = table.filter(found)
    return rows.column("broker")[-1].as_py() if rows.num_rows else None


def not_applied(
    stored: StoredPlan, times: Mapping[int, datetime], owner_of: Callable[[int, str], str | None]
) -> tuple[str, ...]:
    """The plan's unloads that were executed but that the first snapshot after them (`times`: each snapshot's) shows
    elsewhere than their destination (moved again by Pulsar, the executor's answer lost, a broker restarted)."""
    order = sorted(times.items(), key=lambda item: as_utc(item[1]))
    found = []
    for action, attempts in zip(stored.document.actions, stored.attempts, strict=True):
        applied = [a for a in attempts if a.status in APPLIED_ATTEMPT_STATUSES and a.finished_at is not None]
        if action.kind is not ActionKind.UNLOAD or not applied:
            continue
        finished = as_utc(applied[-1].finished_at or stored.created_at)
        first = next((snapshot for snapshot, taken in order if as_utc(taken) > finished), None)
        owner = owner_of(first, action.bundle) if first is not None else None
        if owner is not None and owner != action.destination:
            found.append(f"{action.bundle}: planned to {action.destination}, on {owner} at snapshot {first}")
    return tuple(found)


def check_live_plans(
    store: Store, root: str | Path, history: RecordedHistory, start: datetime, end: datetime
) -> LiveCheck:
    """Every strategy plan of the cluster made from `start` to `end`, replanned from the recording, oldest first."""
    listed = [
        plan for plan in list_plans(store, history.cluster, limit=MOST_PLANS) if start <= as_utc(plan.created_at) <= end
    ]
    checks: list[LivePlanCheck] = []
    state_after: dict[str, Mapping[str, Any]] = {}
    times, owner_of = history.taken_at, partial(recorded_owner, history)
    for listing in sorted(listed, key=lambda plan: plan.id):
        stored = show_plan(store, listing.id)
        document = stored.document
        if document.maintenance is not None:
            continue  # drains and fills: asked for by a person, not a strategy's decision
        minute = history.minute_of(stored.created_at_utc)
        notes: list[str] = []
        previous = state_after.get(document.strategy)
        if previous is not None and dict(previous) != document.state_before:
            notes.append("its strategy state is not the one the previous replanned plan left: another run committed")
        splits = any(action.kind is not ActionKind.UNLOAD for action in document.actions)
        replayed: tuple[ActionKey, ...] | None = None
        try:
            again = replan(store, root, stored)
        except (InputError, NotFoundError) as error:
            notes.append(f"not replanned: {error}")
        else:
            replayed = action_keys(again.actions, splits=splits)
            state_after[document.strategy] = again.state_after
        checks.append(
            LivePlanCheck(
                plan=stored.id,
                strategy=document.strategy,
                created_at=stored.created_at_utc,
                minute=minute,
                snapshot=stored.snapshot_id,
                status=stored.status.value,
                live=action_keys(document.actions, splits=splits),
                replayed=replayed,
                notes=tuple(notes),
                not_applied=not_applied(stored, times, owner_of),
            )
        )
    return LiveCheck(history.cluster, tuple(checks))
