"""Planner configuration under Pulsar's own key names and defaults.

Values come from `--set KEY=VALUE`, a `broker.conf` file or a mapping (DAG params); the same key
means the same thing as on the team's brokers. `pulsarVersion` picks the release line whose
defaults and behaviours apply (`planner.pulsar.versions`, docs/fidelity.md); the default is the latest 4.x.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, TypeAdapter, ValidationError

from planner.errors import InputError, format_validation_error
from planner.pulsar.versions import PulsarVersion

logger = logging.getLogger(__name__)

_PROPERTY_PATTERN = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)", re.DOTALL)

MIB = 1024 * 1024

MODULAR_LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE_LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


def is_extensible_load_manager(class_name: str | None) -> bool:
    """Whether a `loadManagerClassName` (with or without its package) is the extensible load manager (PIP-192)."""
    return class_name is not None and class_name.rsplit(".", 1)[-1] == EXTENSIBLE_LOAD_MANAGER.rsplit(".", 1)[-1]


SPLIT_ALGORITHMS = (
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
)


def _comma_separated(value: object) -> object:
    """Pulsar reads Set/List settings from broker.conf as comma-separated strings."""
    if isinstance(value, str):
        return frozenset(part.strip() for part in value.split(",") if part.strip())
    return value


def _java_boolean(value: object) -> object:
    """Accept what Java's Boolean.parseBoolean means (`true`/`false`) and refuse other words."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered not in {"true", "false"}:
            raise ValueError(f"expected true or false, got {value!r}")
        return lowered == "true"
    return value


def _version(value: object) -> object:
    return PulsarVersion.parse(value) if isinstance(value, str) else value


