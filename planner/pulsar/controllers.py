"""The brokers' own load-balancing controllers, and whether a broker's configuration leaves them on: Pulsar's load
shedding and its automatic bundle splitting act on the same bundles as the product's plans, so two controllers would
fight (a bundle the plan moved is moved back, a bundle the plan splits is split already).

Read in the `pulsar-broker` sources of 3.0.7, 3.3.6, 4.0.8 and 4.2.4, where the switches are the same:
- shedding, both load managers: `loadBalancerEnabled && loadBalancerSheddingEnabled`
  (`LoadManagerShared.isLoadSheddingEnabled`, read by `ModularLoadManagerImpl.doLoadShedding` on every cycle;
  `UnloadScheduler.isLoadBalancerSheddingEnabled` on the extensible load manager);
- automatic splits, modular: `loadBalancerAutoBundleSplitEnabled` alone (`ModularLoadManagerImpl
  .checkNamespaceBundleSplit`, run by the leader's `updateAll` whenever a load report changes);
  extensible: `loadBalancerEnabled && loadBalancerAutoBundleSplitEnabled` (`SplitScheduler`).
`loadBalancerSheddingEnabled` and `loadBalancerAutoBundleSplitEnabled` are dynamic (`ServiceConfiguration`,
`dynamic = true`): a value set through `/admin/v2/brokers/configuration/{key}/{value}` overrides broker.conf on every
broker, at once. `loadBalancerEnabled` is not (broker.conf only). Pulsar's defaults switch both controllers on.
Pure: configurations in, the controllers on out.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from planner.pulsar.config import is_extensible_load_manager

LOAD_BALANCER = "loadBalancerEnabled"
LOAD_MANAGER_CLASS = "loadManagerClassName"


class Controller(StrEnum):
    """A controller of the brokers', by the key that switches it on."""

    SHEDDING = "loadBalancerSheddingEnabled"
    AUTO_SPLIT = "loadBalancerAutoBundleSplitEnabled"

    @property
    def what(self) -> str:
        return "load shedding" if self is Controller.SHEDDING else "automatic bundle splitting"


# Every key that decides whether a controller runs: what the executor reads again at execution time.
CONTROLLER_KEYS: frozenset[str] = frozenset({LOAD_BALANCER, LOAD_MANAGER_CLASS, *Controller})


def _switched_on(value: object) -> bool:
    """Java's `Boolean.parseBoolean` of a configuration value, Pulsar's default (true) when the key is absent."""
    if value is None:
        return True
    if isinstance(value, bool):
        return value
    return str(value).lower() == "true"


def controllers_on(
    configuration: Mapping[str, object], dynamic: Mapping[str, object] | None = None
) -> list[Controller]:
    """The brokers' own controllers a broker runs with `configuration` (its runtime configuration; absent keys take
    Pulsar's defaults), `dynamic` (the cluster's dynamic configuration values) overriding it as Pulsar applies them.

    `controllers_on({}, dynamic)` is the most a broker whose configuration is unknown can run: absent keys are
    Pulsar's defaults (on), and the modular load manager splits without `loadBalancerEnabled`."""
    effective = {**configuration, **(dynamic or {})}
    balancer = _switched_on(effective.get(LOAD_BALANCER))
    extensible = is_extensible_load_manager(str(effective.get(LOAD_MANAGER_CLASS) or "") or None)
    found = []
    if balancer and _switched_on(effective.get(Controller.SHEDDING)):
        found.append(Controller.SHEDDING)
    if (balancer or not extensible) and _switched_on(effective.get(Controller.AUTO_SPLIT)):
        found.append(Controller.AUTO_SPLIT)
    return found
