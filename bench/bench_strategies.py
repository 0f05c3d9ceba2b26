"""Plan time of AvgShedder and UniformLoadShedder on 1,000 brokers x 100,000 bundles (goal: <= 0.5 s per plan).

Usage: python bench/bench_strategies.py [--brokers N] [--bundles N] [--repeat N]
Prints the time to build/parse the input and the best and median time per plan, on one core.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from planner.plan.shedding.registry import shedding_strategy
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import (
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageMessageData,
    load_data_from_json,
)


def generate(brokers: int, bundles: int, seed: int = 1) -> LoadData:
    rng = random.Random(seed)
    per_broker = bundles // brokers
    broker_data: dict[str, LocalBrokerData] = {}
    bundle_data: dict[str, BundleData] = {}
    index = 0
    for b in range(brokers):
        names = []
        rate_total = throughput_total = 0.0
        skew = rng.lognormvariate(0, 0.6)
        for _ in range(per_broker):
            name = f"tenant{index % 50}/ns{index % 400}/0x{index:08x}_0x{index + 1:08x}"
            index += 1
            rate = rng.lognormvariate(5, 1.2) * skew
            throughput = rate * rng.uniform(200, 4000)
            short = TimeAverageMessageData(
                max_samples=NUM_SHORT_SAMPLES,
                num_samples=10,
                msg_rate_in=rate / 2,
                msg_rate_out=rate / 2,
                msg_throughput_in=throughput / 2,
                msg_throughput_out=throughput / 2,
            )
            long = short.model_copy(update={"max_samples": NUM_LONG_SAMPLES, "num_samples": 500})
            bundle_data[name] = BundleData(short_term_data=short, long_term_data=long, topics=rng.randint(1, 50))
            names.append(name)
            rate_total += rate
            throughput_total += throughput
        usage = min(99.0, 20 + 60 * skew / 2)
        broker_data[f"10.{b // 250}.{b % 250}.1:8080"] = LocalBrokerData(
            cpu=ResourceUsage(usage=usage * 16, limit=1600),
            bandwidth_in=ResourceUsage(usage=usage * 0.8 * 1e4, limit=1e6),
            bandwidth_out=ResourceUsage(usage=usage * 0.7 * 1e4, limit=1e6),
            msg_rate_in=rate_total / 2,
            msg_rate_out=rate_total / 2,
            msg_throughput_in=throughput_total / 2,
            msg_throughput_out=throughput_total / 2,
            bundles=frozenset(names),
            last_stats={name: NamespaceBundleStats() for name in names},
            num_bundles=len(names),
        )
    recent = {name: 1 for name in rng.sample(sorted(bundle_data), k=min(1000, len(bundle_data)))}
    return LoadData(brokers=broker_data, bundle_data=bundle_data, recently_unloaded_bundles=recent)


def time_plans(strategy_name: str, data: LoadData, config: PulsarConfig, repeat: int) -> None:
    strategy = shedding_strategy(strategy_name)
    # Hit counters primed so that every pair fires: the heaviest plan AvgShedder can produce.
    state = strategy.run(data, config, strategy.initial_state()).state
    timings, unloads = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        outcome = strategy.run(data, config, state)
        timings.append(time.perf_counter() - started)
        unloads = len(outcome.unloads)
    print(
        f"{strategy_name:<20} best {min(timings):.3f} s  median {statistics.median(timings):.3f} s  "
        f"per plan ({repeat} plans, {unloads} unloads selected)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bundles", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    data = generate(args.brokers, args.bundles)
    elapsed = time.perf_counter() - started
    print(f"generated {len(data.brokers)} brokers x {len(data.bundle_data)} bundles in {elapsed:.1f} s")
    text = data.model_dump_json(by_alias=True)
    started = time.perf_counter()
    load_data_from_json(text)
    print(f"parsed and validated {len(text) / 1e6:.0f} MB of LoadData JSON in {time.perf_counter() - started:.2f} s")

    config = PulsarConfig.from_settings(
        {"loadBalancerAvgShedderHitCountHighThreshold": "1", "loadBalancerAvgShedderHitCountLowThreshold": "1"}
    )
    time_plans("AvgShedder", data, config, args.repeat)
    time_plans("UniformLoadShedder", data, config, args.repeat)
    time_plans("ThresholdShedder", data, config, args.repeat)


if __name__ == "__main__":
    main()
