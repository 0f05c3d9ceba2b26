"""Typed records of Pulsar's load-balancing JSON, parsed and validated.

Field names mirror Pulsar's own JSON (camelCase aliases of the snake_case attributes), so a load
report exactly as `GET /admin/v2/broker-stats/load-report` returns it parses without renaming.
Unknown fields are ignored, missing ones take Pulsar's defaults, and wrong types, negative rates,
NaN/inf, malformed bundle names and reversed ranges are rejected with the field's full path.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic.alias_generators import to_camel

from planner.errors import InputError, format_validation_error, malformed_json_message
from planner.names import check_broker_id
from planner.pulsar.bundle_range import check_bundle_name
from planner.settings import DEFAULT_MAX_JSON_BYTES, planner_settings

# Pulsar's ModularLoadManagerImpl constants (not configuration).
NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
# Stats assumed for a bundle the leader has never seen (ModularLoadManagerImpl.getBundleDataOrDefault).
DEFAULT_MESSAGE_RATE = 50.0
DEFAULT_MESSAGE_THROUGHPUT = 50000.0

MAX_JSON_BYTES_ENV = "PULSAR_REBALANCE_MAX_JSON_BYTES"

# Pulsar's counters and timestamps are Java longs; a larger value cannot come from a broker.
JAVA_LONG_MAX = 2**63 - 1
# TimeAverageMessageData's sample counts are Java ints.
JAVA_INT_MAX = 2**31 - 1


def _check_bundle_name(name: str) -> str:
    check_bundle_name(name)
    return name


Rate = Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)]
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Count = Annotated[int, Strict(), Field(ge=0, le=JAVA_LONG_MAX)]
Text = Annotated[str, Strict()]
BundleKey = Annotated[str, Strict(), AfterValidator(_check_bundle_name)]
BrokerId = Annotated[str, Strict(), AfterValidator(check_broker_id)]


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
    """A moving average of a bundle's traffic; see `planner.samples.time_average` for the update rule."""

    max_samples: Annotated[int, Strict(), Field(ge=1, le=JAVA_INT_MAX)] = NUM_SHORT_SAMPLES
    num_samples: Annotated[int, Strict(), Field(ge=0, le=JAVA_INT_MAX)] = 0
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


class BrokerLoadData(PulsarRecord):
    """A broker's load as the extensible load manager (PIP-192) publishes it (`extensions.data.BrokerLoadData`):
    its resource usage, traffic, and the exponential moving averages TransferShedder ranks brokers by.

    `weightedMaxEMA` is the moving average of the weighted maximum resource usage, a fraction (0.85 = 85 %);
    `msgThroughputEMA` of the bytes/s in + out. `updatedAt` is when the broker last computed them (epoch millis).
    A broker that has not computed them yet reports 1.0 and 0.
    """

    cpu: ResourceUsage = ResourceUsage()
    memory: ResourceUsage = ResourceUsage()
    direct_memory: ResourceUsage = ResourceUsage()
    bandwidth_in: ResourceUsage = ResourceUsage()
    bandwidth_out: ResourceUsage = ResourceUsage()
    msg_throughput_in: Rate = 0.0
    msg_throughput_out: Rate = 0.0
    msg_rate_in: Rate = 0.0
    msg_rate_out: Rate = 0.0
    bundle_count: Count = 0
    topics: Count = 0
    max_resource_usage: Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)] = 1.0
    weighted_max_ema: Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False, alias="weightedMaxEMA")] = 1.0
    msg_throughput_ema: Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False, alias="msgThroughputEMA")] = 0.0
    updated_at: Count = 0
    reported_at: Count = 0

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out


class TopBundleLoadData(PulsarRecord):
    """One of a broker's busiest bundles (`TopBundlesLoadData.BundleLoadData`)."""

    bundle_name: BundleKey
    stats: NamespaceBundleStats = NamespaceBundleStats()


class TopBundlesLoadData(PulsarRecord):
    """A broker's busiest bundles as it publishes them: the top `loadBalancerMaxNumberOfBundlesInBundleLoadReport`,
    the least busy of them first (`models.TopKBundles`)."""

    top_bundles_load_data: list[TopBundleLoadData] = Field(default_factory=list)


