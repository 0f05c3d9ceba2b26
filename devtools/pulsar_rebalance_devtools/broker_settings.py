"""Broker settings of every Pulsar cluster this project runs: the local cluster command's and docker-compose.yml's.

Load reports on, Pulsar's own balancing actions off, so that only the planner moves bundles; fast
statistics, so that traffic shows up in the load report within seconds; one bookie. Only per-broker
keys (cluster name, metadata store, addresses, ports) differ between the two and stay with each.

docker-compose.yml cannot import Python, so it repeats these values as `PULSAR_PREFIX_<key>`
variables, which the Pulsar image's `bin/apply-config-from-env.py` writes into `conf/broker.conf`;
tests/unit/test_docker_compose.py fails, printing the block to paste, when the two disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType

PULSAR_ENV_PREFIX = "PULSAR_PREFIX_"

SHARED_BROKER_SETTINGS: Mapping[str, object] = MappingProxyType(
    {
        # One bookie: Pulsar's broker.conf defaults (2/2/2) would fail every ledger creation.
        "managedLedgerDefaultEnsembleSize": 1,
        "managedLedgerDefaultWriteQuorum": 1,
        "managedLedgerDefaultAckQuorum": 1,
        "functionsWorkerEnabled": "false",
        "transactionCoordinatorEnabled": "false",
        # Per-namespace `__change_events` topics would occupy bundles the tests move around.
        "systemTopicEnabled": "false",
        "topicLevelPoliciesEnabled": "false",
        "brokerDeleteInactiveTopicsEnabled": "false",
        # Tests and the demo clean up their namespaces with `?force=true`.
        "forceDeleteNamespaceAllowed": "true",
        "forceDeleteTenantAllowed": "true",
        # Loopback and virtual NICs report no speed (limit -1000); a fixed 1 Gbit/s gives real bandwidth usage.
        "loadBalancerOverrideBrokerNicSpeedGbps": 1,
        # Load reports on, Pulsar's own balancing actions off: only the planner moves bundles.
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
        "loadBalancerEnabled": "true",
        "loadBalancerSheddingEnabled": "false",
        "loadBalancerAutoBundleSplitEnabled": "false",
        "loadBalancerAutoUnloadSplitBundlesEnabled": "false",
        # Fast statistics so a test sees traffic in the load report within seconds, not minutes.
        "statsUpdateFrequencyInSecs": 5,
        "statsUpdateInitialDelayInSecs": 5,
        "loadBalancerReportUpdateMinIntervalMillis": 1000,
        "loadBalancerReportUpdateThresholdPercentage": 1,
        "loadBalancerReportUpdateMaxIntervalMinutes": 1,
        "loadBalancerHostUsageCheckIntervalMinutes": 1,
        "loadBalancerResourceQuotaUpdateIntervalMinutes": 1,
        "brokerShutdownTimeoutMs": 10000,
        # An executor settles an unanswered unload only after the brokers' own unload timeout (60 s by default):
        # these brokers unload in well under a second, and 15 s keeps each such wait short.
        "namespaceBundleUnloadingTimeoutMs": 15000,
    }
)


def as_pulsar_image_env(settings: Mapping[str, object]) -> dict[str, str]:
    """`settings` as environment variables of an `apachepulsar/pulsar` container (`PULSAR_PREFIX_<key>`)."""
    return {f"{PULSAR_ENV_PREFIX}{key}": str(value) for key, value in settings.items()}


# Over the shared settings, for a cluster on the extensible load manager (PIP-192). Its shedding stays off, as the
# modular one's: an unload the planner makes with the admin API is not recorded by the leader's UnloadScheduler, so
# Pulsar's own TransferShedder would not give the moved bundle its grace period and could move it straight back.
EXTENSIBLE_BROKER_SETTINGS: Mapping[str, object] = MappingProxyType(
    {
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl",
        "loadBalancerLoadSheddingStrategy": "org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder",
        "loadBalancerSheddingEnabled": "false",
        "loadBalancerAutoBundleSplitEnabled": "false",
    }
)


OPENID_PROVIDER = "org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID"
OAUTH2_CLIENT_PLUGIN = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"


def openid_auth_settings(
    issuer_url: str, audience: str, key_file: str, super_user_roles: Sequence[str]
) -> dict[str, str]:
    """Pulsar's OpenID Connect authentication (`pulsar-broker-auth-oidc`) with authorization on: tokens of `issuer_url`
    for `audience` accepted, the role read from `azp` (the OAuth2 client's id, which every Keycloak access token
    carries; a service account's `sub` is an id Keycloak makes up), and the brokers calling each other with OAuth2
    client credentials of their own (`key_file`, Pulsar's key file; named by path, never in a process argument).
    Plain http to the issuer only because it is on loopback (`openIDRequireIssuersUseHttps`)."""
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": OPENID_PROVIDER,
        "openIDAllowedTokenIssuers": issuer_url,
        "openIDAllowedAudiences": audience,
        "openIDRoleClaim": "azp",
        "openIDRequireIssuersUseHttps": "false",
        "authorizationEnabled": "true",
        "superUserRoles": ",".join(super_user_roles),
        "brokerClientAuthenticationPlugin": OAUTH2_CLIENT_PLUGIN,
        "brokerClientAuthenticationParameters": json.dumps(
            {
                "type": "client_credentials",
                "issuerUrl": issuer_url,
                "privateKey": f"file://{key_file}",
                "audience": audience,
            },
            separators=(",", ":"),
        ),
    }
