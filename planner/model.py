"""Typed records of Pulsar's load-balancing JSON, parsed and validated.

Field names mirror Pulsar's own JSON (camelCase aliases of the snake_case attributes), so a load
report exactly as `GET /admin/v2/broker-stats/load-report` returns it parses without renaming.
Unknown fields are ignored, missing ones take Pulsar's defaults, and wrong types, negative rates,
NaN/inf, malformed bundle names and reversed ranges are rejected with the field's full path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic.alias_generators import to_camel

from planner.bundles.bundle_range import check_bundle_name
from planner.errors import InputError

# Pulsar's ModularLoadManagerImpl constants (not configuration).
NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
# Stats assumed for a bundle the leader has never seen (ModularLoadManagerImpl.getBundleDataOrDefault).
DEFAULT_MESSAGE_RATE = 50.0
DEFAULT_MESSAGE_THROUGHPUT = 50000.0

MAX_JSON_BYTES = 512 * 1024 * 1024

_BROKER_ID_PATTERN = re.compile(r"\S+:\d{1,5}")


def _check_bundle_name(name: str) -> str:
    check_bundle_name(name)
    return name


def _check_broker_id(broker_id: str) -> str:
    if _BROKER_ID_PATTERN.fullmatch(broker_id) is None:
        raise ValueError(f"broker id {broker_id!r} is not of the form host:webServicePort")
    return broker_id


Rate = Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)]
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Count = Annotated[int, Strict(), Field(ge=0)]
Text = Annotated[str, Strict()]
BundleKey = Annotated[str, Strict(), AfterValidator(_check_bundle_name)]
BrokerId = Annotated[str, Strict(), AfterValidator(_check_broker_id)]


class PulsarRecord(BaseModel):
    """Base of every record: camelCase JSON names, unknown fields ignored, records immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,
    )


class ResourceUsage(PulsarRecord):
    """`{usage, limit}`: cpu in percent of one core summed over cores, memory in MiB, bandwidth in Kbit/s."""

    usage: Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)] = 0.0
    # Pulsar reports a limit <= 0 when it cannot tell (e.g. no NIC speed) and then counts 0 %.
    limit: Number = 0.0


class NamespaceBundleStats(PulsarRecord):
    """One bundle's current stats as its owner reports them in `lastStats`."""

    msg_rate_in: Rate = 0.0
    msg_throughput_in: Rate = 0.0
    msg_rate_out: Rate = 0.0
    msg_throughput_out: Rate = 0.0
    consumer_count: Count = 0
    producer_count: Count = 0
    topics: Count = 0
    cache_size: Count = 0


class LocalBrokerData(PulsarRecord):
    """A broker's own load report (`LocalBrokerData`), as written to the metadata store."""

    web_service_url: Text | None = None
    web_service_url_tls: Text | None = None
    pulsar_service_url: Text | None = None
    pulsar_service_url_tls: Text | None = None
    persistent_topics_enabled: Annotated[bool, Strict()] = True
    non_persistent_topics_enabled: Annotated[bool, Strict()] = True
    cpu: ResourceUsage = ResourceUsage()
    memory: ResourceUsage = ResourceUsage()
    direct_memory: ResourceUsage = ResourceUsage()
    bandwidth_in: ResourceUsage = ResourceUsage()
    bandwidth_out: ResourceUsage = ResourceUsage()
    msg_rate_in: Rate = 0.0
    msg_rate_out: Rate = 0.0
    msg_throughput_in: Rate = 0.0
    msg_throughput_out: Rate = 0.0
    last_update: Count = 0
    last_stats: dict[BundleKey, NamespaceBundleStats] = Field(default_factory=dict)
    num_topics: Count = 0
    num_bundles: Count = 0
    num_consumers: Count = 0
    num_producers: Count = 0
    bundles: frozenset[BundleKey] = frozenset()
    last_bundle_gains: frozenset[BundleKey] = frozenset()
    last_bundle_losses: frozenset[BundleKey] = frozenset()
    broker_version_string: Text | None = None
    load_manager_class_name: Text | None = None
    start_timestamp: Count = 0

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out


class TimeAverageMessageData(PulsarRecord):
    """A moving average of a bundle's traffic; see `planner.time_average` for the update rule."""

    max_samples: Annotated[int, Strict(), Field(ge=1)] = NUM_SHORT_SAMPLES
    num_samples: Count = 0
    msg_throughput_in: Rate = 0.0
    msg_throughput_out: Rate = 0.0
    msg_rate_in: Rate = 0.0
    msg_rate_out: Rate = 0.0

    @property
    def total_msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def total_msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out


