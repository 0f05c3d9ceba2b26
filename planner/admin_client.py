"""Pulsar admin REST API client (spec §8) over `requests`.

Timeouts on every call; bounded retries with backoff (urllib3 `Retry`) on connection errors, and on
5xx for reads only, because a split or unload that reached the broker must not be sent twice; 307
redirects followed with the same method and body, keeping credentials inside the cluster; token or
basic auth; TLS verified by default. Errors name the broker, endpoint and status, never the token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from planner.errors import InputError

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
DEFAULT_RETRIES = 3
DEFAULT_MAX_REDIRECTS = 5
DEFAULT_CONCURRENCY = 64


class AdminError(Exception):
    """A failed admin call: names the broker, endpoint and status (or transport failure)."""

    def __init__(self, broker: str, method: str, endpoint: str, reason: str, status: int | None = None) -> None:
        self.broker = broker
        self.endpoint = endpoint
        self.status = status
        status_text = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"{method} {endpoint} on {broker} failed ({status_text}): {reason}")


class _ClusterSession(requests.Session):
    """A session that keeps credentials across 307 redirects between the cluster's brokers.

    requests drops the Authorization header whenever the port or host changes, but Pulsar redirects
    to the owning broker or the leader, which need the same credentials. Only a downgrade from https
    to http drops them.
    """

    def should_strip_auth(self, old_url: str, new_url: str) -> bool:
        return urlsplit(old_url).scheme == "https" and urlsplit(new_url).scheme != "https"


class _BearerToken(requests.auth.AuthBase):
    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "_BearerToken(***)"


@dataclass(frozen=True, slots=True)
class AdminAuth:
    """Credentials: a JWT (`Bearer`) or HTTP basic user and password. `repr` never shows the secret."""

    token: str | None = None
    username: str | None = None
    password: str | None = None

    def requests_auth(self) -> requests.auth.AuthBase | None:
        if self.token:
            return _BearerToken(self.token)
        if self.username is not None:
            return requests.auth.HTTPBasicAuth(self.username, self.password or "")
        return None

    def secrets(self) -> list[str]:
        return [secret for secret in (self.token, self.password) if secret]

    def __repr__(self) -> str:
        kind = "token" if self.token else "basic" if self.username is not None else "none"
        return f"AdminAuth({kind}, ***)"


def broker_url(broker_id: str, scheme: str) -> str:
    """A broker's web service URL from its id (`host:webPort`), with the cluster's scheme."""
    return f"{scheme}://{broker_id}"


class PulsarAdminClient:
    """Admin calls on one cluster, reached through `admin_url` (any broker or a proxy in front of them)."""

    def __init__(
        self,
        admin_url: str,
        *,
        auth: AdminAuth | None = None,
        ca_file: str | None = None,
        verify_tls: bool = True,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff_factor: float = 0.2,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        parts = urlsplit(admin_url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise InputError(f"invalid admin URL {admin_url!r}: expected http(s)://host:port")
        self.admin_url = admin_url.rstrip("/")
        self.scheme = parts.scheme
        self.timeout = timeout
        self.concurrency = concurrency
        self._auth = auth or AdminAuth()
        self._session = _ClusterSession()
        self._session.max_redirects = max_redirects
        self._session.auth = self._auth.requests_auth()
        self._session.verify = ca_file if ca_file else verify_tls
        self._session.headers["Accept"] = "application/json"
        retry = Retry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            backoff_factor=backoff_factor,
            status_forcelist=(500, 502, 503, 504),
            allowed_methods=frozenset({"GET", "HEAD"}),
            redirect=False,  # requests follows redirects itself, bounded by max_redirects
            raise_on_status=False,
        )
        adapter = HTTPAdapter(max_retries=retry, pool_connections=concurrency, pool_maxsize=concurrency)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> PulsarAdminClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        base: str | None = None,
        params: Mapping[str, str] | None = None,
        body: object = None,
    ) -> requests.Response:
        base = base or self.admin_url
        broker = urlsplit(base).netloc
        try:
            response = self._session.request(
                method,
                base + path,
                params=params,
                data=json.dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None,
                timeout=self.timeout,
            )
        except requests.TooManyRedirects:
            raise AdminError(broker, method, path, f"more than {self._session.max_redirects} redirects") from None
        except requests.RequestException as error:
            raise AdminError(broker, method, path, _transport_reason(error)) from None
        if response.status_code >= 400:
            raise AdminError(
                urlsplit(response.url).netloc or broker,
                method,
                path,
                _error_reason(response),
                response.status_code,
            )
        return response

    def _get_json(self, path: str, *, base: str | None = None, params: Mapping[str, str] | None = None) -> Any:
        response = self._request("GET", path, base=base, params=params)
        return _json_of(response, "GET", path)

    def get_text(self, path: str, *, base: str | None = None) -> str:
        """The raw body of a GET (archived as collected, for audit and replay)."""
        response = self._request("GET", path, base=base)
        _json_of(response, "GET", path)  # refuse malformed JSON with a clear error
        return response.text

    def map_concurrently(self, keys: Sequence[str], call: Callable[[str], T]) -> dict[str, T | AdminError]:
        """Run `call(key)` for every key (broker, namespace) concurrently; failures come back as AdminError."""

        def guarded(key: str) -> T | AdminError:
            try:
                return call(key)
            except AdminError as error:
                return error

        if not keys:
            return {}
        workers = max(1, min(self.concurrency, len(keys)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pulsar-admin") as pool:
            return dict(zip(keys, pool.map(guarded, keys), strict=True))

    # --- reads -----------------------------------------------------------------------------------

    def cluster_name(self) -> str:
        """The Pulsar cluster the admin URL belongs to (runtime configuration, else the only cluster)."""
        try:
            runtime = self._get_json("/admin/v2/brokers/configuration/runtime")
            if isinstance(runtime, dict) and runtime.get("clusterName"):
                return str(runtime["clusterName"])
        except AdminError as error:
            logger.info("runtime configuration unavailable (%s); falling back to the cluster list", error)
        clusters = self._get_json("/admin/v2/clusters")
        if isinstance(clusters, list) and len(clusters) == 1:
            return str(clusters[0])
        raise AdminError(urlsplit(self.admin_url).netloc, "GET", "/admin/v2/clusters", f"ambiguous clusters {clusters}")

    def active_brokers(self, cluster: str) -> list[str]:
        brokers = self._get_json(f"/admin/v2/brokers/{quote(cluster, safe='')}")
        return sorted(str(broker) for broker in brokers)

    def leader_broker(self) -> dict[str, str]:
        return self._get_json("/admin/v2/brokers/leaderBroker")

    def load_report_text(self, broker_id: str) -> str:
        """A broker's own LocalBrokerData; only that broker can answer it."""
        return self.get_text("/admin/v2/broker-stats/load-report", base=broker_url(broker_id, self.scheme))

    def topic_stats(self, broker_id: str) -> dict[str, Any]:
        """Per-topic stats of the topics a broker serves: `{ns: {range: {"persistent": {topic: {...}}}}}`."""
        return self._get_json("/admin/v2/broker-stats/topics", base=broker_url(broker_id, self.scheme))

    def owned_bundles(self, cluster: str, broker_id: str) -> dict[str, Any]:
        return self._get_json(
            f"/admin/v2/brokers/{quote(cluster, safe='')}/{quote(broker_id, safe=':')}/ownedNamespaces"
        )

    def tenants(self) -> list[str]:
        return self._get_json("/admin/v2/tenants")

    def namespaces(self, tenant: str) -> list[str]:
        return self._get_json(f"/admin/v2/namespaces/{quote(tenant, safe='')}")

    def bundle_boundaries(self, namespace: str) -> list[int]:
        data = self._get_json(f"/admin/v2/namespaces/{_namespace_path(namespace)}/bundles")
        return [int(boundary, 16) for boundary in data["boundaries"]]

    def topic_bundle(self, topic: str) -> str:
        return self._request("GET", f"/lookup/v2/topic/{_topic_path(topic)}/bundle").text.strip().strip('"')

    def lookup_topic(self, topic: str) -> dict[str, str]:
        """The topic's owner. Careful: a lookup assigns the bundle if nobody owns it."""
        return self._get_json(f"/lookup/v2/topic/{_topic_path(topic)}")

    # --- actions ---------------------------------------------------------------------------------

    def unload_bundle(self, namespace: str, bundle_range: str, destination: str | None = None) -> None:
        params = {"destinationBroker": destination} if destination else None
        self._request("PUT", f"/admin/v2/namespaces/{_namespace_path(namespace)}/{bundle_range}/unload", params=params)

    def split_bundle(
        self,
        namespace: str,
        bundle_range: str,
        *,
        algorithm: str | None = None,
        positions: Iterable[int] | None = None,
        unload: bool = False,
    ) -> None:
        params = {"unload": "true" if unload else "false"}
        if algorithm:
            params["splitAlgorithmName"] = algorithm
        self._request(
            "PUT",
            f"/admin/v2/namespaces/{_namespace_path(namespace)}/{bundle_range}/split",
            params=params,
            body=list(positions) if positions is not None else None,
        )


