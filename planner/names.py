"""Names that come from outside (clusters, tenants, namespaces, bundles, broker ids), checked by Pulsar's rules.

They end up in storage paths (`cluster=NAME` partitions, run directories), admin URLs and the store, so a name
Pulsar itself would refuse is refused here too, wherever it comes from: a clusters file, a CLI option or an
admin API answer. Pulsar's rule for cluster, tenant and namespace names is `NamedEntity.checkName`,
`^[-=:.\\w]*$` (Java's `\\w`: ASCII letters, digits and `_`). Pulsar allows `.` and `..` as whole names; here they
are refused as well, since such a name would step out of the directory it names.
"""

from __future__ import annotations

import re

from planner.errors import InputError

# One name of Pulsar's alphabet, not `.` or `..` (checked by the lookahead), as a regex fragment others build on.
NAME_PATTERN = r"(?!\.{1,2}(?![-=:.\w]))[-=:.\w]+"
_NAME = re.compile(NAME_PATTERN, re.ASCII)
# A broker id is its lookup service address, `host:webServicePort`; an IPv6 host is bracketed.
_BROKER_ID = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}", re.ASCII)


class PulsarNameError(InputError):
    """A cluster, tenant, namespace or broker name that Pulsar's rules do not allow."""


def check_name(name: str, what: str) -> str:
    """`name` if it is a valid cluster, tenant or namespace name; `what` names the object in the error."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise PulsarNameError(
            f"invalid {what} {name!r}: expected letters, digits, and - = : . _ only (Pulsar's names), not . or .."
        )
    return name


def check_cluster_name(name: str, source: str) -> str:
    """A cluster name, from `source` (the clusters file, an option, the broker's runtime configuration)."""
    return check_name(name, f"cluster name from {source}")


def check_namespace(namespace: str, what: str = "namespace") -> str:
    """A namespace, `tenant/ns` or Pulsar's legacy `tenant/cluster/ns`, each part a valid name."""
    parts = namespace.split("/") if isinstance(namespace, str) else [namespace]
    if len(parts) not in (2, 3):
        raise PulsarNameError(f"invalid {what} {namespace!r}: expected tenant/namespace")
    for part in parts:
        check_name(part, f"{what} {namespace!r}: part")
    return namespace


def check_broker_id(broker_id: str, what: str = "broker id") -> str:
    """A broker id, `host:webServicePort`."""
    if not isinstance(broker_id, str) or _BROKER_ID.fullmatch(broker_id) is None:
        raise PulsarNameError(f"invalid {what} {broker_id!r}: not of the form host:webServicePort")
    return broker_id
