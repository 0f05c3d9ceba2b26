"""A recorded history replayed: how long reading it, replaying it per policy and the capacity advice on it take.

Usage: python bench/bench_replay.py [--brokers 10] [--bundles 1000] [--days 1] [--policy P ...]
A simulated cluster (mixed hardware, a daily cycle, noise) runs the offline plans while every 5-minute collect is
written with the samples dataset's own writer (`planner.simulator.capacity_report.record`), as the collect DAG leaves
it. Then, side by side: reading the recording (`RecordedHistory`), each policy's replay
(`planner.simulator.replay.replay`, what `simulate --replay` and the daily replay DAG run), and the capacity advice
(`planner.plan.capacity`, what `pulsar-rebalance capacity` and the review's capacity page compute), each with its
wall time and the process's peak memory after it. The daily replay DAG replays a week per cluster: goal < 5 minutes
for every default policy on 10 brokers and 1,000 bundles.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from planner.audit.capacity import read_capacity_inputs
from planner.plan.capacity import advise_capacity
from planner.simulator.capacity_report import history_of, record
from planner.simulator.engine import DEFAULT_POLICIES
from planner.simulator.replay import p95_score, replay, replay_config
from planner.simulator.scenario import scenario_from_mapping

CLUSTER = "bench-replay"


def scenario(brokers: int, bundles: int, days: int) -> dict:
    half = max(1, brokers // 2)
    return {
        "name": "bench-replay",
        "minutes": days * 1440,
        "brokers": [
            {"name": "small", "count": half, "cores": 8, "cpuPerMsg": 0.012, "cpuPerMiB": 0.5},
            {"name": "large", "count": brokers - half, "cores": 16, "cpuPerMsg": 0.008, "cpuPerMiB": 0.5},
        ],
        "bundles": [
            {
                "namespace": f"tenant/ns{index}",
                "count": bundles // 4,
                "owners": ["small", "large"] if index % 2 else ["large"],
                "score": 12,
                "sizeSpread": 0.8,
                "diurnal": 0.3,
                "diurnalPeakHour": 9 + index,
                "noise": 0.03,
            }
            for index in range(4)
        ],
    }


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=10)
    parser.add_argument("--bundles", type=int, default=1000)
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--policy", action="append", dest="policies", help="default: every default policy")
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as directory:
        root = Path(directory)
        started = time.perf_counter()
        record(root, scenario_from_mapping(scenario(args.brokers, args.bundles, args.days), "bench"), cluster=CLUSTER)
        rows.append(("record (simulate + write)", time.perf_counter() - started, peak_mib(), ""))

        started = time.perf_counter()
        history = history_of(root, CLUSTER)
        rows.append(
            ("read the recording", time.perf_counter() - started, peak_mib(), f"{len(history.snapshot_ids)} snapshots")
        )

        for policy in args.policies or DEFAULT_POLICIES:
            started = time.perf_counter()
            result = replay(history, policy)
            detail = f"{len(result.moves)} moves, p95 score {p95_score(result):.1f}"
            rows.append((f"replay {policy}", time.perf_counter() - started, peak_mib(), detail))

        started = time.perf_counter()
        inputs = read_capacity_inputs(root, CLUSTER, history.start, history.end)  # as `pulsar-rebalance capacity`
        advice = advise_capacity(inputs, replay_config(history).resource_weights, window=(history.start, history.end))
        removal = advice.removal.broker if advice.removal is not None else "none"
        rows.append(
            ("capacity advice", time.perf_counter() - started, peak_mib(), f"p95 {advice.p95:.1f}, remove {removal}")
        )

    print(f"{args.brokers} brokers, {args.bundles} bundles, {args.days} days of 5-minute snapshots")
    print(f"{'step':<40} {'seconds':>8} {'peak MiB':>9}  result")
    for step, seconds, peak, detail in rows:
        print(f"{step:<40} {seconds:8.1f} {peak:9.0f}  {detail}", flush=True)
    replays = sum(seconds for step, seconds, _, _ in rows if step.startswith("replay "))
    print(f"{'every replay together':<40} {replays:8.1f}")


if __name__ == "__main__":
    main()
