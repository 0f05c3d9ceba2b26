"""The plan and its records: one typed family from the strategy that plans to the executor that sends.

The strategies, the maintenance plans and the forecast build these records (`planner.plan.planning`), the
Spark job writes them, the store keeps them, the approval gate and the review API read them. Field names are
camelCase on the wire (as the job writes them and the review API serves them) and snake_case in Python. A
record is validated wherever it is made or crosses a stage boundary: the job's output file, a commit, the
approval gate's summary. A plan's `actionsHash` must be the hash of its actions (filled in when absent), so a
plan cannot claim one list and carry another; each action is checked against the rules of its kind.

The strategy states and usage models stay JSON values here: their owners validate them
(`Strategy.load_state`, `UsageModels.from_json`), and their shape differs per strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from planner.actions import ActionKind, actions_hash
from planner.errors import InputError, format_validation_error
from planner.plan.calibration import Calibration


class WireModel(BaseModel):
    """A frozen record, camelCase on the wire."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class PlannedAction(WireModel):
    """One admin call of a plan, as planned: what the executor sends (the kind, the bundle, its source and the
    kind's own fields), and for the reviewer why and how much traffic moves."""

    kind: ActionKind
    bundle: str
    source: str
    destination: str | None
    # None: not measured (no stats for the bundle, or a plan that measures nothing). Never written as 0.0, which
    # is a measured idle bundle: the approval policies' share rules must tell the two apart.
    msg_rate: float | None = None
    throughput: float | None = None
    reason: str = ""
    split_algorithm: str | None = None
    split_positions: tuple[int, ...] | None = None  # None: the broker computes them (the planner cannot)

    @model_validator(mode="after")
    def _valid_for_its_kind(self) -> PlannedAction:
        problem = _ACTION_RULES[self.kind](self)
        if problem:
            raise ValueError(f"{self.kind} of {self.bundle}: {problem}")
        return self

    def to_json(self) -> dict[str, Any]:
        # Unloads carry no split fields, as the planner has always written them.
        unload_only = {"split_algorithm", "split_positions"} if self.kind is ActionKind.UNLOAD else None
        return self.model_dump(by_alias=True, mode="json", exclude=unload_only)


def _unload_rules(action: PlannedAction) -> str | None:
    if action.split_algorithm is not None or action.split_positions is not None:
        return "an unload has no split algorithm or positions"
    return None


def _split_rules(action: PlannedAction) -> str | None:
    if action.destination is not None:
        return "a split has no destination: both halves stay on its source"
    if not action.split_algorithm:
        return "a split names its algorithm"
    return None


# What each kind of action must (not) carry, as Cruise Control's BalancingAction.validate() checks per action type.
_ACTION_RULES: dict[ActionKind, Callable[[PlannedAction], str | None]] = {
    ActionKind.UNLOAD: _unload_rules,
    ActionKind.SPLIT: _split_rules,
}


class BrokerForecast(WireModel):
    """A broker's predicted load before and after the plan's moves (`planner.plan.forecast`)."""

    broker: str
    msg_rate_before: float
    msg_rate_after: float
    throughput_before: float
    throughput_after: float
    score_before: float  # weighted max usage, percent points, as reported
    score_after: float
    model: str  # where the CPU costs came from: broker, cluster or snapshot
    # The score the prediction starts from: the broker's recent samples at its current traffic (the report when it has
    # none). score_after - score_start is the moves' effect alone; None in plans made before it was recorded.
    score_start: float | None = None

    @property
    def score_predicted_from(self) -> float:
        return self.score_start if self.score_start is not None else self.score_before


class PairEvaluation(WireModel):
    """An AvgShedder pair of one run as the strategy evaluated it: the gap, the hit counters after counting,
    whether it fired, and then what it sheds by."""

    underloaded: str
    overloaded: str
    gap: float
    low_hits: int
    high_hits: int
    fired: bool
    mode: str | None = None  # "msgRate" or "throughput" when it fired and met a minimum
    budget: float | None = None


class PredictedMove(WireModel):
    """One planned move with the predicted scores of its two brokers just before and after it."""

    bundle: str
    source: str
    destination: str
    source_before: float
    source_after: float
    destination_before: float
    destination_after: float


class ScaleEventRef(WireModel):
    """The scale event a maintenance plan answers (`planner.plan.scale_events`): a broker that joined (a fill) or
    one marked for removal (a drain). Resolved from the store when the plan is asked for, never from a caller."""

    id: int
    kind: Literal["join", "removal"]
    broker: str


class MaintenanceDocument(WireModel):
    """What a maintenance plan was asked to do (`planner.plan.maintenance`, `planner.orchestrate.rollback`)."""

    mode: Literal["drain", "fill", "rollback"]
    brokers: list[str] = Field(default_factory=list)  # drained or filled
    max_moves: int | None = None
    # Brokers predicted over the overload threshold after the plan: the cluster lacks the capacity.
    over_capacity: list[str] = Field(default_factory=list)
    rolls_back: int | None = None  # the executed plan a rollback undoes
    scale_event: ScaleEventRef | None = None  # proposed for a scale event, not asked for by a person


class BalanceReport(WireModel):
    """Why the strategy planned what it did (`planner.plan.balance`)."""

    balanced: bool  # nothing planned, and the strategy's measure is within its thresholds
    summary: str
    score_spread: float  # highest minus lowest broker score, percentage points
    msg_rate_spread: float  # highest minus lowest broker msg/s
    thresholds: dict[str, float] = Field(default_factory=dict)  # the strategy's, under Pulsar's key names
    waiting: tuple[str, ...] = ()  # pairs over a threshold, not yet confirmed


