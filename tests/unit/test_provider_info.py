"""The provider info Airflow loads is valid against Airflow's own schema and names classes that exist."""

from __future__ import annotations

import importlib
import importlib.util
import json
from importlib.resources import files

import jsonschema
from airflow.sdk import BaseNotifier

from planner.airflow.provider import get_provider_info


def test_the_provider_info_is_valid_against_airflows_schema():
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_the_provider_info_lists_the_notifiers_and_the_integrations_documentation():
    info = get_provider_info()
    assert info["notifications"], info
    for path in info["notifications"]:
        module, name = path.rsplit(".", 1)
        assert issubclass(getattr(importlib.import_module(module), name), BaseNotifier), path
    [integration] = info["integrations"]
    assert integration["external-doc-url"].startswith("https://pulsar.apache.org/docs/")


def test_the_webhook_has_a_connection_type_of_its_own_with_its_form():
    from planner.airflow.hooks import WebhookHook
    from planner.airflow.provider import WEBHOOK_CONNECTION_TYPE, webhook_connection_fields

    types = {entry["connection-type"]: entry for entry in get_provider_info()["connection-types"]}
    webhook = types[WEBHOOK_CONNECTION_TYPE]
    module, name = webhook["hook-class-name"].rsplit(".", 1)
    hook = getattr(importlib.import_module(module), name)
    assert hook is WebhookHook and hook.conn_type == WEBHOOK_CONNECTION_TYPE
    assert set(webhook["conn-fields"]) == set(webhook_connection_fields()) >= {"headers", "routing_key"}
    assert webhook["ui-field-behaviour"]["hidden-fields"] == hook.get_ui_field_behaviour()["hidden_fields"]


def test_airflows_connection_form_offers_the_webhook_type_without_the_http_provider():
    """What the UI's connection form reads (`GET /ui/connections/hook_meta`), from the installed provider."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    offered = {meta.connection_type: meta for meta in HookMetaService.hook_meta_data()}
    if importlib.util.find_spec("airflow.providers.http") is None:  # as here: the webhook must not need it
        assert "http" not in offered
    webhook = offered["pulsar_rebalance_webhook"]
    assert webhook.hook_name == "Pulsar rebalance webhook" and set(webhook.extra_fields) >= {"headers", "routing_key"}
    assert webhook.standard_fields.host.title == "Webhook URL" and webhook.standard_fields.login.hidden
