"""Which clusters the planner manages and how to reach their admin API.

A TOML file (`--clusters FILE`, `PULSAR_REBALANCE_CLUSTERS`, or `clusters.toml` in the planner's
home) lists them. Secrets are not written in the file itself but named: an environment variable or
a file that holds the token or password.

    [[clusters]]
    name = "prod-east"
    admin_url = "https://pulsar-east.example:8443"
    token_env = "PULSAR_EAST_TOKEN"        # or token_file = "/run/secrets/pulsar-east"
    ca_file = "/etc/ssl/pulsar-ca.pem"     # TLS is verified unless verify_tls = false
    # client_cert = "/etc/ssl/planner.pem"   # and client_key, for brokers that authenticate by TLS certificate
    # allow_insecure_http_credentials = true   # only if a token must go over plain http to another host
    max_response_bytes = 134217728         # larger admin API answers are refused (default 128 MiB)
    # read_processes = 2                     # processes decoding extensible brokers' topic stats (default: one per CPU)
    # broker_url_template = "https://{host}:8443"   # where each broker's own web service is, if not at its id
    # broker_urls = { "10.0.0.7:8080" = "https://proxy.example/brokers/b-1/" }   # per broker id, over the template
    # allow_beside_broker_controllers = true   # execute even while the brokers' own shedding or splitting is on

    [[clusters]]
    name = "managed"                          # a cluster behind an identity provider: OAuth2 client credentials
    admin_url = "https://pulsar.example:8443"
    [clusters.oauth2]
    issuer_url = "https://auth.example/"     # its token endpoint read from /.well-known/openid-configuration
    credentials_file = "/run/secrets/pulsar-oauth2.json"   # Pulsar's key file: client_id, client_secret
    # client_id = "planner" with client_secret_env = "PULSAR_OAUTH2_SECRET", instead of the file
    audience = "urn:pulsar:managed"
    # scope = "admin"

One kind of auth per cluster: a token (`token_env`, `token_file` or `token`), basic (`username` and a password), or
`oauth2`; with TLS client certificates beside any of them. A `token_file` is read again whenever it changes.

The entry's execution keys (`planner.settings.ClusterExecution`) are listed in docs/settings.md.

Inside Airflow, Connections provide the same fields (wired by the DAGs).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from planner.collect.admin_client import DEFAULT_MAX_RESPONSE_BYTES, AdminAuth, PulsarAdminClient, is_loopback
from planner.collect.broker_addresses import check_broker_urls, check_template
from planner.collect.oauth2 import OAuth2ClientCredentials, read_key_file
from planner.errors import InputError, format_validation_error
from planner.names import check_name
from planner.settings import ClusterExecution, planner_settings


def _broker_urls(urls: dict[str, str] | None) -> dict[str, str] | None:
    return check_broker_urls(urls) if urls is not None else None


def _broker_url_template(template: str | None) -> str | None:
    return check_template(template) if template is not None else None


class OAuth2Settings(BaseModel):
    """OAuth2 client credentials, as Pulsar's `AuthenticationOAuth2` takes them: the issuer (its metadata names the
    token endpoint), the client as a key file (`credentials_file`, read again at every fetch) or as `client_id` with
    its secret (`client_secret_env`, or `client_secret` from an Airflow connection), `audience` and `scope`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Optional when the credentials file names it (`issuer_url` of Pulsar's key file).
    issuer_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    credentials_file: Path | None = None
    client_id: str | None = Field(default=None, min_length=1)
    client_secret_env: str | None = None
    client_secret: SecretStr | None = None
    audience: str | None = None
    scope: str | None = None

    @model_validator(mode="after")
    def _one_client(self) -> OAuth2Settings:
        secrets = [self.client_secret_env, self.client_secret]
        if self.credentials_file is not None:
            if self.client_id is not None or any(secret is not None for secret in secrets):
                raise ValueError("give credentials_file or client_id with its secret, not both")
            return self
        if self.client_id is None:
            raise ValueError("give credentials_file, or client_id with client_secret_env")
        if sum(secret is not None for secret in secrets) != 1:
            raise ValueError("client_id needs one secret: client_secret_env (or client_secret)")
        if self.issuer_url is None:
            raise ValueError("issuer_url is required with client_id")
        return self


class ClusterSettings(ClusterExecution):
    """A cluster's admin API and credentials, and what executing its plans may do (`ClusterExecution`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, AfterValidator(lambda name: check_name(name, "cluster name"))]
    admin_url: str = Field(pattern=r"^https?://[^/\s]+/?$")
    token_env: str | None = None
    token_file: Path | None = None
    username: str | None = None
    password_env: str | None = None
    ca_file: Path | None = None
    verify_tls: bool = True
    # A TLS client certificate (PEM), for brokers that authenticate clients by certificate.
    client_cert: Path | None = None
    client_key: Path | None = None
    # Credentials never go over plain http to a host that is not loopback, unless this says they may.
    allow_insecure_http_credentials: bool = False
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, gt=0)
    # Worker processes decoding the topic stats of an extensible load manager's brokers (0: none, threads of the
    # collect's own process; unset: one per usable CPU, up to 4, with two brokers each at least).
    read_processes: int | None = Field(default=None, ge=0, le=64)
    # Where each broker's own web service is reached, when its id (`host:webPort`) is not reachable from here
    # (`planner.collect.broker_addresses`): an explicit URL per broker id, over a template, over `{scheme}://{id}`.
    broker_urls: Annotated[dict[str, str] | None, AfterValidator(_broker_urls)] = None
    broker_url_template: Annotated[str | None, AfterValidator(_broker_url_template)] = None
    # Direct secrets are accepted for programmatic use (Airflow Connections), never logged or printed.
    token: SecretStr | None = None
    password: SecretStr | None = None
    oauth2: OAuth2Settings | None = None

    @model_validator(mode="after")
    def _one_kind_of_auth(self) -> ClusterSettings:
        kinds = {
            "token_env": self.token_env,
            "token_file": self.token_file,
            "token": self.token,
            "username": self.username,
            "oauth2": self.oauth2,
        }
        given = [kind for kind, value in kinds.items() if value is not None]
        if len(given) > 1:
            raise ValueError(f"one kind of auth per cluster: {' and '.join(given)} given")
        if self.username is None and (self.password_env or self.password):
            raise ValueError("a password needs a username")
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert")
        return self

    def auth(self) -> AdminAuth:
        if self.oauth2 is not None:
            return AdminAuth(oauth2=self._oauth2_credentials(self.oauth2))
        if self.token_file:
            try:
                with self.token_file.open(encoding="utf-8") as handle:
                    if not handle.read().strip():
                        raise InputError(f"cluster {self.name}: token_file {str(self.token_file)!r} is empty")
            except (OSError, UnicodeDecodeError) as error:
                reason = getattr(error, "strerror", None) or "not UTF-8 text"
                raise InputError(f"cluster {self.name}: cannot read token_file: {reason}") from None
            # Read again by the client whenever the file changes (a rotated, mounted secret).
            return AdminAuth(token_file=str(self.token_file))
        token = self.token.get_secret_value() if self.token else None
        if self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise InputError(f"cluster {self.name}: environment variable {self.token_env} (token_env) is not set")
        password = self.password.get_secret_value() if self.password else None
        if self.password_env:
            password = os.environ.get(self.password_env)
            if password is None:
                raise InputError(f"cluster {self.name}: environment variable {self.password_env} is not set")
        return AdminAuth(token=token, username=self.username, password=password)

    def _oauth2_credentials(self, oauth2: OAuth2Settings) -> OAuth2ClientCredentials:
        """The OAuth2 client, its key file read now so that a bad one is a configuration error (exit 2)."""
        issuer_url = oauth2.issuer_url
        client_secret = oauth2.client_secret.get_secret_value() if oauth2.client_secret else None
        if oauth2.credentials_file is not None:
            try:
                key_file = read_key_file(oauth2.credentials_file)
            except InputError as error:
                raise InputError(f"cluster {self.name}: oauth2.credentials_file: {error}") from None
            issuer_url = issuer_url or key_file.issuer_url
        if oauth2.client_secret_env:
            client_secret = os.environ.get(oauth2.client_secret_env)
            if not client_secret:
                raise InputError(
                    f"cluster {self.name}: environment variable {oauth2.client_secret_env} "
                    "(oauth2.client_secret_env) is not set"
                )
        if not issuer_url:
            raise InputError(f"cluster {self.name}: oauth2.issuer_url is missing (nor in the credentials file)")
        issuer = urlsplit(issuer_url)
        if (
            issuer.scheme != "https"
            and not is_loopback(issuer.hostname or "")
            and not self.allow_insecure_http_credentials
        ):
            raise InputError(
                f"cluster {self.name}: oauth2.issuer_url {issuer_url}: the client secret would travel over plain http "
                "to a host that is not loopback; use https, or set allow_insecure_http_credentials = true"
            )
        return OAuth2ClientCredentials(
            issuer_url=issuer_url,
            client_id=oauth2.client_id,
            client_secret=client_secret,
            credentials_file=str(oauth2.credentials_file) if oauth2.credentials_file else None,
            audience=oauth2.audience,
            scope=oauth2.scope,
            ca_file=str(self.ca_file) if self.ca_file else None,
            verify_tls=self.verify_tls,
        )

    def _client_cert(self) -> str | tuple[str, str] | None:
        if self.client_cert is None:
            return None
        return (str(self.client_cert), str(self.client_key)) if self.client_key else str(self.client_cert)

    def client(self) -> PulsarAdminClient:
        return PulsarAdminClient(
            self.admin_url,
            auth=self.auth(),
            ca_file=str(self.ca_file) if self.ca_file else None,
            verify_tls=self.verify_tls,
            client_cert=self._client_cert(),
            max_response_bytes=self.max_response_bytes,
            allow_insecure_http_credentials=self.allow_insecure_http_credentials,
            read_processes=self.read_processes,
            broker_urls=self.broker_urls,
            broker_url_template=self.broker_url_template,
        )


def clusters_file(path: Path | None = None) -> Path:
    if path is not None:
        return path
    settings = planner_settings()
    return settings.clusters or settings.home / "clusters.toml"


def load_clusters(path: Path | None = None) -> list[ClusterSettings]:
    """The configured clusters; a missing default file means none are configured."""
    location = clusters_file(path)
    if not location.exists():
        if path is not None:
            raise InputError(f"cannot read clusters file {str(location)!r}: no such file")
        return []
    try:
        document = tomllib.loads(location.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"invalid clusters file {str(location)!r}: {error}") from None
    entries = document.get("clusters", [])
    if not isinstance(entries, list):
        raise InputError(f"invalid clusters file {str(location)!r}: clusters must be an array of tables")
    clusters = []
    for index, entry in enumerate(entries):
        try:
            clusters.append(ClusterSettings.model_validate(entry))
        except ValidationError as error:
            name = entry.get("name", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
            raise InputError(format_validation_error(error, f"cluster {name} in {location}")) from None
    names = [cluster.name for cluster in clusters]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InputError(f"invalid clusters file {str(location)!r}: duplicate cluster names {duplicates}")
    return clusters


def find_cluster(name: str, path: Path | None = None) -> ClusterSettings:
    for cluster in load_clusters(path):
        if cluster.name == name:
            return cluster
    raise InputError(f"unknown cluster {name!r}: not in {clusters_file(path)}")
