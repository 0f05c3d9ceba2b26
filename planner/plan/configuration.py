"""The configuration and release a plan is made with, and where each value came from.

For every key the planner uses (`PulsarConfig.known_keys`), strongest first:

1. the team's explicit settings (clusters.toml, DAG params, `--set`, `--broker-conf`): source `team`;
2. the cluster's own value, as the latest snapshot read it (`ClusterDeclarations`): the dynamic configuration where
   it sets the key, else the leader's runtime configuration, else (the leader's unread or unknown) the value most
   brokers run; source `cluster`;
3. Pulsar's default for the release planned: source `default`.

Why the dynamic configuration wins: in every release read (3.0.7, 3.3.6, 4.0.8, 4.2.4,
`BrokerService.handleDynamicConfigurationUpdates` and `configValueChanged`) each broker sets a dynamic value over its
broker.conf field at start and at every change, and `/brokers/configuration/runtime` serves the fields after that
(`getRuntimeConfiguration`, `String.valueOf` of each field). The two differ only while a change propagates or on a
broker that could not parse the value and kept its own: that broker is shown as disagreeing.

The release: the team's `pulsarVersion`, else the leader's `brokerVersionString` (a rolling upgrade runs more than
one: the plan says so), else the release most brokers run, else the newest the planner knows. A value of the
cluster's that the planner refuses (or a release it does not model) stops the plan with one line naming the key, the
broker and the cluster: planning with a default the brokers do not run is the plan issue #34 is about. The team's
explicit setting of that key replaces it and plans.

The brokers' own controllers (`planner.pulsar.controllers`) are read from the cluster's values only, never the
team's: a setting cannot switch off the shedding the brokers run. Pure: the plan job calls it per cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, get_origin

from pydantic import JsonValue, ValidationError

from planner.actions import ActionKind
from planner.errors import InputError
from planner.plan.document import ClusterView, ConfigSource, ConfigValue, PlanDocument, PlannedAction
from planner.pulsar.config import PulsarConfig
from planner.pulsar.controllers import Controller, controllers_on
from planner.pulsar.declarations import ClusterDeclarations, Declaration, Unreadable
from planner.pulsar.versions import PulsarVersion

VERSION_KEY = "pulsarVersion"
# The keys whose value a plan records: every key of the config but the release, which the view holds apart.
CONFIG_KEYS: tuple[str, ...] = tuple(
    field.alias for field in PulsarConfig.model_fields.values() if field.alias and field.alias != VERSION_KEY
)
# Set-valued keys: Pulsar serves them as Java writes a collection (`[a, b]`), broker.conf as `a,b`.
_SET_KEYS = frozenset(
    field.alias
    for field in PulsarConfig.model_fields.values()
    if field.alias and get_origin(field.annotation) is frozenset
)
# PIP-357 (4.0.0) keys: they do not exist before 4.0, where `from_settings` drops them.
_FROM_4_0 = frozenset({"loadBalancerBandwidthInResourceWeight", "loadBalancerBandwidthOutResourceWeight"})
_POLICY_DECLARATIONS = (Declaration.ISOLATION_POLICIES, Declaration.FAILURE_DOMAINS, Declaration.ANTI_AFFINITY_GROUPS)
_SHOWN = 5  # brokers named in a note before "and N more"

# What each of the brokers' controllers does that a plan's action of this kind does too.
_COMPETES_WITH = {Controller.SHEDDING: ActionKind.UNLOAD, Controller.AUTO_SPLIT: ActionKind.SPLIT}
_WHAT_IT_DOES = {
    Controller.SHEDDING: "the leader unloads bundles of its own choosing at every shedding cycle",
    Controller.AUTO_SPLIT: "the leader splits bundles of its own choosing as they grow",
}


def java_text(key: str, value: str) -> str:
    """A configuration value as broker.conf writes it: Pulsar serves a set as `[a, b]`."""
    text = value.strip()
    if key in _SET_KEYS and text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip() for part in text[1:-1].split(",") if part.strip())
    return text


def _canonical(key: str, text: str) -> Hashable:
    """What a value means to the planner, so `30` and `30.0` of a double are one value; a value it refuses stays
    its text."""
    try:
        value = PulsarConfig.parse_value(key, text)
    except ValidationError:
        return ("refused", text)
    return value if isinstance(value, Hashable) else ("text", text)


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


@dataclass(frozen=True, slots=True)
class Declared:
    """One key as the cluster declares it: the value a plan uses, where it was read, and each broker's value when
    they disagree."""

    text: str
    origin: str  # "the dynamic configuration", "the leader h:p", "broker h:p (most brokers)"
    brokers: dict[str, str] = field(default_factory=dict)


def declared_value(key: str, declarations: ClusterDeclarations) -> Declared | None:
    """The cluster's value of `key`, or None where nothing read declares it (a blank value is Pulsar's default)."""
    per_broker = {
        broker: java_text(key, values[key])
        for broker, values in sorted(declarations.configuration.items())
        if values.get(key, "").strip()
    }
    dynamic = java_text(key, declarations.dynamic_configuration.get(key, ""))
    meanings = {broker: _canonical(key, text) for broker, text in per_broker.items()}
    if dynamic:
        text, origin = dynamic, "the dynamic configuration"
        meaning = _canonical(key, dynamic)
    elif declarations.leader in per_broker:
        leader = declarations.leader
        text, origin, meaning = per_broker[leader], f"the leader {leader}", meanings[leader]
    elif per_broker:
        # The leader's configuration unread: the value most brokers run (ties: the first broker's, by id).
        counts = Counter(meanings.values())
        first = next(broker for broker in per_broker if counts[meanings[broker]] == max(counts.values()))
        text, meaning = per_broker[first], meanings[first]
        origin = f"broker {first} (the leader's configuration unread)"
    else:
        return None
    disagree = any(found != meaning for found in meanings.values())
    return Declared(text, origin, dict(per_broker) if disagree else {})


@dataclass(frozen=True, slots=True)
class Release:
    """The release planned for, where it came from, and the brokers' releases when they run more than one."""

    version: PulsarVersion
    source: ConfigSource
    mixed: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _team_release(cluster: str, value: object) -> PulsarVersion:
    try:
        return PulsarVersion.parse(str(value))
    except ValueError as error:
        raise InputError(f"invalid settings of {cluster}: {VERSION_KEY}: {error}") from None


