"""What the cluster declares at execution time, read again by the executor: the policies Pulsar's placement obeys,
against which every destination is checked right before its unload is sent, and whether the brokers' own load
shedding or automatic bundle splitting is on, beside which the executor refuses to run unless the cluster's
settings allow it.

The executor checks destinations itself because Pulsar does not: an unload's named destination is handed to the
bundle's next assignment ahead of every placement filter, in each release read (docs/reliability.md, "The cluster's
policies and controllers at execution time"). Policies can change between the snapshot a plan was made on, its
approval and its execution; the check is `planner.pulsar.policies.destination_refusal`, the one the planner makes.

What is read, and how often. Everything read is kept for `MAX_AGE_SECONDS` and read again after that (by the
monotonic clock), so a plan of a thousand actions reads it once per batch of actions, not once per action, and a
policy or setting changed during the execution is seen within that time:
- the isolation policies and failure domains (two calls);
- the dynamic configuration and each active broker's runtime configuration (one call each), for the controllers
  and the keys the destination check reads (`failureDomainsEnabled`, the load manager); only those keys are kept;
- the anti-affinity group of each namespace whose bundle is sent to a destination (one call per namespace);
- when such a namespace has a group: the group of every namespace the brokers own (one call each, concurrently,
  once per batch), and which broker owns each bundle (one call per broker, again for each such action: the plan's
  own moves change Pulsar's counts).
Whatever cannot be read or understood fails closed: a destination that cannot be checked is not sent
(`PoliciesUnreadableError`), and brokers whose configuration cannot be read count as running what Pulsar's defaults
would run, unless the dynamic configuration switches it off for every broker.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import InputError, format_validation_error
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.controllers import CONTROLLER_KEYS, Controller, controllers_on
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.load_manager_shared import is_system_service_namespace
from planner.pulsar.policies import anti_affinity_group, destination_refusal
from planner.pulsar.versions import PulsarVersion

# How long what was read serves before it is read again: one batch of actions.
MAX_AGE_SECONDS = 30.0
# The runtime configuration's keys the destination check reads, besides the controllers' own.
_CHECK_KEYS = frozenset({"failureDomainsEnabled", "loadManagerClassName"})
_KEPT_KEYS = CONTROLLER_KEYS | _CHECK_KEYS
_SHOWN_BROKERS = 3


class PoliciesUnreadableError(Exception):
    """The cluster's policies could not be read, or not understood, at execution time: no destination is checked."""


@dataclass(frozen=True, slots=True)
class ControllersSeen:
    """The brokers' own controllers as read at execution time."""

    # Broker -> the controllers it runs (only brokers that run one).
    on: dict[str, tuple[Controller, ...]] = field(default_factory=dict)
    # Broker -> why its configuration could not be read, where the dynamic configuration does not switch off
    # everything it could run.
    unknown: dict[str, str] = field(default_factory=dict)
    # The dynamic configuration or the broker list could not be read: nothing can be told.
    error: str | None = None

    @property
    def clear(self) -> bool:
        """Nothing the brokers run would act beside the plan, as far as can be told."""
        return not self.on and not self.unknown and self.error is None

    def describe(self) -> str:
        """One line: what is on, and where, or what could not be read."""
        if self.error is not None:
            return f"cannot tell whether the brokers' own load shedding or bundle splitting is on: {self.error}"
        parts = []
        for controller in Controller:
            brokers = sorted(broker for broker, running in self.on.items() if controller in running)
            if brokers:
                parts.append(f"the brokers' own {controller.what} is on ({controller.value}=true on {_some(brokers)})")
        if self.unknown:
            broker, reason = sorted(self.unknown.items())[0]
            more = f" and {len(self.unknown) - 1} more" if len(self.unknown) > 1 else ""
            verb = "runs" if len(self.unknown) == 1 else "run"
            parts.append(
                f"cannot tell whether {_some(sorted(self.unknown))} {verb} the brokers' own load shedding or bundle "
                f"splitting: the configuration of {broker}{more} could not be read ({reason})"
            )
        return "; ".join(parts) if parts else "the brokers' own load shedding and bundle splitting are off"

    def to_json(self) -> dict[str, Any]:
        return {
            "on": {broker: [controller.value for controller in running] for broker, running in sorted(self.on.items())},
            "unknown": dict(sorted(self.unknown.items())),
            "error": self.error,
        }


