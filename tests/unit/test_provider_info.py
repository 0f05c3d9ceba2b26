"""The provider info Airflow loads is valid against Airflow's own schema and names classes that exist."""

from __future__ import annotations

import importlib
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
