"""`stop` during a paced execution of a real plan on the real local cluster: `execute` and `stop` run as the
console script in processes of their own; the run finishes the unload under way, sends none after the stop is
recorded, ends `stopped` (exit 3), and an explicit `execute` later moves the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.lifecycle import PlanStatus
from planner.store.database import Store
from planner.store.models import AuditEvent
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.executor_support import CountingClient, approved_plan, owners

pytestmark = pytest.mark.integration

SCRIPT = str(Path(sys.executable).parent / "pulsar-rebalance")


def test_stop_during_a_paced_execution_sends_nothing_more_and_a_rerun_moves_the_rest(
    pulsar_cluster, traffic_generator, tmp_path
):
    source, destination = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(4)])
    generator.place_bundles({i: source for i in range(4)})
    generator.start()  # clients look the bundles up again after each unload
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(url)
    bundles = [
        f"{generator.namespace}/0x{generator.boundaries[i]:08x}_0x{generator.boundaries[i + 1]:08x}" for i in range(4)
    ]
    plan_id = approved_plan(store, pulsar_cluster, bundles, source, destination)
    admin_url = pulsar_cluster["brokers"][0]["adminUrl"]
    execute = [SCRIPT, "execute", str(plan_id), "--admin-url", admin_url, "--db", url, "--verify-timeout", "30"]

    # One action per 10 s: the stop lands in the wait after the first unload.
    running = subprocess.Popen(
        [*execute, "--actions-per-minute", "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    waiting = threading.Event()

    def read_stderr() -> None:
        assert running.stderr is not None
        for line in running.stderr:
            lines.append(line.rstrip("\n"))
            if "before action 2/4" in line:
                waiting.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert waiting.wait(120), lines
        stop = subprocess.run(
            [SCRIPT, "stop", str(plan_id), "--db", url, "--reason", "proof on the local cluster"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        stopped_at = time.monotonic()
        # Not communicate(): it would read stderr too, taking lines from the reader. The JSON fits the pipe's buffer.
        running.wait(timeout=120)
        assert running.stdout is not None
        out = running.stdout.read()
    finally:
        running.kill()
    reader.join(30)
    assert stop.returncode == 0, stop.stderr
    assert running.returncode == 3, lines
    assert time.monotonic() - stopped_at < 5, "honoured within the pacing wait"
    report = json.loads(out)
    assert report["status"] == "stopped", report
    assert [action["status"] for action in report["actions"]] == ["succeeded", "not-run", "not-run", "not-run"]
    assert any("stopped by cli:" in line for line in lines), lines

    # Nothing was sent after the stop: one attempt in the store, and the cluster shows only the first bundle moved,
    # still, a while later.
    with store.session() as session:
        events = [event.event for event in session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan_id))]
    assert events.count("action.sending") == 1 and "plan.stop-requested" in events and "plan.stopped" in events
    time.sleep(5)
    client = CountingClient(admin_url)
    seen = owners(client, pulsar_cluster, bundles)
    assert seen.get(bundles[0]) == destination and all(seen.get(bundle) == source for bundle in bundles[1:]), seen
    assert show_plan(store, plan_id).status is PlanStatus.STOPPED

    # Stopped, not closed: an explicit execute moves the rest.
    again = subprocess.run(
        [*execute, "--actions-per-minute", "0", "--quiet"], capture_output=True, text=True, check=False, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "executed"
    assert all(owner == destination for owner in owners(client, pulsar_cluster, bundles).values())
    store.dispose()
