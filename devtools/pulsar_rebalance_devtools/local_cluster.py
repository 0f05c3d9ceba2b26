"""A real multi-broker Apache Pulsar cluster on 127.0.0.1, for development, tests and the demo.

Pulsar ships no Python broker, and the project's machines reach only Maven Central, so the broker
comes from there: the distribution tarball when Maven Central has it for the chosen version, else
`pulsar-broker` with its transitive dependencies. Either way the jars end up in one `lib/` folder
in a download cache outside the repository, and every process is a plain `java -cp lib/* <main>`
with configuration files written here (no `bin/pulsar` script needed).

The cluster is one ZooKeeper, one bookie and N brokers running `ModularLoadManagerImpl` with load
reports on but Pulsar's own shedding and auto-split off, so that only the planner moves bundles.
Processes outlive the Python process that started them; their PIDs live in a state file, so
`status()`/`stop()` work from any later process.

A cluster can run another release (`pulsar_version`, any 3.x or 4.x on Maven Central; Java 17 runs both) and
broker.conf keys of its own over the shared ones (`broker_settings`: thresholds, weights, Pulsar's own shedding,
failure domains). The state file records both; `start` refuses to hand back a running cluster of another release or
other settings, and refuses data another release wrote: such a cluster lives under its own home and ports.

Public functions: `start`, `status`, `stop`, `wipe`; helpers `ensure_distribution`, `distribution_route`,
`settings_from_env`, `broker_setting_overrides`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from planner.collect.oauth2 import OAuth2ClientCredentials, OAuth2Tokens
from planner.settings import ENV_PREFIX, DevClusterSettings, cache_home, planner_settings
from pulsar_rebalance_devtools.broker_settings import (
    EXTENSIBLE_BROKER_SETTINGS,
    OAUTH2_CLIENT_PLUGIN,
    SHARED_BROKER_SETTINGS,
)
from pulsar_rebalance_devtools.maven import DEPENDENCY_PLUGIN, MavenError, run_maven

log = logging.getLogger(__name__)

# Newest 4.x on Maven Central when this was written: 4.2.4 exists as `pulsar-broker` jars only, the
# newest distribution tarball there is 4.0.8 (both routes work; see `ensure_distribution`).
DEFAULT_PULSAR_VERSION: str = DevClusterSettings.model_fields["pulsar_version"].default
DEFAULT_CLUSTER_NAME: str = DevClusterSettings.model_fields["cluster"].default

# The variables that set each field (planner/settings.py, DevClusterSettings).
ENV_CACHE = f"{ENV_PREFIX}CACHE"
ENV_VERSION = f"{ENV_PREFIX}PULSAR_VERSION"
ENV_CLUSTER = f"{ENV_PREFIX}CLUSTER"
ENV_ZK_PORT = f"{ENV_PREFIX}ZK_PORT"
ENV_BOOKIE_PORT = f"{ENV_PREFIX}BOOKIE_PORT"
ENV_WEB_PORT = f"{ENV_PREFIX}WEB_PORT"
ENV_BROKER_PORT = f"{ENV_PREFIX}BROKER_PORT"
ENV_START_TIMEOUT = f"{ENV_PREFIX}START_TIMEOUT"
ENV_BROKER_MEM = f"{ENV_PREFIX}BROKER_MEM"
ENV_AUTH = f"{ENV_PREFIX}LOCAL_AUTH"
AUTH_MODES = ("none", "token")
ENV_LOAD_MANAGER = f"{ENV_PREFIX}LOCAL_LOAD_MANAGER"
LOAD_MANAGERS = ("modular", "extensible")
SUPERUSER_ROLE = "admin"
# What each broker of the cluster must have of its own (names, addresses, ports, its metadata store): an override
# of these would break the cluster rather than configure it.
PER_BROKER_KEYS = frozenset(
    {
        "clusterName",
        "metadataStoreUrl",
        "configurationMetadataStoreUrl",
        "bindAddress",
        "advertisedAddress",
        "webServicePort",
        "brokerServicePort",
    }
)
_BROKER_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")
# A release as Maven Central names it: major.minor.patch (a line such as "3.3" names no distribution).
_RELEASE = re.compile(r"\d+\.\d+\.\d+")

HOST = "127.0.0.1"
_STOP_TIMEOUT_SECONDS = 30.0
_POLL_SECONDS = 0.5

# What Pulsar's `bin/pulsar` script adds to every JVM, minus log settings, which are per process here.
_JVM_FLAGS = [
    "-Djava.net.preferIPv4Stack=true",
    "-Djute.maxbuffer=10485760",
    "-Dzookeeper.clientTcpKeepAlive=true",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.management/sun.management=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.platform=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dorg.apache.pulsar.shade.io.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.recycler.maxCapacityPerThread=4096",
    "-Dio.netty.allocator.maxOrder=10",
    "-XX:+ExitOnOutOfMemoryError",
    "-Dpulsar.allocator.exit_on_oom=true",
    # Two cores shared by five JVMs: a serial collector and C1-only JIT start faster and use less memory.
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
]
_ZOOKEEPER_MEM = ["-Xms64m", "-Xmx128m"]
_BOOKIE_MEM = ["-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m"]

_LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:pulsar.log.dir}/${sys:pulsar.log.file}
appender.file.filePattern = ${sys:pulsar.log.dir}/${sys:pulsar.log.file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{ISO8601} %-5level [%t] %c{1} - %msg%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


class LocalClusterError(RuntimeError):
    """The local cluster could not be downloaded, started or reached; the message says where to look."""


@dataclass(frozen=True, slots=True)
class LocalClusterSettings:
    """Where the cluster lives and which ports it uses; every field can be set through the environment."""

    home: Path
    cache: Path
    pulsar_version: str
    cluster_name: str
    zookeeper_port: int
    bookie_port: int
    web_port_base: int
    broker_port_base: int
    start_timeout_seconds: float
    broker_mem: tuple[str, ...]
    # "token": Pulsar's JWT authentication and authorization on the brokers, one superuser token in a file.
    auth: str = "none"
    # "extensible": the brokers run the extensible load manager (PIP-192) instead of ModularLoadManagerImpl.
    load_manager: str = "modular"
    # broker.conf keys over the shared settings, in every broker's file (`broker_setting_overrides` checks them).
    broker_settings: tuple[tuple[str, str], ...] = ()

    @property
    def cluster_dir(self) -> Path:
        return self.home / "local-cluster"

    @property
    def state_file(self) -> Path:
        return self.cluster_dir / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.cluster_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.cluster_dir / "data"

    @property
    def conf_dir(self) -> Path:
        return self.cluster_dir / "conf"

    @property
    def token_file(self) -> Path:
        """The superuser's token (mode 600); only its path is ever printed or passed on."""
        return self.cluster_dir / "auth" / "admin.token"

    @property
    def secret_key_file(self) -> Path:
        return self.cluster_dir / "auth" / "token-secret.key"

    def web_port(self, index: int) -> int:
        return self.web_port_base + index

    def broker_host(self, index: int) -> str:
        """Each broker on its own loopback address (127.0.0.1, .2, ...), as brokers on their own machines are:
        Pulsar's namespace isolation policies tell brokers apart by host only, never by port."""
        return f"127.0.0.{index + 1}"

    def broker_port(self, index: int) -> int:
        return self.broker_port_base + index


