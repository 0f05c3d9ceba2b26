"""The collect DAG decodes an extensible cluster's topic stats in worker processes inside a real Airflow task.

`PulsarAdminClient.map_in_processes` starts its workers from a fork server. In Airflow 3 the task's process is
forked by the supervisor (itself a LocalExecutor worker forked from the scheduler), its stdio are sockets to the
supervisor, and its `__main__` is the `airflow` script, which multiprocessing has every worker import again by path
unless told not to (`_preparation_data` in `planner/collect/admin_client.py`): there that import fails, Airflow
having masked the task's database URL, and every worker died. This runs the `pulsar_rebalance_collect` DAG through
the REST API under a real scheduler (LocalExecutor), dag-processor and api-server, started as
`test_install_into_airflow.py` starts them but from this checkout's environment, against four fake extensible
brokers in this process, the cluster's connection (created through the REST API, token included) asking for 2
worker processes. Unpaused, the DAG also makes its scheduled run; the test watches the one it triggered.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.collect.collector import read_archive
from planner.store.database import Store
from planner.store.snapshots import list_snapshots
from tests.fake_extensible import TOPIC_STATS, descendants, extensible_cluster, gone
from tests.integration.conftest import _free_port, airflow_env
from tests.integration.test_install_into_airflow import Api, Components, api_server_env, tail

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CLUSTER = "fake"
BROKERS = 4
TOKEN = "eyJhbGciOiJIUzI1NiJ9.YWlyZmxvdy13b3JrZXJz.sig-3c1e"
COLLECT_DAG = "pulsar_rebalance_collect"
FORK_SERVER = b"multiprocessing.forkserver"


class ForkServerWatch:
    """Polls the processes under the scheduler (its LocalExecutor workers, their tasks and whatever those start)
    for a fork server of `multiprocessing`; records each one seen with its parent (the task's process) and the
    most children it had at once (the pool's workers), and every command line and environment of theirs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.parents: dict[int, int] = {}  # fork server -> the process that started it
        self.children: dict[int, set[int]] = {}  # fork server -> the children it had at once, most seen
        self.seen: dict[int, bytes] = {}  # fork server or worker -> its command line and environment
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="fork-server-watch", daemon=True)

    def __enter__(self) -> ForkServerWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            family = descendants(self.root)
            for pid in family:
                with contextlib.suppress(OSError):
                    if FORK_SERVER not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        continue
                    self.parents.setdefault(pid, family[pid])
                    workers = {child for child, parent in family.items() if parent == pid}
                    if len(workers) > len(self.children.get(pid, ())):
                        self.children[pid] = workers
                    for process in (pid, *workers):
                        self.seen.setdefault(
                            process,
                            Path(f"/proc/{process}/cmdline").read_bytes()
                            + Path(f"/proc/{process}/environ").read_bytes(),
                        )

    def most_workers(self, started_by: int) -> int:
        """The most workers seen at once under a fork server that process `started_by` started."""
        servers = [server for server, parent in self.parents.items() if parent == started_by]
        return max((len(self.children.get(server, ())) for server in servers), default=0)


@contextlib.contextmanager
def running_airflow(root: Path, entry_url: str) -> Iterator[tuple[Api, Components, dict[str, str]]]:
    """This checkout's Airflow (LocalExecutor on a SQLite metadata database) serving cluster `fake` at `entry_url`:
    its api-server, scheduler and dag-processor, each a process of its own on loopback; the `pulsar_fake`
    connection is the test's to create."""
    env = airflow_env({"cluster": CLUSTER, "brokers": [{"adminUrl": entry_url}]}, root)
    env.pop(f"AIRFLOW_CONN_PULSAR_{CLUSTER.upper()}")  # created through the REST API below, as a deployment does
    port = _free_port()
    server_env, password = api_server_env(root, port)
    logs = root / "logs"
    logs.mkdir()
    env |= server_env | {
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),  # Components runs `$VIRTUAL_ENV/bin/airflow`
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",  # the LocalExecutor forks this many workers at once
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "PULSAR_REBALANCE_PLAN_PROFILE": "manual",  # the collect's samples start no plan run
    }
    components = Components(env, logs)
    try:
        for component in ("api-server", "scheduler", "dag-processor"):
            components.start(component)
        api = Api(f"http://127.0.0.1:{port}", password)
        yield api, components, env
    finally:
        components.stop()


