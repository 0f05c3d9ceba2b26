"""Provider info for Airflow's providers manager (the `apache_airflow_provider` entry point): the `pulsar`
connection type with its hook, form fields and Test button, the notifications' webhook connection type, the modules
of the hooks and operators, the notifier classes and the plugin."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from planner.settings import ClusterExecution, ExecutorSettings

PACKAGE = "pulsar-rebalance"
CONNECTION_TYPE = "pulsar"
# The notifications' webhook: a type of our own, which the UI offers without the http provider. Connections of type
# http (made before it existed) are read alike.
WEBHOOK_CONNECTION_TYPE = "pulsar_rebalance_webhook"
WEBHOOK_CONNECTION_TYPES = (WEBHOOK_CONNECTION_TYPE, "http", "https")
# The integration's documentation: the load balancing this package plans for. The package's own documentation
# link is not provider info: Airflow reads it from the distribution's `Project-URL: Documentation`, which stays
# unset while the project has no public home (README.md and docs/ ship in the sdist).
PULSAR_LOAD_BALANCING_DOCS = "https://pulsar.apache.org/docs/next/administration-load-balance/"
# The notifier classes DAG authors may use (`on_*_callback`); the e-mail channel is the SMTP provider's own.
NOTIFIER_CLASSES = ("planner.airflow.notifications.PlanWebhookNotifier",)


def executor_json_types() -> dict[str, str]:
    """Each executor setting's JSON schema type, for the connection form and the plan DAG's params
    (durations are given in seconds)."""
    kinds = {int: "integer"}
    return {name: kinds.get(field.annotation, "number") for name, field in ExecutorSettings.model_fields.items()}


def _executor_form_fields() -> dict[str, Any]:
    return {
        name: {
            "label": f"Executor: {name.replace('_', ' ')}",
            "schema": {"type": [kind, "null"]},
            "description": f"{ExecutorSettings.model_fields[name].description} Empty: the configured default.",
        }
        for name, kind in executor_json_types().items()
    }


def connection_fields() -> dict[str, Any]:
    """The connection form's extra fields (provider info `conn-fields`)."""
    return {
        "auth": {
            "label": "Authentication",
            "schema": {"type": ["string", "null"], "enum": ["token", "basic", "oauth2", None], "default": "token"},
            "description": "token: the Password field holds a JWT (or Token file names a file holding it). basic: "
            "Login and Password. oauth2: client credentials, Login the client id and Password its secret (or "
            "Credentials file), from the Issuer URL.",
        },
        "token_file": {
            "label": "Token file",
            "schema": {"type": ["string", "null"]},
            "description": "A file holding the token (auth token), read again whenever it changes: a mounted secret.",
        },
        "issuer_url": {
            "label": "OAuth2 issuer URL",
            "schema": {"type": ["string", "null"]},
            "description": "auth oauth2: the identity provider; its token endpoint is read from its OpenID metadata.",
        },
        "credentials_file": {
            "label": "OAuth2 credentials file",
            "schema": {"type": ["string", "null"]},
            "description": "auth oauth2: Pulsar's key file (JSON with client_id and client_secret), instead of "
            "Login and Password.",
        },
        "audience": {"label": "OAuth2 audience", "schema": {"type": ["string", "null"]}},
        "scope": {"label": "OAuth2 scope", "schema": {"type": ["string", "null"]}},
        "ca_file": {
            "label": "CA file",
            "schema": {"type": ["string", "null"]},
            "description": "PEM file of the CA that signed the brokers' certificates (default: the system's CAs).",
        },
        "verify_tls": {"label": "Verify TLS", "schema": {"type": ["boolean", "null"], "default": True}},
        "client_cert": {
            "label": "Client certificate",
            "schema": {"type": ["string", "null"]},
            "description": "PEM file of a TLS client certificate, for brokers that authenticate clients by TLS.",
        },
        "client_key": {
            "label": "Client key",
            "schema": {"type": ["string", "null"]},
            "description": "PEM file of the client certificate's private key (if not in the certificate file).",
        },
        "allow_insecure_http_credentials": {
            "label": "Allow credentials over plain http",
            "schema": {"type": ["boolean", "null"], "default": False},
            "description": "Only for a trusted network: send the token over http to a host that is not loopback.",
        },
        "allow_beside_broker_controllers": {
            "label": "Execute beside the brokers' own shedding",
            "schema": {"type": ["boolean", "null"], "default": False},
            "description": ClusterExecution.model_fields["allow_beside_broker_controllers"].description,
        },
        **_executor_form_fields(),
    }


UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "port"],
    "relabeling": {
        "host": "Admin URL",
        "login": "Login (basic auth) or OAuth2 client id",
        "password": "Token, password or OAuth2 client secret",
    },
    "placeholders": {"host": "https://pulsar-admin.example:8443", "password": "JWT, or the basic auth password"},
}


def webhook_connection_fields() -> dict[str, Any]:
    """The webhook connection form's extra fields."""
    return {
        "headers": {
            "label": "Headers",
            "schema": {"type": ["object", "null"]},
            "description": "Extra HTTP headers sent with each message, as a JSON object.",
        },
        "routing_key": {
            "label": "PagerDuty routing key",
            "schema": {"type": ["string", "null"], "format": "password"},
            "description": "An Events API v2 integration key: each message is a PagerDuty event too (post to "
            "https://events.pagerduty.com/v2/enqueue).",
        },
        "password_in_path": {
            "label": "Password is the URL's secret path",
            "schema": {"type": ["boolean", "null"], "default": False},
            "description": "Append the password to the webhook URL's path instead of sending it as a bearer token: "
            "Slack's and Teams' URLs carry their secret in the path, which the connection list would show in the "
            "URL field.",
        },
        "verify_tls": {"label": "Verify TLS", "schema": {"type": ["boolean", "null"], "default": True}},
        "ca_file": {
            "label": "CA file",
            "schema": {"type": ["string", "null"]},
            "description": "PEM file of the CA that signed the endpoint's certificate (default: the system's CAs).",
        },
    }


WEBHOOK_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "port", "login"],
    "relabeling": {"host": "Webhook URL", "password": "Bearer token or the URL's secret path"},
    "placeholders": {
        "host": "https://hooks.slack.com/services",
        "password": "sent as Authorization: Bearer, or appended to the URL (T000/B000/XXXX)",
    },
}


def _ui_field_behaviour(behaviour: dict[str, Any]) -> dict[str, Any]:
    """A hook's field behaviour as provider info spells it."""
    return {
        "hidden-fields": behaviour["hidden_fields"],
        "relabeling": behaviour["relabeling"],
        "placeholders": behaviour["placeholders"],
    }


def get_provider_info() -> dict[str, Any]:
    try:
        installed = version(PACKAGE)
    except PackageNotFoundError:  # imported from a checkout that is not installed
        installed = "0+unknown"
    return {
        "package-name": PACKAGE,
        "name": "Pulsar rebalance",
        "description": "Offline, approval-gated rebalancing planner for Apache Pulsar clusters.",
        "versions": [installed],
        "integrations": [
            {"integration-name": "Apache Pulsar", "external-doc-url": PULSAR_LOAD_BALANCING_DOCS, "tags": ["service"]}
        ],
        "hooks": [{"integration-name": "Apache Pulsar", "python-modules": ["planner.airflow.hooks"]}],
        "operators": [{"integration-name": "Apache Pulsar", "python-modules": ["planner.airflow.operators"]}],
        "connection-types": [
            {
                "connection-type": CONNECTION_TYPE,
                "hook-class-name": "planner.airflow.hooks.PulsarAdminHook",
                "hook-name": "Pulsar admin API",
                "conn-fields": connection_fields(),
                "ui-field-behaviour": _ui_field_behaviour(UI_FIELD_BEHAVIOUR),
            },
            {
                "connection-type": WEBHOOK_CONNECTION_TYPE,
                "hook-class-name": "planner.airflow.hooks.WebhookHook",
                "hook-name": "Pulsar rebalance webhook",
                "conn-fields": webhook_connection_fields(),
                "ui-field-behaviour": _ui_field_behaviour(WEBHOOK_FIELD_BEHAVIOUR),
            },
        ],
        "plugins": [{"name": "pulsar_rebalance", "plugin-class": "planner.airflow.plugin.PulsarRebalancePlugin"}],
        "notifications": list(NOTIFIER_CLASSES),
    }
