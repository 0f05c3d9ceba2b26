"""OAuth2 client credentials (RFC 6749 §4.4) for the admin client, as Pulsar's own clients do it.

Pulsar's `AuthenticationOAuth2` (pulsar-client, `ClientCredentialsFlow`) reads the issuer's metadata at
`<issuer_url>/.well-known/openid-configuration` (`DefaultMetadataResolver`) for its `token_endpoint`, reads a key
file (`KeyFile`: `type`, `client_id`, `client_secret`, optional `issuer_url`) at every fetch, and posts
`grant_type=client_credentials` with `client_id`, `client_secret` and, when set, `audience` and `scope` as a form
(`client_secret_post`). Its access token is sent as `Authorization: Bearer`. It refreshes at 90 % of `expires_in`
(`expiryAdjustment`); so does `OAuth2Tokens`, fetching in the calling thread under a lock (the collect reads in
64 threads: one of them fetches, the others wait for its token).

Every client secret read and every access token fetched stays in `OAuth2Tokens.secrets()`, which the admin client's
secrets filter masks in logs and error texts. Nothing here is pickled but the configuration: a worker process of
`map_in_processes` fetches tokens of its own.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from planner.errors import InputError

# Pulsar's AuthenticationOAuth2 refreshes once this share of `expires_in` has passed (its default expiryAdjustment).
REFRESH_FRACTION = 0.9
# A 401 with a token younger than this is taken for a refusal of the role, not an expired token: no new fetch.
MIN_TOKEN_AGE_FOR_RENEWAL = 10.0
# Tokens kept for masking (a process rarely fetches more: one per lifespan).
_REMEMBERED_SECRETS = 256
# Token endpoint and metadata answers are small; anything larger is not an OAuth2 server's.
_MAX_ANSWER_BYTES = 1024 * 1024
KEY_FILE_TYPE = "client_credentials"

logger = logging.getLogger(__name__)


class TokenError(RuntimeError):
    """No access token could be had: the issuer is unreachable, refuses the client, or answered nonsense. One line,
    naming the issuer or token endpoint, never the secret."""


@dataclass(frozen=True, slots=True)
class KeyFile:
    """Pulsar's OAuth2 key file (the JSON its `privateKey` parameter names)."""

    client_id: str
    client_secret: str = field(repr=False)
    issuer_url: str | None = None


def read_key_file(path: Path) -> KeyFile:
    """The key file at `path`; InputError naming the file and the field when it is unreadable or incomplete."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"cannot read OAuth2 credentials file {str(path)!r}: {error.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise InputError(f"invalid OAuth2 credentials file {str(path)!r}: not JSON") from None
    if not isinstance(document, dict):
        raise InputError(f"invalid OAuth2 credentials file {str(path)!r}: expected a JSON object")
    kind = document.get("type", KEY_FILE_TYPE)
    if kind != KEY_FILE_TYPE:
        raise InputError(f"invalid OAuth2 credentials file {str(path)!r}: type must be {KEY_FILE_TYPE}, not {kind!r}")
    for key in ("client_id", "client_secret"):
        if not isinstance(document.get(key), str) or not document[key]:
            raise InputError(f"invalid OAuth2 credentials file {str(path)!r}: {key} is missing or empty")
    issuer = document.get("issuer_url")
    return KeyFile(document["client_id"], document["client_secret"], issuer if isinstance(issuer, str) else None)


@dataclass(frozen=True, slots=True)
class OAuth2ClientCredentials:
    """Where and how to fetch tokens: the issuer, the client (its id and secret, or a key file read at every fetch,
    so that a rotated secret is used without a restart), `audience` and `scope`, and how to reach the issuer (TLS
    verified against `ca_file`, else the system's CAs, unless `verify_tls` is false)."""

    issuer_url: str
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    credentials_file: str | None = None
    audience: str | None = None
    scope: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    timeout: tuple[float, float] = (5.0, 30.0)

    def __post_init__(self) -> None:
        if (self.credentials_file is None) == (self.client_id is None or self.client_secret is None):
            raise ValueError("OAuth2 needs either credentials_file or client_id with client_secret")

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer_url.rstrip('/')}/.well-known/openid-configuration"

    def client(self) -> KeyFile:
        """The client's id and secret: the key file's as it is now, else the given ones."""
        if self.credentials_file is not None:
            try:
                return read_key_file(Path(self.credentials_file))
            except InputError as error:
                raise TokenError(str(error)) from None
        assert self.client_id is not None and self.client_secret is not None
        return KeyFile(self.client_id, self.client_secret)


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    fetched_at: float  # monotonic
    refresh_at: float | None  # monotonic; None: no lifetime known, kept until refused


