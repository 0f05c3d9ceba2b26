"""The CLI for automation: `--version`, one exit code per kind of ending (0 done, 1 runtime failure, 2 bad input,
3 an execution that ended without every action done), progress on stderr during `execute` with the JSON kept on
stdout, and `stop`: an operator's stop, recorded in the store from another process, honoured by the running
executor before its next action.

The fake brokers of the executor's policy tests answer for the cluster; `execute` and `stop` run as the real console
script in processes of their own, as an operator's shell or a scheduler runs them."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from planner import cli
from planner.audit.plan_records import show_plan
from planner.lifecycle import PLAN_TRANSITIONS, PlanStatus, advance
from planner.pulsar.versions import RELEASE_LINES
from planner.store.models import StopRequest
from planner.store.stops import request_stop
from tests.unit import test_execution_policies as policies
from tests.unit.test_execution_policies import CLUSTER, FAST, FULL, NAMESPACES, MovingClient, approved, events, unload

# The executor's policy tests' fake cluster (three fake brokers) and store, used by name.
cluster = policies.cluster
store = policies.store

SCRIPT = str(Path(sys.executable).parent / "pulsar-rebalance")


# One action per 10 s, and no waiting for a new owner (the fake's bundles stay where they are).
PACED = ("--actions-per-minute", "6", "--verify-timeout", "0")


def run(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *arguments], capture_output=True, text=True, check=False, timeout=timeout)


def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'planner.db'}"  # the `store` fixture's file


def execute_arguments(plan_id: int, cluster: policies.Cluster, tmp_path: Path) -> list[str]:
    # The fake cluster has no load reports to measure the plan by afterwards.
    return ["execute", str(plan_id), "--admin-url", cluster.entry.url, "--db", db_url(tmp_path), "--no-measure"]


# --- --version and the exit codes ------------------------------------------------------------------------------


def test_version_names_the_installed_distribution_and_the_pulsar_release_lines():
    done = run("--version")
    assert done.returncode == 0 and done.stderr == ""
    first, lines = done.stdout.splitlines()
    assert first == f"pulsar-rebalance {importlib.metadata.version('pulsar-rebalance')}"
    assert all(f"{major}.{minor} ({release})" in lines for (major, minor), release in RELEASE_LINES.items()), lines


def test_a_runtime_failure_exits_1_with_one_line_and_bad_input_still_exits_2(tmp_path, capsys):
    # A cluster nobody answers for: the collect cannot read it (it used to exit 2 as if the input were wrong).
    url = db_url(tmp_path)
    assert cli.main(["collect", "--admin-url", "http://127.0.0.1:1", "--db", url]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "127.0.0.1:1" in error, error

    # A store that cannot be opened: a runtime failure, named as the store's.
    assert cli.main(["plan", "list", "--db", f"sqlite:///{tmp_path}"]) == 1  # a directory: SQLite cannot open it
    error = capsys.readouterr().err
    assert error.startswith("error: the store is unavailable: ") and error.count("\n") == 1, error

    # Bad input is still 2, for every command.
    assert cli.main(["execute", "0", "--db", url]) == 2
    assert cli.main(["stop", "nope", "--db", url]) == 2
    capsys.readouterr()


def test_execute_against_an_unreachable_cluster_exits_1(cluster, store, tmp_path, capsys):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    assert cli.main(["execute", str(plan_id), "--admin-url", "http://127.0.0.1:1", "--db", db_url(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "127.0.0.1:1" in error, error
    assert cluster.unloads() == []


def test_execute_exits_3_unless_every_action_is_done_and_keeps_its_json_on_stdout(cluster, store, tmp_path, capsys):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/guarded", a, c), unload("t/free", a, None)])
    cluster.policies({"reason": "metadata store timeout"}, status=500)  # the destination cannot be checked: deferred
    arguments = execute_arguments(plan_id, cluster, tmp_path)
    assert cli.main([*arguments, "--verify-timeout", "0", "--actions-per-minute", "0"]) == 3
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "partial" and report["counts"]["deferred"] == 1, report
    # One line as each action starts and one as it ends, on stderr only.
    assert f"[1/2] unload t/guarded/{FULL}: started" in err and f"[1/2] unload t/guarded/{FULL}: deferred" in err
    assert f"[2/2] unload t/free/{FULL}: started" in err, err

    cluster.policies({})
    assert cli.main([*arguments, "--verify-timeout", "0", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "executed" and err == ""


# --- the lifecycle: stopped, from executing only, resumable ------------------------------------------------------


def test_stopped_is_an_ending_of_an_execution_that_an_explicit_rerun_resumes():
    assert PlanStatus.STOPPED in PLAN_TRANSITIONS[PlanStatus.EXECUTING]
    assert advance(PlanStatus.STOPPED, PlanStatus.EXECUTING, "plan 1") is PlanStatus.EXECUTING
    for before in (PlanStatus.APPROVED, PlanStatus.PARTIAL, PlanStatus.EXECUTED, PlanStatus.PENDING):
        assert PlanStatus.STOPPED not in PLAN_TRANSITIONS[before], before


def test_a_stop_for_a_plan_that_is_not_executing_is_refused_and_records_nothing(cluster, store, tmp_path, capsys):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    assert cli.main(["stop", str(plan_id), "--db", db_url(tmp_path), "--reason", "too early"]) == 2
    error = capsys.readouterr().err
    assert error == f"error: plan {plan_id} is approved, not executing: there is no execution to stop\n"
    assert cli.main(["stop", "999", "--db", db_url(tmp_path)]) == 2
    assert "unknown plan 999" in capsys.readouterr().err
    with store.session() as session:
        assert session.scalars(select(StopRequest)).all() == []
    assert events(store, "plan.stop-requested") == []


# --- stop, from another process, during a paced execution ----------------------------------------------------------


class StderrLines:
    """A process's stderr, line by line as it comes, kept for the assertions."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()

    def join(self) -> None:
        """Until the process closed its stderr (it ended): every line is read."""
        self._thread.join(30)

    def wait_for(self, text: str, timeout: float = 60) -> None:
        with self._seen:
            if not self._seen.wait_for(lambda: any(text in line for line in self.lines), timeout):
                raise AssertionError(f"no {text!r} on stderr: {self.lines}")


