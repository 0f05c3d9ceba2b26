"""Run one plan DAG in-process with `dag.test()`, answering its approval gate through Airflow's REST API.

Usage (in an environment where AIRFLOW_HOME points at a migrated metadata database):
    python -m pulsar_rebalance_devtools.airflow_cycle DAG_ID DECISION CONF_JSON
DECISION is Approve or Reject; `ui` to leave the gate to a person in the Airflow UI (an api-server
on the same metadata database); or `timeout` to leave it unanswered until its response timeout passes.
Prints the run's task states as JSON on the last line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any


def rest_client() -> Any:
    """Airflow's own REST app, in-process. Built before the run starts: building it in the answering thread while
    `dag.test()` starts imports the same modules from two threads at once, which can hang both."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    return TestClient(create_app(apps="core"))


def answer_gate(client: Any, decision: str, stop: threading.Event) -> None:
    """Approve or reject the first pending gate through the REST API."""
    while not stop.is_set():
        pending = client.get("/api/v2/dags/~/dagRuns/~/hitlDetails", params={"response_received": "false"})
        details = pending.json().get("hitl_details", []) if pending.status_code == 200 else []
        if details:
            detail = details[0]
            task_instance = detail["task_instance"]
            time.sleep(3)  # answering within a second of the gate appearing can race the scheduler loop
            path = (
                f"/api/v2/dags/{task_instance['dag_id']}/dagRuns/{task_instance['dag_run_id']}/taskInstances/"
                f"{task_instance['task_id']}/{task_instance['map_index']}/hitlDetails"
            )
            response = client.patch(path, json={"chosen_options": [decision], "params_input": {}})
            print(json.dumps({"answered": decision, "status": response.status_code}), file=sys.stderr)
            return
        time.sleep(1)


def scheduler_runner() -> Any:
    """A scheduler job runner for its awaiting-input sweep (built before the run starts, like `rest_client`)."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    return SchedulerJobRunner(job=Job(), executors=[])


def enforce_response_timeouts(runner: Any, stop: threading.Event) -> None:
    """The scheduler's own awaiting-input sweep, which applies a gate's defaults once its response timeout
    has passed. `dag.test()` runs no scheduler loop, so this stands in for that loop's timer."""
    while not stop.wait(2):
        runner.check_awaiting_input_timeouts()


def main() -> int:
    dag_id, decision, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()
    dag = bag.dags[dag_id]
    stop = threading.Event()
    if decision == "timeout":
        threading.Thread(target=enforce_response_timeouts, args=(scheduler_runner(), stop), daemon=True).start()
    elif decision != "ui":
        threading.Thread(target=answer_gate, args=(rest_client(), decision, stop), daemon=True).start()
    run = dag.test(run_conf=conf)
    stop.set()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print(json.dumps({"state": str(run.state), "tasks": states}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
