"""Topic stats decoded in worker processes (`PulsarAdminClient.map_in_processes`): the same snapshot as threads
make, the credentials handed to the workers through the pool's pipe only, and a worker that dies or stops fails the
collect with nothing kept, its processes gone."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from planner.collect.admin_client import AdminAuth, AdminError, PulsarAdminClient, WorkerProcessError
from planner.collect.collector import collect, read_archive
from planner.store.database import Store
from planner.store.snapshots import list_snapshots
from tests.fake_extensible import descendants, extensible_cluster, gone
from tests.fake_pulsar import FakePulsar, Reply

CLUSTER = "fake"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.d29ya2Vycw.sig-77aa"
BROKERS = 4


@pytest.fixture
def cluster():
    """Four fake brokers of the extensible load manager, each serving one namespace's lower bundle."""
    with extensible_cluster(CLUSTER, BROKERS) as brokers:
        yield brokers


def _client(entry: FakePulsar, **options) -> PulsarAdminClient:
    return PulsarAdminClient(
        entry.url, auth=AdminAuth(token=TOKEN), timeout=(1.0, 5.0), retries=0, max_response_bytes=1 << 20, **options
    )


def _workers() -> list[int]:
    """The worker processes: the children of this process's fork server. Only those: in a full run this process
    has other grandchildren (a cluster's, Spark's), which a test must never signal."""
    found = descendants()
    servers = {pid for pid, parent in found.items() if parent == os.getpid() and _is_fork_server(pid)}
    return [pid for pid, parent in found.items() if parent in servers]


def _is_fork_server(pid: int) -> bool:
    try:
        return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _snapshot(store: Store) -> dict:
    archive = read_archive(list_snapshots(store, CLUSTER, limit=1)[0].archive_path)
    archive.pop("takenAt")
    reports = {broker: json.loads(raw) for broker, raw in archive.pop("loadReports").items()}
    for report in reports.values():
        report.pop("lastUpdate")
    return {**archive, "loadReports": reports}


def test_worker_processes_make_the_same_snapshot_as_threads_and_get_the_token_by_pipe_only(cluster, tmp_path):
    entry = cluster[0]
    seen: dict[int, tuple[bytes, bytes]] = {}
    done = threading.Event()

    def watch() -> None:  # every worker's command line and environment while the collect runs
        while not done.wait(0.01):
            for pid in _workers():
                with contextlib.suppress(OSError):
                    seen.setdefault(
                        pid, (Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes())
                    )

    for broker in cluster:  # slow enough for the watcher to see the workers
        broker.routes[("GET", "/admin/v2/broker-stats/topics")][0].delay = 0.3
    snapshots = {}
    for processes in (0, 2):
        store = Store(f"sqlite:///{tmp_path / f'{processes}.db'}")
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with _client(entry, read_processes=processes) as client:
                assert client.worker_processes(BROKERS) == processes
                collect(client, store, tmp_path / str(processes))
        finally:
            done.set()
            watcher.join()
            done.clear()
        snapshots[processes] = _snapshot(store)
        store.dispose()
    assert snapshots[2] == snapshots[0]
    assert snapshots[0]["declarations"]["policies"]["anti_affinity_groups"] == {"t/ns-1": "spread", "t/ns-3": "spread"}
    assert len(snapshots[0]["loadReports"]) == BROKERS
    assert len(seen) >= 2, "no worker process was seen"
    for cmdline, environ in seen.values():
        assert TOKEN.encode() not in cmdline and TOKEN.encode() not in environ
    stats_calls = [request for broker in cluster for request in broker.requests if request.path.endswith("/topics")]
    assert len(stats_calls) == 2 * BROKERS
    assert {request.headers.get("Authorization") for request in stats_calls} == {f"Bearer {TOKEN}"}


def test_a_broker_whose_topic_stats_fail_is_missing_and_brings_no_group_either_way(cluster, tmp_path):
    """The groups read while the workers decode cover every broker's namespaces; those of a broker left out of the
    snapshot are dropped, as the threads' collect never asks for them."""
    cluster[3].route("GET", "/admin/v2/broker-stats/topics", Reply(500, {"reason": "boom"}))
    snapshots = {}
    for processes in (0, 2):
        store = Store(f"sqlite:///{tmp_path / f'{processes}.db'}")
        with _client(cluster[0], read_processes=processes) as client:
            result = collect(client, store, tmp_path / str(processes))
        assert list(result.missing) == [cluster[3].broker_id]
        snapshots[processes] = _snapshot(store)
        store.dispose()
    assert snapshots[2] == snapshots[0]
    assert snapshots[2]["declarations"]["policies"]["anti_affinity_groups"] == {"t/ns-1": "spread"}


def test_a_worker_killed_mid_read_fails_the_collect_and_keeps_nothing(cluster, tmp_path):
    for broker in cluster:
        broker.routes[("GET", "/admin/v2/broker-stats/topics")][0].delay = 3.0
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    killed: list[int] = []

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            workers = _workers()
            if len(workers) >= 2 and any(r.path.endswith("/topics") for b in cluster for r in b.requests):
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
            time.sleep(0.02)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    with _client(cluster[0], read_processes=2) as client, pytest.raises(WorkerProcessError, match="died before"):
        collect(client, store, tmp_path)
    killer.join()
    assert killed
    assert list_snapshots(store, CLUSTER, limit=5) == []
    assert not [path for path in tmp_path.rglob("*") if path.is_file() and path.suffix != ".db"]
    store.dispose()


