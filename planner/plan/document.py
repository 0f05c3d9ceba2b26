"""The plan document: one typed model from the Spark job's output to the database, XCom and the review API.

Field names are camelCase on the wire (as the job writes them and the review API serves them) and
snake_case in Python. A document is validated wherever it crosses a stage boundary: the job's output
file, a commit, the approval gate's summary. Its `actionsHash` must be the hash of its actions (filled
in when absent), so a document cannot claim one list and carry another.

The strategy states and usage models stay JSON values here: their owners validate them
(`Strategy.load_state`, `UsageModels.from_json`), and their shape differs per strategy.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from planner.actions import actions_hash
from planner.errors import InputError, format_validation_error


class _Document(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class PlanActionDocument(_Document):
    kind: Literal["unload", "split"]
    bundle: str
    source: str
    destination: str | None
    # None: not measured (no stats for the bundle, or a plan that measures nothing). Never written as 0.0, which
    # is a measured idle bundle: the approval policies' share rules must tell the two apart.
    msg_rate: float | None = None
    throughput: float | None = None
    reason: str = ""
    split_algorithm: str | None = None
    split_positions: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        # Unloads carry no split fields, as the planner has always written them.
        unload_only = {"split_algorithm", "split_positions"} if self.kind == "unload" else None
        return self.model_dump(by_alias=True, mode="json", exclude=unload_only)


class BrokerForecastDocument(_Document):
    broker: str
    msg_rate_before: float
    msg_rate_after: float
    throughput_before: float
    throughput_after: float
    score_before: float
    score_after: float
    model: str


class PairDocument(_Document):
    """An AvgShedder pair as the strategy evaluated it: its gap and hit counters, and whether it fired."""

    underloaded: str
    overloaded: str
    gap: float
    low_hits: int
    high_hits: int
    fired: bool
    mode: str | None = None
    budget: float | None = None


class PredictedMoveDocument(_Document):
    bundle: str
    source: str
    destination: str
    source_before: float
    source_after: float
    destination_before: float
    destination_after: float


class MaintenanceDocument(_Document):
    """What a maintenance plan was asked to do (`planner.plan.maintenance`, `planner.orchestrate.rollback`)."""

    mode: Literal["drain", "fill", "rollback"]
    brokers: list[str] = Field(default_factory=list)  # drained or filled
    max_moves: int | None = None
    # Brokers predicted over the overload threshold after the plan: the cluster lacks the capacity.
    over_capacity: list[str] = Field(default_factory=list)
    rolls_back: int | None = None  # the executed plan a rollback undoes


class BalanceDocument(_Document):
    """Why the strategy planned what it did (`planner.plan.balance`)."""

    balanced: bool
    summary: str
    score_spread: float
    msg_rate_spread: float
    thresholds: dict[str, float] = Field(default_factory=dict)
    waiting: list[str] = Field(default_factory=list)


class PlanDocument(_Document):
    cluster: str
    strategy: str
    actions: list[PlanActionDocument]
    actions_hash: str = ""
    brokers: list[BrokerForecastDocument] = Field(default_factory=list)
    state_before: dict[str, Any] = Field(default_factory=dict)
    state_after: dict[str, Any] = Field(default_factory=dict)
    pairs: list[PairDocument] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    usage_models: dict[str, Any] | None = None
    predicted_moves: list[PredictedMoveDocument] = Field(default_factory=list)
    maintenance: MaintenanceDocument | None = None
    balance: BalanceDocument | None = None
    # The cluster's load manager (loadManagerClassName's class), which decided how the plan was made.
    load_manager: str | None = None

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


class AveragesSource(_Document):
    """How the job came by a cluster's bundle averages (`planner.samples.averages_state`)."""

    method: Literal["incremental", "full", "window"]
    reason: str
    state: str | None = None  # the stored state folded onto
    written: str | None = None  # the state this run stored


class JobResult(_Document):
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


class PlanSummary(_Document):
    """What the commit task hands the approval gate and the tasks after it (XCom): ids and texts only."""

    plan: int
    created: bool
    actions: int
    actions_hash: str
    subject: str
    markdown: str
    balance: str = ""  # the balance summary, for the log of a run that stops at an empty plan