def _some(brokers: Sequence[str]) -> str:
    shown = ", ".join(brokers[:_SHOWN_BROKERS])
    return shown + (f" and {len(brokers) - _SHOWN_BROKERS} more" if len(brokers) > _SHOWN_BROKERS else "")


@dataclass(slots=True)
class _Batch:
    """What was read in the current batch; each part read when first needed."""

    started: float
    policies: ClusterPolicies | PoliciesUnreadableError | None = None
    controllers: ControllersSeen | None = None
    configuration: dict[str, dict[str, str]] = field(default_factory=dict)  # broker -> kept keys
    dynamic: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str | None] = field(default_factory=dict)  # namespace -> its group, as read
    owned_groups: dict[str, str] | None = None  # every owned namespace with a group -> the group
    config: PulsarConfig | None = None


class DeclaredNow:
    """The cluster's declarations as the executor reads them during one run (reads only)."""

    def __init__(
        self,
        client: PulsarAdminClient,
        cluster: str,
        *,
        max_age: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.cluster, self.clock = client, cluster, clock
        self.max_age = MAX_AGE_SECONDS if max_age is None else max_age
        self._batch: _Batch | None = None

    def _current(self) -> _Batch:
        if self._batch is None or self.clock() - self._batch.started > self.max_age:
            self._batch = _Batch(started=self.clock())
        return self._batch

    def forget(self) -> None:
        """Read everything again when next needed (the run itself changed the policies: a fence)."""
        self._batch = None

    # --- the brokers' own controllers ---------------------------------------------------------

    def controllers(self) -> ControllersSeen:
        batch = self._current()
        if batch.controllers is None:
            batch.controllers = self._read_controllers(batch)
        return batch.controllers

    def _read_controllers(self, batch: _Batch) -> ControllersSeen:
        try:
            brokers = self.client.active_brokers(self.cluster)
            batch.dynamic = _kept(self.client.dynamic_configuration())
        except AdminError as error:
            return ControllersSeen(error=str(error))
        on, unknown = {}, {}
        worst = controllers_on({}, batch.dynamic)  # what a broker whose configuration is unknown may run
        for broker, answer in self.client.map_concurrently(brokers, self.client.runtime_configuration_of).items():
            if isinstance(answer, AdminError):
                if worst:
                    unknown[broker] = str(answer)
                continue
            batch.configuration[broker] = _kept(answer)
            running = controllers_on(batch.configuration[broker], batch.dynamic)
            if running:
                on[broker] = tuple(running)
        return ControllersSeen(on=on, unknown=unknown)

    # --- the policies ---------------------------------------------------------------------------

    def policies(self) -> ClusterPolicies:
        """The isolation policies and failure domains in force; PoliciesUnreadableError when they cannot be read."""
        batch = self._current()
        if batch.policies is None:
            batch.policies = self._read_policies()
        if isinstance(batch.policies, PoliciesUnreadableError):
            raise batch.policies
        return batch.policies

    def _read_policies(self) -> ClusterPolicies | PoliciesUnreadableError:
        try:
            isolation = self.client.isolation_policies(self.cluster)
            domains = self.client.failure_domains(self.cluster)
        except AdminError as error:
            return PoliciesUnreadableError(str(error))
        try:
            # Pulsar's own JSON validates as it is (`planner.pulsar.declarations`).
            return ClusterPolicies.model_validate({"isolation": isolation, "failure_domains": domains})
        except ValidationError as error:
            return PoliciesUnreadableError(
                format_validation_error(error, "the cluster's isolation policies or domains")
            )

    def destination_refusal(self, bundle: str, destination: str, brokers: Sequence[str]) -> str | None:
        """Why the policies in force forbid `destination` to own `bundle` (naming the policy), None when they allow
        it; `brokers` are the active ones. PoliciesUnreadableError when what the check needs cannot be read."""
        policies = self.policies()
        namespace = namespace_of(bundle)
        group = self._group_of(namespace)
        owners = None
        if group is not None:
            owners = self._owners(brokers)
            policies = policies.model_copy(
                update={"anti_affinity_groups": {**self._owned_groups(owners), namespace: group}}
            )
        try:
            return destination_refusal(bundle, destination, policies, owners, brokers=brokers, config=self._config())
        except InputError as error:  # a policy the check cannot read (e.g. a pattern only Java understands)
            raise PoliciesUnreadableError(str(error)) from None

    def _group_of(self, namespace: str) -> str | None:
        batch = self._current()
        if namespace not in batch.groups:
            try:
                batch.groups[namespace] = self.client.anti_affinity_group(namespace)
            except AdminError as error:
                raise PoliciesUnreadableError(f"the anti-affinity group of {namespace}: {error}") from None
        found = batch.groups[namespace]
        # A blank group is none, as Pulsar reads it.
        return (
            anti_affinity_group(namespace, ClusterPolicies(anti_affinity_groups={namespace: found})) if found else None
        )

    def _owners(self, brokers: Sequence[str]) -> dict[str, str]:
        """Bundle -> the broker that owns it now, over the active brokers."""
        owners: dict[str, str] = {}
        answers = self.client.map_concurrently(list(brokers), lambda b: self.client.owned_bundles(self.cluster, b))
        for broker, owned in answers.items():
            if isinstance(owned, AdminError):
                raise PoliciesUnreadableError(f"the bundles {broker} owns, for the anti-affinity counts: {owned}")
            owners.update(dict.fromkeys(owned, broker))
        return owners

    def _owned_groups(self, owners: Mapping[str, str]) -> dict[str, str]:
        """The anti-affinity group of every namespace the brokers own (Pulsar counts them all), once per batch."""
        batch = self._current()
        if batch.owned_groups is None:
            namespaces = sorted({namespace_of(bundle) for bundle in owners} - set(batch.groups))
            wanted = [namespace for namespace in namespaces if not is_system_service_namespace(namespace)]
            for namespace, answer in self.client.map_concurrently(wanted, self.client.anti_affinity_group).items():
                if isinstance(answer, AdminError):
                    if answer.status == 404:  # deleted since its bundles were listed: it owns nothing any more
                        continue
                    raise PoliciesUnreadableError(f"the anti-affinity group of {namespace}: {answer}")
                batch.groups[namespace] = answer
            batch.owned_groups = {namespace: group for namespace, group in batch.groups.items() if group}
        return batch.owned_groups

    def _config(self) -> PulsarConfig:
        """The keys the check reads: the release (from 5.0 isolation also matches broker ids), whether failure
        domains count, and the load manager (anti-affinity counts namespaces on the modular one, bundles on the
        extensible one). The dynamic configuration wins; then the first broker whose configuration was read."""
        batch = self._current()
        if batch.config is not None:
            return batch.config
        self.controllers()
        values: dict[str, str] = {}
        for broker in sorted(batch.configuration, reverse=True):
            values.update(
                {key: batch.configuration[broker][key] for key in _CHECK_KEYS & batch.configuration[broker].keys()}
            )
        values.update({key: batch.dynamic[key] for key in _CHECK_KEYS & batch.dynamic.keys()})
        # Unreadable: the latest release's rules, which differ from older ones only for broker ids in patterns (5.0).
        with contextlib.suppress(AdminError, ValueError):
            values["pulsarVersion"] = str(PulsarVersion.parse_prefix(self.client.broker_version()))
        try:
            batch.config = PulsarConfig.from_settings(values, source="the brokers' configuration")
        except InputError as error:
            raise PoliciesUnreadableError(str(error)) from None
        return batch.config


def _kept(values: Mapping[str, Any]) -> dict[str, str]:
    """The keys the executor reads of a configuration answer, as Java writes them; the rest (tokens, passwords) is
    dropped at once."""
    return {
        key: ("true" if value else "false") if isinstance(value, bool) else str(value)
        for key, value in values.items()
        if key in _KEPT_KEYS and value is not None
    }