def _namespace_path(namespace: str) -> str:
    return "/".join(quote(part, safe="") for part in namespace.split("/"))


def _topic_path(topic: str) -> str:
    """`persistent://t/ns/name` → `persistent/t/ns/name` (URL-encoded local name)."""
    domain, separator, rest = topic.partition("://")
    if not separator or rest.count("/") < 2:
        raise InputError(f"invalid topic {topic!r}: expected persistent://tenant/namespace/name")
    tenant, namespace, local_name = rest.split("/", 2)
    return f"{domain}/{quote(tenant, safe='')}/{quote(namespace, safe='')}/{quote(local_name, safe='')}"


def _json_of(response: requests.Response, method: str, path: str) -> Any:
    try:
        return response.json()
    except ValueError:
        broker = urlsplit(response.url).netloc
        raise AdminError(broker, method, path, "malformed JSON in the response", response.status_code) from None


def _error_reason(response: requests.Response) -> str:
    try:
        reason = response.json().get("reason")
    except (ValueError, AttributeError):
        reason = None
    text = str(reason) if reason else (response.text or response.reason or "")
    return text.strip().replace("\n", " ")[:300]


def _transport_reason(error: requests.RequestException) -> str:
    kind = type(error).__name__
    # After the retries, requests wraps the last failure in urllib3's MaxRetryError.
    cause = error.args[0] if error.args else None
    last = getattr(cause, "reason", cause)
    if isinstance(error, requests.Timeout) or isinstance(last, TimeoutError | urllib3.exceptions.TimeoutError):
        return "timed out, retries exhausted" if isinstance(cause, MaxRetryError) else "timed out"
    if isinstance(error, requests.exceptions.SSLError):
        return "TLS verification failed"
    if isinstance(error, requests.ConnectionError):
        return f"connection failed ({kind})"
    return kind