def _reported_release(cluster: str, broker: str, text: str) -> PulsarVersion:
    try:
        return PulsarVersion.parse_prefix(text)
    except ValueError as error:
        raise InputError(
            f"cluster {cluster}: broker {broker} reports release {text!r}, which the planner does not model "
            f"({error}); set {VERSION_KEY} in the cluster's settings to plan for another release"
        ) from None


def _release_of(text: str) -> PulsarVersion | None:
    try:
        return PulsarVersion.parse_prefix(text)
    except ValueError:
        return None


def _groups(releases: Mapping[str, str]) -> str:
    by_release: dict[str, list[str]] = {}
    for broker, text in sorted(releases.items()):
        by_release.setdefault(text, []).append(broker)
    return "; ".join(f"{text} on {_some(brokers)}" for text, brokers in sorted(by_release.items()))


def cluster_release(cluster: str, settings: Mapping[str, Any], declarations: ClusterDeclarations) -> Release:
    """The release to plan for: the team's `pulsarVersion`, else the leader's, else most brokers', else the newest
    the planner knows. Mixed releases (a rolling upgrade) are kept, and said in a note."""
    reported = {broker: text.strip() for broker, text in declarations.broker_versions.items() if text.strip()}
    mixed = dict(sorted(reported.items())) if len(set(reported.values())) > 1 else {}
    notes: list[str] = []
    if settings.get(VERSION_KEY) is not None and str(settings[VERSION_KEY]).strip():
        version, source = _team_release(cluster, settings[VERSION_KEY]), ConfigSource.TEAM
        whose = f"{VERSION_KEY} of the team's settings"
        runs = sorted(set(reported.values()))
        if runs and any(_release_of(text) != version for text in runs):
            notes.append(f"Planned for Pulsar {version} ({whose}); the brokers run {', '.join(runs)}.")
    elif reported:
        source = ConfigSource.CLUSTER
        if declarations.leader in reported:
            broker, whose = declarations.leader, f"the leader {declarations.leader}'s"
        else:  # the leader unknown or its release unread: the release most brokers run (ties: the newer)
            counts = Counter(reported.values())
            broker = max(sorted(reported), key=lambda name: (counts[reported[name]], reported[name]))
            whose = f"the release most brokers run ({broker}'s; the leader's unread)"
        version = _reported_release(cluster, broker, reported[broker])
    else:
        version, source = PulsarVersion.parse("latest"), ConfigSource.DEFAULT
        whose = "the newest release the planner knows"
        notes.append(
            f"The brokers' release could not be read: planned for Pulsar {version}, the newest the planner knows; "
            f"set {VERSION_KEY} in the cluster's settings if the brokers run another."
        )
    if mixed:
        notes.insert(
            0,
            f"Mixed releases (a rolling upgrade?): {_groups(mixed)}. Planned for Pulsar {version}, {whose}; brokers "
            "of another release may place and shed differently.",
        )
    return Release(version, source, mixed, tuple(notes))


