"""Progress on the terminal: drawn on stderr only when it is a terminal, from what the step produces."""

from __future__ import annotations

import io
import threading
import time

import pytest
from rich.console import Console

from planner import progress


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a terminal, captured."""
    buffer = io.StringIO()
    monkeypatch.setattr(progress, "_console", lambda: Console(file=buffer, force_terminal=True, width=120))
    monkeypatch.setattr(progress, "POLL_SECONDS", 0.05)
    return buffer


def test_a_download_shows_the_bytes_written_so_far(terminal, tmp_path):
    target = tmp_path / "m2" / "pulsar.tar.gz"
    target.parent.mkdir()
    with progress.download("Pulsar 4.2.4 from Maven Central", lambda: progress.directory_bytes(tmp_path / "m2")):
        for _ in range(4):
            with target.open("ab") as out:
                out.write(b"x" * 3_000_000)
            time.sleep(0.1)
    drawn = terminal.getvalue()
    assert "Pulsar 4.2.4 from Maven Central" in drawn and "12.0/? MB" in drawn


def test_steps_name_the_step_under_way(terminal):
    with progress.steps("DAG pulsar_rebalance_plan_local") as step:
        step("1 task(s) done; spark_plan (running)")
        time.sleep(0.2)
    assert "DAG pulsar_rebalance_plan_local: 1 task(s) done; spark_plan (running)" in terminal.getvalue()


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(monkeypatch, capsys, tmp_path):
    measured = threading.Event()

    def measure() -> int:
        measured.set()
        return 0

    with progress.download("quiet", measure), progress.steps("quiet") as step:
        step("a step")
        time.sleep(0.6)
    assert not measured.is_set() and capsys.readouterr().err == ""


def test_a_spark_job_shows_its_stages(terminal, spark):
    with progress.spark_stages(spark, "Spark job (local[2])"):
        spark.range(0, 2_000_000, numPartitions=8).selectExpr("sum(id * id)").collect()
        time.sleep(0.2)
    drawn = terminal.getvalue()
    assert "Spark job (local[2])" in drawn and "stage " in drawn
