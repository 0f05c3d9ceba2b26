"""Fixtures shared by every test folder: one local Spark session (starting one takes seconds)."""

from __future__ import annotations

import logging
import os

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_jobs.session import spark_session

    session = spark_session("local[2]", "pulsar-rebalance-tests")
    yield session
    session.stop()
    # py4j's connections log their closing when collected at interpreter exit, after pytest closed the
    # captured streams ("Logging error ... I/O operation on closed file"); nothing is wrong, so stay quiet.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def standalone_spark(tmp_path_factory):
    """A real Spark standalone cluster on loopback whose workers see nothing of the checkout, and the workers'
    Python (numpy, pandas, pyarrow only): `tests/spark/cluster.py`. One for the session: starting it and the
    workers' Python takes about a minute."""
    from tests.spark.cluster import standalone_cluster, worker_python

    root = tmp_path_factory.mktemp("standalone")
    python = worker_python(root)
    with standalone_cluster(root) as running:
        yield running, python