def test_stopped_workers_fail_the_collect_past_their_calls_timeouts_and_are_killed(cluster, tmp_path):
    for broker in cluster[2:]:  # the first two answer at once, the last two after 30 s
        broker.routes[("GET", "/admin/v2/broker-stats/topics")][0].delay = 30.0
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    stopped: list[int] = []

    def stop_the_workers() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            slow = [r for b in cluster[2:] for r in b.requests if r.path.endswith("/topics")]
            if len(slow) == 2:
                stopped.extend(_workers())
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
                return
            time.sleep(0.02)

    stopper = threading.Thread(target=stop_the_workers)
    stopper.start()
    started = time.monotonic()
    failures: list[BaseException] = []

    def collect_once() -> None:
        try:
            collect(client, store, tmp_path)
        except BaseException as error:  # the test asserts which
            failures.append(error)

    with _client(cluster[0], read_processes=2) as client:
        limit = client._worker_silence_limit()
        collecting = threading.Thread(target=collect_once, daemon=True)
        collecting.start()
        collecting.join(limit + 30)
        assert not collecting.is_alive(), "the collect waits for its stopped workers forever"
    elapsed = time.monotonic() - started
    assert len(failures) == 1 and isinstance(failures[0], WorkerProcessError), failures
    assert "answered in" in str(failures[0])
    stopper.join()
    assert stopped
    assert limit <= elapsed < limit + 15  # not the 30 s the brokers take, nor forever
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in stopped), "a stopped worker was left behind"
    assert list_snapshots(store, CLUSTER, limit=5) == []
    store.dispose()


def test_a_collect_killed_while_its_workers_read_leaves_no_process_behind(cluster, tmp_path):
    for broker in cluster:
        broker.routes[("GET", "/admin/v2/broker-stats/topics")][0].delay = 2.0
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from planner.collect.admin_client import PulsarAdminClient
        from planner.collect.collector import collect
        from planner.store.database import Store
        if __name__ == "__main__":
            client = PulsarAdminClient({cluster[0].url!r}, read_processes=2, timeout=(1.0, 5.0))
            collect(client, Store("sqlite:///{tmp_path}/planner.db"), Path({str(tmp_path)!r}))
        """
    )
    path = tmp_path / "collect_once.py"
    path.write_text(script)
    child = subprocess.Popen([sys.executable, str(path)], cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 60
        family: list[int] = []
        while time.monotonic() < deadline:
            family = list(descendants(child.pid))
            if len(family) >= 3 and any(r.path.endswith("/topics") for b in cluster for r in b.requests):
                break  # the fork server and two workers, reading
            time.sleep(0.02)
        assert len(family) >= 3, family
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 15
        while not all(gone(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in family if not gone(pid)] == []
    finally:
        child.kill()


def test_worker_processes_one_per_usable_cpu_two_keys_each_or_as_the_settings_say(monkeypatch):
    client = PulsarAdminClient("http://127.0.0.1:1")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3, 4, 5, 6, 7})
    assert [client.worker_processes(keys) for keys in (1, 3, 4, 7, 50)] == [0, 0, 2, 3, 4]
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    assert client.worker_processes(50) == 0
    assert [PulsarAdminClient("http://127.0.0.1:1", read_processes=n).worker_processes(3) for n in (0, 1, 2, 8)] == [
        0,
        0,
        2,
        3,
    ]


def test_an_admin_error_crosses_a_process_boundary_whole():
    error = AdminError("b:8080", "GET", "/admin/v2/broker-stats/topics", "read timed out", 504, may_have_applied=True)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.broker, copy.endpoint, copy.status, copy.reason, copy.may_have_applied, str(copy)) == (
        error.broker,
        error.endpoint,
        error.status,
        error.reason,
        True,
        str(error),
    )


def test_workers_start_without_the_collects_main_module(cluster, tmp_path):
    """A worker does not import its parent's `__main__` again: in an Airflow 3 task that is the `airflow` script,
    whose import fails there (the task's database URL is masked), and every worker died before reading
    (`tests/integration/test_collect_processes_in_airflow.py` runs the collect DAG under a real scheduler)."""
    script = textwrap.dedent(
        f"""
        if __name__ != "__main__":
            raise SystemExit("a worker imported the collect's __main__ again")
        from pathlib import Path
        from planner.collect.admin_client import PulsarAdminClient
        from planner.collect.collector import collect
        from planner.store.database import Store
        client = PulsarAdminClient({cluster[0].url!r}, read_processes=2, timeout=(1.0, 5.0))
        collect(client, Store("sqlite:///{tmp_path}/planner.db"), Path({str(tmp_path)!r}))
        """
    )
    path = tmp_path / "collect_main.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    store = Store(f"sqlite:///{tmp_path}/planner.db")
    assert len(_snapshot(store)["loadReports"]) == BROKERS
    store.dispose()


def test_a_call_defined_in_main_is_refused_before_any_worker_starts():
    def call(client: PulsarAdminClient, key: str) -> str:
        return key

    call.__module__ = "__main__"  # as a script's own function: a worker, without the script, could not find it
    with pytest.raises(ValueError, match="call is not importable"):
        PulsarAdminClient("http://127.0.0.1:1", read_processes=2).map_in_processes(["a", "b"], call)
