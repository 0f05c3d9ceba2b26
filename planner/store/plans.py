"""Plans in the store: committing a plan with its actions and the strategy's new state in one transaction, and
every read of a plan, its actions, their attempts and its measurements.

The state row carries a version. A plan run reads the state and its version; the commit stores the
new state only if the version is unchanged (optimistic concurrency), so two concurrent runs cannot
both count a hit. A retried commit of the same run (same run key) finds its plan already stored and
changes nothing.

The plan document is the planning stage's type (`planner.plan.document`), above the store: a commit takes anything
shaped like it (`PlanToCommit`), and a read gives its JSON as committed, for the caller to validate
(`planner.audit.plan_records.show_plan`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol, cast

from sqlalchemy import CursorResult, Select, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from planner.actions import ActionKind
from planner.errors import InputError, NotFoundError
from planner.lifecycle import APPLIED_ATTEMPT_STATUSES, AttemptStatus, PlanStatus
from planner.store.actions import ExecutableAction
from planner.store.approvals import RecordedDecision
from planner.store.clusters import cluster_row
from planner.store.database import Store
from planner.store.models import (
    ActionExecution,
    Approval,
    Cluster,
    Plan,
    PlanAction,
    PlanMeasurement,
    StrategyState,
    as_utc,
    audit_event,
    utc_now,
)


class StaleStateError(RuntimeError):
    """The strategy state changed since this plan run read it: another run committed first."""


@dataclass(frozen=True, slots=True)
class StoredState:
    state: dict[str, Any]
    version: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    plan_id: int
    created: bool  # False when the run had already been committed
    state_version: int


class ActionToCommit(Protocol):
    """What the store keeps of a planned action (`planner.plan.document.PlannedAction`)."""

    @property
    def kind(self) -> str: ...
    @property
    def bundle(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def destination(self) -> str | None: ...
    @property
    def split_algorithm(self) -> str | None: ...
    @property
    def split_positions(self) -> Sequence[int] | None: ...
    @property
    def msg_rate(self) -> float | None: ...
    @property
    def reason(self) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


class PlanToCommit(Protocol):
    """What the store keeps of a plan (`planner.plan.document.PlanDocument`)."""

    @property
    def cluster(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def actions(self) -> Sequence[ActionToCommit]: ...
    @property
    def actions_hash(self) -> str: ...
    @property
    def state_after(self) -> dict[str, Any]: ...
    def to_json(self) -> dict[str, Any]: ...


def read_state(store: Store, cluster: str, strategy: str) -> StoredState:
    """The strategy's stored state for a cluster; version 0 and an empty state before the first plan."""
    with store.session() as session:
        row = session.scalar(
            select(StrategyState).join(Cluster).where(Cluster.name == cluster, StrategyState.strategy == strategy)
        )
        return StoredState(dict(row.state), row.version) if row else StoredState({}, 0)


