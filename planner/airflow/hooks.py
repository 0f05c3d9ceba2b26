"""Airflow hooks: the `pulsar` connection type (a cluster's admin API), the planner's store and the notifications'
webhook.

Hooks own the connections; operators and task functions ask them for a client, settings or a store.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
from airflow.sdk import BaseHook
from pydantic import SecretStr, ValidationError
from sqlalchemy.engine import make_url

from planner.airflow.provider import (
    CONNECTION_TYPE,
    UI_FIELD_BEHAVIOUR,
    WEBHOOK_CONNECTION_TYPE,
    WEBHOOK_CONNECTION_TYPES,
    WEBHOOK_FIELD_BEHAVIOUR,
    webhook_connection_fields,
)
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.collect.clusters import ClusterSettings, OAuth2Settings
from planner.errors import InputError, format_validation_error
from planner.settings import ClusterExecution, ExecutorSettings, planner_settings
from planner.store.database import Store, default_database_url

CONNECTION_PREFIX = "pulsar_"  # + the cluster's name
STORE_CONNECTION = "pulsar_rebalance_db"

AUTH_KINDS = ("token", "basic", "oauth2")
# With `auth = oauth2` (Login: the client id, Password: its secret, unless `credentials_file` names a key file).
OAUTH2_EXTRAS = ("issuer_url", "credentials_file", "audience", "scope")
# Extra fields of a `pulsar` connection besides the executor's settings (planner.settings.ExecutorSettings).
CLUSTER_EXTRAS = (
    "auth",
    "token_file",
    *OAUTH2_EXTRAS,
    "ca_file",
    "verify_tls",
    "client_cert",
    "client_key",
    "allow_insecure_http_credentials",
    *ClusterExecution.model_fields,
)
# How the admin client reads, in the connection's extra JSON only (no form field).
# `broker_urls` is a JSON object (broker id → base URL); `broker_url_template` a string (`https://{host}:8443`).
_CLIENT_EXTRAS = ("max_response_bytes", "read_processes", "broker_urls", "broker_url_template")
# How the Airflow 2 form prefixed extra fields; still accepted.
_FORM_PREFIX = f"extra__{CONNECTION_TYPE}__"


class PulsarAdminHook(BaseHook):
    """A Pulsar cluster's admin REST API, from a `pulsar` connection.

    Host: the admin URL (`https://host:port`; any broker or a proxy). Password: the token (or, with
    `auth = basic`, the password for Login); or extra `token_file`, a file holding the token, read again whenever it
    changes (a mounted Kubernetes secret). With `auth = oauth2`: OAuth2 client credentials, Login the client id and
    Password its secret, or extra `credentials_file` (Pulsar's key file), with extras `issuer_url`, `audience` and
    `scope`. Extras: TLS (`ca_file`, `verify_tls`, `client_cert`,
    `client_key`), `allow_insecure_http_credentials`, `allow_beside_broker_controllers`, where each broker's own web
    service is (`broker_url_template`, `broker_urls`), and the executor's settings for this cluster.
    """

    conn_name_attr = "pulsar_conn_id"
    default_conn_name = "pulsar_default"
    conn_type = CONNECTION_TYPE
    hook_name = "Pulsar admin API"

    def __init__(self, pulsar_conn_id: str = default_conn_name, *, cluster: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pulsar_conn_id = pulsar_conn_id
        self.cluster = cluster or pulsar_conn_id.removeprefix(CONNECTION_PREFIX)

    @classmethod
    def for_cluster(cls, cluster: str) -> PulsarAdminHook:
        """The hook of a cluster the DAGs serve: its connection is `pulsar_<cluster>`."""
        return cls(f"{CONNECTION_PREFIX}{cluster}", cluster=cluster)

    def _extras(self) -> tuple[Any, dict[str, Any]]:
        connection = self.get_connection(self.pulsar_conn_id)
        extras = {}
        for key, value in connection.extra_dejson.items():
            name = key.removeprefix(_FORM_PREFIX)
            if value is None or value == "":
                continue  # an empty form field: the default
            extras[name] = value
        known = set(CLUSTER_EXTRAS) | set(ExecutorSettings.model_fields) | set(_CLIENT_EXTRAS)
        unknown = sorted(set(extras) - known)
        if unknown:
            raise InputError(f"connection {self.pulsar_conn_id}: unknown extra field(s) {unknown}")
        return connection, extras

    def cluster_settings(self) -> ClusterSettings:
        connection, extras = self._extras()
        host = (connection.host or "").strip()
        if not host:
            raise InputError(f"connection {self.pulsar_conn_id}: host (the admin URL) is empty")
        if "://" not in host:
            # Connections of type http/https (older setups) carry the scheme in their type.
            scheme = connection.conn_type if connection.conn_type in {"http", "https"} else "https"
            host = f"{scheme}://{host}"
        if connection.port:
            host = f"{host.rstrip('/')}:{connection.port}"
        kind = extras.get("auth") or "token"
        if kind not in AUTH_KINDS:
            raise InputError(
                f"connection {self.pulsar_conn_id}: auth must be one of {', '.join(AUTH_KINDS)}, not {kind!r}"
            )
        self._check_auth_fields(kind, connection, extras)
        basic, oauth2 = kind == "basic", kind == "oauth2"
        try:
            return ClusterSettings(
                name=self.cluster,
                admin_url=host.rstrip("/"),
                token=SecretStr(connection.password) if connection.password and kind == "token" else None,
                token_file=extras.get("token_file"),
                username=connection.login if basic else None,
                password=SecretStr(connection.password) if basic and connection.password else None,
                oauth2=self._oauth2_settings(connection, extras) if oauth2 else None,
                ca_file=extras.get("ca_file"),
                verify_tls=extras.get("verify_tls", True),
                client_cert=extras.get("client_cert"),
                client_key=extras.get("client_key"),
                allow_insecure_http_credentials=extras.get("allow_insecure_http_credentials", False),
                **{key: extras[key] for key in ClusterExecution.model_fields if key in extras},
                **{key: extras[key] for key in _CLIENT_EXTRAS if key in extras},
            )
        except ValidationError as error:
            raise InputError(format_validation_error(error, f"connection {self.pulsar_conn_id}")) from None

    def _check_auth_fields(self, kind: str, connection: Any, extras: dict[str, Any]) -> None:
        """Fields of another kind of auth than the connection's are refused, rather than silently ignored."""
        where = f"connection {self.pulsar_conn_id} (auth = {kind})"
        stray = [key for key in OAUTH2_EXTRAS if key in extras] if kind != "oauth2" else []
        if kind != "token" and "token_file" in extras:
            stray.append("token_file")
        if stray:
            raise InputError(f"{where}: extra field(s) {stray} belong to another kind of auth")
        if kind == "token" and "token_file" in extras and connection.password:
            raise InputError(f"{where}: give the token in Password or extra token_file, not both")
        if kind == "oauth2" and "credentials_file" in extras and (connection.login or connection.password):
            raise InputError(f"{where}: give Login and Password (client id and secret) or credentials_file, not both")

    def _oauth2_settings(self, connection: Any, extras: dict[str, Any]) -> OAuth2Settings:
        try:
            return OAuth2Settings(
                client_id=connection.login or None,
                client_secret=SecretStr(connection.password) if connection.password else None,
                **{key: extras[key] for key in OAUTH2_EXTRAS if key in extras},
            )
        except ValidationError as error:
            raise InputError(format_validation_error(error, f"connection {self.pulsar_conn_id}, oauth2")) from None

    def executor_settings(self, base: ExecutorSettings) -> ExecutorSettings:
        """`base` with this cluster's executor settings from the connection's extras on top."""
        _, extras = self._extras()
        values = {key: value for key, value in extras.items() if key in ExecutorSettings.model_fields}
        return base.overridden(values, f"connection {self.pulsar_conn_id}")

    def get_conn(self) -> PulsarAdminClient:
        return self.cluster_settings().client()

    def test_connection(self) -> tuple[bool, str]:
        """The UI's Test button: reach the admin API with the credentials and list the active brokers."""
        try:
            with self.get_conn() as client:
                name = client.cluster_name()
                brokers = client.active_brokers(name)
        except (AdminError, InputError) as error:
            return False, str(error)
        return True, f"Pulsar cluster {name}: {len(brokers)} active broker(s) ({', '.join(brokers)})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return UI_FIELD_BEHAVIOUR


@functools.lru_cache(maxsize=8)
def _cached_store(url: str) -> Store:
    return Store(url)


class PlannerStoreHook(BaseHook):
    """The planner's store (plans, decisions, audit) from the `pulsar_rebalance_db` connection, else the
    `db_url` setting, else SQLite under the planner's home. One engine per URL and process."""

    conn_name_attr = "store_conn_id"
    default_conn_name = STORE_CONNECTION
    conn_type = "generic"
    hook_name = "Pulsar rebalance store"

    def __init__(self, store_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store_conn_id = store_conn_id

    def database_url(self) -> str:
        configured = planner_settings(airflow=True).database_url
        if configured:
            return configured
        from airflow.exceptions import AirflowNotFoundException

        try:
            connection = self.get_connection(self.store_conn_id)
        except AirflowNotFoundException:
            return default_database_url()
        if connection.conn_type == "sqlite":  # Airflow's sqlite connection keeps the file's path as its host
            return f"sqlite:///{connection.host}"
        url = make_url(connection.get_uri())
        if url.drivername in {"postgres", "postgresql"}:
            url = url.set(drivername="postgresql+psycopg")  # Airflow writes postgres://, SQLAlchemy wants this
        return url.render_as_string(hide_password=False)

    def get_conn(self) -> Store:
        return _cached_store(self.database_url())


WEBHOOK_TIMEOUT_SECONDS = 10.0
_WEBHOOK_FORM_PREFIX = f"extra__{WEBHOOK_CONNECTION_TYPE}__"


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    url: str = field(repr=False)  # Slack's and Teams' URLs hold their secret
    headers: dict[str, str] = field(repr=False)  # the bearer token
    verify: bool | str  # requests' `verify`: check the certificate (against this CA file)
    routing_key: str | None = field(default=None, repr=False)


class WebhookHook(BaseHook):
    """An HTTP endpoint that takes JSON, from a `pulsar_rebalance_webhook` connection (or an `http` one, as before
    that type existed).

    Host: the whole URL (`https://hooks.example.com/services/...`), or a host name with its path
    (`hooks.example.com/services/...`), then Schema is the URL scheme (default `https`) and Port the port.
    Password: a bearer token, sent as `Authorization`, or with extra `password_in_path` the URL's secret path
    (Slack's `T000/B000/XXXX`), appended to Host's URL. Extras: `headers` (an object), `routing_key` (a PagerDuty
    Events API v2 key: the body then is a PagerDuty event too), `verify_tls` and `ca_file`; `verify` (false, or a
    CA bundle path) as `http` connections give it.
    """

    conn_name_attr = "webhook_conn_id"
    default_conn_name = "pulsar_rebalance_webhook"
    conn_type = WEBHOOK_CONNECTION_TYPE
    hook_name = "Pulsar rebalance webhook"

    def __init__(self, webhook_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.webhook_conn_id = webhook_conn_id

    def get_conn(self) -> WebhookEndpoint:
        where = f"connection {self.webhook_conn_id}"
        connection = self.get_connection(self.webhook_conn_id)
        if connection.conn_type not in WEBHOOK_CONNECTION_TYPES:
            raise InputError(
                f"{where}: conn_type must be {WEBHOOK_CONNECTION_TYPE} (or http), not {connection.conn_type!r}"
            )
        extra = {
            key.removeprefix(_WEBHOOK_FORM_PREFIX): value
            for key, value in connection.extra_dejson.items()
            if value is not None and value != ""  # an empty form field: the default
        }
        if connection.conn_type == WEBHOOK_CONNECTION_TYPE:  # an http connection may carry the http hook's extras
            unknown = sorted(set(extra) - set(webhook_connection_fields()))
            if unknown:
                raise InputError(f"{where}: unknown extra field(s) {unknown}")
        host = (connection.host or "").strip()
        if "://" in host:
            url = host
        elif host:
            url = f"{connection.schema or 'https'}://{host}{f':{connection.port}' if connection.port else ''}"
        else:
            raise InputError(f"{where}: host (the webhook's URL) is empty")
        headers = extra.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise InputError(f"{where}: extra headers must be a JSON object")
        headers = {str(name): str(value) for name, value in headers.items()}
        in_path = extra.get("password_in_path", False)
        if not isinstance(in_path, bool):
            raise InputError(f"{where}: extra password_in_path must be true or false, not {in_path!r}")
        if in_path and not connection.password:
            raise InputError(f"{where}: password (the URL's secret path) is empty, and password_in_path is true")
        if in_path:
            # The secret stays in the masked field: the URL field is shown in the connection list.
            url = f"{url.rstrip('/')}/{connection.password.lstrip('/')}"
        elif connection.password:
            headers["Authorization"] = f"Bearer {connection.password}"
        verify = extra["verify"] if "verify" in extra else (extra.get("ca_file") or extra.get("verify_tls", True))
        return WebhookEndpoint(url, headers, verify, extra.get("routing_key"))

    def post(self, endpoint: WebhookEndpoint, body: Mapping[str, Any]) -> None:
        response = requests.post(
            endpoint.url, json=body, headers=endpoint.headers, timeout=WEBHOOK_TIMEOUT_SECONDS, verify=endpoint.verify
        )
        if response.status_code >= 400:
            # The URL can hold a secret (Slack's do): name the connection, not the URL.
            raise InputError(f"webhook {self.webhook_conn_id} answered HTTP {response.status_code}")

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return WEBHOOK_FIELD_BEHAVIOUR
