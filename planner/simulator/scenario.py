"""Simulation scenarios: named TOML files (or a seed) describing brokers, bundle traffic and events.

A scenario says what a platform team would tell a colleague: "ten brokers at 70 %, ten new ones join
at minute 10", "one broker is 32 cores with cheap messages, the others are small", "bundle traffic
follows the day and spikes now and then". Broker hardware is heterogeneous on purpose: each broker
has its own cores, CPU cost per message and per MiB and NIC speed, because the strategies rank by
different figures (msgRate, throughput, resource usage) and only differ visibly when those disagree.

A scenario may also declare what the cluster declares to Pulsar's placement (`[policies]`: namespace isolation
policies, failure domains, anti-affinity groups); the simulated leader and this product's plans obey them, and a
run can show what a planner that ignores them would have done.

The file format is validated as strictly as LoadData: unknown keys, wrong types and references to
brokers or namespaces that do not exist are errors that name the scenario and the field.
"""

from __future__ import annotations

import math
import random
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from planner.errors import InputError, format_validation_error
from planner.pulsar.bundle_range import FULL_RANGE_UPPER, check_bundle_name
from planner.pulsar.declarations import (
    AutoFailoverPolicy,
    AutoFailoverPolicyType,
    ClusterPolicies,
    FailureDomain,
    NamespaceIsolationPolicy,
)