def commit_plan(
    store: Store,
    plan: PlanToCommit,
    *,
    admin_url: str,
    run_key: str,
    expected_version: int,
    snapshot_id: int | None = None,
    actor: str = "planner",
) -> CommitResult:
    with store.session() as session:
        existing = session.scalar(select(Plan).where(Plan.run_key == run_key))
        if existing is not None:
            return CommitResult(existing.id, False, existing.state_version)
        cluster_name, strategy, actions = plan.cluster, plan.strategy, plan.actions
        cluster = cluster_row(session, cluster_name, admin_url)
        state = session.scalar(
            select(StrategyState).where(StrategyState.cluster_id == cluster.id, StrategyState.strategy == strategy)
        )
        new_version = expected_version + 1
        if state is None:
            if expected_version != 0:
                raise StaleStateError(f"{cluster_name}/{strategy}: no stored state at version {expected_version}")
            session.add(
                StrategyState(cluster_id=cluster.id, strategy=strategy, version=new_version, state=plan.state_after)
            )
            try:
                session.flush()
            except IntegrityError as error:  # a concurrent first plan of this cluster inserted the state first
                raise StaleStateError(
                    f"{cluster_name}/{strategy}: another plan run stored the first state while this one ran"
                ) from error
        else:
            changed = cast(  # an UPDATE's result is a cursor's, with its row count
                "CursorResult[Any]",
                session.execute(
                    update(StrategyState)
                    .where(StrategyState.id == state.id, StrategyState.version == expected_version)
                    .values(version=new_version, state=plan.state_after, updated_at=utc_now())
                    .execution_options(synchronize_session=False)
                ),
            ).rowcount
            if changed != 1:
                raise StaleStateError(
                    f"{cluster_name}/{strategy}: state is at version {state.version}, this run read "
                    f"{expected_version}; another plan run committed first"
                )
        row = Plan(
            cluster_id=cluster.id,
            snapshot_id=snapshot_id,
            run_key=run_key,
            strategy=strategy,
            status=(PlanStatus.PENDING if actions else PlanStatus.EMPTY).value,
            actions_hash=plan.actions_hash,
            state_version=new_version,
            details=plan.to_json(),
        )
        session.add(row)
        session.flush()
        for sequence, action in enumerate(actions):
            session.add(
                PlanAction(
                    plan_id=row.id,
                    sequence=sequence,
                    kind=ActionKind(action.kind).value,
                    bundle=action.bundle,
                    source=action.source,
                    destination=action.destination,
                    split_algorithm=action.split_algorithm,
                    split_positions=list(action.split_positions) if action.split_positions is not None else None,
                    # The column cannot be null: an unmeasured msg/s is 0.0 here and null only in `details`.
                    traffic=action.msg_rate if action.msg_rate is not None else 0.0,
                    reason=action.reason,
                    details=action.to_json(),
                )
            )
        session.add(
            audit_event(
                cluster_name,
                actor,
                "plan.created",
                plan=row.id,
                actions=len(actions),
                strategy=strategy,
                runKey=run_key,
            )
        )
        plan_id = row.id
    return CommitResult(plan_id, True, new_version)


def commit_plan_once(
    store: Store,
    plan: PlanToCommit,
    *,
    admin_url: str,
    run_key: str,
    expected_version: int,
    snapshot_id: int | None = None,
    actor: str = "planner",
) -> CommitResult:
    """`commit_plan`, where a concurrent commit of the same run key counts as already committed (the twin
    may win on the run key or, first, on the state version)."""
    try:
        return commit_plan(
            store,
            plan,
            admin_url=admin_url,
            run_key=run_key,
            expected_version=expected_version,
            snapshot_id=snapshot_id,
            actor=actor,
        )
    except (IntegrityError, StaleStateError):
        with store.session() as session:
            existing = session.scalar(select(Plan).where(Plan.run_key == run_key))
            if existing is None:
                raise
            return CommitResult(existing.id, False, existing.state_version)


def plan_for_run(store: Store, run_id: str, cluster: str) -> int | None:
    """The plan an orchestrator run committed for a cluster (its run key starts with the run id and the
    cluster), found in the store rather than in anything the run's tasks pass each other."""
    with store.session() as session:
        return session.scalar(
            select(Plan.id)
            .where(Plan.run_key.startswith(f"{run_id}:{cluster}:", autoescape=True))
            .order_by(Plan.id.desc())
            .limit(1)
        )


# --- lists of plans ---------------------------------------------------------------------------------------------

PLAN_STATUSES = tuple(status.value for status in PlanStatus)
MAX_PER_PAGE = 200


@dataclass(frozen=True, slots=True)
class PlanListing:
    """A plan as lists show it: its row, how many actions it has, and who decided it when."""

    id: int
    cluster: str
    created_at: datetime
    strategy: str
    status: PlanStatus
    actions: int
    approver: str | None
    decided_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """As `plans list` shows it."""
        return {
            "id": self.id,
            "cluster": self.cluster,
            "createdAt": self.created_at.isoformat(),
            "strategy": self.strategy,
            "status": self.status.value,
            "actions": self.actions,
        }


