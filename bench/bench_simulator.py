"""Simulator speed: 20 brokers, 2,000 bundles, 24 hours of one-minute steps under one policy (goal: < 60 s).

Usage: python bench/bench_simulator.py [--policy AvgShedder] [--brokers 20] [--bundles 2000] [--minutes 1440]
Prints the wall time of the run, the simulated minutes per second, and what the policy did. The
cluster has mixed hardware, daily traffic cycles, noise and random short spikes, so load reports are
written and bundle averages updated about as often as in a real cluster.
"""

from __future__ import annotations

import argparse
import time

from planner.simulator.engine import simulate
from planner.simulator.scenario import scenario_from_mapping


def scenario(brokers: int, bundles: int, minutes: int) -> dict:
    half = max(1, brokers // 2)
    per_namespace = bundles // 8
    return {
        "name": "bench",
        "minutes": minutes,
        "brokers": [
            {"name": "small", "count": half, "cores": 8, "cpuPerMsg": 0.012, "cpuPerMiB": 0.5},
            {"name": "large", "count": brokers - half, "cores": 16, "cpuPerMsg": 0.008, "cpuPerMiB": 0.5},
        ],
        "bundles": [
            {
                "namespace": f"tenant/ns{index}",
                "count": per_namespace,
                "owners": ["small", "large"] if index % 2 else ["large"],
                "score": 6.0,
                "sizeSpread": 0.8,
                "diurnal": 0.3,
                "diurnalPeakHour": 9 + index,
                "noise": 0.03,
                "jitter": {"probability": 0.0005, "factor": 3, "minutes": 2},
            }
            for index in range(8)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="AvgShedder")
    parser.add_argument("--brokers", type=int, default=20)
    parser.add_argument("--bundles", type=int, default=2000)
    parser.add_argument("--minutes", type=int, default=1440)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    spec = scenario_from_mapping(scenario(args.brokers, args.bundles, args.minutes), "bench")
    started = time.perf_counter()
    result = simulate(spec, args.policy, seed=args.seed)
    elapsed = time.perf_counter() - started
    metrics = result.metrics
    print(
        f"{args.policy}: {args.brokers} brokers x {args.bundles} bundles x {args.minutes} minutes "
        f"in {elapsed:.1f} s ({args.minutes / elapsed:.0f} simulated minutes/s; goal < 60 s)"
    )
    print(
        f"  moves {metrics.moves} in {metrics.rounds} rounds, final spread {metrics.final_spread:.1f} points, "
        f"peak score {metrics.peak_score:.1f}"
    )


if __name__ == "__main__":
    main()