MIB = 1024 * 1024
MINUTES_PER_DAY = 24 * 60
RANDOM_PREFIX = "random"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
_SCENARIO_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class _Spec(BaseModel):
    """Scenario file records: camelCase keys, unknown keys refused (a typo must not pass silently)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True)


class BrokerGroup(_Spec):
    """`count` identical brokers `name-1:port` .. `name-N:port` (just `name:port` when count is 1)."""

    name: Annotated[str, Field(pattern=_NAME.pattern)]
    count: Annotated[int, Field(ge=1, le=10_000)] = 1
    cores: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 8.0
    # CPU in percent of one core per msg/s (in + out) and per MiB/s (in + out): the hardware's cost.
    cpu_per_msg: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.008
    cpu_per_mib: Annotated[float, Field(ge=0, allow_inf_nan=False, alias="cpuPerMiB")] = 0.0
    nic_gbps: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    # Score points used with no traffic at all (GC, replication, other tenants of the host).
    background: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 2.0
    # Per-minute normal noise on the CPU the broker reports, in score points (GC pauses, neighbours' bursts).
    cpu_noise: Annotated[float, Field(ge=0, le=50, allow_inf_nan=False)] = 0.0
    cost_change: CostChange | None = None
    join_at: Annotated[int, Field(ge=0)] = 0
    port: Annotated[int, Field(ge=1, le=65535)] = 8080


class CostChange(_Spec):
    """From minute `at` on, the broker's traffic costs `factor` times what its hardware's did (a noisy neighbour,
    a throttled host, a degraded disk): the history its usage model was fitted on no longer holds."""

    at: Annotated[int, Field(ge=0)]
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Spike(_Spec):
    """Traffic of some bundles multiplied by `factor` for `minutes` minutes from minute `at`."""

    at: Annotated[int, Field(ge=0)]
    minutes: Annotated[int, Field(ge=1)] = 2
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 3.0
    broker: str | None = None  # only the group's bundles initially owned by this broker (or group)
    bundles: Annotated[int, Field(ge=1)] | None = None  # only the first N of those


class Jitter(_Spec):
    """Random short spikes: each bundle starts one with this probability per minute."""

    probability: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 3.0
    minutes: Annotated[int, Field(ge=1)] = 2


class BundleGroup(_Spec):
    """`count` bundles of one namespace, dealt round robin over `owners` (broker or group names).

    Size them either by `rate` (msg/s in per bundle) or by `score`: the points this group adds to
    each owner at minute 0, given the owner's own cost per message, which is how operators describe
    a cluster ("three brokers at 80, 80 and 20 %").
    """

    namespace: str
    count: Annotated[int, Field(ge=1, le=1_000_000)]
    owners: Annotated[list[str], Field(min_length=1)]
    rate: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    score: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    fanout: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0  # msgRateOut / msgRateIn
    message_size: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 2048.0  # bytes
    topics: Annotated[int, Field(ge=1)] = 4
    size_spread: Annotated[float, Field(ge=0, le=3, allow_inf_nan=False)] = 0.0  # lognormal sigma
    diurnal: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0  # amplitude
    diurnal_peak_hour: Annotated[float, Field(ge=0, lt=24, allow_inf_nan=False)] = 14.0
    growth_per_day: Annotated[float, Field(gt=-1, allow_inf_nan=False)] = 0.0
    noise: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0  # per-minute lognormal sigma
    spikes: list[Spike] = Field(default_factory=list)
    jitter: Jitter | None = None

    @model_validator(mode="after")
    def _one_size(self) -> BundleGroup:
        if (self.rate is None) == (self.score is None):
            raise ValueError("give exactly one of rate and score")
        return self


class Event(_Spec):
    """`loss`: brokers leave for good; `restart`: they leave for `down` minutes; `rolling-restart`:
    one after the other, `interval` minutes apart."""

    at: Annotated[int, Field(ge=0)]
    kind: Literal["loss", "restart", "rolling-restart"]
    brokers: Annotated[list[str], Field(min_length=1)]
    down: Annotated[int, Field(ge=1)] = 2
    interval: Annotated[int, Field(ge=1)] = 10


class MinAvailableParameters(_Spec):
    """The `min_available` auto-failover policy's parameters, under Pulsar's own names: fewer available primaries
    than `min_limit` fail the namespace over to its secondaries; a primary above `usage_threshold` percent of CPU,
    memory or bandwidth is not available."""

    min_limit: Annotated[int, Field(ge=0, alias="min_limit")]
    usage_threshold: Annotated[int, Field(ge=0, le=100, alias="usage_threshold")]


class AutoFailoverSpec(_Spec):
    policy_type: Literal["min_available"]  # the only type Pulsar has
    parameters: MinAvailableParameters


class IsolationSpec(_Spec):
    """A namespace isolation policy as Pulsar takes it (`NamespaceIsolationData`, which refuses one without
    namespaces, primaries or an auto-failover policy): regular expressions matched against the whole namespace
    name and broker host."""

    namespaces: Annotated[list[str], Field(min_length=1)]
    primary: Annotated[list[str], Field(min_length=1)]
    secondary: list[str] = Field(default_factory=list)
    auto_failover_policy: AutoFailoverSpec


# Pulsar's `NamedEntity.checkName`, which names of isolation policies and failure domains must pass.
_POLICY_NAME = Annotated[str, Field(pattern=r"^[-=:.\w]+$")]


class PoliciesSpec(_Spec):
    """What the cluster declares to Pulsar's placement: isolation policies by name, failure domains by name (their
    brokers or broker groups), and each namespace's anti-affinity group."""

    isolation: dict[_POLICY_NAME, IsolationSpec] = Field(default_factory=dict)
    failure_domains: dict[_POLICY_NAME, Annotated[list[str], Field(min_length=1)]] = Field(default_factory=dict)
    anti_affinity_groups: dict[str, Annotated[str, Field(min_length=1)]] = Field(default_factory=dict)


class Scenario(_Spec):
    name: Annotated[str, Field(pattern=_SCENARIO_NAME.pattern)]
    description: str = ""
    minutes: Annotated[int, Field(ge=1, le=525_600)] = 120
    # Balanced = max - min broker score below this many points, until the end of the run.
    target_spread: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 20.0
    # A move counts as caused by a spike when its source hosted a spiking bundle this recently.
    spike_lag_minutes: Annotated[int, Field(ge=0)] = 10
    offline_cadence_minutes: Annotated[int, Field(ge=1)] = 60
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    brokers: Annotated[list[BrokerGroup], Field(min_length=1)]
    bundles: Annotated[list[BundleGroup], Field(min_length=1)]
    events: list[Event] = Field(default_factory=list)
    policies: PoliciesSpec | None = None