def _listings() -> Select:
    """Plans with their action counts and decisions, from indexed joins, never from loading the plans' JSON."""
    action_count = select(func.count(PlanAction.id)).where(PlanAction.plan_id == Plan.id).scalar_subquery()
    return (
        select(
            Plan.id,
            Cluster.name,
            Plan.created_at,
            Plan.strategy,
            Plan.status,
            action_count,
            Approval.approver,
            Approval.decided_at,
        )
        .join(Cluster)
        .outerjoin(Approval, Approval.plan_id == Plan.id)
    )


def _listing(row: Any) -> PlanListing:
    plan_id, cluster, created_at, strategy, status, actions, approver, decided_at = row
    return PlanListing(plan_id, cluster, created_at, strategy, PlanStatus(status), actions, approver, decided_at)


def list_plans(
    store: Store, cluster: str | None = None, status: PlanStatus | None = None, limit: int = 50
) -> list[PlanListing]:
    """The newest plans first (of a cluster, in a status)."""
    query = _listings().order_by(Plan.id.desc()).limit(limit)
    if cluster:
        query = query.where(Cluster.name == cluster)
    if status:
        query = query.where(Plan.status == status.value)
    with store.session() as session:
        return [_listing(row) for row in session.execute(query)]


@dataclass(frozen=True, slots=True)
class PlanFilter:
    cluster: str | None = None
    status: str | None = None
    created_from: date | None = None  # inclusive, UTC days
    created_to: date | None = None  # inclusive
    search: str | None = None  # plans with an action on a bundle or broker containing this text
    page: int = 1
    per_page: int = 25

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in PLAN_STATUSES:
            raise InputError(f"plan filter: status must be one of {', '.join(PLAN_STATUSES)} (got {self.status!r})")
        if self.page < 1:
            raise InputError(f"plan filter: page must be 1 or more (got {self.page})")
        if not 1 <= self.per_page <= MAX_PER_PAGE:
            raise InputError(f"plan filter: per_page must be between 1 and {MAX_PER_PAGE} (got {self.per_page})")
        if self.created_from and self.created_to and self.created_from > self.created_to:
            raise InputError(f"plan filter: created_from ({self.created_from}) is after created_to ({self.created_to})")

    def apply(self, query: Select) -> Select:
        if self.cluster:
            query = query.where(Cluster.name == self.cluster)
        if self.status:
            query = query.where(Plan.status == self.status)
        if self.created_from:
            query = query.where(Plan.created_at >= datetime.combine(self.created_from, time(), UTC))
        if self.created_to:
            query = query.where(Plan.created_at < datetime.combine(self.created_to + timedelta(days=1), time(), UTC))
        if self.search:
            text = self.search.lower()
            touched = select(PlanAction.plan_id).where(
                or_(
                    *(
                        func.lower(column).contains(text, autoescape=True)
                        for column in (PlanAction.bundle, PlanAction.source, PlanAction.destination)
                    )
                )
            )
            query = query.where(Plan.id.in_(touched))
        return query


@dataclass(frozen=True, slots=True)
class PlanPage:
    items: list[PlanListing]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def plan_page(store: Store, filters: PlanFilter, readable: Collection[str] | None = None) -> PlanPage:
    """One page of plans, newest first, with the total for pagination (of the `readable` clusters' plans). Built
    for large stores: one count query and one page query."""

    def scoped(query: Select) -> Select:
        query = filters.apply(query)
        return query if readable is None else query.where(Cluster.name.in_(sorted(readable)))

    with store.session() as session:
        total = session.scalar(scoped(select(func.count(Plan.id)).join(Cluster))) or 0
        rows = session.execute(
            scoped(_listings())
            .order_by(Plan.id.desc())
            .offset((filters.page - 1) * filters.per_page)
            .limit(filters.per_page)
        ).all()
    return PlanPage([_listing(row) for row in rows], total, filters.page, filters.per_page)


