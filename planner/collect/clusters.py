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

The entry's execution keys (`planner.settings.ClusterExecution`) are listed in docs/settings.md.

Inside Airflow, Connections provide the same fields (wired by the DAGs).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, SecretStr, ValidationError, model_validator

from planner.collect.admin_client import DEFAULT_MAX_RESPONSE_BYTES, AdminAuth, PulsarAdminClient
from planner.collect.broker_addresses import check_broker_urls, check_template
from planner.errors import InputError, format_validation_error
from planner.names import check_name
from planner.settings import ClusterExecution, planner_settings


def _broker_urls(urls: dict[str, str] | None) -> dict[str, str] | None:
    return check_broker_urls(urls) if urls is not None else None


def _broker_url_template(template: str | None) -> str | None:
    return check_template(template) if template is not None else None


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

    @model_validator(mode="after")
    def _one_kind_of_auth(self) -> ClusterSettings:
        token_sources = [self.token_env, self.token_file, self.token]
        if sum(source is not None for source in token_sources) > 1:
            raise ValueError("give at most one of token_env, token_file, token")
        if self.username is None and (self.password_env or self.password):
            raise ValueError("a password needs a username")
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert")
        return self

    def auth(self) -> AdminAuth:
        token = self.token.get_secret_value() if self.token else None
        if self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise InputError(f"cluster {self.name}: environment variable {self.token_env} (token_env) is not set")
        if self.token_file:
            try:
                token = self.token_file.read_text().strip()
            except OSError as error:
                raise InputError(f"cluster {self.name}: cannot read token_file: {error.strerror}") from None
        password = self.password.get_secret_value() if self.password else None
        if self.password_env:
            password = os.environ.get(self.password_env)
            if password is None:
                raise InputError(f"cluster {self.name}: environment variable {self.password_env} is not set")
        return AdminAuth(token=token, username=self.username, password=password)

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
