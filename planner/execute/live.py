"""The live cluster as the executor checks it, through the admin client: reads only."""

from __future__ import annotations

import functools
import itertools

from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.execute.declared import DeclaredNow
from planner.pulsar.bundle_range import BundleName
from planner.pulsar.versions import PulsarVersion

# Pulsar's default namespaceBundleUnloadingTimeoutMs: how long a broker may take to unload a bundle it accepted.
DEFAULT_UNLOAD_TIMEOUT_SECONDS = 60.0
# Added to the broker's own unload timeout: an unanswered request is settled only once the broker has given up.
SETTLE_MARGIN_SECONDS = 5.0
# A broker configured to take longer is waited on this long; what is still unsettled then stays in doubt.
MAX_UNLOAD_TIMEOUT_SECONDS = 3600.0


class LiveCluster:
    """Live checks on the cluster, through the admin client (reads only)."""

    def __init__(self, client: PulsarAdminClient, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        # The policies and the brokers' own controllers as the cluster declares them now, read once per batch.
        self.declared = DeclaredNow(client, cluster)

    def active_brokers(self) -> list[str]:
        return self.client.active_brokers(self.cluster)

    def owner(self, bundle: str, brokers: list[str] | None = None) -> str | None:
        return self.ownership(bundle, brokers)[0]

    def ownership(self, bundle: str, brokers: list[str] | None = None) -> tuple[str | None, bool]:
        """The bundle's owner, and whether it lists the bundle as active: a broker unloading a bundle keeps listing
        it, inactive, while it closes its topics (Pulsar's NamespaceOwnershipStatus.is_active)."""
        for broker in brokers if brokers is not None else self.active_brokers():
            status = self.client.owned_bundles(self.cluster, broker).get(bundle)
            if status is not None:
                active = status.get("is_active", True) if isinstance(status, dict) else True
                return broker, active is not False
        return None, False

    @functools.cached_property
    def unload_timeout_seconds(self) -> float:
        """How long a broker may take over an unload it accepted (namespaceBundleUnloadingTimeoutMs, read from the
        runtime configuration; Pulsar's default where it cannot be read)."""
        try:
            configured = self.client.runtime_configuration().get("namespaceBundleUnloadingTimeoutMs")
            millis = float(configured) if configured not in (None, "") else DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        except (AdminError, ValueError, TypeError):
            millis = DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        if not millis >= 0:  # NaN or negative: not a timeout to wait on
            millis = DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        return min(millis / 1000, MAX_UNLOAD_TIMEOUT_SECONDS)

    def ranges(self, namespace: str) -> list[tuple[int, int]]:
        return list(itertools.pairwise(self.client.bundle_boundaries(namespace)))

    def bundle_exists(self, bundle: str) -> bool:
        name = BundleName.parse(bundle)
        return (name.range.lower, name.range.upper) in self.ranges(name.namespace)

    @functools.cached_property
    def destinations_keyed_by_range(self) -> bool:
        """Whether the brokers keep an unload's destination by bundle range alone (before Pulsar 4.2, #25518), so
        that two namespaces' bundles of one range share it. A version that cannot be read counts as the older
        rule: it can only make the executor wait."""
        try:
            version = PulsarVersion.parse_prefix(self.client.broker_version())
        except (AdminError, ValueError):
            return True
        return not version.destination_keyed_by_bundle_name