def _applies(key: str, version: PulsarVersion) -> bool:
    """Whether the release has `key` at all (the planner drops the others)."""
    return key not in _FROM_4_0 or version.has_new_bandwidth_weight_keys


@dataclass(frozen=True, slots=True)
class PlanConfiguration:
    """The config a plan is made with, and what the view of it needs: where each value came from."""

    config: PulsarConfig
    declarations: ClusterDeclarations | None = None  # None: the snapshot read no declarations
    release: Release | None = None
    team: frozenset[str] = frozenset()  # the keys the team's settings give
    declared: dict[str, Declared] = field(default_factory=dict)

    def record(
        self, plan: PlanDocument, config: PulsarConfig, brokers: Iterable[str], snapshot_keys: Collection[str] = ()
    ) -> PlanDocument:
        """`plan` with the cluster view of what it was made with, and first among its notes what a reviewer must
        see: the brokers' own controllers still on for what the plan does, mixed releases, what could not be read.
        `config`: the config used; `snapshot_keys`: its keys set from the snapshot over everything (the load manager
        the brokers ran). Unchanged without declarations."""
        if self.declarations is None or self.release is None:
            return plan
        competing, warnings = competing_controllers(self.declarations, brokers, plan.actions)
        view = ClusterView(
            release=str(config.pulsar_version),
            release_source=self.release.source,
            mixed_releases=self.release.mixed,
            configuration=self._values(config, frozenset(snapshot_keys)),
            policies_read=not any(self.declarations.unread(kind) for kind in _POLICY_DECLARATIONS),
            unreadable=tuple(unreadable_text(entry) for entry in self.declarations.unreadable),
            competing_controllers=tuple(competing),
        )
        unread = [f"Not read at the collect, planned without it: {text}." for text in view.unreadable]
        notes = (*warnings, *self.release.notes, *unread, *plan.notes)
        return plan.model_copy(update={"cluster_view": view, "notes": notes})

    def _values(self, config: PulsarConfig, snapshot_keys: frozenset[str]) -> tuple[ConfigValue, ...]:
        used = config.model_dump(by_alias=True, mode="json")
        values = []
        for key in CONFIG_KEYS:
            value: JsonValue = used[key]
            if isinstance(value, list):
                value = sorted(value, key=str)
            declared = self.declared.get(key)
            applies = _applies(key, config.pulsar_version)
            if key in snapshot_keys:
                source = ConfigSource.CLUSTER
            elif key in self.team and applies:
                source = ConfigSource.TEAM
            elif declared is not None and applies:
                source = ConfigSource.CLUSTER
            else:
                source = ConfigSource.DEFAULT
            values.append(
                ConfigValue(
                    key=key,
                    value=value,
                    source=source,
                    brokers=declared.brokers if declared is not None else {},
                    cluster_value=declared.text if declared is not None and source is ConfigSource.TEAM else None,
                )
            )
        return tuple(values)