def settings_from_env() -> LocalClusterSettings:
    """The local cluster's settings (`planner.settings.DevClusterSettings`); ports default away from Pulsar's and
    Airflow's 8080/6650."""
    dev = DevClusterSettings()
    return LocalClusterSettings(
        home=planner_settings().home,
        cache=(dev.cache or cache_home() / "pulsar").expanduser(),
        pulsar_version=dev.pulsar_version,
        cluster_name=dev.cluster,
        zookeeper_port=dev.zk_port,
        bookie_port=dev.bookie_port,
        web_port_base=dev.web_port,
        broker_port_base=dev.broker_port,
        start_timeout_seconds=dev.start_timeout,
        broker_mem=tuple(dev.broker_mem.split()),
        auth=dev.local_auth,
        load_manager=dev.local_load_manager,
    )


def broker_setting_overrides(assignments: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """broker.conf overrides for every broker (`--set KEY=VALUE`), checked: a key as broker.conf spells it, not one
    each broker has of its own, a value on one line. Sorted, so equal overrides compare equal."""
    for key, value in assignments.items():
        if not _BROKER_KEY.fullmatch(key):
            raise LocalClusterError(f"broker setting {key!r}: not a broker.conf key")
        if key in PER_BROKER_KEYS:
            raise LocalClusterError(f"broker setting {key}: each broker has its own; the local cluster sets it")
        if "\n" in value or "\r" in value:
            raise LocalClusterError(f"broker setting {key}: the value must be one line")
    return tuple(sorted(assignments.items()))


def check_release(version: str) -> str:
    """`version` when it names a release with its patch level (3.3.6), else a LocalClusterError."""
    if not _RELEASE.fullmatch(version):
        raise LocalClusterError(f"Pulsar version {version!r}: name a release with its patch level, e.g. 3.3.6")
    return version


# --------------------------------------------------------------------------------------------
# Download
# --------------------------------------------------------------------------------------------


def ensure_distribution(settings: LocalClusterSettings | None = None) -> Path:
    """The `lib/` folder of the configured Pulsar version, downloaded from Maven Central on first use.

    Route 1: `org.apache.pulsar:pulsar-server-distribution:<ver>:tar.gz:bin`, unpacked (its `lib/`).
    Route 2: `org.apache.pulsar:pulsar-broker:<ver>` and its runtime dependencies, versions managed by
    Pulsar's own parent POM (as the distribution build does), plain `zookeeper` excluded because
    Pulsar ships a patched copy (`zookeeper-with-patched-admin`).
    """
    settings = settings or settings_from_env()
    version_dir = settings.cache / settings.pulsar_version
    lib_dir = version_dir / "lib"
    marker = version_dir / "COMPLETE"
    if marker.exists():
        return lib_dir
    version_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(version_dir / ".lock"):
        if marker.exists():
            return lib_dir
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="download-", dir=version_dir) as tmp:
            work = Path(tmp)
            shutil.rmtree(lib_dir, ignore_errors=True)
            try:
                _download_tarball(settings.pulsar_version, work, lib_dir)
                route = "pulsar-server-distribution tarball"
            except MavenError as tarball_error:
                log.info(
                    "no distribution tarball for %s (%s); resolving pulsar-broker jars",
                    settings.pulsar_version,
                    tarball_error,
                )
                _download_broker_jars(settings.pulsar_version, work, lib_dir)
                route = "pulsar-broker jars with dependencies"
        marker.write_text(f"{route}\n{time.monotonic() - started:.1f} s\n")
        log.info(
            "Pulsar %s ready in %s (%s, %.0f s)", settings.pulsar_version, lib_dir, route, time.monotonic() - started
        )
    return lib_dir


