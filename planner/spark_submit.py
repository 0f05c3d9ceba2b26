"""What the plan job's spark-submit is given besides the job, decided when it runs (pure; no Spark, no Airflow).

- **The driver's address** (`SPARK_LOCAL_IP`, the `spark_local_ip` setting) only on a local master, where
  driver and executors share the host. On any other master the executors connect back to the driver from
  elsewhere: a loopback address would send them to their own host, so the driver keeps Spark's own choice
  (the host's address) unless the deployment's Spark conf names it (`spark.driver.host`,
  `spark.driver.bindAddress`).
- **The deployment's Spark conf, py-files, archives, packages and repositories** (`SparkSubmitSettings`), as
  spark-submit's own options: `--conf` wins over `spark-defaults.conf`, and what it leaves unset keeps the
  cluster's value.
- **Hadoop's s3a filesystem** for `s3://` storage, as Maven coordinates Spark resolves itself with Ivy
  (`--packages`, or `spark.jars.packages` for a session the CLI starts): hadoop-aws at the Hadoop release
  inside pyspark, and the two AWS SDK modules it uses at the release Hadoop's own POM names, instead of the
  SDK's 680 MB bundle. Spark's driver fetches them once into its Ivy cache and serves them to the executors.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from planner import storage
from planner.errors import InputError
from planner.settings import SparkSubmitSettings

_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?|local-cluster\[[^\]]*\]")

# Hadoop release → the AWS SDK v2 release its build pins (`aws-java-sdk-v2.version` in
# org.apache.hadoop:hadoop-project:<release>'s POM). pyspark 4.2 ships Hadoop 3.5.0; 4.1 3.4.2; 4.0 3.4.1.
S3A_AWS_SDK = {"3.4.1": "2.24.6", "3.4.2": "2.29.52", "3.5.0": "2.35.4"}
# hadoop-aws depends on the SDK's whole bundle; the s3 and s3-transfer-manager modules are all s3a uses. The
# rest Spark already ships (or the job needs none of it).
S3A_EXCLUSIONS = (
    "software.amazon.awssdk:bundle",
    "software.amazon.awssdk:netty-nio-client",
    "org.apache.httpcomponents:httpclient",
    "org.apache.httpcomponents:httpcore",
    "commons-codec:commons-codec",
    "commons-logging:commons-logging",
    "org.slf4j:slf4j-api",
)
# Where a deployment brings its own jars instead, nothing is added.
JAR_PROPERTIES = ("spark.jars", "spark.jars.packages")
# Only on a local master, where the job owns the whole Spark on the Airflow worker.
LOCAL_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def is_local_master(master: str) -> bool:
    """`local`, `local[N]`, `local[*]`, `local[N,F]`, `local-cluster[N,C,M]`: driver and executors on this host."""
    return _LOCAL_MASTER.fullmatch(master.strip()) is not None


def pyspark_hadoop_version() -> str | None:
    """The Hadoop release inside the installed pyspark (its `hadoop-client-api` jar), found without importing
    pyspark (the Airflow extra alone has none); None without pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    jars = sorted((Path(spec.origin).parent / "jars").glob("hadoop-client-api-*.jar"))
    return jars[0].stem.removeprefix("hadoop-client-api-") if jars else None


def s3a_packages(hadoop: str | None) -> tuple[str, ...]:
    """hadoop-aws for Hadoop `hadoop` and the AWS SDK modules it uses, as `group:artifact:version`."""
    sdk = S3A_AWS_SDK.get(hadoop or "")
    if sdk is None:
        raise InputError(
            f"spark.s3a_packages: no AWS SDK release known for Hadoop {hadoop or '(no pyspark installed)'}; set "
            "spark.packages to hadoop-aws and the SDK modules of your Spark's Hadoop, or turn spark.s3a_packages "
            "off if the cluster has them"
        )
    return (
        f"org.apache.hadoop:hadoop-aws:{hadoop}",
        f"software.amazon.awssdk:s3:{sdk}",
        f"software.amazon.awssdk:s3-transfer-manager:{sdk}",
    )


def needs_s3a(storage_root: str) -> bool:
    return storage.spark_uri(storage_root).startswith("s3a://")


def s3a_wanted(settings: SparkSubmitSettings, conf: Mapping[str, str], storage_root: str) -> bool:
    """The s3a packages are added: `s3://` storage, and the deployment brought no jars of its own."""
    if not settings.s3a_packages or not needs_s3a(storage_root):
        return False
    if any(key in conf for key in JAR_PROPERTIES):
        return False
    return not any(package.startswith("org.apache.hadoop:hadoop-aws:") for package in settings.packages)


@dataclass(frozen=True)
class SparkSubmission:
    """spark-submit's options for one run of the plan job (the master is the connection's)."""

    master: str
    conf: dict[str, str] = field(default_factory=dict)
    py_files: tuple[str, ...] = ()
    archives: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    exclude_packages: tuple[str, ...] = ()
    repositories: tuple[str, ...] = ()
    env_vars: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the task's log: where the driver listens and what comes with the job (no values of
        the conf: a deployment may put credentials there)."""
        driver = (
            f"driver on {self.env_vars['SPARK_LOCAL_IP']} (local master)"
            if "SPARK_LOCAL_IP" in self.env_vars
            else "driver on "
            + (self.conf.get("spark.driver.host") or "the host's address (Spark's choice; spark.driver.host to set)")
        )
        parts = [f"master {self.master}", driver, f"conf keys {sorted(self.conf)}"]
        parts += [f"{name} {list(value)}" for name, value in self._lists().items() if value]
        return "; ".join(parts)

    def _lists(self) -> dict[str, tuple[str, ...]]:
        return {
            "py-files": self.py_files,
            "archives": self.archives,
            "packages": self.packages,
            "exclude-packages": self.exclude_packages,
            "repositories": self.repositories,
        }


def spark_submission(
    settings: SparkSubmitSettings, master: str, *, local_ip: str, storage_root: str, hadoop: str | None
) -> SparkSubmission:
    """The options for the plan job on `master`, from the deployment's settings. `hadoop`: the Hadoop release of
    the driver's Spark (`pyspark_hadoop_version()`), for the s3a packages."""
    local = is_local_master(master)
    conf = {**(LOCAL_CONF if local else {}), **settings.conf}
    packages, excluded = settings.packages, settings.exclude_packages
    if s3a_wanted(settings, conf, storage_root):
        packages = (*packages, *s3a_packages(hadoop))
        excluded = (*excluded, *(name for name in S3A_EXCLUSIONS if name not in excluded))
    return SparkSubmission(
        master=master,
        conf=conf,
        py_files=settings.py_files,
        archives=settings.archives,
        packages=packages,
        exclude_packages=excluded,
        repositories=settings.repositories,
        env_vars={"SPARK_LOCAL_IP": local_ip} if local else {},
    )