def test_stop_from_another_process_is_honoured_before_the_next_action(cluster, store, tmp_path):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload(namespace, a, c) for namespace in NAMESPACES])
    # Paced at one action per 10 s: the stop lands in the wait after the first action.
    execute = subprocess.Popen(
        [SCRIPT, *execute_arguments(plan_id, cluster, tmp_path), *PACED],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        stderr = StderrLines(execute)
        stderr.wait_for("waiting 10.0 s before action 2/4")
        stop = run("stop", str(plan_id), "--db", db_url(tmp_path), "--reason", "incident 42", "--as", "oncall")
        # Once `stop` returned, the request is committed: from here on the fake must see nothing more.
        seen_at_stop = len(cluster.entry.requests)
        stopped_at = time.monotonic()
        # Not communicate(): it would read stderr too, taking lines from the reader. The JSON fits the pipe's buffer.
        execute.wait(timeout=60)
        assert execute.stdout is not None
        out = execute.stdout.read()
        stderr.join()
    finally:
        execute.kill()
    assert stop.returncode == 0, stop.stderr
    recorded = json.loads(stop.stdout)
    assert recorded["plan"] == plan_id and recorded["reason"] == "incident 42" and not recorded["alreadyRequested"]

    assert execute.returncode == 3, stderr.lines
    assert time.monotonic() - stopped_at < 5, "honoured within the pacing wait, not after it"
    assert len(cluster.entry.requests) == seen_at_stop, [r.path for r in cluster.entry.requests[seen_at_stop:]]
    assert cluster.unloads() == [f"/admin/v2/namespaces/t/guarded/{FULL}/unload"]

    report = json.loads(out)
    assert report["status"] == "stopped" and report["stop"]["requestedBy"] == recorded["requestedBy"], report
    assert [action["status"] for action in report["actions"]] == ["placed-elsewhere", "not-run", "not-run", "not-run"]
    assert all(
        "stopped by cli:" in action["reason"] and "incident 42" in action["reason"] for action in report["actions"][1:]
    )
    assert any("stopped by cli:" in line and "no further action is started" in line for line in stderr.lines)

    # The audit trail: who asked and why, and the run that honoured it; the request closed as `stopped`.
    [asked] = events(store, "plan.stop-requested")
    assert asked.actor.endswith(" as oncall") and asked.details["reason"] == "incident 42"
    [honoured] = events(store, "plan.stopped")
    assert honoured.details["stopRequest"] == recorded["stopRequest"] and honoured.details["notRun"] == [1, 2, 3]
    assert events(store, "plan.execution-finished")[-1].details["status"] == "stopped"
    with store.session() as session:
        [row] = session.scalars(select(StopRequest)).all()
        assert row.outcome == "stopped" and row.closed_at is not None
    assert show_plan(store, plan_id).status is PlanStatus.STOPPED

    # A stopped plan stays stopped until someone executes it again: then the rest runs, and the closed request
    # stops nothing.
    again = run(
        "execute", str(plan_id), "--admin-url", cluster.entry.url, "--db", db_url(tmp_path), "--verify-timeout", "0"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "executed" and len(cluster.unloads()) == 4


def test_a_stop_that_comes_after_the_last_action_is_closed_with_the_plans_ending(cluster, store, monkeypatch):
    """A request the run never reached an action boundary for is not left open to stop a later run."""
    from planner.execute import executor

    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    finish = executor._finish

    def stop_then_finish(run, report):
        request_stop(store, plan_id, "cli:late", "too late")
        return finish(run, report)

    monkeypatch.setattr(executor, "_finish", stop_then_finish)
    report = executor.execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert report.status is PlanStatus.EXECUTED and report.stopped_by is None
    with store.session() as session:
        [row] = session.scalars(select(StopRequest)).all()
        assert row.outcome == "executed" and row.closed_at is not None
    assert events(store, "plan.stopped") == []
    assert events(store, "plan.execution-finished")[-1].details["stopRequestsClosed"] == [row.id]


@pytest.mark.parametrize("entry", ["cli", "airflow"])
def test_a_stop_recorded_while_no_run_holds_the_plan_is_honoured_by_the_next_before_it_sends(
    cluster, store, tmp_path, entry, monkeypatch
):
    """A run that died left the plan executing; a stop recorded then is honoured by the run that resumes it, before
    its first action, whichever entry point starts it: the CLI's `execute` or the Airflow execute task."""
    from planner.store.models import Plan

    a, _, c = cluster.ids
    run_key = f"manual__1:{CLUSTER}:AvgShedder"
    plan_id = approved(store, [unload("t/free", a, c)], run_key=run_key)
    with store.session() as session:
        session.get(Plan, plan_id).status = PlanStatus.EXECUTING.value  # as a run that died leaves it
    request_stop(store, plan_id, "cli:ops", "hold on")
    if entry == "cli":
        done = run(*execute_arguments(plan_id, cluster, tmp_path), "--verify-timeout", "0")
        assert done.returncode == 3 and json.loads(done.stdout)["status"] == "stopped", done.stderr
    else:
        from planner.airflow import tasks

        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
        monkeypatch.setattr(tasks, "store", lambda: store)
        connection = {"conn_type": "pulsar", "host": cluster.entry.url, "extra": {"verify_timeout_seconds": 0}}
        monkeypatch.setenv(f"AIRFLOW_CONN_PULSAR_{CLUSTER.upper()}", json.dumps(connection))
        assert tasks.execute_approved(CLUSTER, "manual__1")["status"] == "stopped"
    assert cluster.unloads() == []
    assert show_plan(store, plan_id).status is PlanStatus.STOPPED
    [honoured] = events(store, "plan.stopped")
    assert honoured.details["requestedBy"] == "cli:ops" and honoured.details["reason"] == "hold on"


def test_the_stop_requests_migration_goes_down_and_up_again(tmp_path):
    from alembic import command
    from sqlalchemy import inspect

    from planner.store.database import Store, _alembic_config, current_revisions, migration_heads

    opened = Store(f"sqlite:///{tmp_path / 'migrated.db'}")
    assert "stop_requests" in inspect(opened.engine).get_table_names()
    config = _alembic_config()
    with opened.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0007")
    assert current_revisions(opened.engine) == {"0007"}
    assert "stop_requests" not in inspect(opened.engine).get_table_names()
    opened.dispose()
    again = Store(f"sqlite:///{tmp_path / 'migrated.db'}")  # opening migrates to the newest again
    assert "stop_requests" in inspect(again.engine).get_table_names()
    assert current_revisions(again.engine) == migration_heads()
    again.dispose()