def distribution_route(settings: LocalClusterSettings | None = None) -> str | None:
    """How the cached version was obtained (tarball or jars), or None when not downloaded yet."""
    settings = settings or settings_from_env()
    marker = settings.cache / settings.pulsar_version / "COMPLETE"
    return marker.read_text().splitlines()[0] if marker.exists() else None


def _download_tarball(version: str, work: Path, lib_dir: Path) -> None:
    artifact = f"org.apache.pulsar:pulsar-server-distribution:{version}:tar.gz:bin"
    label = f"Pulsar {version} from Maven Central"
    run_maven([f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={work}"], work, label)
    tarball = next(work.glob("pulsar-server-distribution-*.tar.gz"))
    with tarfile.open(tarball) as archive:
        archive.extractall(work / "unpacked", filter="data")
    unpacked_lib = next((work / "unpacked").glob("*/lib"))
    shutil.move(unpacked_lib, lib_dir)


def _download_broker_jars(version: str, work: Path, lib_dir: Path) -> None:
    pom = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.pulsar-rebalance</groupId>
  <artifactId>pulsar-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies>
    <dependency><groupId>org.apache.pulsar</groupId><artifactId>pulsar</artifactId><version>{version}</version>
      <type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.pulsar</groupId><artifactId>pulsar-broker</artifactId><version>{version}</version>
      <exclusions><exclusion><groupId>org.apache.zookeeper</groupId><artifactId>zookeeper</artifactId></exclusion>
      </exclusions></dependency>
  </dependencies>
</project>
"""
    (work / "pom.xml").write_text(pom)
    staging = work / "lib"
    run_maven(
        [f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}"],
        work,
        f"Pulsar {version} broker jars from Maven Central",
    )
    shutil.move(staging, lib_dir)


# --------------------------------------------------------------------------------------------
# Public lifecycle
# --------------------------------------------------------------------------------------------


def start(brokers: int = 3, settings: LocalClusterSettings | None = None) -> dict[str, Any]:
    """Start ZooKeeper, a bookie and `brokers` brokers, or return the cluster that is already running."""
    if brokers < 1:
        raise ValueError(f"brokers must be at least 1, got {brokers}")
    settings = settings or settings_from_env()
    settings.cluster_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(settings.cluster_dir / ".lock"):
        running = status(settings)
        if running is not None and running["healthy"]:
            if running.get("loadManager", "modular") != settings.load_manager:
                raise LocalClusterError(
                    f"the cluster running under {settings.cluster_dir} has the {running.get('loadManager', 'modular')} "
                    f"load manager, not the {settings.load_manager} one: stop it first "
                    "(pulsar-rebalance-dev local-cluster stop)"
                )
            _check_same_cluster(settings, running)
            if len(running["brokers"]) != brokers:
                log.warning(
                    "cluster already running with %d brokers (asked for %d); returning it",
                    len(running["brokers"]),
                    brokers,
                )
            return running
        if running is not None:
            log.warning("cluster partly down; stopping what is left before starting again")
            _stop_processes(settings)
        lib_dir = ensure_distribution(settings)
        _check_ports_free(settings, brokers)
        if settings.auth not in AUTH_MODES:
            raise LocalClusterError(
                f"unknown auth {settings.auth!r} ({ENV_AUTH}): choose one of {', '.join(AUTH_MODES)}"
            )
        if settings.load_manager not in LOAD_MANAGERS:
            raise LocalClusterError(
                f"unknown load manager {settings.load_manager!r} ({ENV_LOAD_MANAGER}): "
                f"choose one of {', '.join(LOAD_MANAGERS)}"
            )
        if settings.auth == "token":
            _write_token_files(settings)
        _claim_data_dir(settings)
        state = _cluster_description(settings, brokers) | {"pulsarVersion": settings.pulsar_version, "processes": []}
        try:
            _start_cluster(settings, lib_dir, state)
        except BaseException:
            _stop_processes(settings)
            raise
    return status(settings) or state


def _check_same_cluster(settings: LocalClusterSettings, running: Mapping[str, Any]) -> None:
    """A running cluster is handed back only when it is the one asked for: the same release and broker settings."""
    release = running.get("pulsarVersion", settings.pulsar_version)
    overrides = {key: str(value) for key, value in running.get("brokerSettings", {}).items()}
    wanted = dict(settings.broker_settings)
    if release != settings.pulsar_version or overrides != wanted:
        raise LocalClusterError(
            f"the cluster running under {settings.cluster_dir} runs Pulsar {release} with broker settings "
            f"{overrides or 'shared only'}, not {settings.pulsar_version} with {wanted or 'shared only'}: stop it "
            "first (pulsar-rebalance-dev local-cluster stop), or give this one its own home and ports"
        )


def _claim_data_dir(settings: LocalClusterSettings) -> None:
    """The data directory is the release's that wrote it: another release's metadata and ledgers would be read
    (an upgrade, or a downgrade Pulsar does not support) rather than a fresh cluster started."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    marker = settings.data_dir / "pulsar-version"
    if marker.exists() and marker.read_text().strip() != settings.pulsar_version:
        raise LocalClusterError(
            f"{settings.data_dir} holds the data of Pulsar {marker.read_text().strip()}, not "
            f"{settings.pulsar_version}: wipe it first (pulsar-rebalance-dev local-cluster wipe), or give this "
            "cluster its own home (PULSAR_REBALANCE_HOME)"
        )
    marker.write_text(settings.pulsar_version)


def status(settings: LocalClusterSettings | None = None) -> dict[str, Any] | None:
    """The recorded cluster with per-process liveness and memory, or None when nothing of it runs."""
    settings = settings or settings_from_env()
    state = _read_state(settings)
    if state is None:
        return None
    processes = [
        proc | {"alive": _is_alive(proc["pid"], proc["marker"]), "rssBytes": _rss_bytes(proc["pid"])}
        for proc in state["processes"]
    ]
    if not any(proc["alive"] for proc in processes):
        return None
    return state | {
        "processes": processes,
        "healthy": all(proc["alive"] for proc in processes),
        "rssBytes": sum(proc["rssBytes"] for proc in processes if proc["alive"]),
    }


def stop(settings: LocalClusterSettings | None = None) -> None:
    """Stop every recorded process by PID: brokers first, then the bookie, then ZooKeeper."""
    settings = settings or settings_from_env()
    settings.cluster_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(settings.cluster_dir / ".lock"):
        _stop_processes(settings)
        _remove_cgroups(settings)


def stop_broker(index: int, settings: LocalClusterSettings | None = None) -> int:
    """Stop one broker by PID (SIGTERM: it releases its bundles as in a rolling restart); returns the PID."""
    settings = settings or settings_from_env()
    with _file_lock(settings.cluster_dir / ".lock"):
        state = _running_state(settings)
        [broker] = [p for p in state["processes"] if p["name"] == f"broker-{index}"]
        _terminate([broker])
        return int(broker["pid"])


def start_broker(index: int, settings: LocalClusterSettings | None = None) -> dict[str, Any]:
    """Start a stopped broker again with its configuration, and wait until the cluster is whole."""
    settings = settings or settings_from_env()
    deadline = time.monotonic() + settings.start_timeout_seconds
    with _file_lock(settings.cluster_dir / ".lock"):
        state = _running_state(settings)
        name = f"broker-{index}"
        [old] = [p for p in state["processes"] if p["name"] == name]
        if not _is_alive(old["pid"], old["marker"]):
            conf = settings.conf_dir / f"{name}.conf"
            started = _launch_broker(settings, ensure_distribution(settings), name, conf)
            state["processes"] = [started if p["name"] == name else p for p in state["processes"]]
            _write_state(settings, state)
        _wait_for(lambda: _brokers_ready(state), "all brokers serve their admin API", deadline, state["processes"])
    return status(settings) or state


def add_broker(settings: LocalClusterSettings | None = None) -> dict[str, Any]:
    """Scale out: start one more broker (the next index, on the next ports) and wait until every broker lists
    it. It joins owning nothing, as a new broker does."""
    settings = settings or settings_from_env()
    deadline = time.monotonic() + settings.start_timeout_seconds
    with _file_lock(settings.cluster_dir / ".lock"):
        state = _running_state(settings)
        # The new broker gets the overrides the running ones were started with.
        overrides = tuple(sorted((key, str(value)) for key, value in state.get("brokerSettings", {}).items()))
        settings = dataclasses.replace(settings, broker_settings=overrides)
        index = len(state["brokers"])
        ports = ((settings.web_port(index), ENV_WEB_PORT), (settings.broker_port(index), ENV_BROKER_PORT))
        for port, variable in ports:
            if _port_open(port, settings.broker_host(index)):
                raise LocalClusterError(
                    f"port {settings.broker_host(index)}:{port} is already in use; choose other ports with {variable}"
                )
        name = f"broker-{index}"
        metadata_url = f"zk:{HOST}:{settings.zookeeper_port}"
        conf = _write_conf(settings.conf_dir / f"{name}.conf", _broker_conf(settings, index, metadata_url))
        state["brokers"] = _cluster_description(settings, index + 1)["brokers"]
        state["processes"].append(_launch_broker(settings, ensure_distribution(settings), name, conf))
        _write_state(settings, state)
        _wait_for(lambda: _brokers_ready(state), f"broker {index} joins", deadline, state["processes"])
    return status(settings) or state


def remove_broker(settings: LocalClusterSettings | None = None) -> None:
    """Scale in: stop the broker `add_broker` added last (its bundles go to the others) and forget it."""
    settings = settings or settings_from_env()
    deadline = time.monotonic() + settings.start_timeout_seconds
    with _file_lock(settings.cluster_dir / ".lock"):
        state = _running_state(settings)
        index = len(state["brokers"]) - 1
        if index < 1:
            raise LocalClusterError("the cluster's only broker cannot be removed")
        [broker] = [p for p in state["processes"] if p["name"] == f"broker-{index}"]
        _terminate([broker])
        state["brokers"] = state["brokers"][:index]
        state["processes"] = [p for p in state["processes"] if p is not broker]
        _write_state(settings, state)
        _wait_for(lambda: _brokers_ready(state), f"the cluster without broker {index}", deadline, state["processes"])


def wipe(settings: LocalClusterSettings | None = None) -> None:
    """Stop the cluster and delete its data, configuration and logs (the download cache stays)."""
    settings = settings or settings_from_env()
    stop(settings)
    shutil.rmtree(settings.cluster_dir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Starting
# --------------------------------------------------------------------------------------------


def _cluster_description(settings: LocalClusterSettings, brokers: int) -> dict[str, Any]:
    return {
        "cluster": settings.cluster_name,
        "brokers": [
            {
                "id": f"{settings.broker_host(i)}:{settings.web_port(i)}",
                "adminUrl": f"http://{settings.broker_host(i)}:{settings.web_port(i)}",
                "serviceUrl": f"pulsar://{settings.broker_host(i)}:{settings.broker_port(i)}",
            }
            for i in range(brokers)
        ],
        "zookeeper": f"{HOST}:{settings.zookeeper_port}",
        "bookie": f"{HOST}:{settings.bookie_port}",
        "logDir": str(settings.log_dir),
        "dataDir": str(settings.data_dir),
        "auth": settings.auth,
        "loadManager": settings.load_manager,
        # Only when given: a default cluster's description stays as it was.
        **({"brokerSettings": dict(settings.broker_settings)} if settings.broker_settings else {}),
        **({"tokenFile": str(settings.token_file)} if settings.auth == "token" else {}),
    }


def _start_cluster(settings: LocalClusterSettings, lib_dir: Path, state: dict[str, Any]) -> None:
    """Launch the JVMs in dependency order, waiting for each stage to be ready before the next.

    `state["processes"]` grows as each JVM starts and the state file is rewritten after each, so a
    failed start (or a later `stop()`) can still find and stop every process that was launched.
    """
    deadline = time.monotonic() + settings.start_timeout_seconds
    processes: list[dict[str, Any]] = state["processes"]
    brokers = len(state["brokers"])
    for directory in (settings.log_dir, settings.data_dir, settings.conf_dir):
        directory.mkdir(parents=True, exist_ok=True)
    log4j = settings.conf_dir / "log4j2.properties"
    log4j.write_text(_LOG4J2_PROPERTIES)
    metadata_url = f"zk:{HOST}:{settings.zookeeper_port}"

    zk_conf = _write_conf(settings.conf_dir / "zookeeper.conf", _zookeeper_conf(settings))
    processes.append(
        _launch(
            settings,
            lib_dir,
            "zookeeper",
            _ZOOKEEPER_MEM,
            ["org.apache.zookeeper.server.ZooKeeperServerMain", str(zk_conf)],
        )
    )
    _write_state(settings, state)
    _wait_for(lambda: _zookeeper_ok(settings.zookeeper_port), "ZooKeeper answers ruok", deadline, processes)

    _initialize_metadata(settings, lib_dir, metadata_url, deadline)

    bookie_conf = _write_conf(settings.conf_dir / "bookie.conf", _bookie_conf(settings))
    processes.append(
        _launch(
            settings, lib_dir, "bookie", _BOOKIE_MEM, ["org.apache.bookkeeper.server.Main", "--conf", str(bookie_conf)]
        )
    )
    _write_state(settings, state)
    _wait_for(lambda: _port_open(settings.bookie_port), "bookie listens", deadline, processes)

    for index in range(brokers):
        conf = _write_conf(settings.conf_dir / f"broker-{index}.conf", _broker_conf(settings, index, metadata_url))
        processes.append(_launch_broker(settings, lib_dir, f"broker-{index}", conf))
    _write_state(settings, state)
    _wait_for(lambda: _brokers_ready(state), f"all {brokers} brokers serve their admin API", deadline, processes)


def _initialize_metadata(settings: LocalClusterSettings, lib_dir: Path, metadata_url: str, deadline: float) -> None:
    """Create the cluster, `public/default` and BookKeeper's `/ledgers` once; the bookie needs the latter."""
    marker = settings.data_dir / "metadata-initialized"
    if marker.exists() and marker.read_text().strip() == settings.cluster_name:
        return
    command = [
        _java(),
        *_JVM_FLAGS,
        "-Xmx128m",
        *_log_flags(settings, "initialize-cluster-metadata"),
        "-cp",
        str(lib_dir / "*"),
        "org.apache.pulsar.PulsarClusterMetadataSetup",
        "--cluster",
        settings.cluster_name,
        "--metadata-store",
        metadata_url,
        "--configuration-metadata-store",
        metadata_url,
        "--web-service-url",
        f"http://{HOST}:{settings.web_port(0)}",
        "--broker-service-url",
        f"pulsar://{HOST}:{settings.broker_port(0)}",
        "--initial-num-stream-storage-containers",
        "0",
    ]
    output = settings.log_dir / "initialize-cluster-metadata.out"
    with output.open("wb") as out:
        result = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=max(deadline - time.monotonic(), 1)
        )
    if result.returncode != 0:
        raise LocalClusterError(
            f"initialize-cluster-metadata failed (exit {result.returncode}); see {output} "
            f"and {settings.log_dir / 'initialize-cluster-metadata.log'}"
        )
    marker.write_text(settings.cluster_name)


def _zookeeper_conf(settings: LocalClusterSettings) -> dict[str, object]:
    return {
        "tickTime": 2000,
        "dataDir": settings.data_dir / "zookeeper",
        "clientPort": settings.zookeeper_port,
        "clientPortAddress": HOST,
        # The embedded admin server listens on 8080 by default, which clashes with Airflow.
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr",
        "autopurge.snapRetainCount": 3,
        "autopurge.purgeInterval": 1,
    }


def _bookie_conf(settings: LocalClusterSettings) -> dict[str, object]:
    bookie_dir = settings.data_dir / "bookie"
    return {
        "bookiePort": settings.bookie_port,
        "advertisedAddress": HOST,
        # With a listening interface the bookie binds to its own address (127.0.0.1) instead of 0.0.0.0.
        "listeningInterface": "lo",
        "allowLoopback": "true",
        "useHostNameAsBookieID": "false",
        "metadataServiceUri": f"zk+null://{HOST}:{settings.zookeeper_port}/ledgers",
        "journalDirectories": bookie_dir / "journal",
        "ledgerDirectories": bookie_dir / "ledgers",
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 32,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
        "dbStorage_rocksDB_blockCacheSize": 16 * 1024 * 1024,
        "journalSyncData": "false",
        "httpServerEnabled": "false",
        # A nearly full development disk should not turn the only bookie read-only.
        "diskUsageThreshold": 0.99,
        "diskUsageWarnThreshold": 0.98,
    }


def _broker_conf(settings: LocalClusterSettings, index: int, metadata_url: str) -> dict[str, object]:
    return {
        "clusterName": settings.cluster_name,
        "metadataStoreUrl": metadata_url,
        "configurationMetadataStoreUrl": metadata_url,
        "bindAddress": settings.broker_host(index),
        "advertisedAddress": settings.broker_host(index),
        "webServicePort": settings.web_port(index),
        "brokerServicePort": settings.broker_port(index),
        # The settings every cluster of this project shares with docker-compose.yml's brokers.
        **SHARED_BROKER_SETTINGS,
        **(EXTENSIBLE_BROKER_SETTINGS if settings.load_manager == "extensible" else {}),
        **(_token_auth_conf(settings) if settings.auth == "token" else {}),
        # Last: the cluster's own thresholds, weights and switches win over the shared settings.
        **dict(settings.broker_settings),
    }


def _token_auth_conf(settings: LocalClusterSettings) -> dict[str, object]:
    """Pulsar's JWT authentication (HS256 secret key) and authorization, with the brokers talking to each
    other as the superuser. Secrets are referenced as files, so they appear in no process argument."""
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{settings.secret_key_file}",
        "authorizationEnabled": "true",
        "superUserRoles": SUPERUSER_ROLE,
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"file://{settings.token_file}",
    }


def _write_token_files(settings: LocalClusterSettings) -> None:
    """A fresh HS256 secret key (raw bytes, as `pulsar tokens create-secret-key` writes it) and the
    superuser's token signed with it (a JWT whose subject is the role), both readable by the owner only."""
    key = secrets.token_bytes(32)
    header = _base64url(json.dumps({"alg": "HS256"}, separators=(",", ":")).encode())
    payload = _base64url(json.dumps({"sub": SUPERUSER_ROLE}, separators=(",", ":")).encode())
    signature = _base64url(hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    settings.token_file.parent.mkdir(parents=True, exist_ok=True)
    for path, content in (
        (settings.secret_key_file, key),
        (settings.token_file, f"{header}.{payload}.{signature}".encode()),
    ):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)


def _base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def admin_headers(state: Mapping[str, Any]) -> dict[str, str]:
    """The Authorization header for a cluster description (`start`/`status`), empty without auth: the superuser's
    token, or on brokers that call each other with OAuth2 client credentials, a token of the brokers' own client."""
    token_file = state.get("tokenFile")
    if token_file:
        return {"Authorization": f"Bearer {Path(token_file).read_text().strip()}"}
    brokers_client = state.get("brokerSettings", {})
    if brokers_client.get("brokerClientAuthenticationPlugin") == OAUTH2_CLIENT_PLUGIN:
        params = json.loads(brokers_client["brokerClientAuthenticationParameters"])
        tokens = _oauth2_tokens(params["issuerUrl"], params["privateKey"], params.get("audience"))
        return {"Authorization": f"Bearer {tokens.token()}"}
    return {}


@functools.cache
def _oauth2_tokens(issuer_url: str, key_file: str, audience: str | None) -> OAuth2Tokens:
    """The tokens of the brokers' own OAuth2 client (Pulsar's key file at `key_file`, a `file://` URL), one cache
    per process: the readiness checks poll twice a second."""
    key_path = key_file.removeprefix("file://")
    return OAuth2Tokens(OAuth2ClientCredentials(issuer_url, credentials_file=key_path, audience=audience))


def _write_conf(path: Path, values: Mapping[str, object]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


@functools.cache
def _java() -> str:
    """The `java` executable (JAVA_HOME first), checked to be 17 or newer as Pulsar 3 and 4 require."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    hint = "set JAVA_HOME or run scripts/install_system_deps.sh"
    if not java or not Path(java).exists():
        raise LocalClusterError(f"Java 17+ is needed to run Pulsar; {hint}")
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', version)
    if match is None or int(match.group(1)) < 17:
        raise LocalClusterError(f"Pulsar 3 and 4 need Java 17+, {java} reports {version.splitlines()[:1]}; {hint}")
    return java


def _log_flags(settings: LocalClusterSettings, name: str) -> list[str]:
    return [
        f"-Dlog4j2.configurationFile={settings.conf_dir / 'log4j2.properties'}",
        f"-Dpulsar.log.dir={settings.log_dir}",
        f"-Dpulsar.log.file={name}.log",
    ]


def _marker(settings: LocalClusterSettings, name: str) -> str:
    """A system property that ties a PID to this cluster, so a recycled PID is never signalled."""
    return f"-Dpulsar-rebalance.process={name}@{settings.cluster_dir}"


_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_parent(hierarchy: Path, settings: LocalClusterSettings) -> Path:
    return hierarchy / "pulsar-rebalance" / f"{settings.cluster_name}-{settings.web_port_base}"


def _remove_cgroups(settings: LocalClusterSettings) -> None:
    """The cluster's cgroups, once its processes are gone (a cgroup with a process in it stays)."""
    for parent in {_cgroup_parent(_CGROUP_ROOT / c, settings) for c in ("cpu", "cpuacct", "")}:
        for group in [*parent.glob("*"), parent] if parent.is_dir() else []:
            with contextlib.suppress(OSError):
                group.rmdir()


def _own_cpu_accounting(settings: LocalClusterSettings, name: str) -> list[Path]:
    """The `cgroup.procs` files of a CPU-accounting cgroup of the process's own (created here), in every hierarchy
    that counts CPU (cgroup v1's cpu and cpuacct, or v2's unified one); none where cgroups are not writable.

    A broker reads its CPU usage from its cgroup (the JVM's container metrics), else from the whole host: brokers
    on one machine would all report the machine's usage, and the extensible load manager, which ranks brokers by
    their resource usage alone, could not tell a busy broker from an idle one."""
    hierarchies = [_CGROUP_ROOT / controller for controller in ("cpu", "cpuacct")]
    hierarchies = [path for path in hierarchies if (path / "cgroup.procs").exists()] or [_CGROUP_ROOT]
    procs = []
    for hierarchy in hierarchies:
        group = _cgroup_parent(hierarchy, settings) / name
        try:
            group.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            log.warning("%s reports the machine's CPU usage: no cgroup of its own (%s)", name, error)
            return []
        procs.append(group / "cgroup.procs")
    return procs if all(path.exists() for path in procs) else []


def _launch(
    settings: LocalClusterSettings,
    lib_dir: Path,
    name: str,
    mem: list[str],
    main: list[str],
    cgroups: Sequence[Path] = (),
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    """`prefix`: a command that runs the JVM in its place (`ip netns exec NS`), keeping its PID."""
    workdir = settings.data_dir / name
    workdir.mkdir(parents=True, exist_ok=True)
    marker = _marker(settings, name)
    command = [_java(), marker, *_JVM_FLAGS, *mem, *_log_flags(settings, name), "-cp", str(lib_dir / "*"), *main]
    command = [*prefix, *command]
    if cgroups:
        # The shell joins the cgroups and becomes the JVM (same PID), which reads its CPU usage from them.
        joins = " && ".join(f"echo $$ > {shlex.quote(str(path))}" for path in cgroups)
        command = ["sh", "-c", f'{joins} && exec "$0" "$@"', *command]
    with (settings.log_dir / f"{name}.out").open("ab") as out:
        # A new session: the cluster outlives the CLI call or test session that started it.
        process = subprocess.Popen(
            command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    log.info("started %s (pid %d), log %s", name, process.pid, settings.log_dir / f"{name}.log")
    return {"name": name, "pid": process.pid, "marker": marker, "log": str(settings.log_dir / f"{name}.log")}


def launch_beside(
    name: str, mem: list[str], main: list[str], prefix: Sequence[str] = (), settings: LocalClusterSettings | None = None
) -> dict[str, Any]:
    """Start one more JVM of the running cluster's distribution beside it (a Pulsar proxy: `main` its class and
    arguments), recorded with the cluster's processes, so that `stop` stops it first; `prefix` as `_launch`'s."""
    settings = settings or settings_from_env()
    with _file_lock(settings.cluster_dir / ".lock"):
        state = _running_state(settings)
        process = _launch(settings, ensure_distribution(settings), name, mem, main, prefix=prefix)
        state["processes"].append(process)
        _write_state(settings, state)
    return process


def _wait_for(check: Callable[[], bool], what: str, deadline: float, processes: list[dict[str, Any]]) -> None:
    """Poll `check` until it holds; fail early, naming the log, when a process of the cluster died."""
    while True:
        for proc in processes:
            if not _is_alive(proc["pid"], proc["marker"]):
                raise LocalClusterError(
                    f"{proc['name']} exited while waiting until {what}; see {proc['log']} "
                    f"and {proc['log'].removesuffix('.log')}.out"
                )
        if check():
            return
        if time.monotonic() > deadline:
            raise LocalClusterError(f"timed out waiting until {what}; logs in {Path(processes[0]['log']).parent}")
        time.sleep(_POLL_SECONDS)


def _port_open(port: int, host: str = HOST) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def _zookeeper_ok(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1) as sock:
        sock.sendall(b"ruok")
        return sock.recv(4) == b"imok"
    return False


def _brokers_ready(state: Mapping[str, Any]) -> bool:
    """Every broker lists all brokers of the cluster, serves its load (its load report; on the extensible load
    manager, which has none, its load-balancing metrics), and a leader exists."""
    expected = {broker["id"] for broker in state["brokers"]}
    cluster = state["cluster"]
    headers = admin_headers(state)
    extensible = state.get("loadManager") == "extensible"
    load = "/admin/v2/broker-stats/metrics" if extensible else "/admin/v2/broker-stats/load-report"
    try:
        for broker in state["brokers"]:
            url = broker["adminUrl"]
            listed = requests.get(f"{url}/admin/v2/brokers/{cluster}", headers=headers, timeout=5)
            if listed.status_code != 200 or set(listed.json()) != expected:
                return False
            answer = requests.get(f"{url}{load}", headers=headers, timeout=5)
            if answer.status_code != 200 or (extensible and "brk_lb_cpu_usage" not in answer.text):
                return False
        first = state["brokers"][0]["adminUrl"]
        if requests.get(f"{first}/admin/v2/brokers/leaderBroker", headers=headers, timeout=5).status_code != 200:
            return False
        return cluster in requests.get(f"{first}/admin/v2/clusters", headers=headers, timeout=5).json()
    except (requests.RequestException, ValueError):
        return False


def _check_ports_free(settings: LocalClusterSettings, brokers: int) -> None:
    wanted = {
        (HOST, settings.zookeeper_port): ENV_ZK_PORT,
        (HOST, settings.bookie_port): ENV_BOOKIE_PORT,
        **{(settings.broker_host(i), settings.web_port(i)): ENV_WEB_PORT for i in range(brokers)},
        **{(settings.broker_host(i), settings.broker_port(i)): ENV_BROKER_PORT for i in range(brokers)},
    }
    for (host, port), variable in sorted(wanted.items()):
        if _port_open(port, host):
            raise LocalClusterError(f"port {host}:{port} is already in use; choose other ports with {variable}")


# --------------------------------------------------------------------------------------------
# State and stopping
# --------------------------------------------------------------------------------------------


def _running_state(settings: LocalClusterSettings) -> dict[str, Any]:
    state = _read_state(settings)
    if state is None:
        raise LocalClusterError("no local cluster is running")
    return state


def _launch_broker(settings: LocalClusterSettings, lib_dir: Path, name: str, conf: Path) -> dict[str, Any]:
    # Each broker of the extensible load manager counts its own CPU (the modular one's tests and demo were built
    # around brokers that share the machine's figure, and keep it).
    cgroups = _own_cpu_accounting(settings, name) if settings.load_manager == "extensible" else []
    return _launch(
        settings,
        lib_dir,
        name,
        list(settings.broker_mem),
        ["org.apache.pulsar.PulsarBrokerStarter", "--broker-conf", str(conf)],
        cgroups,
    )


def _read_state(settings: LocalClusterSettings) -> dict[str, Any] | None:
    try:
        return json.loads(settings.state_file.read_text())
    except FileNotFoundError:
        return None


def _write_state(settings: LocalClusterSettings, state: Mapping[str, Any]) -> None:
    temporary = settings.state_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2))
    temporary.replace(settings.state_file)


def _stop_processes(settings: LocalClusterSettings) -> None:
    state = _read_state(settings)
    if state is None:
        return
    processes = state["processes"]
    groups = [
        # What runs beside the cluster (`launch_beside`: a proxy) first, its brokers gone after it.
        [p for p in processes if p["name"] not in {"bookie", "zookeeper"} and not p["name"].startswith("broker-")],
        [p for p in processes if p["name"].startswith("broker-")],
        [p for p in processes if p["name"] == "bookie"],
        [p for p in processes if p["name"] == "zookeeper"],
    ]
    for group in groups:
        _terminate(group)
    settings.state_file.unlink(missing_ok=True)


def _terminate(processes: list[dict[str, Any]]) -> None:
    """SIGTERM (Pulsar's shutdown hooks release bundles and ledgers), SIGKILL whatever outlives the timeout."""
    alive = [p for p in processes if _is_alive(p["pid"], p["marker"])]
    for proc in alive:
        _signal(proc["pid"], signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_SECONDS
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _is_alive(p["pid"], p["marker"])]
    for proc in alive:
        log.warning(
            "%s (pid %d) ignored SIGTERM for %.0f s; killing it", proc["name"], proc["pid"], _STOP_TIMEOUT_SECONDS
        )
        _signal(proc["pid"], signal.SIGKILL)
    while any(_is_alive(p["pid"], p["marker"]) for p in alive):
        time.sleep(0.1)


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _is_alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and is the recorded JVM (its command line carries the marker)."""
    with contextlib.suppress(ChildProcessError):
        # Reap it if it is our own exited child, otherwise it would linger as a zombie.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    if not Path("/proc/self").exists():  # not Linux: fall back to "some process has this PID"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[0] == "Z":
        return False
    # Popen returns while the kernel may still be setting up the new program, when cmdline reads empty;
    # a process caught in that window is the one just launched, not a stranger that reused the PID.
    return not cmdline or marker in cmdline.decode(errors="replace").split("\0")


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes, so parallel test sessions or CLI calls do not race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
