"""What one planning run asks of the Spark job: the clusters, the strategy, how the bundle averages are come by,
and per cluster what the store knows. Built by the plan run (`planner.orchestrate.runner.job_request`) or read
from the job's `--input` file, and parsed there once: the job and the planner take these typed values.

On the wire (the input file) the names are camelCase and the spans are written as `7d`, as the CLI takes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, JsonValue, PlainSerializer, PlainValidator, ValidationError, field_validator

from planner.durations import parse_duration
from planner.errors import InputError, format_validation_error
from planner.plan.document import CalibrationRecord, WireModel
from planner.plan.maintenance import MaintenanceRequest
from planner.plan.shedding.registry import shedding_strategy
from planner.pulsar.declarations import ClusterDeclarations
from planner.samples.reports import SnapshotReports

DEFAULT_HISTORY = timedelta(days=7)
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60))


def span_text(span: timedelta) -> str:
    """A span as `parse_duration` reads it, in the largest unit that divides it (`7d`, `90m`, `45s`)."""
    seconds = int(span.total_seconds())
    for unit, size in _UNITS:
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class AveragingMode(StrEnum):
    PULSAR = "pulsar"  # Pulsar's sample-count rule
    WINDOW = "window"  # plain means over wall-clock windows


@dataclass(frozen=True, slots=True)
class Averaging:
    """How the job averages each bundle's samples: Pulsar's rule, or plain means over a short and a long window."""

    mode: AveragingMode = AveragingMode.PULSAR
    short_window: timedelta = timedelta(hours=1)
    long_window: timedelta = timedelta(days=1)

    @classmethod
    def parse(cls, text: str) -> Averaging:
        """`pulsar`, or `window:1h,1d` (short and long window; units s, m, h, d)."""
        if text == AveragingMode.PULSAR:
            return cls()
        kind, _, spans = text.partition(":")
        if kind != AveragingMode.WINDOW or spans.count(",") != 1:
            raise ValueError(f"averaging {text!r}: expected 'pulsar' or 'window:SHORT,LONG' such as window:1h,1d")
        short, long = (parse_duration(span) for span in spans.split(","))
        return cls(AveragingMode.WINDOW, short, long)

    def __str__(self) -> str:
        if self.mode is AveragingMode.PULSAR:
            return str(self.mode)
        return f"{self.mode}:{span_text(self.short_window)},{span_text(self.long_window)}"


def _span(value: Any) -> timedelta:
    return value if isinstance(value, timedelta) else parse_duration(value)


def _averaging(value: Any) -> Averaging:
    return value if isinstance(value, Averaging) else Averaging.parse(value)


def _maintenance(value: Any) -> MaintenanceRequest:
    return value if isinstance(value, MaintenanceRequest) else MaintenanceRequest.parse(value, "maintenance")


Span = Annotated[timedelta, PlainValidator(_span), PlainSerializer(span_text, when_used="json")]
AveragingText = Annotated[Averaging, PlainValidator(_averaging), PlainSerializer(str, when_used="json")]
Maintenance = Annotated[
    MaintenanceRequest,
    PlainValidator(_maintenance),
    PlainSerializer(MaintenanceRequest.to_json, when_used="json"),
]


class ClusterInputs(WireModel):
    """What the store knows of one cluster, for its plan (`planner.plan.cluster_plan`) and its averages."""

    state: dict[str, Any] | None = None  # the strategy's stored state (its owner validates it)
    # Pulsar keys, with values as given (strings from files and the command line, numbers from callers): the
    # config parses and checks them, as it does everywhere else.
    settings: dict[str, JsonValue] = Field(default_factory=dict)
    recently_unloaded_bundles: dict[str, int] = Field(default_factory=dict)  # bundle: epoch millis
    namespace_bundle_counts: dict[str, int] | None = None
    include_splits: bool = True
    # The snapshots the samples files hold that are not published: the job skips them.
    excluded_snapshots: list[int] = Field(default_factory=list)
    # The published snapshots within the history and who is missing from them: where each sample is placed.
    reports: SnapshotReports | None = None
    load_manager: str | None = None  # what the brokers ran at the latest snapshot
    recently_unloaded_brokers: dict[str, int] = Field(default_factory=dict)  # TransferShedder's cool-down
    maintenance: Maintenance | None = None  # a drain or fill instead of the strategy's plan
    # Every bundle each broker owned at the latest snapshot, idle ones too (for a maintenance plan).
    owned_bundles: dict[str, list[str]] = Field(default_factory=dict)
    # What the cluster declared at the latest snapshot (releases, configuration, policies); None: not read.
    declarations: ClusterDeclarations | None = None
    # What the cluster's executed plans taught its usage model (`planner.plan.calibration`); None: not asked for.
    calibration: CalibrationRecord | None = None


class JobRequest(WireModel):
    """The Spark job's input: what to plan and how, and the state versions the commit checks."""

    clusters: tuple[str, ...]
    strategy: str  # the registry's name of the strategy
    inputs: dict[str, ClusterInputs] = Field(default_factory=dict)
    state_versions: dict[str, int] = Field(default_factory=dict)
    averaging: AveragingText = Averaging()
    history: Span = DEFAULT_HISTORY
    recompute_averages: bool = False  # rather than fold onto the stored averages state
    as_of: datetime | None = None  # None: now
    emit_load_data: bool = False  # each result carries its LoadData (tests and the differential harness)

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, name: str) -> str:
        return shedding_strategy(name).name

    def inputs_of(self, cluster: str) -> ClusterInputs:
        return self.inputs.get(cluster) or ClusterInputs()

    @classmethod
    def parse(cls, text: str | bytes, what: str) -> JobRequest:
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            raise InputError(format_validation_error(error, what)) from None
