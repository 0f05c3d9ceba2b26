"""Fixtures shared by every test folder: one local Spark session (starting one takes seconds)."""

from __future__ import annotations

import logging
import os

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_jobs.plan_job import spark_session

    session = spark_session("local[2]", "pulsar-rebalance-tests")
    yield session
    session.stop()
    # py4j's connections log their closing when collected at interpreter exit, after pytest closed the
    # captured streams ("Logging error ... I/O operation on closed file"); nothing is wrong, so stay quiet.
    logging.getLogger("py4j").setLevel(logging.WARNING)
