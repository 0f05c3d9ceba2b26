"""The plan DAG's Spark job: Airflow's SparkSubmitOperator, given what the deployment configured when it runs.

The DAG file's parse reads no Variable and no connection, so everything that depends on them is decided in
`execute`: the master of the `spark_default` connection, then the options `planner.spark_submit` derives from
it and from the settings (the driver's address on a local master only; the deployment's Spark conf, py-files,
archives, packages and repositories; the s3a packages for `s3://` storage).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

from planner.settings import planner_settings
from planner.spark_submit import SparkSubmission, pyspark_hadoop_version, spark_submission

# The provider's master when the connection cannot be read (SparkSubmitHook._resolve_connection).
DEFAULT_MASTER = "yarn"


def master_of(conn_type: str | None, host: str | None, port: int | None) -> str:
    """The master URL spark-submit gets from a Spark connection, by the provider's rule: a `spark` connection
    whose host is a whole master URL (`local[*]`, `k8s://https://...`, or any host without a port) as is,
    otherwise `<conn_type>://<host>`; then `:<port>` if there is one."""
    whole = conn_type == "spark" and host and ("://" in host or not port)
    master = host if whole and host else f"{conn_type}://{host or ''}"
    return f"{master}:{port}" if port else master


def connection_master(conn_id: str) -> str:
    try:
        connection = SparkSubmitHook.get_connection(conn_id)
    except AirflowException:
        return DEFAULT_MASTER  # what the hook itself then submits to
    return master_of(connection.conn_type, connection.host, connection.port)


class PlanSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of the plan job, with `planner.spark_submit`'s options for the connection's master."""

    def submission(self) -> SparkSubmission:
        settings = planner_settings(airflow=True)
        return spark_submission(
            settings.spark,
            connection_master(self._conn_id),
            local_ip=settings.spark_local_ip,
            storage_root=settings.storage_root,
            hadoop=pyspark_hadoop_version(),
        )

    def execute(self, context: Any) -> None:
        submission = self.submission()
        self.log.info("Spark submission: %s", submission.describe())
        self.conf = {**(self.conf or {}), **submission.conf}
        self.py_files = ",".join(submission.py_files) or None
        self._archives = ",".join(submission.archives) or None
        self.packages = ",".join(submission.packages) or None
        self.exclude_packages = ",".join(submission.exclude_packages) or None
        self._repositories = ",".join(submission.repositories) or None
        self.env_vars = {**(self.env_vars or {}), **submission.env_vars} or None
        self._hook = None  # built from these options, not from an earlier attempt's
        super().execute(context)
