"""Pulsar's own algorithms on files, without a cluster: `shed`, `split-candidates`, `split-positions`,
`topic-bundle`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from planner.arguments import COUNT, EPOCH_MILLIS
from planner.cli.common import (
    Commands,
    add_config_options,
    logger,
    print_json,
    pulsar_config,
    read_json_file,
    strategy_names,
    write_json_atomically,
)
from planner.errors import InputError
from planner.plan.bundles.bundle_splitter_task import find_bundles_to_split
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import bundle_for_topic, validate_boundaries
from planner.plan.bundles.registry import SPLIT_ALGORITHMS, split_algorithm
from planner.plan.bundles.split import can_split
from planner.plan.bundles.split_algorithm import SplitInputs, TopicLoad
from planner.plan.shedding.registry import SheddingStrategy, shedding_strategy
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import PulsarConfig
from planner.pulsar.load_manager_shared import remove_expired_recently_unloaded
from planner.pulsar.model import read_extensible_load_data, read_load_data


def command_shed(args: argparse.Namespace) -> None:
    strategy = shedding_strategy(args.strategy)
    config = pulsar_config(args)
    if strategy.extensible:
        _shed_extensible(args, strategy, config)
        return
    load_data = read_load_data(args.load_data)
    if args.now is not None:
        load_data = remove_expired_recently_unloaded(load_data, args.now, config.shedding_grace_period_millis)
    state = strategy.load_state(read_json_file(args.state_in, "strategy state") if args.state_in else None)
    runs = []
    for _ in range(args.runs):
        outcome = strategy.run(load_data, config, state)
        state = outcome.state
        runs.append({"unloads": [unload.to_json() for unload in outcome.unloads]})
        for reason in outcome.reasons:
            logger.info("%s: %s", strategy.name, reason)
    if args.state_out:
        write_json_atomically(args.state_out, strategy.dump_state(state))
    print_json({"runs": runs})


def _shed_extensible(args: argparse.Namespace, strategy: SheddingStrategy, config: PulsarConfig) -> None:
    """TransferShedder on an ExtensibleLoadData file, at `--now` (default: the current time, as Pulsar's leader
    judges the data's age), carrying the hit counter and the recently unloaded brokers from run to run."""
    load_data = read_extensible_load_data(args.load_data)
    now = args.now if args.now is not None else int(time.time() * 1000)
    grace = config.shedding_grace_period_millis
    recent = {bundle: at for bundle, at in load_data.recently_unloaded_bundles.items() if at >= now - grace}
    load_data = load_data.model_copy(update={"recently_unloaded_bundles": recent})
    state = strategy.load_state(read_json_file(args.state_in, "strategy state") if args.state_in else None)
    runs = []
    for _ in range(args.runs):
        outcome = strategy.run_extensible(load_data, config, state, now)
        state = outcome.state
        load_data = load_data.model_copy(update={"recently_unloaded_brokers": outcome.recently_unloaded_brokers})
        run: dict[str, Any] = {"unloads": [decision.to_json() for decision in outcome.decisions]}
        if outcome.skipped is not None:
            run["skipped"] = outcome.skipped.value
        runs.append(run)
    if args.state_out:
        write_json_atomically(args.state_out, strategy.dump_state(state))
    print_json({"runs": runs})


def command_split_candidates(args: argparse.Namespace) -> None:
    config = pulsar_config(args)
    load_data = read_load_data(args.load_data)
    print_json({"bundles": find_bundles_to_split(load_data, config)})


def _parse_topic(text: str) -> TopicLoad:
    """`NAME[:msgRate:throughput]`, read from the right because topic names contain `:`."""
    parts = text.rsplit(":", 2)
    if len(parts) == 3:
        try:
            msg_rate, throughput = float(parts[1]), float(parts[2])
        except ValueError:
            return TopicLoad(text)
        if not (msg_rate >= 0 and throughput >= 0) or msg_rate == float("inf") or throughput == float("inf"):
            raise InputError(f"invalid --topic {text!r}: msgRate and throughput must be finite and non-negative")
        return TopicLoad(parts[0], msg_rate, throughput)
    return TopicLoad(text)


def _parse_position(text: str) -> int:
    try:
        position = int(text, 0)
    except ValueError:
        raise InputError(f"invalid --position {text!r}: expected an integer (decimal or 0x hex)") from None
    # Pulsar takes the positions as Java longs and drops those outside the bundle; beyond a long there is no position.
    if not -(2**63) <= position < 2**63:
        raise InputError(f"invalid --position {text!r}: must fit a 64-bit signed integer (Pulsar's long)")
    return position


def command_split_positions(args: argparse.Namespace) -> None:
    config = pulsar_config(args)
    bundle = BundleRange.parse(args.bundle)
    algorithm = split_algorithm(args.algorithm)
    if algorithm is None or algorithm.name not in config.supported_namespace_bundle_split_algorithms:
        supported = ", ".join(sorted(config.supported_namespace_bundle_split_algorithms))
        raise InputError(
            f"invalid --algorithm {args.algorithm!r}: not in supportedNamespaceBundleSplitAlgorithms ({supported})"
        )
    topics = [_parse_topic(text) for text in args.topics]
    positions: list[int] = []
    if can_split(bundle):
        if algorithm.runs_only_as_default and config.default_namespace_bundle_split_algorithm != algorithm.name:
            logger.warning(
                "Pulsar brokers run %s only when defaultNamespaceBundleSplitAlgorithm names it; a REST call fails",
                algorithm.name,
            )
        requested = [_parse_position(text) for text in args.positions] if algorithm.takes_requested_positions else None
        positions = algorithm.positions(SplitInputs(bundle, topics, config, requested, force=args.force))
    print_json({"positions": positions})


def _parse_boundaries(text: str) -> list[int]:
    try:
        boundaries = [int(part.strip(), 16) for part in text.split(",")]
        validate_boundaries(boundaries)
    except ValueError as error:
        raise InputError(f"invalid --boundaries {text!r}: {error}") from None
    return boundaries


def command_topic_bundle(args: argparse.Namespace) -> None:
    print_json({"topic": args.topic, "bundle": str(bundle_for_topic(args.topic, _parse_boundaries(args.boundaries)))})


def add_commands(commands: Commands) -> None:
    shed = commands.add_parser("shed", help="run a shedding strategy on a LoadData file")
    shed.add_argument(
        "--load-data",
        type=Path,
        required=True,
        help="LoadData JSON: Pulsar's /admin/v2/broker-stats/load-report shape per broker (README.md)",
    )
    shed.add_argument("--strategy", required=True, help=f"{strategy_names()}, or the Java class name")
    shed.add_argument("--runs", type=COUNT, default=1, help="consecutive runs on the same input, carrying state")
    shed.add_argument("--state-in", type=Path, help="strategy state JSON to start from")
    shed.add_argument("--state-out", type=Path, help="write the strategy state after the last run")
    shed.add_argument(
        "--now",
        type=EPOCH_MILLIS,
        metavar="EPOCH_MILLIS",
        help="first drop recently-unloaded entries older than the grace period",
    )
    add_config_options(shed)
    shed.set_defaults(handler=command_shed)

    candidates = commands.add_parser("split-candidates", help="bundles Pulsar's BundleSplitterTask would split")
    candidates.add_argument("--load-data", type=Path, required=True, help="LoadData JSON (as for shed)")
    add_config_options(candidates)
    candidates.set_defaults(handler=command_split_candidates)

    positions = commands.add_parser("split-positions", help="where a split algorithm would cut a bundle")
    positions.add_argument(
        "--algorithm",
        required=True,
        choices=[algorithm.name for algorithm in SPLIT_ALGORITHMS],
        help="Pulsar's split algorithm to apply",
    )
    positions.add_argument("--bundle", required=True, metavar="0xLLLLLLLL_0xUUUUUUUU", help="the bundle range to cut")
    positions.add_argument(
        "--topic",
        dest="topics",
        action="append",
        default=[],
        metavar="NAME[:msgRate:throughput]",
        help="a topic in the bundle, with its load for flow_or_qps_equally_divide (repeatable)",
    )
    positions.add_argument(
        "--position",
        dest="positions",
        action="append",
        default=[],
        metavar="N",
        help="with specified_positions_divide: a hash position to cut at (repeatable)",
    )
    positions.add_argument("--force", action="store_true", help="specified positions without the two-topic rule")
    add_config_options(positions)
    positions.set_defaults(handler=command_split_positions)

    topic = commands.add_parser("topic-bundle", help="the bundle range a topic hashes into")
    topic.add_argument("--boundaries", required=True, help="comma-separated hex boundaries, 0x00000000..0xffffffff")
    topic.add_argument("topic", help="full topic name, e.g. persistent://tenant/ns/name")
    topic.set_defaults(handler=command_topic_bundle)