class ConfigSource(StrEnum):
    """Where a configuration value a plan used came from, strongest first."""

    TEAM = "team"  # the team's explicit settings (clusters.toml, DAG params, --set)
    CLUSTER = "cluster"  # the brokers' own configuration, read at the collect
    DEFAULT = "default"  # Pulsar's default for the release planned


class ConfigValue(WireModel):
    """One configuration key a plan used, its value and where it came from."""

    key: str
    value: JsonValue
    source: ConfigSource
    # Where the cluster's brokers disagree on the key: each broker's value (the leader's is the one used).
    brokers: dict[str, str] = Field(default_factory=dict)
    # The team overrode a value the cluster declares: the cluster's value.
    cluster_value: str | None = None


class ClusterView(WireModel):
    """What the plan knew of the cluster as it declared itself: the release, the configuration with the source of
    each value, whether the policies were read, and whether the brokers' own controllers are still on."""

    release: str | None = None  # the release planned for (the leader's during a rolling upgrade)
    release_source: ConfigSource = ConfigSource.DEFAULT
    # Broker -> release, when the brokers run more than one (a rolling upgrade).
    mixed_releases: dict[str, str] = Field(default_factory=dict)
    configuration: tuple[ConfigValue, ...] = ()
    policies_read: bool = False
    # What the collect could not read: "isolation policies: 403 ...". The plan was made without it.
    unreadable: tuple[str, ...] = ()
    # The brokers' own controllers still on for what the plan does (`loadBalancerSheddingEnabled`,
    # `loadBalancerAutoBundleSplitEnabled`): two controllers would act on the same bundles.
    competing_controllers: tuple[str, ...] = ()


class CalibrationRecord(WireModel):
    """The calibration a plan predicted with (`planner.plan.calibration`): per broker, kind of fit (broker, cluster,
    snapshot) and resource the scale on that fit's costs, the executed plans it was learnt from, the outcomes skipped
    by reason, and its version (a content hash)."""

    version: str
    scales: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    plans: tuple[str, ...] = ()
    skipped: dict[str, int] = Field(default_factory=dict)
    enabled: bool = True  # False: the team switched calibration off; the scales were learnt but not applied

    @classmethod
    def of(cls, calibration: Calibration, *, enabled: bool = True) -> CalibrationRecord:
        return cls.model_validate({**calibration.to_json(), "enabled": enabled})

    def calibration(self) -> Calibration:
        return Calibration.from_json(self.to_json())


class PlanDocument(WireModel):
    cluster: str
    strategy: str
    actions: tuple[PlannedAction, ...]
    actions_hash: str = ""
    brokers: tuple[BrokerForecast, ...] = ()
    state_before: dict[str, Any] = Field(default_factory=dict)
    state_after: dict[str, Any] = Field(default_factory=dict)
    pairs: tuple[PairEvaluation, ...] = ()
    notes: tuple[str, ...] = ()
    usage_models: dict[str, Any] | None = None
    predicted_moves: tuple[PredictedMove, ...] = ()
    maintenance: MaintenanceDocument | None = None
    balance: BalanceReport | None = None  # None for maintenance plans
    # The cluster's load manager (loadManagerClassName's class), which decided how the plan was made.
    load_manager: str | None = None
    # What the cluster declared and the plan used; None for plans made before the planner read it.
    cluster_view: ClusterView | None = None
    # Which usage model the forecast used: a content hash of `usage_models` (the fit, before calibration; None: the
    # one-snapshot estimate), and the calibration applied on top of it (None: none asked for).
    model_version: str | None = None
    calibration: CalibrationRecord | None = None

    @property
    def mode(self) -> str:
        """`rebalance` for the strategies' plans, else the maintenance mode."""
        return self.maintenance.mode if self.maintenance else "rebalance"

    @model_validator(mode="after")
    def _hash_of_its_actions(self) -> PlanDocument:
        maintenance = self.maintenance.to_json() if self.maintenance else None
        computed = actions_hash([action.to_json() for action in self.actions], maintenance)
        if not self.actions_hash:
            object.__setattr__(self, "actions_hash", computed)
        elif self.actions_hash != computed:
            raise ValueError(f"actionsHash {self.actions_hash} is not the hash of the plan's actions ({computed})")
        return self

    def to_json(self) -> dict[str, Any]:
        document = super().to_json()
        document["actions"] = [action.to_json() for action in self.actions]
        return document

    @classmethod
    def parse(cls, document: Any, what: str) -> PlanDocument:
        """A plan from JSON-like input, or an InputError naming `what` and the field."""
        if isinstance(document, PlanDocument):
            return document
        try:
            return cls.model_validate(document)
        except ValidationError as error:
            raise InputError(format_validation_error(error, what)) from None


class AveragesSource(WireModel):
    """How the job came by a cluster's bundle averages (`planner.samples.averages_state`)."""

    method: Literal["incremental", "full", "window"]
    reason: str
    state: str | None = None  # the stored state folded onto
    written: str | None = None  # the state this run stored


class JobResult(WireModel):
    """What the Spark job writes per cluster (`plan-<cluster>.json`)."""

    plan: PlanDocument
    snapshot: int | None = None
    load_data: dict[str, Any] | None = None  # LoadData JSON, when asked for (tests and the differential harness)
    averages: AveragesSource | None = None

    @classmethod
    def parse(cls, text: str | bytes, what: str) -> JobResult:
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            raise InputError(format_validation_error(error, what)) from None


class PlanSummary(WireModel):
    """What the commit task hands the approval gate and the tasks after it (XCom): ids and texts only."""

    plan: int
    created: bool
    actions: int
    actions_hash: str
    subject: str
    markdown: str
    balance: str = ""  # the balance summary, for the log of a run that stops at an empty plan
