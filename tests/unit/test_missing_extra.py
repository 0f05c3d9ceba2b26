"""A command of an extra the installation lacks fails in one line that names the extra to install."""

from __future__ import annotations

import pytest

from planner.cli.common import runtime_failure


@pytest.mark.parametrize(
    ("module", "extra"),
    [("pyspark.sql", "spark"), ("pandas", "spark"), ("airflow.sdk", "airflow"), ("psycopg", "postgres")],
)
def test_a_module_of_an_extra_names_the_extra(module, extra):
    message = runtime_failure(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert message == f"this command needs {module}: install pulsar-rebalance[{extra}]"


def test_any_other_missing_module_is_a_defect_with_its_traceback():
    assert runtime_failure(ModuleNotFoundError("No module named 'planner.gone'", name="planner.gone")) is None
