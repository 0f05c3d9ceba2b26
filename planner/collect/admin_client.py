"""Pulsar admin REST API (v2) client over `requests`.

Timeouts on every call; bounded retries with backoff (urllib3 `Retry`) on connection errors, and on
5xx for reads only, because a split or unload that reached the broker must not be sent twice; 307
redirects followed with the same method and body, keeping credentials inside the cluster; token or
basic auth; TLS verified by default (the system's CAs, or `ca_file`). Response bodies are read up to
`max_response_bytes` and parsed within the planner's JSON nesting limit, so a broken or hostile
endpoint cannot exhaust memory or the stack. Errors name the broker, endpoint and status, never the token.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import logging
import os
import re
import ssl
import threading
import weakref
from base64 import b64encode
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import spawn
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, ForkServerProcess
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import MaxRetryError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from planner.collect.broker_addresses import MAPPING_HINT, BrokerAddresses
from planner.collect.oauth2 import OAuth2ClientCredentials, OAuth2Tokens, TokenError
from planner.errors import InputError
from planner.names import check_broker_id, check_cluster_name, check_name, check_namespace
from planner.pulsar.bundle_range import check_bundle_name
from planner.pulsar.model import parse_json_document

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
DEFAULT_RETRIES = 3
DEFAULT_MAX_REDIRECTS = 5
DEFAULT_CONCURRENCY = 64
# Worker processes `map_in_processes` starts at most when the cluster's settings do not say (one per usable CPU).
AUTO_READ_PROCESSES_MAX = 4
# How long worker processes may take to start (a fork server importing the planner's client, on a busy machine).
WORKER_START_SECONDS = 30.0
# The largest answers are per-broker topic stats: about 2 KiB per topic, so this allows ~60,000 topics.
DEFAULT_MAX_RESPONSE_BYTES = 128 * 1024 * 1024
# Large enough that a 40 MB answer is read in few steps, each of which waits for the GIL.
_READ_CHUNK_BYTES = 1024 * 1024
# A release as `/brokers/version` and load reports give it: `4.2.4`, `3.0.7.2`, `4.1.0-SNAPSHOT`.
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,63}")


class AdminError(Exception):
    """A failed admin call: names the broker, endpoint and status (or transport failure).

    `may_have_applied` is true when the request may have reached a broker that acted on it: the
    answer was lost (read timeout, connection reset after sending), a 5xx came back (a proxy may
    answer 502 after forwarding), or anything failed after a status line, 2xx included (a body too
    large or cut short). A refused connection, a TLS handshake failure or a readable 4xx mean it did not.
    """

    def __init__(
        self,
        broker: str,
        method: str,
        endpoint: str,
        reason: str,
        status: int | None = None,
        *,
        may_have_applied: bool = False,
    ) -> None:
        self.broker = broker
        self.endpoint = endpoint
        self.status = status
        self.reason = reason
        self.may_have_applied = may_have_applied
        self.method = method
        super().__init__(f"{method} {endpoint} on {broker} failed ({self.status_text}): {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole: a worker process's read returns its failure to the collect (`map_in_processes`).
        return (
            _admin_error,
            (self.broker, self.method, self.endpoint, self.reason, self.status, self.may_have_applied),
        )

    @property
    def status_text(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else "no response"

    @property
    def refused(self) -> bool:
        """The role may not read this: Pulsar answers 403, or 401 where a super-user check fails (from 3.3
        `validateBothSuperuser...` and tenant-admin checks answer 401 to an authenticated role)."""
        return self.status in (401, 403)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _admin_error(
    broker: str, method: str, endpoint: str, reason: str, status: int | None, may_have_applied: bool
) -> AdminError:
    return AdminError(broker, method, endpoint, reason, status, may_have_applied=may_have_applied)


class ClusterSession(requests.Session):
    """A session whose credentials go only where they belong, redirects included.

    Pulsar redirects to the owning broker or the leader, which need the same credentials, so they are
    kept on a redirect to a host the client trusts: the admin URL's and the cluster's own active brokers
    (`PulsarAdminClient.credentials_allowed`). A redirect anywhere else, or from https to http, drops them.
    """

    def __init__(self, allowed: Callable[[str], bool]) -> None:
        super().__init__()
        self._allowed = allowed
        self._environment: dict[tuple[object, ...], dict[str, Any]] = {}

    def merge_environment_settings(self, url: str, proxies: Any, stream: Any, verify: Any, cert: Any) -> dict[str, Any]:
        """requests' reading of the proxy and CA bundle variables, once per host rather than on every request: it
        scans the whole environment each time, a third of a small call's cost, and a collect makes thousands."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc, tuple(sorted((proxies or {}).items())), stream, verify, cert)
        settings = self._environment.get(key)
        if settings is None:
            settings = super().merge_environment_settings(url, dict(proxies or {}), stream, verify, cert)
            self._environment[key] = settings
        return {**settings, "proxies": dict(settings["proxies"])}

    def should_strip_auth(self, old_url: str, new_url: str) -> bool:
        if urlsplit(old_url).scheme == "https" and urlsplit(new_url).scheme != "https":
            return True
        if not self._allowed(new_url):
            logger.warning(
                "redirect to %s: not the admin URL's host nor an active broker; credentials dropped",
                urlsplit(new_url).netloc,
            )
            return True
        return False


class _BearerToken(requests.auth.AuthBase):
    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request

    def __repr__(self) -> str:
        return "_BearerToken(***)"