class OAuth2Tokens:
    """A valid access token for every request, fetched when none is held or the held one is due for refresh, and
    fetched again when a broker refuses it (`renewed`). Thread-safe: one thread fetches, the others wait for it."""

    def __init__(self, credentials: OAuth2ClientCredentials, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._token: _Token | None = None
        self._token_endpoint: str | None = None
        self._secrets: deque[str] = deque(maxlen=_REMEMBERED_SECRETS)
        if credentials.client_secret:
            self._secrets.append(credentials.client_secret)
        self.fetches = 0  # how many tokens this process fetched (a refresh shows as a second one)

    def __reduce__(self) -> tuple[Any, ...]:
        # Only the configuration crosses to another process: it fetches tokens of its own.
        return (OAuth2Tokens, (self.credentials,))

    def __repr__(self) -> str:
        return f"OAuth2Tokens({self.credentials.issuer_url}, ***)"

    def secrets(self) -> list[str]:
        with self._lock:
            return list(self._secrets)

    def token(self) -> str:
        with self._lock:
            current = self._token
            if current is None:
                current = self._fetch("first token")
            elif current.refresh_at is not None and self._clock() >= current.refresh_at:
                current = self._fetch("refreshed before expiry")
            return current.value

    def renewed(self, refused: str) -> bool:
        """After a 401 for `refused`: whether another token is now held to retry with. A newer one may already be
        there (another thread renewed it); a token fetched moments ago is not renewed again, since the broker
        refused the role rather than an expired token."""
        with self._lock:
            current = self._token
            if current is not None and current.value != refused:
                return True
            if current is not None and self._clock() - current.fetched_at < MIN_TOKEN_AGE_FOR_RENEWAL:
                return False
            return self._fetch("renewed after a 401").value != refused

    def _fetch(self, why: str) -> _Token:
        client = self.credentials.client()
        self._secrets.append(client.client_secret)
        endpoint = self._token_endpoint or self._discover()
        form = {
            "grant_type": "client_credentials",
            "client_id": client.client_id,
            "client_secret": client.client_secret,
        }
        if self.credentials.audience:
            form["audience"] = self.credentials.audience
        if self.credentials.scope:
            form["scope"] = self.credentials.scope
        started = self._clock()
        status, document = self._call("POST", endpoint, f"OAuth2 token endpoint {endpoint}", form)
        if status in (400, 401):
            error = document.get("error") if isinstance(document, dict) else None
            description = document.get("error_description") if isinstance(document, dict) else None
            detail = ": ".join(str(part) for part in (error, description) if part) or "no reason given"
            raise TokenError(
                f"OAuth2 token endpoint {endpoint} refused client {client.client_id!r} (HTTP {status}: "
                f"{_masked(detail, client.client_secret)[:200]})"
            )
        if status != 200 or not isinstance(document, dict):
            raise TokenError(f"OAuth2 token endpoint {endpoint} answered HTTP {status}, not a token")
        value = document.get("access_token")
        if not isinstance(value, str) or not value:
            raise TokenError(f"OAuth2 token endpoint {endpoint} answered without an access_token")
        self._secrets.append(value)
        lifetime = _lifetime(document.get("expires_in"), value)
        refresh_at = started + lifetime * REFRESH_FRACTION if lifetime is not None else None
        self._token = _Token(value, started, refresh_at)
        self.fetches += 1
        logger.info(
            "OAuth2 token %d for client %s from %s (%s), %s",
            self.fetches,
            client.client_id,
            endpoint,
            why,
            f"valid {lifetime:.0f} s" if lifetime is not None else "lifetime unknown",
        )
        return self._token

    def _discover(self) -> str:
        """The issuer's token endpoint, from its OpenID Connect metadata (RFC 8414), as Pulsar's resolver reads it."""
        url = self.credentials.metadata_url
        status, document = self._call("GET", url, f"OAuth2 issuer {self.credentials.issuer_url}", None)
        endpoint = document.get("token_endpoint") if isinstance(document, dict) else None
        if status != 200 or not isinstance(endpoint, str) or urlsplit(endpoint).scheme not in {"http", "https"}:
            found = f"HTTP {status}" if status != 200 else "no token_endpoint"
            raise TokenError(f"OAuth2 issuer {self.credentials.issuer_url}: {url} answered {found}")
        self._token_endpoint = endpoint
        return endpoint

    def _call(self, method: str, url: str, what: str, form: dict[str, str] | None) -> tuple[int, object]:
        verify: str | bool = self.credentials.ca_file or self.credentials.verify_tls
        try:
            with requests.request(
                method,
                url,
                data=form,
                headers={"Accept": "application/json"},
                timeout=self.credentials.timeout,
                verify=verify,
                allow_redirects=method == "GET",  # a form with the secret is never sent on to another place
                stream=True,
            ) as response:
                body = response.raw.read(_MAX_ANSWER_BYTES + 1, decode_content=True)
                status = response.status_code
        except requests.RequestException as error:
            raise TokenError(f"{what} unreachable: {_transport_reason(error)}") from None
        if len(body) > _MAX_ANSWER_BYTES:
            raise TokenError(f"{what} answered more than {_MAX_ANSWER_BYTES} bytes")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None


def _masked(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def _lifetime(expires_in: object, token: str) -> float | None:
    """Seconds the token lives: `expires_in`, else the JWT's own `exp` (read, not verified), else unknown."""
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        return float(expires_in)
    if isinstance(expires_in, str) and expires_in.isdigit():
        return float(expires_in)
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        expires = float(claims["exp"]) - time.time()
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    return max(expires, 0.0)


def _transport_reason(error: requests.RequestException) -> str:
    if isinstance(error, requests.exceptions.SSLError):
        return "TLS verification or handshake failed; set ca_file to the CA that signed the issuer's certificate"
    if isinstance(error, requests.Timeout):
        return "timed out"
    if isinstance(error, requests.ConnectionError):
        text = str(error)
        if "Connection refused" in text:
            return "connection refused"
        if "Name or service not known" in text or "NameResolutionError" in text:
            return "host name not resolved"
        return "connection failed"
    return type(error).__name__