StringSet = Annotated[frozenset[str], BeforeValidator(_comma_separated)]
JavaBool = Annotated[bool, BeforeValidator(_java_boolean)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class ResourceWeights:
    """Weights of the resources in the broker score, resolved for the configured Pulsar version."""

    cpu: float
    direct_memory: float
    bandwidth_in: float
    bandwidth_out: float


class PulsarConfig(BaseModel):
    """The load-balancing settings the planner's algorithms read, with the defaults of `ServiceConfiguration`."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid", validate_default=True)

    # Written as the release it names (`3.0.7`), so a config's keys read back as settings (`plan run --set`).
    pulsar_version: Annotated[PulsarVersion, BeforeValidator(_version), PlainSerializer(str, when_used="json")] = Field(
        default=PulsarVersion.parse("latest"), alias="pulsarVersion"
    )

    # Broker score weights (`planner.pulsar.broker_score`). The direct-memory default depends on the version; see
    # from_settings.
    cpu_weight: NonNegative = Field(1.0, alias="loadBalancerCPUResourceWeight")
    memory_weight: NonNegative = Field(0.0, alias="loadBalancerMemoryResourceWeight")
    direct_memory_weight: NonNegative = Field(0.0, alias="loadBalancerDirectMemoryResourceWeight")
    bandwidth_in_weight: NonNegative = Field(1.0, alias="loadBalancerBandwidthInResourceWeight")
    bandwidth_out_weight: NonNegative = Field(1.0, alias="loadBalancerBandwidthOutResourceWeight")
    legacy_bandwidth_in_weight: NonNegative = Field(1.0, alias="loadBalancerBandwithInResourceWeight")
    legacy_bandwidth_out_weight: NonNegative = Field(1.0, alias="loadBalancerBandwithOutResourceWeight")

    # Strategy selection (class names as written in broker.conf).
    shedding_strategy: str = Field(
        "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder", alias="loadBalancerLoadSheddingStrategy"
    )
    placement_strategy: str = Field(
        "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate", alias="loadBalancerLoadPlacementStrategy"
    )

    # Shared by AvgShedder and UniformLoadShedder.
    max_unload_percentage: Fraction = Field(0.2, alias="maxUnloadPercentage")
    min_unload_message: int = Field(1000, alias="minUnloadMessage")
    min_unload_message_throughput: int = Field(1 * MIB, alias="minUnloadMessageThroughput")

    # AvgShedder.
    avg_shedder_low_threshold: float = Field(15.0, alias="loadBalancerAvgShedderLowThreshold", allow_inf_nan=False)
    avg_shedder_high_threshold: float = Field(40.0, alias="loadBalancerAvgShedderHighThreshold", allow_inf_nan=False)
    avg_shedder_hit_count_low_threshold: int = Field(8, alias="loadBalancerAvgShedderHitCountLowThreshold")
    avg_shedder_hit_count_high_threshold: int = Field(2, alias="loadBalancerAvgShedderHitCountHighThreshold")

    # UniformLoadShedder.
    msg_rate_difference_shedder_threshold: float = Field(
        50.0, alias="loadBalancerMsgRateDifferenceShedderThreshold", allow_inf_nan=False
    )
    msg_throughput_multiplier_difference_shedder_threshold: float = Field(
        4.0, alias="loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold", allow_inf_nan=False
    )
    max_unload_bundle_num_per_shedding: int = Field(-1, alias="maxUnloadBundleNumPerShedding")

    # ThresholdShedder and LeastResourceUsageWithWeight.
    broker_threshold_shedder_percentage: int = Field(10, alias="loadBalancerBrokerThresholdShedderPercentage")
    history_resource_percentage: Fraction = Field(0.9, alias="loadBalancerHistoryResourcePercentage")
    bundle_unload_min_throughput_threshold: NonNegative = Field(
        10.0, alias="loadBalancerBundleUnloadMinThroughputThreshold"
    )
    lower_boundary_shedding_enabled: JavaBool = Field(False, alias="lowerBoundarySheddingEnabled")
    average_resource_usage_difference_threshold_percentage: int = Field(
        10, alias="loadBalancerAverageResourceUsageDifferenceThresholdPercentage"
    )

    # OverloadShedder and the placement's overload re-check (`ModularLoadManagerImpl.selectBroker`).
    broker_overloaded_threshold_percentage: int = Field(85, alias="loadBalancerBrokerOverloadedThresholdPercentage")

    # Shedding cycle and placement pipeline (`ModularLoadManagerImpl.doLoadShedding`, `selectBroker`).
    shedding_grace_period_minutes: int = Field(30, alias="loadBalancerSheddingGracePeriodMinutes", ge=0)
    shedding_interval_minutes: int = Field(1, alias="loadBalancerSheddingIntervalMinutes", ge=1)
    distribute_bundles_evenly_enabled: JavaBool = Field(True, alias="loadBalancerDistributeBundlesEvenlyEnabled")
    broker_max_topics: int = Field(50000, alias="loadBalancerBrokerMaxTopics")
    shedding_excluded_namespaces: StringSet = Field(frozenset(), alias="loadBalancerSheddingExcludedNamespaces")
    # The policies placement obeys: failure domains count in the anti-affinity filters only when enabled; with
    # preferLaterVersions only the brokers of the newest release are placement candidates (BrokerVersionFilter).
    failure_domains_enabled: JavaBool = Field(False, alias="failureDomainsEnabled")
    prefer_later_versions: JavaBool = Field(False, alias="preferLaterVersions")

    # Bundle splitting (`BundleSplitterTask`, the split algorithms in `common/naming`).
    auto_bundle_split_enabled: JavaBool = Field(True, alias="loadBalancerAutoBundleSplitEnabled")
    auto_unload_split_bundles_enabled: JavaBool = Field(True, alias="loadBalancerAutoUnloadSplitBundlesEnabled")
    namespace_bundle_max_topics: int = Field(1000, alias="loadBalancerNamespaceBundleMaxTopics")
    namespace_bundle_max_sessions: int = Field(1000, alias="loadBalancerNamespaceBundleMaxSessions")
    namespace_bundle_max_msg_rate: int = Field(30000, alias="loadBalancerNamespaceBundleMaxMsgRate")
    namespace_bundle_max_bandwidth_mbytes: int = Field(100, alias="loadBalancerNamespaceBundleMaxBandwidthMbytes")
    namespace_maximum_bundles: int = Field(128, alias="loadBalancerNamespaceMaximumBundles", ge=1)
    default_number_of_namespace_bundles: int = Field(4, alias="defaultNumberOfNamespaceBundles", ge=1)
    default_namespace_bundle_split_algorithm: str = Field(
        "range_equally_divide", alias="defaultNamespaceBundleSplitAlgorithm"
    )
    supported_namespace_bundle_split_algorithms: StringSet = Field(
        frozenset(SPLIT_ALGORITHMS), alias="supportedNamespaceBundleSplitAlgorithms"
    )
    flow_or_qps_difference_threshold_percentage: int = Field(10, alias="flowOrQpsDifferenceThresholdPercentage")

    # The extensible load manager (PIP-192): TransferShedder, its load data and its split strategy.
    load_manager_class_name: str = Field(MODULAR_LOAD_MANAGER, alias="loadManagerClassName")
    broker_load_target_std: NonNegative = Field(0.25, alias="loadBalancerBrokerLoadTargetStd")
    shedding_condition_hit_count_threshold: int = Field(3, alias="loadBalancerSheddingConditionHitCountThreshold")
    max_number_of_broker_shedding_per_cycle: int = Field(3, alias="loadBalancerMaxNumberOfBrokerSheddingPerCycle")
    transfer_enabled: JavaBool = Field(True, alias="loadBalancerTransferEnabled")
    # TransferShedder and TopKBundles leave bundles with isolation or anti-affinity policies alone unless enabled.
    shedding_bundles_with_policies_enabled: JavaBool = Field(
        False, alias="loadBalancerSheddingBundlesWithPoliciesEnabled"
    )
    debug_mode_enabled: JavaBool = Field(False, alias="loadBalancerDebugModeEnabled")
    broker_load_data_ttl_seconds: int = Field(1800, alias="loadBalancerBrokerLoadDataTTLInSeconds")
    shedding_delay_seconds: int = Field(180, alias="loadBalanceSheddingDelayInSeconds")
    max_bundles_in_bundle_load_report: int = Field(10, alias="loadBalancerMaxNumberOfBundlesInBundleLoadReport", ge=0)
    max_bundles_to_split_per_cycle: int = Field(10, alias="loadBalancerMaxNumberOfBundlesToSplitPerCycle", ge=0)
    bundle_split_condition_hit_count_threshold: int = Field(
        3, alias="loadBalancerNamespaceBundleSplitConditionHitCountThreshold"
    )

    # Load-report mechanics (`ModularLoadManagerImpl.needBrokerDataUpdate`), used by the simulator.
    report_update_threshold_percentage: int = Field(10, alias="loadBalancerReportUpdateThresholdPercentage")
    report_update_min_interval_millis: int = Field(5000, alias="loadBalancerReportUpdateMinIntervalMillis")
    report_update_max_interval_minutes: int = Field(15, alias="loadBalancerReportUpdateMaxIntervalMinutes")

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        return frozenset(field.alias for field in cls.model_fields.values() if field.alias)

    @classmethod
    def parse_value(cls, key: str, value: object) -> object:
        """One key's value as the config would hold it, checked as `from_settings` checks it (ValidationError when
        refused). For telling apart values that are equal as the brokers read them (`30` and `30.0`)."""
        return _key_adapter(key).validate_python(value)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None = None, *, source: str = "settings") -> PulsarConfig:
        """Build a config from Pulsar keys; unknown keys are warned about and ignored, bad values refused."""
        settings = dict(settings or {})
        known = cls.known_keys()
        unknown = sorted(key for key in settings if key not in known)
        if unknown:
            logger.warning("%s: ignoring keys the planner does not use: %s", source, ", ".join(unknown))
        values = {key: value for key, value in settings.items() if key in known}
        try:
            version = PulsarVersion.parse(str(values.get("pulsarVersion", "latest")))
        except ValueError as error:
            raise InputError(f"invalid {source}: pulsarVersion: {error}") from None
        defaults = {
            "loadBalancerDirectMemoryResourceWeight": version.direct_memory_weight_default,
            "loadBalancerMemoryResourceWeight": 0.0 if version.at_least(4, 0) else 1.0,
        }
        if not version.has_new_bandwidth_weight_keys:
            for key in ("loadBalancerBandwidthInResourceWeight", "loadBalancerBandwidthOutResourceWeight"):
                if key in values:
                    logger.warning("%s: %s does not exist before Pulsar 4.0; ignoring it", source, key)
                    del values[key]
        try:
            config = cls.model_validate({**defaults, **values})
        except ValidationError as error:
            raise InputError(format_validation_error(error, source)) from None
        # The version's defaults count as unset: `with_settings` to another version takes that version's.
        by_alias = {field.alias: name for name, field in cls.model_fields.items()}
        defaulted = {by_alias[key] for key in defaults if key not in values}
        object.__setattr__(config, "__pydantic_fields_set__", config.model_fields_set - defaulted)
        return config

    def with_settings(self, settings: Mapping[str, Any], *, source: str = "settings") -> PulsarConfig:
        """This config with more keys applied on top (later settings win)."""
        current = self.model_dump(by_alias=True, exclude_unset=True)
        current["pulsarVersion"] = str(self.pulsar_version)
        return PulsarConfig.from_settings({**current, **settings}, source=source)

    @property
    def resource_weights(self) -> ResourceWeights:
        return ResourceWeights(
            cpu=self.cpu_weight,
            direct_memory=self.direct_memory_weight,
            bandwidth_in=self._bandwidth_weight(self.bandwidth_in_weight, self.legacy_bandwidth_in_weight),
            bandwidth_out=self._bandwidth_weight(self.bandwidth_out_weight, self.legacy_bandwidth_out_weight),
        )

    def _bandwidth_weight(self, current_key: float, legacy_key: float) -> float:
        # PIP-357: the new key wins when changed from 1.0, else the misspelled one, else 1.0.
        if not self.pulsar_version.has_new_bandwidth_weight_keys:
            return legacy_key
        if current_key != 1.0:
            return current_key
        return legacy_key

    @property
    def overload_threshold(self) -> float:
        """`loadBalancerBrokerOverloadedThresholdPercentage` as a fraction (0.85)."""
        return self.broker_overloaded_threshold_percentage / 100.0

    @property
    def placement_short_name(self) -> str:
        """`loadBalancerLoadPlacementStrategy` without its package (LeastLongTermMessageRate, AvgShedder)."""
        return self.placement_strategy.rsplit(".", 1)[-1]

    @property
    def load_manager_short_name(self) -> str:
        """`loadManagerClassName` without its package (ModularLoadManagerImpl, ExtensibleLoadManagerImpl)."""
        return self.load_manager_class_name.rsplit(".", 1)[-1]

    @property
    def extensible(self) -> bool:
        """Whether `loadManagerClassName` is the extensible load manager (PIP-192)."""
        return is_extensible_load_manager(self.load_manager_class_name)

    @property
    def shedding_grace_period_millis(self) -> int:
        return self.shedding_grace_period_minutes * 60 * 1000


@cache
def _key_adapter(key: str) -> TypeAdapter[Any]:
    """The validator of one key's field, constraints and parsing (Java booleans, comma-separated sets) included."""
    [field] = [field for field in PulsarConfig.model_fields.values() if field.alias == key]
    annotation: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return TypeAdapter(annotation)


