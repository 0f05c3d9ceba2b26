"""Airflow's LocalExecutor, with every task started in its own fresh working directory and HOME.

As tasks on separate workers (Celery, Kubernetes) would be: nothing one task leaves in its working
directory or home is there for the next (each is deleted when its task ends). The installation test
copies this file alone into a directory on the scheduler's PYTHONPATH and sets
`[core] executor = fresh_home_executor.FreshHomeLocalExecutor`. Each task's home is appended to the
file named by `FRESH_HOME_LOG`, so the test can check they differed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from airflow.executors.base_executor import BaseExecutor
from airflow.executors.local_executor import LocalExecutor

_run_workload = BaseExecutor.run_workload


def _run_in_fresh_home(workload: Any, **kwargs: Any) -> Any:
    # A LocalExecutor worker process runs one workload at a time: its environment is this workload's.
    home = tempfile.mkdtemp(prefix="fresh-worker-home-")
    os.environ["HOME"] = home
    os.chdir(home)
    with open(os.environ["FRESH_HOME_LOG"], "a") as log:
        log.write(f"{getattr(workload, 'display_name', workload)}\t{home}\n")
    try:
        return _run_workload(workload, **kwargs)
    finally:
        # Gone with the task, as a worker machine's disk would be to the next task.
        os.chdir("/")
        shutil.rmtree(home, ignore_errors=True)


# The workers call BaseExecutor.run_workload; they are forked from the scheduler after this module loads.
BaseExecutor.run_workload = staticmethod(_run_in_fresh_home)


class FreshHomeLocalExecutor(LocalExecutor):
    """LocalExecutor; the fresh homes come from the patched `run_workload` above."""