# --- one plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt at an action, as the executor recorded it."""

    attempt: int
    status: AttemptStatus
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True)
class RecordedAction:
    """An action row: what runs (`runs`), the planned action as committed (JSON), and every attempt at it."""

    runs: ExecutableAction
    planned: dict[str, Any]
    attempts: tuple[AttemptRecord, ...]


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A plan's row, its action rows in order with their attempts, and its decision."""

    id: int
    cluster: str
    status: PlanStatus
    created_at: datetime
    snapshot_id: int | None
    run_key: str
    state_version: int
    actions_hash: str  # the stored hash, which approvals and the executor check against the rows
    document: dict[str, Any]  # the plan document as committed (JSON): its actions are those planned, not the rows
    actions: tuple[RecordedAction, ...]
    approval: RecordedDecision | None


def plan_record(store: Store, plan_id: int) -> PlanRecord:
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        attempts: dict[int, list[AttemptRecord]] = {}
        for action_id, execution in session.execute(
            select(ActionExecution.action_id, ActionExecution)
            .join(PlanAction, ActionExecution.action_id == PlanAction.id)
            .where(PlanAction.plan_id == plan_id)
            .order_by(PlanAction.sequence, ActionExecution.attempt)
        ):
            attempts.setdefault(action_id, []).append(
                AttemptRecord(
                    execution.attempt,
                    AttemptStatus(execution.status),
                    execution.started_at,
                    execution.finished_at,
                    execution.error,
                )
            )
        approval = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        return PlanRecord(
            id=plan.id,
            cluster=plan.cluster.name,
            status=PlanStatus(plan.status),
            created_at=plan.created_at,
            snapshot_id=plan.snapshot_id,
            run_key=plan.run_key,
            state_version=plan.state_version,
            actions_hash=plan.actions_hash,
            document=dict(plan.details),
            actions=tuple(
                RecordedAction(ExecutableAction.of(row), dict(row.details), tuple(attempts.get(row.id, ())))
                for row in plan.actions
            ),
            approval=RecordedDecision.of(approval) if approval is not None else None,
        )


@dataclass(frozen=True, slots=True)
class NewestPlan:
    """A cluster's newest plan, empty or not: an empty one says why nothing was to do (its balance summary)."""

    id: int
    created_at: datetime
    status: PlanStatus
    balance: dict[str, Any] | None  # the document's balance as committed (JSON)


def newest_plan(store: Store, cluster: str) -> NewestPlan | None:
    with store.session() as session:
        plan = session.scalar(
            select(Plan).join(Cluster).where(Cluster.name == cluster).order_by(Plan.id.desc()).limit(1)
        )
        if plan is None:
            return None
        return NewestPlan(plan.id, plan.created_at, PlanStatus(plan.status), plan.details.get("balance"))


# --- measurements ---------------------------------------------------------------------------------------------

MEASUREMENT_VERSION = 2  # the JSON shape of a measurement row; rows of version 1 hold score, msgRate, throughput only


@dataclass(frozen=True, slots=True)
class BrokerSample:
    """One broker as a snapshot saw it: the score (weighted max usage, percent points, with default weights), msg/s
    and bytes/s in + out, and where known the usage of each scored resource (percent), the traffic in and out, and
    the report's own clock (epoch millis of its last update and of the broker's start). None: not recorded (rows of
    measurements taken before these were kept)."""

    score: float
    msg_rate: float
    throughput: float
    cpu: float | None = None
    bandwidth_in: float | None = None
    bandwidth_out: float | None = None
    direct_memory: float | None = None
    msg_rate_in: float | None = None
    msg_rate_out: float | None = None
    throughput_in: float | None = None
    throughput_out: float | None = None
    last_update: int | None = None
    start_timestamp: int | None = None

    def to_json(self) -> dict[str, float | int | None]:
        return {key: getattr(self, name) for name, key in _SAMPLE_KEYS.items()}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BrokerSample:
        values: dict[str, Any] = {}
        for name, key in _SAMPLE_KEYS.items():
            value = document.get(key)
            integral = name in ("last_update", "start_timestamp")
            values[name] = None if value is None else (int(value) if integral else float(value))
        for required in ("score", "msg_rate", "throughput"):
            values[required] = values[required] or 0.0
        return cls(**values)