def unreadable_text(entry: Unreadable) -> str:
    """One line: what could not be read, of which brokers or namespaces, and why."""
    covers = f" of {_some(list(entry.covers))}" if entry.covers else ""
    return f"{entry.what}{covers}: {entry.reason}"


def _checked(cluster: str, declared: Mapping[str, Declared]) -> None:
    """Refuse the plan, in one line naming the key, where it was read and the cluster, when the planner refuses a
    value the cluster uses."""
    for key, found in declared.items():
        try:
            PulsarConfig.parse_value(key, found.text)
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise InputError(
                f"cluster {cluster}: {key}={found.text!r} of {found.origin} is refused by the planner ({problem}); "
                f"set {key} in the cluster's settings to plan with a value of the team's choosing"
            ) from None


def plan_configuration(
    cluster: str, settings: Mapping[str, Any], declarations: ClusterDeclarations | None
) -> PlanConfiguration:
    """The config to plan `cluster` with: the team's `settings` over the cluster's `declarations` over Pulsar's
    defaults for the release planned. Without declarations (a snapshot that read none): the team's settings over
    Pulsar's defaults, as before the planner read them."""
    source = f"settings of {cluster}"
    if declarations is None:
        return PlanConfiguration(PulsarConfig.from_settings(settings, source=source))
    release = cluster_release(cluster, settings, declarations)
    team = frozenset(key for key in settings if key in CONFIG_KEYS)
    found = {key: declared_value(key, declarations) for key in CONFIG_KEYS}
    declared = {key: value for key, value in found.items() if value is not None and _applies(key, release.version)}
    _checked(cluster, {key: value for key, value in declared.items() if key not in team})
    merged = {key: value.text for key, value in declared.items()}
    merged.update(settings)
    merged[VERSION_KEY] = str(release.version)
    config = PulsarConfig.from_settings(merged, source=source)
    return PlanConfiguration(config, declarations, release, team, declared)


def competing_controllers(
    declarations: ClusterDeclarations, brokers: Iterable[str], actions: Collection[PlannedAction]
) -> tuple[list[str], list[str]]:
    """The brokers' own controllers on for what the plan does (load shedding beside its unloads, automatic splitting
    beside its splits), by their keys, and a warning note for each. A broker whose configuration was not read runs
    what the dynamic configuration and Pulsar's defaults (both on) leave it: on, unless switched off cluster-wide."""
    kinds = {action.kind for action in actions}
    everyone = sorted(set(brokers) | set(declarations.configuration))
    read: dict[str, list[Controller]] = {}
    unread: dict[str, list[Controller]] = {}
    for broker in everyone:
        if broker in declarations.configuration:
            read[broker] = controllers_on(declarations.configuration[broker], declarations.dynamic_configuration)
        else:
            unread[broker] = controllers_on({}, declarations.dynamic_configuration)
    keys, warnings = [], []
    for controller, kind in _COMPETES_WITH.items():
        if kind not in kinds:
            continue
        on = [broker for broker, running in read.items() if controller in running]
        unknown = [broker for broker, running in unread.items() if controller in running]
        if not on and not unknown:
            continue
        keys.append(controller.value)
        where = []
        if on:
            where.append(f"{controller.value}=true on {_some(on)}")
        if unknown:
            where.append(f"unknown on {_some(unknown)}, whose configuration was not read (Pulsar's default is on)")
        planned = "unloads" if kind is ActionKind.UNLOAD else "splits"
        warnings.append(
            f"WARNING: the brokers' own {controller.what} is on ({'; '.join(where)}): {_WHAT_IT_DOES[controller]}, "
            f"beside this plan's {planned}, and the two would undo each other's work. Switch it off "
            f"(`pulsar-admin brokers update-dynamic-config --config {controller.value} --value false`) before "
            "approving."
        )
    return keys, warnings


