"""A real Spark standalone cluster and a Spark Connect server on loopback, from the installed pyspark.

- `worker_python(root)`: a virtualenv with numpy, pandas and pyarrow only (the driver's versions): the
  Python a team's Spark workers have. Not pyspark (Spark ships its own to the workers), not this project.
- `StandaloneCluster`: a master and workers, each a process of its own started with `spark-class`. The
  workers run in a private mount namespace in which the checkout (and with it the dev virtualenv) is hidden
  under an empty read-only tmpfs, after the pyspark installation they run from was bind-mounted outside it.
  So executors can use nothing of this project but what the job ships them.
- `ConnectServer`: Spark's own Spark Connect server (`SparkConnectServer`), a driver on that cluster.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy
import pandas
import pyarrow
import pyspark
import requests

from tests.integration.conftest import _free_port, stop_process_group
from tests.object_store import TEST_S3_CREDENTIALS

REPO = Path(__file__).resolve().parents[2]
PYSPARK_HOME = Path(pyspark.__file__).resolve().parent
WORKERS = 2


def worker_python(root: Path) -> Path:
    """A Python with only Spark's pandas-UDF libraries, at the driver's versions."""
    venv = root / "worker-python"
    if not (venv / "bin" / "python").exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "pip"),
                "install",
                "--quiet",
                f"numpy=={numpy.__version__}",
                f"pandas=={pandas.__version__}",
                f"pyarrow=={pyarrow.__version__}",
            ],
            check=True,
            capture_output=True,
        )
    return venv / "bin" / "python"


def spark_environment(root: Path) -> dict[str, str]:
    """Spark's daemons and clients on loopback, with a configuration directory of the test's own."""
    conf = root / "conf"
    conf.mkdir(exist_ok=True)
    environment = {
        **os.environ,
        "SPARK_HOME": str(PYSPARK_HOME),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_DAEMON_MEMORY": "512m",
        # No REST submission server beside the master's own port.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # The object-storage tests' S3-compatible server takes any key; the workers' executors read it too.
        **TEST_S3_CREDENTIALS,
    }
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS"):
        environment.pop(name, None)
    return environment


@dataclass
class StandaloneCluster:
    root: Path
    master_url: str
    ui_url: str
    processes: list[subprocess.Popen[bytes]]

    def alive_workers(self) -> int:
        with contextlib.suppress(requests.RequestException, ValueError):
            workers = requests.get(f"{self.ui_url}/json/", timeout=5).json().get("workers", [])
            return sum(1 for worker in workers if worker.get("state") == "ALIVE")
        return 0

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}" for path in sorted(self.root.glob("*.log"))
        )


def _hidden_checkout_command(root: Path, command: list[str]) -> list[str]:
    """`command` in a private mount namespace where the checkout is an empty directory; Spark's installation
    stays visible through a bind mount outside the checkout, made first."""
    visible_home = root / "spark-home"
    visible_home.mkdir(exist_ok=True)
    script = " && ".join(
        [
            f"mount --bind {shlex.quote(str(PYSPARK_HOME))} {shlex.quote(str(visible_home))}",
            f"mount -t tmpfs -o ro,size=4k,mode=755 hidden {shlex.quote(str(REPO))}",
            f"export SPARK_HOME={shlex.quote(str(visible_home))}",
            "exec " + shlex.join([str(visible_home / "bin" / "spark-class"), *command]),
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]


@contextlib.contextmanager
def standalone_cluster(
    root: Path, *, address: str = "127.0.0.1", namespace: str | None = None
) -> Iterator[StandaloneCluster]:
    """A master and WORKERS one-core workers on `address` (inside network `namespace`, if given: `ip netns`), the
    checkout hidden from the workers; stopped (process groups killed) on exit."""
    environment = spark_environment(root)
    if namespace is not None:
        environment |= {"SPARK_LOCAL_IP": address, "SPARK_LOCAL_HOSTNAME": address}
    in_namespace = ["ip", "netns", "exec", namespace] if namespace is not None else []
    port, ui_port = _free_port(), _free_port()
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, command: list[str]) -> None:
        with (root / f"{name}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [*in_namespace, *command],
                    env=environment,
                    cwd=root,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    master = ["org.apache.spark.deploy.master.Master", "--host", address, "--port", str(port)]
    start("master", [str(PYSPARK_HOME / "bin" / "spark-class"), *master, "--webui-port", str(ui_port)])
    cluster = StandaloneCluster(root, f"spark://{address}:{port}", f"http://{address}:{ui_port}", processes)
    try:
        for index in range(WORKERS):
            work = root / f"work-{index}"
            work.mkdir(exist_ok=True)
            worker = ["org.apache.spark.deploy.worker.Worker", "--host", address, "--port", str(_free_port())]
            worker += ["--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g"]
            worker += ["--work-dir", str(work), cluster.master_url]
            start(f"worker-{index}", _hidden_checkout_command(root, worker))
        deadline = time.monotonic() + 120
        while cluster.alive_workers() < WORKERS:
            if time.monotonic() > deadline or any(process.poll() is not None for process in processes):
                raise RuntimeError(f"the standalone cluster did not start:\n{cluster.logs()}")
            time.sleep(1)
        yield cluster
    finally:
        for process in reversed(processes):
            stop_process_group(process, timeout=30)


@dataclass
class ConnectServer:
    url: str
    log: Path


@contextlib.contextmanager
def connect_server(root: Path, cluster: StandaloneCluster, python: Path) -> Iterator[ConnectServer]:
    """Spark Connect (gRPC on loopback) as a driver on `cluster`, its executors' Python `python`."""
    environment = {**spark_environment(root), "PYSPARK_PYTHON": str(python)}
    port = _free_port()
    log = root / "connect.log"
    command = [
        str(PYSPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        cluster.master_url,
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.driver.memory=768m",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=environment, cwd=root, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server did not start:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(1)
        yield ConnectServer(f"sc://127.0.0.1:{port}", log)
    finally:
        stop_process_group(process, timeout=30)