_SAMPLE_KEYS = {
    "score": "score",
    "msg_rate": "msgRate",
    "throughput": "throughput",
    "cpu": "cpu",
    "bandwidth_in": "bandwidthIn",
    "bandwidth_out": "bandwidthOut",
    "direct_memory": "directMemory",
    "msg_rate_in": "msgRateIn",
    "msg_rate_out": "msgRateOut",
    "throughput_in": "throughputIn",
    "throughput_out": "throughputOut",
    "last_update": "lastUpdate",
    "start_timestamp": "startTimestamp",
}


@dataclass(frozen=True, slots=True)
class SnapshotLoad:
    """What a plan's outcome needs of one snapshot: each broker's sample, the brokers it is missing (broker →
    why), and the owner of each bundle asked about (the plan's moved bundles; absent: not owned by a reporting
    broker). `moved` holds those bundles' traffic in that snapshot (in/out), to split a planned move's rate."""

    snapshot_id: int
    taken_at: datetime
    brokers: dict[str, BrokerSample]
    missing: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    moved: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot_id,
            "takenAt": as_utc(self.taken_at).isoformat(),
            "brokers": {broker: sample.to_json() for broker, sample in sorted(self.brokers.items())},
            "missing": dict(sorted(self.missing.items())),
            "owners": dict(sorted(self.owners.items())),
            "moved": {bundle: dict(traffic) for bundle, traffic in sorted(self.moved.items())},
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SnapshotLoad:
        return cls(
            snapshot_id=int(document["snapshot"]),
            taken_at=datetime.fromisoformat(str(document["takenAt"])),
            brokers={broker: BrokerSample.from_json(sample) for broker, sample in document.get("brokers", {}).items()},
            missing={str(broker): str(why) for broker, why in document.get("missing", {}).items()},
            owners={str(bundle): str(owner) for bundle, owner in document.get("owners", {}).items()},
            moved={
                str(bundle): {str(key): float(value) for key, value in traffic.items()}
                for bundle, traffic in document.get("moved", {}).items()
            },
        )


@dataclass(frozen=True, slots=True)
class Measurement:
    """The load measured after a plan ran (`measured`), and, when recorded with it, the plan's own snapshot as it
    was read at the same time (`planned`): an outcome is rebuilt from these and the plan alone."""

    snapshot_id: int
    measured_at: datetime
    measured: SnapshotLoad
    planned: SnapshotLoad | None = None

    @property
    def brokers(self) -> dict[str, dict[str, float]]:
        """Per broker score, msgRate and throughput measured, as the plan page shows them."""
        return {
            broker: {"score": sample.score, "msgRate": sample.msg_rate, "throughput": sample.throughput}
            for broker, sample in self.measured.brokers.items()
        }

    def to_json(self) -> dict[str, Any]:
        """The row's JSON document (`plan_measurements.brokers`)."""
        document: dict[str, Any] = {"version": MEASUREMENT_VERSION, "measured": self.measured.to_json()}
        if self.planned is not None:
            document["planned"] = self.planned.to_json()
        return document

    @classmethod
    def of(cls, row: PlanMeasurement) -> Measurement:
        document = dict(row.brokers or {})
        if document.get("version") == MEASUREMENT_VERSION:
            planned = document.get("planned")
            return cls(
                row.snapshot_id,
                as_utc(row.measured_at),
                SnapshotLoad.from_json(document["measured"]),
                SnapshotLoad.from_json(planned) if planned is not None else None,
            )
        # Version 1: the brokers' score, msgRate and throughput, keyed by broker, nothing else.
        brokers = {broker: BrokerSample.from_json(values) for broker, values in document.items()}
        measured_at = as_utc(row.measured_at)
        return cls(row.snapshot_id, measured_at, SnapshotLoad(row.snapshot_id, measured_at, brokers))