# --- what the plan page and the approval request show of a plan's configuration ---------------------------------

_RELEASE_SOURCES = {
    ConfigSource.TEAM: f"{VERSION_KEY} of the team's settings",
    ConfigSource.CLUSTER: "the brokers' release",
    ConfigSource.DEFAULT: "the newest release the planner knows: the brokers' was not read",
}


def value_text(value: JsonValue) -> str:
    """A configuration value as broker.conf writes it (`true`, `a,b`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value_text(item) for item in value)
    return "" if value is None else str(value)


@cache
def pulsar_defaults(release: str | None) -> Mapping[str, str]:
    """Pulsar's default of each key for `release` (None: the newest the planner knows), as text."""
    config = PulsarConfig.from_settings({VERSION_KEY: release} if release else {})
    used = config.model_dump(by_alias=True, mode="json")
    return {
        key: value_text(sorted(used[key], key=str) if isinstance(used[key], list) else used[key]) for key in CONFIG_KEYS
    }


@dataclass(frozen=True, slots=True)
class ShownValue:
    """One row of a plan's configuration table."""

    key: str
    value: str
    source: ConfigSource
    default: str  # Pulsar's default for the release planned
    cluster_value: str | None  # the cluster's, where the team overrode it
    brokers: str  # each value and the brokers that run it, where they disagree; empty when they agree

    @property
    def overridden(self) -> bool:
        return self.source is ConfigSource.TEAM

    @property
    def differs_from_default(self) -> bool:
        return self.value != self.default

    @property
    def notable(self) -> bool:
        """What a reviewer must see: the team's overrides, brokers that disagree, values not Pulsar's defaults."""
        return self.overridden or bool(self.brokers) or self.differs_from_default


def controller_text(key: str) -> str:
    """What a controller of the brokers' does, by its key (`loadBalancerSheddingEnabled`: load shedding)."""
    try:
        return Controller(key).what
    except ValueError:  # a key a later release may add: shown as it is
        return key


def release_source_text(view: ClusterView) -> str:
    """Where the release planned for came from, in words."""
    return _RELEASE_SOURCES[view.release_source]


def mixed_releases_text(view: ClusterView) -> str:
    """`4.0.8 on a:8080; 4.2.4 on b:8080, c:8080`; empty when the brokers run one release."""
    return _groups(view.mixed_releases)


def release_text(view: ClusterView) -> str:
    """`Pulsar 4.2.4 (the brokers' release)`, flagged when the brokers run more than one."""
    text = f"Pulsar {view.release} ({release_source_text(view)})"
    if view.mixed_releases:
        text += f"; mixed releases: {_groups(view.mixed_releases)}"
    return text


def shown_configuration(view: ClusterView) -> list[ShownValue]:
    """The view's configuration as its table shows it, in the config's order."""
    defaults = pulsar_defaults(view.release)
    rows = []
    for entry in view.configuration:
        by_value: dict[str, list[str]] = {}
        for broker, text in sorted(entry.brokers.items()):
            by_value.setdefault(text, []).append(broker)
        rows.append(
            ShownValue(
                key=entry.key,
                value=value_text(entry.value),
                source=entry.source,
                default=defaults.get(entry.key, ""),
                cluster_value=entry.cluster_value,
                brokers="; ".join(f"{text} on {_some(names)}" for text, names in sorted(by_value.items())),
            )
        )
    return rows