def test_the_collect_dag_decodes_topic_stats_in_worker_processes_under_a_real_scheduler(tmp_path):
    with extensible_cluster(CLUSTER, BROKERS) as brokers, running_airflow(tmp_path, brokers[0].url) as running:
        api, components, env = running
        logs = tmp_path / "logs"
        for broker in brokers:  # each read lasts long enough for the watch to see the workers at it
            broker.routes[TOPIC_STATS][0].delay = 2.0
        api.call(
            "POST",
            "/api/v2/connections",
            json={
                "connection_id": f"pulsar_{CLUSTER}",
                "conn_type": "pulsar",
                "host": brokers[0].url,
                "password": TOKEN,
                "extra": json.dumps({"read_processes": 2}),
            },
        )
        deadline = time.monotonic() + 180
        while api.session.get(f"{api.url}/api/v2/dags/{COLLECT_DAG}", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, f"the collect DAG was not parsed:\n{tail(logs)}"
            time.sleep(1)
        assert api.call("GET", "/api/v2/importErrors")["total_entries"] == 0
        scheduler = components.processes["scheduler"][0].pid
        with ForkServerWatch(scheduler) as watch:
            run_id = api.call("POST", f"/api/v2/dags/{COLLECT_DAG}/dagRuns", json={"logical_date": None})["dag_run_id"]
            api.call("PATCH", f"/api/v2/dags/{COLLECT_DAG}", json={"is_paused": False})
            states = api.wait_for_run(COLLECT_DAG, run_id, 300, logs)
        # The collect, and after it the scale events' proposals (none: the first snapshot is the baseline).
        collected = {task: states.get(task) for task in ("clusters[-1]", "collect[0]", "scale_events[-1]")}
        assert set(collected.values()) == {"success"}, f"{states}\n{tail(logs)}"
        assert not {state for state in states.values() if state in {"failed", "upstream_failed"}}, states
        # The run's collect task's process started a fork server, and both workers under it read at once.
        task = api.call("GET", f"/api/v2/dags/{COLLECT_DAG}/dagRuns/{run_id}/taskInstances/collect/0")
        seen = f"fork servers (parent, workers) under the scheduler: {watch.parents}, {watch.children}"
        assert watch.most_workers(started_by=task["pid"]) == 2, f"task process {task['pid']}; {seen}"
        # None of them outlives the task, while Airflow goes on.
        deadline = time.monotonic() + 30
        while not all(gone(pid) for pid in watch.seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in watch.seen if not gone(pid)] == []

    # The token crossed to them through the pool's pipe: every topic stats read carried it, and no worker's or
    # fork server's command line or environment holds it.
    reads = [request for broker in brokers for request in broker.requests if request.path == TOPIC_STATS[1]]
    assert len(reads) >= BROKERS and {request.headers.get("Authorization") for request in reads} == {f"Bearer {TOKEN}"}
    assert not [pid for pid, seen in watch.seen.items() if TOKEN.encode() in seen]
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    [snapshot] = list_snapshots(store, CLUSTER, limit=1)
    store.dispose()
    archive = read_archive(snapshot.archive_path)
    assert sorted(archive["loadReports"]) == sorted(broker.broker_id for broker in brokers)
    reports = {broker: json.loads(raw) for broker, raw in archive["loadReports"].items()}
    assert [report["numTopics"] for _, report in sorted(reports.items())] == [50 + index for index in range(BROKERS)]