# --- loading --------------------------------------------------------------------------------------


def _scenario_directory() -> Any:
    return resources.files("planner.simulator").joinpath("scenarios")


# The order of the evaluation report: the strategies' known failure modes first, then cluster operations.
_EVALUATION_ORDER = (
    "threshold-over-unloading",
    "multi-hit-80-80-20",
    "spike",
    "spike-large",
    "heterogeneous",
    "heterogeneous-hot-fast",
    "scale-out",
    "rolling-restart",
)


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped with the package: the evaluation's order, then any others by name."""
    names = [entry.name[: -len(".toml")] for entry in _scenario_directory().iterdir() if entry.name.endswith(".toml")]
    ordered = [name for name in _EVALUATION_ORDER if name in names]
    return ordered + sorted(name for name in names if name not in ordered)


def parse_scenario(text: str, source: str) -> Scenario:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"invalid scenario {source}: {error}") from None
    return scenario_from_mapping(document, source)


def scenario_from_mapping(document: Mapping[str, Any], source: str) -> Scenario:
    try:
        scenario = Scenario.model_validate(document)
    except ValidationError as error:
        raise InputError(format_validation_error(error, f"scenario {source}")) from None
    build_world(scenario, seed=0, minutes=1, source=source)  # cross-field checks fail now, not mid-run
    return scenario