def parse_assignments(assignments: Iterable[str], option: str = "--set") -> dict[str, str]:
    """`KEY=VALUE` strings (from `--set`, or the named option) into a mapping; the last of a repeated key wins."""
    parsed: dict[str, str] = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator or not key.strip():
            raise InputError(f"invalid {option} {assignment!r}: expected KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return parsed


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java .properties file such as broker.conf (comments, `=`/`:` separators, continuations).

    Blank values are dropped: Pulsar keeps a key's default when broker.conf leaves it empty.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise InputError(f"cannot read broker.conf {str(path)!r}: {error.strerror}") from None
    properties: dict[str, str] = {}
    logical = ""
    for raw in lines:
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        logical = ""
        if value:
            properties[key] = value
    return properties


def _split_property(line: str) -> tuple[str, str]:
    # The key ends at the first `=`, `:` or blank; one separator and the blanks around it are dropped.
    match = _PROPERTY_PATTERN.match(line)
    assert match is not None  # the pattern matches any string
    return match.group(1), match.group(2).strip()


def load_config(broker_conf: Path | None = None, assignments: Iterable[str] = ()) -> PulsarConfig:
    """The config the CLI uses: broker.conf (if given), then `--set` assignments on top."""
    settings: dict[str, str] = {}
    if broker_conf is not None:
        file_settings = read_properties(broker_conf)
        ignored = [key for key in file_settings if key not in PulsarConfig.known_keys()]
        settings.update({key: value for key, value in file_settings.items() if key in PulsarConfig.known_keys()})
        if ignored:
            logger.info("%s: %d keys not used by the planner were ignored", broker_conf, len(ignored))
    overrides = parse_assignments(assignments)
    settings.update(overrides)
    return PulsarConfig.from_settings(settings, source="--set" if overrides else "configuration")
