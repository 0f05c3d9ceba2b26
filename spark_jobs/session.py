"""The planning job's Spark session: on a local master, a standalone/YARN/Kubernetes cluster, or a Spark
Connect endpoint, with the team's settings first and the job's code shipped to the executors.

Settings. The job's own tuning (`JOB_DEFAULTS`) applies only to keys that nothing else set: not
spark-submit's `--conf`, not the cluster's `spark-defaults.conf`, not the options the caller passes. On a
local master the job also picks the driver's interpreter for the Python workers and turns the UI off, again
only where unset; on a cluster it never chooses the workers' Python (`spark.pyspark.python`, `PYSPARK_PYTHON`
or the cluster's `python3` decide).

Code. The executors run one piece of the project (the usage-model fit, a pandas UDF that needs numpy and
pandas only). `ship_code` sends them the `planner` package as a zip, built from wherever this driver
imports it: `addPyFile` on a classic session, `addArtifacts` on Spark Connect, nothing on a local master. So
workers need a Python with Spark's pandas-UDF libraries (numpy, pandas, pyarrow) and nothing of this project.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

import planner
from planner import storage
from planner.pulsar.config import read_properties
from planner.settings import cache_home
from planner.spark_submit import JAR_PROPERTIES, S3A_EXCLUSIONS, pyspark_hadoop_version, s3a_packages

# Tuning measured by bench/bench_spark_averages.py; each applies only where the team set nothing.
JOB_DEFAULTS = {
    # The samples' timestamps are UTC; so are the plan's times.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # The averages group by bundle name and chunk. The first-level "fast" map compares names with no stored
    # hash and fills at 65,536 groups; Spark's main hash map alone made the one full read about a third
    # faster. Files are packed into tasks by size, not time, so a task's groups are about its snapshots
    # times the bundles: smaller tasks keep its map in cache (8% faster).
    "spark.sql.codegen.aggregate.map.twolevel.enabled": "false",
    "spark.sql.files.maxPartitionBytes": "32m",
}
# Only on a local master, where the job owns the whole (in-process) Spark.
LOCAL_DEFAULTS = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
CODE_ZIP_PREFIX = "pulsar_rebalance_code-"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session (no SparkContext, no RDDs)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def spark_session(
    master: str | None = "local[*]",
    app_name: str = "pulsar-rebalance-plan",
    conf: Mapping[str, str] | None = None,
    storage_root: str | None = None,
) -> SparkSession:
    """The job's session. `master=None` leaves the master to spark-submit; `sc://host:port` is a Spark Connect
    endpoint; `conf` are the caller's settings (the CLI's `--conf`), which win over everything but
    spark-submit's own. `storage_root` (a URI) is where the job reads and writes: on an object store, a
    session this process starts gets Hadoop's s3a packages (`planner.spark_submit`, resolved by Spark's Ivy)
    unless `spark.jars` or `spark.jars.packages` is set."""
    conf = dict(conf or {})
    if master is not None and master.startswith("sc://"):
        builder = SparkSession.builder.remote(master)
    elif master is None:
        builder = SparkSession.builder
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        _prepare_python_workers(master, conf)
        configured = _configured_keys_before_start() | set(conf)
        defaults = dict(LOCAL_DEFAULTS) if is_local(master) else {}
        object_store = bool(storage_root) and storage.spark_uri(storage_root or "").startswith("s3a://")
        if object_store and not set(JAR_PROPERTIES) & configured:
            # Resolved by Spark itself (Ivy) when the JVM starts, cached in its Ivy directory.
            defaults["spark.jars.packages"] = ",".join(s3a_packages(pyspark_hadoop_version()))
            defaults["spark.jars.excludes"] = ",".join(S3A_EXCLUSIONS)
        conf = {**{k: v for k, v in defaults.items() if k not in configured}, **conf}
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    apply_job_defaults(session, storage_root)
    if not is_connect(session):
        session.sparkContext.setLogLevel("ERROR")
    ship_code(session)
    return session


def _prepare_python_workers(master: str, conf: Mapping[str, str]) -> None:
    """Which interpreter runs the Python workers. PySpark hands the executors the driver's `PYSPARK_PYTHON`
    (else `python3` on their PATH); spark-submit sets it from `spark.pyspark.python`, an in-process session
    does not, so a given `spark.pyspark.python` is applied here the same way."""
    if "spark.pyspark.python" in conf:
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    elif is_local(master):
        # Local workers run on this machine: this interpreter has numpy and pyarrow.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _configured_keys_before_start() -> set[str]:
    """Keys the team configured for a session about to start in this process: its spark-defaults.conf (where
    spark-submit would look for it) and a running context's. Read without starting Spark's JVM, which must
    start with the session's jars."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if running is not None:
        return {key for key, _ in running.getConf().getAll()}
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(Path(pyspark.__file__).parent / "conf")
    defaults = Path(conf_dir) / "spark-defaults.conf"
    return set(read_properties(defaults)) if defaults.is_file() else set()


def explicitly_set(spark: SparkSession) -> set[str]:
    """The keys set for this session by anyone (spark-submit, --conf, spark-defaults.conf, the builder, the
    Connect server's configuration): `SET` lists those, and not the defaults."""
    return {row["key"] for row in spark.sql("SET").collect()}


def apply_job_defaults(spark: SparkSession, storage_root: str | None = None) -> dict[str, str]:
    """Set the job's tuning, and the s3a settings that follow from an object store's URI, where nothing else
    did; returns what was set."""
    configured = explicitly_set(spark)
    wanted = {**JOB_DEFAULTS, **storage.hadoop_s3a_settings(storage_root or "")}
    applied = {
        key: value for key, value in wanted.items() if key not in configured and f"spark.hadoop.{key}" not in configured
    }
    for key, value in applied.items():
        spark.conf.set(key, value)
    return applied


def code_zip(directory: Path | None = None) -> Path:
    """The `planner` package, as this process imports it, in a zip for `--py-files`; cached by content."""
    package = Path(planner.__file__).resolve().parent
    files = sorted(path for path in package.rglob("*.py") if "__pycache__" not in path.parts)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            # A fixed time stamp: the same code gives the same bytes, and so the same name.
            info = zipfile.ZipInfo(str(Path("planner") / path.relative_to(package)), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    directory = directory or cache_home() / "spark"
    target = directory / f"{CODE_ZIP_PREFIX}{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)
    return target


def _shipped(spark: SparkSession) -> bool:
    if is_connect(spark):
        return False
    submitted = spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    return any(Path(entry).name.startswith(CODE_ZIP_PREFIX) for entry in submitted.split(",") if entry)


def ship_code(spark: SparkSession) -> Path | None:
    """Send the executors the `planner` package (see the module's docstring); returns the zip sent, if any."""
    if not is_connect(spark) and is_local(spark.sparkContext.master):
        return None
    if _shipped(spark):
        return None
    archive = code_zip()
    if is_connect(spark):
        spark.addArtifacts(str(archive), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(archive))
    return archive
