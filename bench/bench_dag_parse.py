"""Parse time of the DAG file with 50 clusters: before (the Variable read and all 3N+1 DAGs built at every parse)
against now (no Variable read; a task's process builds only its DAG).

Needs no running Airflow: each parse is the installed Airflow's own `DagBag` filling from a DAG folder, in a
fresh Python process that has imported Airflow first (the dag-processor and the task runner fork from
processes that have), so the first parse also imports the planner's modules ("cold"); later parses in the same
process rebuild the DAGs from the already imported modules ("warm", the median of several). Two parses:

- the dag-processor's: no parsing context, every DAG;
- a task's process: Airflow's parsing context set to one plan DAG's id, as its task runner sets it.

"Before" is a DAG file doing what the factory did until now: `build_dags(planner_settings(airflow=True))`, every
DAG whatever the context. The settings Variable is served by Airflow's environment-variable backend
(`AIRFLOW_VAR_PULSAR_REBALANCE_SETTINGS`), so its read costs only a lookup here; in a deployment each is a
round trip to the API server and its database, so the "before" times are a lower bound. Reads are counted:
calls of the SDK's `Variable.get` and `Connection.get`, and SQL statements on any SQLAlchemy engine.
Usage: python bench/bench_dag_parse.py [--clusters N] [--repeats N] [--warm N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from planner.airflow.dags import DAG_FILE

BEFORE_FILE = (
    "# The factory as it was: the Variable read and every DAG built at every parse, whatever the parsing context.\n"
    "from planner.airflow.dags import build_dags\n"
    "from planner.settings import planner_settings\n"
    "globals().update({f'dag_{index}': built for index, built in "
    "enumerate(build_dags(planner_settings(airflow=True)).values())})\n"
)

# Run in a fresh process: Airflow imported, the reads counted, then the DAG folder parsed `1 + warm` times.
PARSE = """
import json, statistics, sys, time
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import Connection, Variable
from sqlalchemy import event
from sqlalchemy.engine import Engine

reads = {"variable": 0, "connection": 0, "sql": 0}
for kind, cls in (("variable", Variable), ("connection", Connection)):
    original = cls.get
    def counted(*args, _kind=kind, _original=original, **kwargs):
        reads[_kind] += 1
        return _original(*args, **kwargs)
    cls.get = counted
event.listen(Engine, "before_cursor_execute", lambda *args: reads.__setitem__("sql", reads["sql"] + 1))
folder, warm = sys.argv[1], int(sys.argv[2])
seconds, dags = [], 0
for _ in range(1 + warm):
    started = time.perf_counter()
    bag = DagBag(dag_folder=folder)
    seconds.append(time.perf_counter() - started)
    assert not bag.import_errors, bag.import_errors
    dags = len(bag.dags)
print(json.dumps({"cold": seconds[0], "warm": statistics.median(seconds[1:]) if warm else None, "dags": dags,
                  "reads": {kind: count // (1 + warm) for kind, count in reads.items()}}))
"""


def parse(folder: Path, env: dict[str, str], warm: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PARSE, str(folder), str(warm)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the parse failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per case (the cold parse's median)")
    parser.add_argument("--warm", type=int, default=5, help="parses after the first in each process")
    args = parser.parse_args()
    clusters = [f"cluster-{index:02d}" for index in range(args.clusters)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = {"before": root / "before", "now": root / "now"}
        for name, text in (("before", BEFORE_FILE), ("now", DAG_FILE)):
            folders[name].mkdir()
            (folders[name] / "pulsar_rebalance.py").write_text(text)
        base = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PULSAR_REBALANCE_", "AIRFLOW", "_AIRFLOW_PARSING_CONTEXT"))
        }
        base |= {
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PULSAR_REBALANCE_CLUSTER_NAMES": ",".join(clusters),
            "PULSAR_REBALANCE_HOME": str(root / "planner"),
            "AIRFLOW_VAR_PULSAR_REBALANCE_SETTINGS": json.dumps({"approval_timeout": 7200, "measure_wait": 60}),
        }
        task = {**base, "_AIRFLOW_PARSING_CONTEXT_DAG_ID": f"pulsar_rebalance_plan_{clusters[len(clusters) // 2]}"}
        task["_AIRFLOW_PARSING_CONTEXT_TASK_ID"] = "prepare"
        print(
            f"{args.clusters} clusters ({3 * args.clusters + 1} DAGs); median of {args.repeats} fresh processes "
            f"(cold) and of {args.warm} parses after the first (warm)"
        )
        print(f"{'parse':<16}{'':<8}{'DAGs built':>11}{'cold s':>9}{'warm s':>9}{'Variable':>10}{'Conn.':>7}{'SQL':>6}")
        for label, env in (("dag-processor", base), ("task process", task)):
            for name in ("before", "now"):
                runs = [parse(folders[name], env, args.warm) for _ in range(args.repeats)]
                cold = statistics.median(run["cold"] for run in runs)
                warm = statistics.median(run["warm"] for run in runs)
                reads = runs[0]["reads"]
                print(
                    f"{label:<16}{name:<8}{runs[0]['dags']:>11}{cold:>9.2f}{warm:>9.3f}"
                    f"{reads['variable']:>10}{reads['connection']:>7}{reads['sql']:>6}"
                )


if __name__ == "__main__":
    main()