def _long_term_default() -> TimeAverageMessageData:
    return TimeAverageMessageData(max_samples=NUM_LONG_SAMPLES)


class BundleData(PulsarRecord):
    """The leader's short- and long-term averages of one bundle."""

    short_term_data: TimeAverageMessageData = TimeAverageMessageData()
    long_term_data: TimeAverageMessageData = Field(default_factory=_long_term_default)
    topics: Count = 0


def default_bundle_data() -> BundleData:
    """Pulsar's stand-in for a bundle without history: 50 msg/s and 50000 B/s each way, no samples."""
    return BundleData(
        short_term_data=TimeAverageMessageData(
            max_samples=NUM_SHORT_SAMPLES,
            msg_rate_in=DEFAULT_MESSAGE_RATE,
            msg_rate_out=DEFAULT_MESSAGE_RATE,
            msg_throughput_in=DEFAULT_MESSAGE_THROUGHPUT,
            msg_throughput_out=DEFAULT_MESSAGE_THROUGHPUT,
        ),
        long_term_data=TimeAverageMessageData(
            max_samples=NUM_LONG_SAMPLES,
            msg_rate_in=DEFAULT_MESSAGE_RATE,
            msg_rate_out=DEFAULT_MESSAGE_RATE,
            msg_throughput_in=DEFAULT_MESSAGE_THROUGHPUT,
            msg_throughput_out=DEFAULT_MESSAGE_THROUGHPUT,
        ),
    )


class LoadData(PulsarRecord):
    """The strategies' input: every broker's load report, the leader's bundle averages, recent unloads."""

    brokers: dict[BrokerId, LocalBrokerData] = Field(default_factory=dict)
    bundle_data: dict[BundleKey, BundleData] = Field(default_factory=dict)
    recently_unloaded_bundles: dict[BundleKey, Count] = Field(default_factory=dict)


RecordT = TypeVar("RecordT", bound=PulsarRecord)


def format_validation_error(error: ValidationError, what: str) -> str:
    """One line naming the object and the path of the first bad field, e.g. `brokers['h:8080'].cpu.usage`."""
    first = error.errors(include_url=False)[0]
    path = ""
    for part in first["loc"]:
        if part == "[key]":
            path += " (key)"
        elif isinstance(part, int) or (isinstance(part, str) and not part.isidentifier()):
            path += f"[{part!r}]"
        else:
            path += f".{part}" if path else str(part)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "json_invalid":
        return f"invalid {what}: malformed JSON: {message.removeprefix('Invalid JSON: ')}"
    if first["type"] not in {"missing", "value_error"} and "input" in first:
        message += f" (got {_short_repr(first['input'])})"
    more = error.error_count() - 1
    suffix = f" (+{more} more errors)" if more > 0 else ""
    return f"invalid {what}: {path or '<root>'}: {message}{suffix}"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_size(text: str | bytes, what: str) -> None:
    if len(text) > MAX_JSON_BYTES:
        raise InputError(f"invalid {what}: document larger than {MAX_JSON_BYTES} bytes")


def parse_json_document(text: str | bytes, what: str) -> Any:
    """Parse a small JSON document (state files) with a size limit and a clear error for deep nesting."""
    _check_size(text, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"invalid {what}: malformed JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except (RecursionError, UnicodeDecodeError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else "not UTF-8"
        raise InputError(f"invalid {what}: JSON {reason}") from None


def _validate_json(model: type[RecordT], text: str | bytes, what: str) -> RecordT:
    """Parse and validate in one pass (pydantic's JSON parser also bounds nesting depth)."""
    _check_size(text, what)
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        raise InputError(format_validation_error(error, what)) from None


def load_data_from_mapping(document: Mapping[str, Any]) -> LoadData:
    """Validate an already-parsed LoadData document."""
    try:
        return LoadData.model_validate(document)
    except ValidationError as error:
        raise InputError(format_validation_error(error, "LoadData")) from None


def load_data_from_json(text: str | bytes) -> LoadData:
    return _validate_json(LoadData, text, "LoadData")


def read_load_data(path: Path) -> LoadData:
    try:
        text = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read LoadData file {str(path)!r}: {error.strerror}") from None
    return load_data_from_json(text)


def local_broker_data_from_json(text: str | bytes, broker_id: str) -> LocalBrokerData:
    """Parse one broker's load report; errors name the broker."""
    return _validate_json(LocalBrokerData, text, f"load report of broker {broker_id}")