class ExtensibleLoadData(PulsarRecord):
    """TransferShedder's input (the extensible load manager's stores, offline): every broker's load data and top
    bundles, keyed by broker id, in the order the load data store lists them (it breaks ties in the sort by load);
    the brokers registered as available (default: those with load data); and the bundles and source brokers of
    recent unloads (epoch millis)."""

    brokers: dict[BrokerId, BrokerLoadData] = Field(default_factory=dict)
    top_bundles: dict[BrokerId, TopBundlesLoadData] = Field(default_factory=dict)
    available_brokers: list[BrokerId] | None = None
    recently_unloaded_bundles: dict[BundleKey, Count] = Field(default_factory=dict)
    recently_unloaded_brokers: dict[BrokerId, Count] = Field(default_factory=dict)

    @property
    def available(self) -> list[str]:
        return list(self.brokers) if self.available_brokers is None else list(self.available_brokers)


RecordT = TypeVar("RecordT", bound=PulsarRecord)


def max_json_bytes(default: int = DEFAULT_MAX_JSON_BYTES) -> int:
    """The size limit of JSON documents read from files: `PULSAR_REBALANCE_MAX_JSON_BYTES`, else `default`."""
    settings = planner_settings()
    return settings.max_json_bytes if "max_json_bytes" in settings.model_fields_set else default


def _check_size(text: str | bytes, what: str, max_bytes: int | None) -> None:
    limit = max_json_bytes() if max_bytes is None else max_bytes
    # A str is measured in characters: at most a quarter of its UTF-8 size, close enough for a guard.
    if len(text) > limit:
        raise InputError(
            f"invalid {what}: document of {len(text)} bytes is larger than the limit of {limit} bytes "
            f"({MAX_JSON_BYTES_ENV})"
        )


def parse_json_document(text: str | bytes, what: str, *, max_bytes: int | None = None) -> Any:
    """Parse a JSON document (state files, admin API answers) within the size and nesting limits.

    pydantic's parser (the one `model_validate_json` uses) bounds the nesting depth without
    recursing in Python, so every JSON input of the planner is refused the same way.
    """
    _check_size(text, what, max_bytes)
    try:
        return pydantic_core.from_json(text)
    except ValueError as error:
        raise InputError(malformed_json_message(str(error), what)) from None


def _validate_json(model: type[RecordT], text: str | bytes, what: str, max_bytes: int | None) -> RecordT:
    """Parse and validate in one pass, within the same limits as `parse_json_document`."""
    _check_size(text, what, max_bytes)
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


def load_data_from_json(text: str | bytes, *, max_bytes: int | None = None) -> LoadData:
    return _validate_json(LoadData, text, "LoadData", max_bytes)


def extensible_load_data_from_json(text: str | bytes, *, max_bytes: int | None = None) -> ExtensibleLoadData:
    return _validate_json(ExtensibleLoadData, text, "ExtensibleLoadData", max_bytes)


def read_json_file(path: Path, what: str, *, max_bytes: int | None = None) -> bytes:
    """A JSON file's bytes, refused before reading when it is larger than the limit."""
    limit = max_json_bytes() if max_bytes is None else max_bytes
    try:
        with path.open("rb") as handle:
            # Read one byte past the limit so an oversized file is refused without loading all of it.
            text = handle.read(limit + 1)
    except OSError as error:
        raise InputError(f"cannot read {what} {str(path)!r}: {error.strerror}") from None
    _check_size(text, what, limit)
    return text


def read_load_data(path: Path, *, max_bytes: int | None = None) -> LoadData:
    return load_data_from_json(read_json_file(path, "LoadData file", max_bytes=max_bytes), max_bytes=max_bytes)


def read_extensible_load_data(path: Path, *, max_bytes: int | None = None) -> ExtensibleLoadData:
    text = read_json_file(path, "ExtensibleLoadData file", max_bytes=max_bytes)
    return extensible_load_data_from_json(text, max_bytes=max_bytes)


def local_broker_data_from_json(text: str | bytes, broker_id: str, *, max_bytes: int | None = None) -> LocalBrokerData:
    """Parse one broker's load report; errors name the broker."""
    return _validate_json(LocalBrokerData, text, f"load report of broker {broker_id}", max_bytes)