class TokenFile:
    """A token read from a file, read again whenever the file changes (its inode, size or modification time, one
    `stat` per request): a Kubernetes secret mounted as a file is rotated by swapping the file, and the client sends
    the new token without a restart. A file gone or empty for a moment (a rotation in progress) keeps the last token.
    Every token read is kept for masking (`secrets`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._token: str | None = None
        self._secrets: list[str] = []
        self.reads = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenFile, (self.path,))

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"

    def secrets(self) -> list[str]:
        with self._lock:
            return list(self._secrets)

    def token(self) -> str:
        with self._lock:
            try:
                stat = os.stat(self.path)
                seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                if seen != self._seen:
                    text = Path(self.path).read_text(encoding="utf-8").strip()
                    if text:
                        self._token, self._seen = text, seen
                        self.reads += 1
                        if text not in self._secrets:
                            self._secrets.append(text)
            except (OSError, UnicodeDecodeError) as error:
                if self._token is None:
                    reason = getattr(error, "strerror", None) or "not UTF-8 text"
                    raise TokenError(f"cannot read token_file {self.path!r}: {reason}") from None
                logger.warning("token_file %s unreadable (%s); sending the token read before", self.path, error)
            if self._token is None:
                raise TokenError(f"token_file {self.path!r} is empty")
            return self._token

    def renewed(self, refused: str) -> bool:
        """After a 401: whether the file now holds another token than the refused one."""
        return self.token() != refused


@dataclass(frozen=True, slots=True, weakref_slot=True)
class AdminAuth:
    """Credentials, one kind: a JWT (`Bearer`) given, or read from `token_file` (again when the file changes), HTTP
    basic user and password, or OAuth2 client credentials (`oauth2`, tokens fetched and refreshed). `repr` never
    shows a secret; a copy pickled to another process reads or fetches its tokens itself."""

    token: str | None = None
    username: str | None = None
    password: str | None = None
    token_file: str | None = None
    oauth2: OAuth2ClientCredentials | None = None
    _source: TokenFile | OAuth2Tokens | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kinds = [
            self.token is not None,
            self.username is not None,
            self.token_file is not None,
            self.oauth2 is not None,
        ]
        if sum(kinds) > 1:
            raise ValueError("AdminAuth takes one kind of credentials: token, username, token_file or oauth2")
        source = TokenFile(self.token_file) if self.token_file else OAuth2Tokens(self.oauth2) if self.oauth2 else None
        object.__setattr__(self, "_source", source)

    @property
    def kind(self) -> str:
        if self.token:
            return "token"
        if self.token_file:
            return "token_file"
        if self.oauth2:
            return "oauth2"
        return "basic" if self.username is not None else "none"

    @property
    def has_credentials(self) -> bool:
        return self.kind != "none"

    @property
    def tokens(self) -> TokenFile | OAuth2Tokens | None:
        """Where the tokens come from when they change while the client lives (a file, an OAuth2 issuer)."""
        return self._source

    def requests_auth(self) -> requests.auth.AuthBase | None:
        """The credentials for one request; a token read or fetched now when it comes from a file or an issuer
        (TokenError when it cannot be had)."""
        if self.token:
            return _BearerToken(self.token)
        if self._source is not None:
            return _BearerToken(self._source.token())
        if self.username is not None:
            return requests.auth.HTTPBasicAuth(self.username, self.password or "")
        return None

    def renewed(self, refused: requests.auth.AuthBase | None) -> bool:
        """After a 401 for the credentials `refused`: whether other ones are now held, worth one retry (a token file
        rotated, an OAuth2 token fetched again). TokenError when a new token cannot be had."""
        if self._source is None or not isinstance(refused, _BearerToken):
            return False
        return self._source.renewed(refused.token)

    def secrets(self) -> list[str]:
        """Every form of the credentials that could come back in an answer (the Basic header is base64), and every
        token read or fetched so far."""
        found = [secret for secret in (self.token, self.password) if secret]
        if self.username is not None and self.password:
            found.append(b64encode(f"{self.username}:{self.password}".encode()).decode())
        if self._source is not None:
            found.extend(self._source.secrets())
        return found

    def redact(self, text: str) -> str:
        """`text` with the credentials masked (a proxy or broker may echo request headers in an error)."""
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:
        return f"AdminAuth({self.kind}, ***)"


class _SecretsFilter(logging.Filter):
    """Masks the credentials of every live client in the records of the HTTP libraries' loggers: urllib3
    logs request URLs when it retries, and a redirect may put a token in one."""

    def __init__(self) -> None:
        super().__init__()
        # By identity: AdminAuth compares by value, and a WeakSet keeps one of two equal live objects, then forgets
        # the value when that one is collected, though the other still serves a client (seen in a full test run).
        self.auths: weakref.WeakValueDictionary[int, AdminAuth] = weakref.WeakValueDictionary()

    def filter(self, record: logging.LogRecord) -> bool:
        auths = list(self.auths.values())
        if auths:
            message = record.getMessage()
            masked = message
            for auth in auths:
                masked = auth.redact(masked)
            if masked != message:
                record.msg, record.args = masked, ()
        return True


_SECRETS_FILTER = _SecretsFilter()
for _name in ("urllib3.connectionpool", "urllib3.util.retry", "urllib3.poolmanager", "urllib3.response"):
    logging.getLogger(_name).addFilter(_SECRETS_FILTER)


@dataclass(frozen=True, slots=True)
class _ClientArgs:
    """What a client was made with, to make the same client in a worker process (pickled through the pool's pipe:
    the credentials never reach a process's arguments or environment)."""

    admin_url: str
    options: dict[str, Any] = field(default_factory=dict)
    trusted_hosts: frozenset[str] = frozenset()
    # The cluster's name, and the brokers whose mapped URL the parent checked (`broker_base`): not checked again.
    cluster: str | None = None
    brokers: tuple[str, ...] = ()
    mapping_checked: frozenset[str] = frozenset()


class WorkerProcessError(RuntimeError):
    """A worker process of `map_in_processes` died (killed, out of memory) before answering: the reads it held
    have no answer, so the whole map fails rather than pass off a broker as missing."""


@dataclass(frozen=True, slots=True)
class _Answer:
    """A response whose body has been read within the size limit."""

    status: int
    broker: str  # host:port that answered (after redirects)
    body: bytes
    location: str | None = None  # where a redirect not followed points

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Retry(Retry):
    """urllib3's retries, except for a refused connection or a name that does not resolve: nothing listens there, or
    the name is wrong, and a retry a fraction of a second later would only say so again, with a warning each time
    (a broker that restarts takes seconds; the executor's reconciliation covers that)."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if error is not None and _pool is not None and _refused_or_unresolved(error):
            raise MaxRetryError(_pool, url or "", error) from error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def _refused_or_unresolved(error: object) -> bool:
    if isinstance(error, urllib3.exceptions.NameResolutionError):
        return True
    return isinstance(error, urllib3.exceptions.NewConnectionError) and isinstance(
        error.__cause__, ConnectionRefusedError
    )


class PulsarAdminClient:
    """Admin calls on one cluster, reached through `admin_url` (any broker or a proxy in front of them)."""

    def __init__(
        self,
        admin_url: str,
        *,
        auth: AdminAuth | None = None,
        ca_file: str | None = None,
        verify_tls: bool = True,
        client_cert: str | tuple[str, str] | None = None,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff_factor: float = 0.2,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        allow_insecure_http_credentials: bool = False,
        read_processes: int | None = None,
        broker_urls: Mapping[str, str] | None = None,
        broker_url_template: str | None = None,
    ) -> None:
        """`read_processes`: worker processes for `map_in_processes` (0: none, its reads run in threads; None: one per
        usable CPU, up to `AUTO_READ_PROCESSES_MAX`, with at least two keys each). `broker_urls`, `broker_url_template`:
        where each broker's own web service is reached (`planner.collect.broker_addresses`)."""
        self._options: dict[str, Any] = {
            "auth": auth,
            "ca_file": ca_file,
            "verify_tls": verify_tls,
            "client_cert": client_cert,
            "timeout": timeout,
            "retries": retries,
            "backoff_factor": backoff_factor,
            "max_redirects": max_redirects,
            "concurrency": concurrency,
            "max_response_bytes": max_response_bytes,
            "allow_insecure_http_credentials": allow_insecure_http_credentials,
            "read_processes": 0,  # a worker's client reads in threads
            "broker_urls": dict(broker_urls or {}),
            "broker_url_template": broker_url_template,
        }
        self.read_processes = read_processes
        parts = urlsplit(admin_url)
        if parts.scheme not in {"http", "https"} or not parts.netloc or not parts.hostname:
            raise InputError(f"invalid admin URL {admin_url!r}: expected http(s)://host:port")
        self._auth = auth or AdminAuth()
        if self._auth.has_credentials:
            _SECRETS_FILTER.auths[id(self._auth)] = self._auth
        self.allow_insecure_http_credentials = allow_insecure_http_credentials
        if self._auth.has_credentials and not self._plain_text_allowed(admin_url):
            raise InputError(
                f"admin URL {admin_url}: credentials would travel over plain http to a host that is not loopback; "
                "use https, or set allow_insecure_http_credentials = true in the cluster's settings"
            )
        # Hosts that may receive the credentials: the admin URL's, and the active brokers the cluster lists.
        self._trusted_hosts = {parts.hostname}
        self.admin_url = admin_url.rstrip("/")
        self.scheme = parts.scheme
        self.broker_addresses = BrokerAddresses.of(parts.scheme, broker_url_template, broker_urls)
        # The hosts the operator mapped brokers to are theirs: trusted with the credentials like the brokers.
        self._trusted_hosts.update(self.broker_addresses.hosts())
        # Per broker whose URL is mapped: None once the mapping is checked, else why it is wrong (`broker_base`).
        self._mapping_checked: dict[str, AdminError | None] = {}
        self._mapping_lock = threading.Lock()
        # The Pulsar cluster's name and active brokers once known (`cluster_name`, `active_brokers`), for the mapping
        # check.
        self._cluster: str | None = None
        self._brokers: tuple[str, ...] = ()
        self.timeout = timeout
        self.concurrency = concurrency
        self.max_response_bytes = max_response_bytes
        # Passed on every request too: requests lets REQUESTS_CA_BUNDLE override a session's CA file.
        self._verify: str | bool = ca_file if ca_file else verify_tls
        self._session = ClusterSession(self.credentials_allowed)
        self._session.max_redirects = max_redirects
        self._session.verify = self._verify
        self._session.cert = client_cert
        self._session.headers["Accept"] = "application/json"
        retry = _Retry(
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

    def _plain_text_allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" or is_loopback(parts.hostname or "") or self.allow_insecure_http_credentials

    def credentials_allowed(self, url: str) -> bool:
        """Whether a request to `url` may carry the credentials: a trusted host, and not plain http to a
        host that is not loopback (unless the cluster's settings allow it)."""
        return urlsplit(url).hostname in self._trusted_hosts and self._plain_text_allowed(url)

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
        redirects: bool = True,
        renew: bool = True,
    ) -> _Answer:
        """`redirects`: follow them (else a 3xx is answered, with its `location`). `renew`: on a 401, send once more
        if the credentials changed meanwhile (a token file rotated, an OAuth2 token expired and fetched again); a
        401 means the broker did not act, so a write is safe to send again."""
        base = base or self.admin_url
        broker = urlsplit(base).netloc
        try:
            auth = self._auth.requests_auth() if self.credentials_allowed(base) else None
        except TokenError as error:
            raise AdminError(broker, method, path, str(error)) from None
        if auth is None and self._auth.has_credentials:
            logger.warning("%s %s on %s: not a host the credentials may go to; sent without them", method, path, broker)
        try:
            with self._session.request(
                method,
                base + path,
                auth=auth,
                params=params,
                data=json.dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None,
                timeout=self.timeout,
                verify=self._verify,
                stream=True,
                allow_redirects=redirects,
            ) as response:
                answer = _Answer(
                    response.status_code,
                    urlsplit(response.url).netloc or broker,
                    self._read_body(response, method, path),
                    response.headers.get("Location") if response.is_redirect else None,
                )
        except requests.TooManyRedirects:
            raise AdminError(broker, method, path, f"more than {self._session.max_redirects} redirects") from None
        except requests.RequestException as error:
            raise AdminError(
                broker, method, path, _transport_reason(error), may_have_applied=_may_have_been_sent(error)
            ) from None
        if answer.status == 401 and renew and auth is not None:
            try:
                renewed = self._auth.renewed(auth)
            except TokenError as error:
                raise AdminError(answer.broker, method, path, f"HTTP 401, and then: {error}", answer.status) from None
            if renewed:
                logger.info("%s %s on %s: HTTP 401; sending again with renewed credentials", method, path, broker)
                return self._request(
                    method, path, base=base, params=params, body=body, redirects=redirects, renew=False
                )
        if answer.status >= 400:
            reason = _error_reason(answer, response.reason, self._auth)
            raise AdminError(answer.broker, method, path, reason, answer.status, may_have_applied=answer.status >= 500)
        return answer

    def _read_body(self, response: requests.Response, method: str, path: str) -> bytes:
        """The body, refused once it exceeds `max_response_bytes` (decompressed, so gzip bombs count in full)."""
        limit = self.max_response_bytes
        declared = response.headers.get("Content-Length", "")

        def unreadable(reason: str) -> AdminError:
            # Past the status line the broker has seen the request: whatever fails now may have applied.
            return AdminError(
                urlsplit(response.url).netloc, method, path, reason, response.status_code, may_have_applied=True
            )

        too_large = unreadable(f"response body larger than the limit of {limit} bytes (max_response_bytes)")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        # A declared length is read as one piece: a broker's topic stats are tens of MB, and every further copy of
        # them (chunks into a buffer, the buffer into bytes) cost more CPU than parsing them.
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_content(max(int(declared), 1) if declared.isdigit() else _READ_CHUNK_BYTES):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise too_large
        except requests.RequestException as error:  # a body cut short, badly chunked or undecodable
            raise unreadable(f"answer {response.status_code} could not be read: {_transport_reason(error)}") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _get_json(self, path: str, *, base: str | None = None, params: Mapping[str, str] | None = None) -> Any:
        answer = self._request("GET", path, base=base, params=params)
        return _json_of(answer, "GET", path, self.max_response_bytes)

    def get_text(self, path: str, *, base: str | None = None) -> str:
        """The raw body of a GET (archived as collected, for audit and replay)."""
        answer = self._request("GET", path, base=base)
        _json_of(answer, "GET", path, self.max_response_bytes)  # refuse malformed JSON with a clear error
        return answer.text

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

    def worker_processes(self, keys: int) -> int:
        """How many worker processes `map_in_processes` starts for `keys` keys: `read_processes` (at most one per
        key), or when unset one per usable CPU up to `AUTO_READ_PROCESSES_MAX` with two keys each at least. Fewer
        than two is none: one process would only add its start to the same single core's work."""
        if self.read_processes is not None:
            count = min(self.read_processes, keys)
        else:
            count = min(_usable_cpus(), AUTO_READ_PROCESSES_MAX, keys // 2)
        return count if count >= 2 else 0

    def map_in_processes(
        self, keys: Sequence[str], call: Callable[[PulsarAdminClient, str], T]
    ) -> dict[str, T | AdminError]:
        """`call(client, key)` for every key, in worker processes that each hold a client made like this one, for
        reads that cost more CPU to decode than to fetch (a broker's topic stats, tens of MB of JSON): threads
        decode on one core, under one GIL, processes on all of them. `call` is a module-level function, what it
        returns is pickled back; failures come back as AdminError. Without worker processes (`worker_processes`),
        the calls run in this process's threads. A worker that dies raises WorkerProcessError."""
        processes = self.worker_processes(len(keys))
        if not processes:
            return self.map_concurrently(keys, lambda key: call(self, key))
        if call.__module__ == "__main__":
            raise ValueError(f"map_in_processes: {call.__qualname__} is not importable (defined in __main__)")
        checked = frozenset(broker for broker, failure in self._mapping_checked.items() if failure is None)
        trusted = frozenset(self._trusted_hosts)
        args = _ClientArgs(self.admin_url, self._options, trusted, self._cluster, self._brokers, checked)
        # forkserver, not fork: this process has threads (heartbeats, pools, a scheduler's), which fork would copy
        # mid-flight, locks held; and not spawn, which imports the planner again for every pool. Its workers start
        # without this process's `__main__` (`_WorkerProcess`).
        context = _WorkerContext()
        # Imported once by the fork server (started by the first pool of this process), not by every worker.
        context.set_forkserver_preload([__name__, call.__module__])
        answers: dict[str, T | AdminError] = {}
        silence = self._worker_silence_limit()
        # Held open here only: when this process dies, even by SIGKILL, the workers read its end-of-file and exit
        # (a pool's workers hold both ends of its call queue, so they would wait on it forever; and with them the
        # fork server and resource tracker, which live as long as a worker holds their pipes).
        alive_reader, alive_writer = context.Pipe(duplex=False)
        try:
            with (
                alive_reader,
                alive_writer,
                ProcessPoolExecutor(
                    processes, mp_context=context, initializer=_start_worker, initargs=(args, alive_reader)
                ) as pool,
            ):
                futures = {pool.submit(_call_in_worker, call, key): key for key in keys}
                pending: set[Future[T | AdminError]] = set(futures)
                while pending:
                    starting = len(answers) == 0  # the first answer waits for the workers to start too
                    timeout = silence + (WORKER_START_SECONDS if starting else 0)
                    done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                    if not done:
                        _kill_workers(pool)
                        raise WorkerProcessError(
                            f"no worker process reading {self.admin_url}'s brokers answered in {timeout:.0f} s, past "
                            "every timeout of their calls (paused or starved?); they were killed and nothing of "
                            "this collect is kept"
                        )
                    for future in done:
                        answers[futures[future]] = future.result()
        except BrokenProcessPool:
            raise WorkerProcessError(
                f"a worker process reading {self.admin_url}'s brokers died before answering (killed or out of "
                "memory); nothing of this collect is kept"
            ) from None
        return {key: answers[key] for key in keys}

    def _worker_silence_limit(self) -> float:
        """How long `map_in_processes` waits for its next answer before it takes its workers for stuck (stopped,
        swapped out): a call within the client's own limits has answered by then (every attempt's connect and read
        timeouts, and decoding the largest answer allowed at 10 MB/s)."""
        connect, read = self.timeout
        attempts = int(self._options["retries"]) + 1
        return (connect + read) * attempts + self.max_response_bytes / 10_000_000

    # --- one broker's own web service ------------------------------------------------------------

    def broker_base(self, broker_id: str) -> str:
        """The base URL of `broker_id`'s own web service, for the reads only that broker can answer (everything else
        goes to the admin URL, which may be a proxy): `broker_urls`, else `broker_url_template`, else its id with the
        admin URL's scheme. A mapped URL is checked to reach that broker, once per client (`_check_mapping`)."""
        url = self.broker_addresses.url(broker_id)
        if self.broker_addresses.source(broker_id) is not None:
            # The operator mapped the broker there: its host may receive the credentials, as the broker's own may.
            self._trusted_hosts.add(urlsplit(url).hostname or "")
            self._check_mapping(broker_id, url)
        return url

    def _from_broker(self, broker_id: str, path: str) -> _Answer:
        """GET `path` of `broker_id`'s own web service; a failure to reach it names the broker, the URL tried, why,
        and the settings that map it."""
        base = self.broker_base(broker_id)
        try:
            return self._request("GET", path, base=base)
        except AdminError as error:
            raise self._unreachable(broker_id, base, error) from None

    def _check_mapping(self, broker_id: str, base: str) -> None:
        """Raise unless `base` reaches `broker_id` itself. Pulsar redirects `ownedNamespaces` of a broker to that broker
        (`BrokersBase.getOwnedNamespaces`, `maybeRedirectToBroker`): asked without following redirects, that broker
        answers 200, any other one 307 to it. And that broker redirects the same question about another broker: a
        URL that answers 200 for both follows the redirects itself, as Pulsar's proxy does on its `/admin` route,
        and would hand each per-broker read to whichever broker it picks. The result is kept once settled: one check
        per broker and client (one collect)."""
        with self._mapping_lock:
            if broker_id in self._mapping_checked:
                known = self._mapping_checked[broker_id]
                if known is not None:
                    raise known
                return
        cluster = self._cluster or self.cluster_name()
        setting = self.broker_addresses.source(broker_id)
        answer, path = self._owned_namespaces_at(base, cluster, broker_id, broker_id)
        failure = None
        if answer.status != 200:
            elsewhere = f"it redirected to {answer.location}" if answer.location else f"it answered {answer.status}"
            failure = AdminError(
                broker_id,
                "GET",
                path,
                f"cluster {cluster}: {base} ({setting}) does not reach broker {broker_id} but another: {elsewhere}; "
                f"map {broker_id} to its own web service",
                answer.status,
            )
        elif other := next((broker for broker in self._brokers if broker != broker_id), None):
            answer, path = self._owned_namespaces_at(base, cluster, other, broker_id)
            if answer.status == 200:
                failure = AdminError(
                    broker_id,
                    "GET",
                    path,
                    f"cluster {cluster}: {base} ({setting}) answers for other brokers too (it follows Pulsar's "
                    "redirects, as a proxy's /admin route does), so a read there may be another broker's; map "
                    f"{broker_id} to its own web service",
                    answer.status,
                )
        # Kept once settled (it reaches that broker, or not); a broker not reached now may be reached later.
        with self._mapping_lock:
            self._mapping_checked[broker_id] = failure
        if failure is not None:
            raise failure

    def _owned_namespaces_at(self, base: str, cluster: str, broker_id: str, mapped: str) -> tuple[_Answer, str]:
        """`ownedNamespaces` of `broker_id` at `base` (`mapped`'s URL), redirects not followed (`_check_mapping`)."""
        path = f"/admin/v2/brokers/{quote(cluster, safe='')}/{quote(broker_id, safe=':')}/ownedNamespaces"
        try:
            return self._request("GET", path, base=base, redirects=False), path
        except AdminError as error:
            raise self._unreachable(mapped, base, error) from None

    def _unreachable(self, broker_id: str, base: str, error: AdminError) -> AdminError:
        """`error` of a read of `broker_id`'s own web service at `base`, in one line saying what was tried, why it
        failed and, when the broker was not reached (no answer, a gateway's 502 or 504), which settings map it. A
        mapped URL that refuses the credentials (401, 403: a proxy or ingress asking for others) is named too."""
        where = f"cluster {self._cluster}: " if self._cluster else ""
        source = self.broker_addresses.source(broker_id)
        tried = f"{base} (from {source})" if source else base
        if error.status is None or error.status in (502, 504):
            reason = f"{where}broker {broker_id} unreachable at {tried}: {error.reason}; {MAPPING_HINT}"
        elif error.status in (401, 403) and source:
            reason = f"{where}broker {broker_id} at {tried} refused the request: {error.reason}"
        else:
            return error
        return AdminError(
            broker_id, error.method, error.endpoint, reason, error.status, may_have_applied=error.may_have_applied
        )

    # --- reads -----------------------------------------------------------------------------------

    def runtime_configuration(self) -> dict[str, Any]:
        """The answering broker's configuration (every key, as strings); empty when it may not be read."""
        try:
            runtime = self._get_json("/admin/v2/brokers/configuration/runtime")
        except AdminError as error:
            logger.info("runtime configuration unavailable (%s)", error)
            return {}
        return runtime if isinstance(runtime, dict) else {}

    def runtime_configuration_of(self, broker_id: str) -> dict[str, Any]:
        """One broker's own runtime configuration (every key, as strings, secrets included: keep only what is
        needed); AdminError when it may not be read."""
        path = "/admin/v2/brokers/configuration/runtime"
        answer = self._from_broker(broker_id, path)
        return _json_object(_json_of(answer, "GET", path, self.max_response_bytes), broker_id, path)

    def dynamic_configuration(self) -> dict[str, Any]:
        """The dynamic configuration's values the cluster overrides (`/brokers/configuration/values`)."""
        path = "/admin/v2/brokers/configuration/values"
        return _json_object(self._get_json(path), urlsplit(self.admin_url).netloc, path)

    def broker_version(self, broker_id: str | None = None) -> str:
        """The Pulsar release a broker says it runs (`4.2.4`): the answering broker's, or `broker_id`'s own."""
        path = "/admin/v2/brokers/version"
        answer = self._from_broker(broker_id, path) if broker_id else self._request("GET", path)
        version = answer.text.strip().strip('"')
        if not _VERSION.fullmatch(version):
            raise AdminError(answer.broker, "GET", path, f"not a release: {version[:40]!r}", answer.status)
        return version

    def cluster_name(self, runtime: Mapping[str, Any] | None = None) -> str:
        """The Pulsar cluster the admin URL belongs to (runtime configuration, else the only cluster), checked by
        Pulsar's naming rule: it names directories and URL paths. `runtime`: the configuration if already read."""
        runtime = self.runtime_configuration() if runtime is None else runtime
        if runtime.get("clusterName"):
            self._cluster = check_cluster_name(str(runtime["clusterName"]), f"{self.admin_url}'s runtime configuration")
            return self._cluster
        clusters = self._get_json("/admin/v2/clusters")
        if isinstance(clusters, list) and len(clusters) == 1:
            self._cluster = check_cluster_name(str(clusters[0]), f"{self.admin_url}/admin/v2/clusters")
            return self._cluster
        raise AdminError(urlsplit(self.admin_url).netloc, "GET", "/admin/v2/clusters", f"ambiguous clusters {clusters}")

    def active_brokers(self, cluster: str) -> list[str]:
        """The cluster's active brokers (`host:webPort`); their hosts may receive the credentials from now on."""
        path = f"/admin/v2/brokers/{quote(cluster, safe='')}"
        brokers = sorted(check_broker_id(str(broker), f"broker id in {path}") for broker in self._get_json(path))
        self._trusted_hosts.update(urlsplit(f"//{broker}").hostname or "" for broker in brokers)
        self._cluster, self._brokers = cluster, tuple(brokers)
        return brokers

    def leader_broker(self) -> dict[str, str]:
        return self._get_json("/admin/v2/brokers/leaderBroker")

    def load_report_text(self, broker_id: str) -> str:
        """A broker's own LocalBrokerData; only that broker can answer it."""
        path = "/admin/v2/broker-stats/load-report"
        answer = self._from_broker(broker_id, path)
        _json_of(answer, "GET", path, self.max_response_bytes)  # refuse malformed JSON with a clear error
        return answer.text

    def topic_stats(self, broker_id: str) -> dict[str, Any]:
        """Per-topic stats of the topics a broker serves: `{ns: {range: {"persistent": {topic: {...}}}}}`."""
        return _json_of(
            self._from_broker(broker_id, path := "/admin/v2/broker-stats/topics"), "GET", path, self.max_response_bytes
        )

    def topic_stats_body(self, broker_id: str) -> bytes:
        """`topic_stats` as the broker sent it (within `max_response_bytes`), for a reader that decodes only the
        fields it needs (`planner.collect.extensible`)."""
        return self._from_broker(broker_id, "/admin/v2/broker-stats/topics").body

    def broker_metrics(self, broker_id: str) -> list[dict[str, Any]]:
        """A broker's metrics (`[{"dimensions": {...}, "metrics": {...}}]`); on the extensible load manager they
        hold its `brk_lb_*` resource usage. Reading them makes the broker compute its load data again."""
        path = "/admin/v2/broker-stats/metrics"
        return _json_of(self._from_broker(broker_id, path), "GET", path, self.max_response_bytes)

    def owned_bundles(self, cluster: str, broker_id: str) -> dict[str, Any]:
        path = f"/admin/v2/brokers/{quote(cluster, safe='')}/{quote(broker_id, safe=':')}/ownedNamespaces"
        owned = self._get_json(path)
        for bundle in owned if isinstance(owned, dict) else ():
            check_bundle_name(str(bundle))
        return owned

    def bundle_owners(self, cluster: str) -> dict[str, str]:
        """Every bundle an active broker owns, with that broker."""
        return {
            bundle: broker for broker in self.active_brokers(cluster) for bundle in self.owned_bundles(cluster, broker)
        }

    def isolation_policies(self, cluster: str) -> dict[str, Any]:
        """The cluster's namespace isolation policies by name; none at all is a 404 in Pulsar, an empty dict here."""
        try:
            return self._get_json(f"/admin/v2/clusters/{quote(cluster, safe='')}/namespaceIsolationPolicies")
        except AdminError as error:
            if error.status == 404:
                return {}
            raise

    def failure_domains(self, cluster: str) -> dict[str, Any]:
        """The cluster's failure domains by name (`{"brokers": [...]}` each)."""
        path = f"/admin/v2/clusters/{quote(cluster, safe='')}/failureDomains"
        return _json_object(self._get_json(path), urlsplit(self.admin_url).netloc, path)

    def set_isolation_policy(self, cluster: str, name: str, policy: Mapping[str, Any]) -> None:
        """Create or replace a namespace isolation policy (idempotent)."""
        path = f"/admin/v2/clusters/{quote(cluster, safe='')}/namespaceIsolationPolicies/{quote(name, safe='')}"
        self._request("POST", path, body=dict(policy))

    def delete_isolation_policy(self, cluster: str, name: str) -> bool:
        """Delete a namespace isolation policy; False when there was none."""
        path = f"/admin/v2/clusters/{quote(cluster, safe='')}/namespaceIsolationPolicies/{quote(name, safe='')}"
        try:
            self._request("DELETE", path)
        except AdminError as error:
            if error.status in (404, 412):
                return False
            raise
        return True

    def tenants(self) -> list[str]:
        tenants = self._get_json("/admin/v2/tenants")
        return [check_name(str(tenant), "tenant in /admin/v2/tenants") for tenant in tenants]

    def namespaces(self, tenant: str) -> list[str]:
        path = f"/admin/v2/namespaces/{quote(tenant, safe='')}"
        return [check_namespace(str(namespace), f"namespace in {path}") for namespace in self._get_json(path)]

    def bundle_boundaries(self, namespace: str) -> list[int]:
        data = self._get_json(f"/admin/v2/namespaces/{_namespace_path(namespace)}/bundles")
        return [int(boundary, 16) for boundary in data["boundaries"]]

    def anti_affinity_group(self, namespace: str) -> str | None:
        """The namespace's anti-affinity group, None when it has none. Pulsar keeps it in the namespace's local
        policies, which its policies document (`GET /namespaces/{tenant}/{namespace}`) does not carry, so it has an
        endpoint of its own. It answers the bare string, and without a group an empty body."""
        path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/antiAffinity"
        answer = self._request("GET", path)
        text = answer.text.strip()
        if text.startswith('"'):  # a JSON string, as a proxy or a later release may send it
            parsed = _json_of(answer, "GET", path, self.max_response_bytes)
            text = parsed if isinstance(parsed, str) else ""
        return text or None

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


def _json_object(document: Any, broker: str, path: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise AdminError(broker, "GET", path, f"expected a JSON object, got {type(document).__name__}")
    return document


def _json_of(answer: _Answer, method: str, path: str, max_bytes: int) -> Any:
    try:
        return parse_json_document(answer.body, "response", max_bytes=max_bytes)
    except InputError as error:
        reason = str(error).removeprefix("invalid response: ")
        raise AdminError(answer.broker, method, path, reason, answer.status) from None


def _error_reason(answer: _Answer, http_reason: str | None, auth: AdminAuth) -> str:
    try:
        document = parse_json_document(answer.body, "error response", max_bytes=len(answer.body))
        reason = document.get("reason") if isinstance(document, dict) else None
    except InputError:
        reason = None
    text = str(reason) if reason else (answer.text or http_reason or "")
    # Masked before shortening, so no prefix of a secret survives the cut.
    return auth.redact(text).strip().replace("\n", " ")[:300]


def _innermost_ssl_error(error: BaseException) -> ssl.SSLError | None:
    """The `ssl` error under requests' and urllib3's wrappers (MaxRetryError, SSLError), if any."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return current
        linked = [getattr(current, "reason", None), current.__cause__, current.__context__, *current.args]
        pending.extend(item for item in linked if isinstance(item, BaseException))
    return None


def _tls_reason(error: requests.exceptions.SSLError) -> str:
    cause = _innermost_ssl_error(error)
    if isinstance(cause, ssl.SSLCertVerificationError):
        detail = cause.verify_message or cause.reason or "certificate not trusted"
        return f"TLS verification failed ({detail}); set ca_file to the CA that signed the broker's certificate"
    detail = getattr(cause, "reason", None) or type(cause or error).__name__
    return f"TLS handshake failed ({detail})"


def _may_have_been_sent(error: requests.RequestException) -> bool:
    """Whether the request may have left this process before the transport failed. Only failures to
    connect (refused, unreachable, connect timeout, TLS handshake) prove it did not."""
    if isinstance(error, requests.ConnectTimeout | requests.exceptions.SSLError | requests.exceptions.InvalidURL):
        return False
    if isinstance(error, requests.ConnectionError):
        cause = error.args[0] if error.args else None
        last = getattr(cause, "reason", cause)
        if isinstance(last, urllib3.exceptions.NewConnectionError | urllib3.exceptions.NameResolutionError):
            return False
    return True


def _transport_reason(error: requests.RequestException) -> str:
    """Why no answer came, as an operator tells it apart: connection refused, name does not resolve, connect or read
    timed out, TLS; "retries exhausted" when urllib3 retried first."""
    # After the retries, requests wraps the last failure in urllib3's MaxRetryError.
    cause = error.args[0] if error.args else None
    last = getattr(cause, "reason", cause)
    retried = ", retries exhausted" if isinstance(cause, MaxRetryError) and not _refused_or_unresolved(last) else ""
    if isinstance(error, requests.exceptions.SSLError):
        return _tls_reason(error)
    # Before the timeouts: urllib3 2 makes every failure to connect (NewConnectionError) a ConnectTimeoutError.
    if isinstance(last, urllib3.exceptions.NameResolutionError):
        return "name does not resolve"
    if isinstance(last, urllib3.exceptions.NewConnectionError):
        return _connect_failure(last) + retried
    if isinstance(error, requests.ConnectTimeout) or isinstance(last, urllib3.exceptions.ConnectTimeoutError):
        return "connect timed out" + retried
    if isinstance(error, requests.Timeout) or isinstance(last, TimeoutError | urllib3.exceptions.TimeoutError):
        return "read timed out" + retried
    if isinstance(error, requests.ConnectionError):
        return f"connection failed ({type(last or error).__name__}){retried}"
    return type(error).__name__


def _connect_failure(error: urllib3.exceptions.NewConnectionError) -> str:
    """A failure to connect by its cause: refused (nothing listens), no route, or another OS error by its text."""
    cause = error.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, OSError) and cause.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"no route to the host ({cause.strerror})"
    if isinstance(cause, OSError) and cause.strerror:
        return f"connection failed ({cause.strerror})"
    return "connection failed"


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as a container's cpuset limits it), where the OS says."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL a pool's workers (a stopped process ignores everything else), so that its shutdown does not wait
    for them forever; `_processes` is the pool's own record of them (no public handle before Python 3.14)."""
    for process in list(getattr(pool, "_processes", {}).values()):
        process.kill()


class _WorkerProcess(ForkServerProcess):
    """A worker process of `map_in_processes`: forked by the fork server, without its parent's `__main__`."""


class _WorkerContext(ForkServerContext):
    Process = _WorkerProcess


_stdlib_preparation_data = spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    """What multiprocessing sends a process it starts, for it to prepare itself; for a `_WorkerProcess`, without
    the parent's `__main__`, which it would import again by path (or name) before it runs anything. A worker runs
    only this module's functions and `call`'s module's, which the fork server imported; and the parent's `__main__`
    may not import there at all: in an Airflow 3 task it is the `airflow` script, whose import configures Airflow's
    database from an environment the task masks (`airflow-db-not-allowed:///`), so every worker died before it read
    anything and the collect failed (`tests/integration/test_collect_processes_in_airflow.py`). Other processes'
    data is left as it is."""
    data = _stdlib_preparation_data(name)
    if name.startswith(f"{_WorkerProcess.__name__}-"):
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
    return data


# multiprocessing asks `spawn` for this data in the parent, by the new process's name only (popen_forkserver).
spawn.get_preparation_data = _preparation_data


# The client of a worker process of `map_in_processes`, made once when the worker starts.
_worker_client: PulsarAdminClient | None = None


def _start_worker(args: _ClientArgs, parent_alive: Connection) -> None:
    global _worker_client
    _worker_client = PulsarAdminClient(args.admin_url, **args.options)
    _worker_client._trusted_hosts.update(args.trusted_hosts)
    _worker_client._cluster, _worker_client._brokers = args.cluster, args.brokers
    _worker_client._mapping_checked.update(dict.fromkeys(args.mapping_checked))
    threading.Thread(target=_exit_with_parent, args=(parent_alive,), name="parent-alive", daemon=True).start()


def _exit_with_parent(parent_alive: Connection) -> None:
    """Exit this worker once the process that started the pool is gone (its end of `parent_alive` closed)."""
    with contextlib.suppress(EOFError, OSError):
        parent_alive.recv_bytes()
    os._exit(1)


def _call_in_worker(call: Callable[[PulsarAdminClient, str], T], key: str) -> T | AdminError:
    assert _worker_client is not None, "_start_worker runs first in every worker"
    try:
        return call(_worker_client, key)
    except AdminError as error:
        return error