def load_scenario(reference: str) -> Scenario:
    """A shipped scenario by name, a `.toml` file by path, or `random:SEED` (a generated one)."""
    if reference == RANDOM_PREFIX or reference.startswith(RANDOM_PREFIX + ":"):
        seed_text = reference.partition(":")[2] or "1"
        try:
            seed = int(seed_text)
        except ValueError:
            raise InputError(f"invalid scenario {reference!r}: expected random:SEED with an integer seed") from None
        return random_scenario(seed)
    if reference.endswith(".toml") or "/" in reference:
        path = Path(reference)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise InputError(f"cannot read scenario file {reference!r}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise InputError(f"invalid scenario {reference}: not UTF-8") from None
        return parse_scenario(text, reference)
    if reference not in builtin_scenarios():
        known = ", ".join(builtin_scenarios())
        raise InputError(f"unknown scenario {reference!r}: expected one of {known}, a .toml file or random:SEED")
    text = _scenario_directory().joinpath(f"{reference}.toml").read_text(encoding="utf-8")
    return parse_scenario(text, reference)


# --- random scenarios -----------------------------------------------------------------------------


def random_scenario(seed: int) -> Scenario:
    """A plausible cluster drawn from `seed`: mixed hardware, skewed placement, daily traffic, jitter,
    and sometimes growth, a scale-out or a broker loss. The same seed always gives the same cluster."""
    rng = random.Random(seed)
    broker_count = rng.randint(3, 10)
    brokers = []
    for index in range(broker_count):
        cores = rng.choice([4, 8, 8, 16, 32])
        brokers.append(
            {
                "name": f"b{index + 1}",
                "cores": cores,
                "cpuPerMsg": round(rng.uniform(0.004, 0.016), 4),
                "cpuPerMiB": round(rng.uniform(0.0, 2.0), 2),
                "background": round(rng.uniform(1, 8), 1),
            }
        )
    joining = rng.random() < 0.3
    if joining:
        brokers.append({"name": "new", "count": rng.randint(1, 3), "joinAt": rng.randint(10, 60)})
    initial = [broker["name"] for broker in brokers if broker.get("joinAt", 0) == 0]
    # Skew: each broker starts somewhere between lightly and heavily loaded.
    target = {name: rng.uniform(15, 85) for name in initial}
    namespaces = rng.randint(1, 4)
    bundles = []
    for index in range(namespaces):
        shape = {
            "sizeSpread": round(rng.uniform(0, 1.2), 2),
            "diurnal": round(rng.uniform(0, 0.4), 2),
            "diurnalPeakHour": rng.randint(0, 23),
            "growthPerDay": round(rng.choice([0.0, 0.0, rng.uniform(0, 0.5)]), 2),
            "noise": round(rng.uniform(0, 0.05), 3),
            "messageSize": rng.choice([512, 1024, 2048, 8192]),
            "topics": rng.randint(1, 20),
            "jitter": {"probability": round(rng.uniform(0, 0.003), 4), "factor": rng.choice([2, 3, 5])},
        }
        for name in initial:
            bundles.append(
                {
                    "namespace": f"tenant/ns{index + 1}",
                    "count": rng.randint(2, 12),
                    "owners": [name],
                    "score": round(target[name] / namespaces, 1),
                    **shape,
                }
            )
    events = []
    if not joining and len(initial) > 3 and rng.random() < 0.3:
        events.append({"at": rng.randint(20, 90), "kind": "loss", "brokers": [rng.choice(initial)]})
    document = {
        "name": f"{RANDOM_PREFIX}-{seed}",
        "description": f"generated from seed {seed}: {broker_count} brokers of mixed hardware, skewed placement",
        "minutes": 240,
        "brokers": brokers,
        "bundles": bundles,
        "events": events,
    }
    return scenario_from_mapping(document, f"{RANDOM_PREFIX}:{seed}")


# --- compiled form --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Brokers:
    """Every broker that ever exists in the run, sorted by id (the order reports are processed in)."""

    ids: tuple[str, ...]
    cores: np.ndarray
    cpu_per_msg: np.ndarray
    cpu_per_mib: np.ndarray
    nic_gbps: np.ndarray
    background: np.ndarray
    join_at: np.ndarray
    cpu_noise: np.ndarray | None = None  # score points; None: no broker has any
    cost_change_at: np.ndarray | None = None  # minute from which `cost_factor` applies; None: no broker changes
    cost_factor: np.ndarray | None = None

    def cost_factors(self, minute: int) -> np.ndarray | None:
        """Per broker, the factor on its hardware's traffic costs at `minute` (None: 1 for every broker)."""
        if self.cost_change_at is None or self.cost_factor is None:
            return None
        return np.where(minute >= self.cost_change_at, self.cost_factor, 1.0)


@dataclass(frozen=True, slots=True)
class Bundles:
    """Per-bundle traffic parameters, in bundle-name order."""

    names: tuple[str, ...]
    initial_owner: np.ndarray  # broker index
    rate_in: np.ndarray  # msg/s at minute 0 before diurnal/growth factors
    fanout: np.ndarray
    message_size: np.ndarray
    topics: np.ndarray
    diurnal: np.ndarray
    diurnal_peak_minute: np.ndarray
    growth_per_day: np.ndarray
    noise: np.ndarray
    spikes: tuple[tuple[int, int, int, float], ...]  # (bundle, first minute, end minute, factor)


@dataclass(frozen=True, slots=True)
class BrokerEvent:
    minute: int
    broker: int
    up: bool  # True: the broker (re)starts empty; False: it stops and its bundles are reassigned


@dataclass(frozen=True, slots=True)
class World:
    scenario: Scenario
    brokers: Brokers
    bundles: Bundles
    events: tuple[BrokerEvent, ...]
    policies: ClusterPolicies | None = None  # None: the scenario declares no `[policies]`


def _broker_ids(group: BrokerGroup) -> list[str]:
    if group.count == 1:
        return [f"{group.name}:{group.port}"]
    return [f"{group.name}-{index}:{group.port}" for index in range(1, group.count + 1)]


def _bundle_ranges(count: int) -> list[str]:
    """Pulsar's initial layout of `count` bundles: equal steps, the last one closed at 0xffffffff."""
    step = (FULL_RANGE_UPPER + 1) // count
    bounds = [index * step for index in range(count)] + [FULL_RANGE_UPPER]
    return [f"0x{bounds[index]:08x}_0x{bounds[index + 1]:08x}" for index in range(count)]


def build_world(scenario: Scenario, seed: int, minutes: int | None = None, *, source: str | None = None) -> World:
    """Resolve names, size bundles and expand events; `seed` draws bundle sizes and jitter spikes."""
    minutes = minutes or scenario.minutes
    where = f"scenario {source or scenario.name}"
    rng = np.random.default_rng(seed)
    groups: dict[str, list[str]] = {}
    hardware: dict[str, BrokerGroup] = {}
    for index, group in enumerate(scenario.brokers):
        ids = _broker_ids(group)
        if group.name in groups:
            raise InputError(f"invalid {where}: brokers[{index}].name {group.name!r} is used twice")
        groups[group.name] = ids
        for broker_id in ids:
            if broker_id in hardware:
                raise InputError(f"invalid {where}: brokers[{index}]: broker id {broker_id} is used twice")
            hardware[broker_id] = group
    for broker_id in list(hardware):
        # A single broker can also be named without its port: `broker-3` for `broker-3:8080`.
        groups.setdefault(broker_id.rpartition(":")[0], [broker_id])
    ids = sorted(hardware)
    position = {broker_id: index for index, broker_id in enumerate(ids)}

    def resolve(names: list[str], field: str) -> list[str]:
        resolved: list[str] = []
        for name in names:
            if name not in groups:
                raise InputError(f"invalid {where}: {field}: no broker or broker group named {name!r}")
            resolved.extend(groups[name])
        return resolved

    brokers = Brokers(
        ids=tuple(ids),
        cores=np.array([hardware[b].cores for b in ids], dtype=float),
        cpu_per_msg=np.array([hardware[b].cpu_per_msg for b in ids], dtype=float),
        cpu_per_mib=np.array([hardware[b].cpu_per_mib for b in ids], dtype=float),
        nic_gbps=np.array([hardware[b].nic_gbps for b in ids], dtype=float),
        background=np.array([hardware[b].background for b in ids], dtype=float),
        join_at=np.array([hardware[b].join_at for b in ids], dtype=int),
        **_host_conditions([hardware[b] for b in ids]),
    )

    per_namespace: dict[str, int] = {}
    for group in scenario.bundles:
        per_namespace[group.namespace] = per_namespace.get(group.namespace, 0) + group.count
    ranges = {namespace: _bundle_ranges(count) for namespace, count in per_namespace.items()}
    used = dict.fromkeys(per_namespace, 0)

    rows: list[dict[str, Any]] = []
    spikes: list[tuple[int, int, int, float]] = []
    for group_index, group in enumerate(scenario.bundles):
        field = f"bundles[{group_index}]"
        owners = resolve(group.owners, f"{field}.owners")
        late = [owner for owner in owners if hardware[owner].join_at > 0]
        if late:
            raise InputError(f"invalid {where}: {field}.owners: {late[0]} joins later and cannot own bundles at start")
        if per_namespace[group.namespace] > FULL_RANGE_UPPER // 2:
            raise InputError(f"invalid {where}: {field}.count: too many bundles in {group.namespace}")
        names = []
        for _ in range(group.count):
            name = f"{group.namespace}/{ranges[group.namespace][used[group.namespace]]}"
            used[group.namespace] += 1
            try:
                check_bundle_name(name)
            except InputError:
                raise InputError(f"invalid {where}: {field}.namespace {group.namespace!r} is not tenant/ns") from None
            names.append(name)
        owner_of = [owners[index % len(owners)] for index in range(group.count)]
        weights = rng.lognormal(0.0, group.size_spread, size=group.count) if group.size_spread else np.ones(group.count)
        rates = _group_rates(group, owner_of, weights, hardware)
        first_row = len(rows)
        for index, name in enumerate(names):
            rows.append(
                {
                    "name": name,
                    "owner": position[owner_of[index]],
                    "rate": rates[index],
                    "fanout": group.fanout,
                    "size": group.message_size,
                    "topics": group.topics,
                    "diurnal": group.diurnal,
                    "peak": group.diurnal_peak_hour * 60.0,
                    "growth": group.growth_per_day,
                    "noise": group.noise,
                }
            )
        for spike_index, spike in enumerate(group.spikes):
            members = range(group.count)
            if spike.broker is not None:
                chosen = set(resolve([spike.broker], f"{field}.spikes[{spike_index}].broker"))
                members = [index for index in members if owner_of[index] in chosen]
            selected = list(members)[: spike.bundles] if spike.bundles else list(members)
            spikes.extend((first_row + index, spike.at, spike.at + spike.minutes, spike.factor) for index in selected)
        if group.jitter is not None and group.jitter.probability > 0:
            starts = rng.random((group.count, minutes)) < group.jitter.probability
            for index, minute in zip(*np.nonzero(starts), strict=True):
                end = int(minute) + group.jitter.minutes
                spikes.append((first_row + int(index), int(minute), end, group.jitter.factor))

    order = sorted(range(len(rows)), key=lambda row: rows[row]["name"])
    renumber = {old: new for new, old in enumerate(order)}

    def column(key: str, dtype: type) -> np.ndarray:
        return np.array([rows[row][key] for row in order], dtype=dtype)

    bundles = Bundles(
        names=tuple(rows[row]["name"] for row in order),
        initial_owner=column("owner", int),
        rate_in=column("rate", float),
        fanout=column("fanout", float),
        message_size=column("size", float),
        topics=column("topics", int),
        diurnal=column("diurnal", float),
        diurnal_peak_minute=column("peak", float),
        growth_per_day=column("growth", float),
        noise=column("noise", float),
        spikes=tuple(sorted((renumber[b], start, end, factor) for b, start, end, factor in spikes)),
    )
    events = _expand_events(scenario, brokers, position, resolve)
    policies = None
    if scenario.policies is not None:
        policies = _cluster_policies(scenario.policies, where, ids, per_namespace, resolve)
    return World(scenario, brokers, bundles, events, policies)


def _host_conditions(groups: list[BrokerGroup]) -> dict[str, np.ndarray]:
    """The per-broker CPU noise and cost changes, only when a broker has any: runs without them draw nothing."""
    conditions = {}
    if any(group.cpu_noise > 0 for group in groups):
        conditions["cpu_noise"] = np.array([group.cpu_noise for group in groups], dtype=float)
    if any(group.cost_change is not None for group in groups):
        never = np.iinfo(np.int64).max
        changes = [group.cost_change for group in groups]
        conditions["cost_change_at"] = np.array([never if c is None else c.at for c in changes], dtype=np.int64)
        conditions["cost_factor"] = np.array([1.0 if c is None else c.factor for c in changes], dtype=float)
    return conditions


def _key(name: str) -> str:
    """A key in a field path, as `format_validation_error` writes it."""
    return f".{name}" if name.isidentifier() else f"[{name!r}]"


def _cluster_policies(
    spec: PoliciesSpec, where: str, ids: list[str], namespaces: Mapping[str, int], resolve: Any
) -> ClusterPolicies:
    """`[policies]` as Pulsar's records. A regular expression that matches no namespace or broker of the scenario,
    a broker in two failure domains or an anti-affinity group for a namespace the scenario has not are refused:
    in a scenario they are typos, and a policy that silently matches nothing would show nothing."""
    hosts = [broker_id.rpartition(":")[0] for broker_id in ids]
    isolation = {}
    for name, policy in spec.isolation.items():
        field = f"policies.isolation{_key(name)}"
        for key, patterns, universe, what in (
            ("namespaces", policy.namespaces, list(namespaces), "namespace"),
            ("primary", policy.primary, hosts, "broker host"),
            ("secondary", policy.secondary, hosts, "broker host"),
        ):
            for index, pattern in enumerate(patterns):
                try:
                    compiled = re.compile(pattern)
                except re.error as error:
                    raise InputError(
                        f"invalid {where}: {field}.{key}[{index}]: not a regular expression ({error})"
                    ) from None
                if not any(compiled.fullmatch(candidate) for candidate in universe):
                    raise InputError(f"invalid {where}: {field}.{key}[{index}]: {pattern!r} matches no {what}")
        failover = policy.auto_failover_policy
        isolation[name] = NamespaceIsolationPolicy(
            namespaces=tuple(policy.namespaces),
            primary=tuple(policy.primary),
            secondary=tuple(policy.secondary),
            auto_failover_policy=AutoFailoverPolicy(
                policy_type=AutoFailoverPolicyType(failover.policy_type),
                parameters={
                    "min_limit": str(failover.parameters.min_limit),
                    "usage_threshold": str(failover.parameters.usage_threshold),
                },
            ),
        )
    domains: dict[str, FailureDomain] = {}
    domain_of: dict[str, str] = {}
    for name, members in spec.failure_domains.items():
        field = f"policies.failureDomains{_key(name)}"
        brokers = resolve(members, field)
        for broker_id in brokers:
            if domain_of.setdefault(broker_id, name) != name:
                raise InputError(f"invalid {where}: {field}: {broker_id} is already in domain {domain_of[broker_id]!r}")
        domains[name] = FailureDomain(brokers=frozenset(brokers))
    for namespace in spec.anti_affinity_groups:
        if namespace not in namespaces:
            field = f"policies.antiAffinityGroups{_key(namespace)}"
            raise InputError(f"invalid {where}: {field}: the scenario has no bundles in that namespace")
    return ClusterPolicies(isolation=isolation, failure_domains=domains, anti_affinity_groups=spec.anti_affinity_groups)


def _points_per_message(group: BundleGroup, broker: BrokerGroup) -> float:
    """Score points one msg/s of this group's inbound rate costs on `broker` (in + out, CPU only)."""
    messages = 1.0 + group.fanout
    cpu = messages * broker.cpu_per_msg + messages * group.message_size / MIB * broker.cpu_per_mib
    return cpu / broker.cores


def _group_rates(
    group: BundleGroup, owner_of: list[str], weights: np.ndarray, hardware: Mapping[str, BrokerGroup]
) -> list[float]:
    if group.rate is not None:
        return [group.rate * float(weight) for weight in weights / weights.mean()]
    rates = [0.0] * group.count
    for owner in sorted(set(owner_of)):
        members = [index for index, name in enumerate(owner_of) if name == owner]
        cost = _points_per_message(group, hardware[owner])
        total_rate = group.score / cost if cost > 0 else 0.0
        share = weights[members] / weights[members].sum()
        for index, fraction in zip(members, share, strict=True):
            rates[index] = total_rate * float(fraction)
    return rates


def _expand_events(
    scenario: Scenario, brokers: Brokers, position: Mapping[str, int], resolve: Any
) -> tuple[BrokerEvent, ...]:
    events = [BrokerEvent(int(join), index, True) for index, join in enumerate(brokers.join_at) if join > 0]
    for index, event in enumerate(scenario.events):
        targets = resolve(event.brokers, f"events[{index}].brokers")
        for offset, broker_id in enumerate(sorted(set(targets), key=targets.index)):
            start = event.at + (offset * event.interval if event.kind == "rolling-restart" else 0)
            events.append(BrokerEvent(start, position[broker_id], False))
            if event.kind != "loss":
                events.append(BrokerEvent(start + event.down, position[broker_id], True))
    # Stops before starts within a minute, so a zero-gap restart still empties the broker.
    return tuple(sorted(events, key=lambda e: (e.minute, e.up, e.broker)))


def diurnal_factor(minute: int, amplitude: np.ndarray, peak_minute: np.ndarray) -> np.ndarray:
    """1 + amplitude * cos(2 pi (t - peak) / day): highest at the peak hour, lowest twelve hours later."""
    return 1.0 + amplitude * np.cos(2.0 * math.pi * (minute - peak_minute) / MINUTES_PER_DAY)