def record_measurement(
    store: Store,
    plan_id: int,
    measured: SnapshotLoad,
    *,
    planned: SnapshotLoad | None = None,
    actor: str = "planner",
) -> Measurement:
    """The load measured after a plan ran, beside its prediction, with the plan's own snapshot read the same way
    (`planned`); a plan measured again gets another row, and the newest counts."""
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        row = PlanMeasurement(plan_id=plan_id, snapshot_id=measured.snapshot_id, brokers={})
        row.measured_at = utc_now()
        recorded = Measurement(measured.snapshot_id, row.measured_at, measured, planned)
        row.brokers = recorded.to_json()
        session.add(row)
        session.add(audit_event(plan.cluster.name, actor, "plan.measured", plan=plan_id, snapshot=measured.snapshot_id))
    return recorded


def latest_measurement(store: Store, plan_id: int) -> Measurement | None:
    with store.session() as session:
        row = session.scalar(
            select(PlanMeasurement).where(PlanMeasurement.plan_id == plan_id).order_by(PlanMeasurement.id.desc())
        )
        return Measurement.of(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class MeasuredPlan:
    """An executed plan with its newest measurement: what an outcome is built from."""

    record: PlanRecord
    measurement: Measurement


def measured_plans(
    store: Store,
    cluster: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 1000,
) -> list[MeasuredPlan]:
    """The cluster's plans that were measured after they ran, measured since `since` and up to `until`, oldest
    measurement first (the newest `limit` of them), each with its newest measurement."""
    newest = (
        select(PlanMeasurement.plan_id, func.max(PlanMeasurement.id).label("measurement_id"))
        .group_by(PlanMeasurement.plan_id)
        .subquery()
    )
    query = (
        select(Plan.id, PlanMeasurement)
        .join(newest, newest.c.plan_id == Plan.id)
        .join(PlanMeasurement, PlanMeasurement.id == newest.c.measurement_id)
        .join(Cluster, Cluster.id == Plan.cluster_id)
        .where(Cluster.name == cluster)
        .order_by(PlanMeasurement.measured_at.desc(), PlanMeasurement.id.desc())
        .limit(limit)
    )
    if since is not None:
        query = query.where(PlanMeasurement.measured_at >= since)
    if until is not None:
        query = query.where(PlanMeasurement.measured_at <= until)
    with store.session() as session:
        rows = [(plan_id, Measurement.of(row)) for plan_id, row in session.execute(query)]
    return [MeasuredPlan(plan_record(store, plan_id), measurement) for plan_id, measurement in reversed(rows)]


def recently_unloaded_brokers(
    store: Store, cluster: str, as_of: datetime, within: timedelta = timedelta(hours=1)
) -> dict[str, int]:
    """The source brokers of the cluster's unloads that took effect within `within` before `as_of`, each with its
    latest (epoch millis): TransferShedder's cool-down input (Pulsar's UnloadScheduler records the source broker
    of every unload it completes)."""
    return _latest_applied_unloads(
        store,
        cluster,
        PlanAction.source,
        ActionExecution.finished_at > as_of - within,
        ActionExecution.finished_at <= as_of,
    )


def applied_unloads_before(store: Store, cluster: str, before: datetime) -> dict[str, int]:
    """Each bundle's latest applied unload that finished before `before` (epoch millis): what the store's recently
    unloaded bundles held then (the executor records one per applied unload)."""
    return _latest_applied_unloads(store, cluster, PlanAction.bundle, ActionExecution.finished_at < before)


def _latest_applied_unloads(store: Store, cluster: str, key: Any, *window: Any) -> dict[str, int]:
    """Per `key` (the unload's source broker or its bundle), the latest applied unload of the cluster finished in
    `window` (epoch millis)."""
    applied = [status.value for status in APPLIED_ATTEMPT_STATUSES]
    with store.session() as session:
        rows = session.execute(
            select(key, func.max(ActionExecution.finished_at))
            .join(ActionExecution, ActionExecution.action_id == PlanAction.id)
            .join(Plan, Plan.id == PlanAction.plan_id)
            .join(Cluster, Cluster.id == Plan.cluster_id)
            .where(
                Cluster.name == cluster,
                PlanAction.kind == ActionKind.UNLOAD.value,
                ActionExecution.status.in_(applied),
                *window,
            )
            .group_by(key)
        ).all()
    return {name: int(as_utc(finished).timestamp() * 1000) for name, finished in rows if finished is not None}
