"""Plans made and read: `plan run` (the Spark job's plan, committed), `plan show ID`, `plan list`, and
`spark-code`.

`plan --cluster ...` (no `run`), `plans [list]` and `plans show ID` are the earlier spellings of the same
commands: scripts use them, so they keep working (`with_legacy_spellings`, `command_plans`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.arguments import COUNT, ID, duration
from planner.cli.common import (
    ArgumentParser,
    Commands,
    add_config_options,
    add_store_options,
    open_store,
    print_json,
    pulsar_config,
    strategy_names,
)
from planner.errors import InputError
from planner.lifecycle import PlanStatus
from planner.plan.maintenance import DEFAULT_MAX_MOVES, MaintenanceRequest
from planner.pulsar.config import parse_assignments
from planner.settings import storage_root


def command_spark_code(args: argparse.Namespace) -> None:
    from planner.spark_submit import S3A_EXCLUSIONS, pyspark_hadoop_version, s3a_packages
    from spark_jobs.session import code_zip

    document: dict[str, Any] = {"pyFiles": str(code_zip(args.out))}
    if args.s3a_packages:
        # For spark-submit's --packages and --exclude-packages: Spark resolves them itself (Ivy).
        document["packages"] = ",".join(s3a_packages(pyspark_hadoop_version()))
        document["excludePackages"] = ",".join(S3A_EXCLUSIONS)
    print_json(document)


PLAN_COMMANDS = ("run", "show", "list")


def with_legacy_spellings(argv: Sequence[str]) -> list[str]:
    """`plan [OPTIONS]`, the spelling of `plan run [OPTIONS]` before `plan` had its commands, as `plan run`.
    (`plans` needs no rewriting: it stays a command of its own.)"""
    words = list(argv)
    # The command is the first word that is not an option: the top-level options take no value.
    command = next((index for index, word in enumerate(words) if not word.startswith("-")), None)
    if command is None or words[command] != "plan":
        return words
    rest = words[command + 1 :]
    if rest and rest[0] in {*PLAN_COMMANDS, "-h", "--help"}:
        return words
    return [*words[: command + 1], "run", *rest]


def plan_id(text: str) -> int:
    """A plan's id (`ID`), refused as an invalid plan id."""
    try:
        return ID(text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"invalid plan id: {error}") from None


def command_plan_show(args: argparse.Namespace) -> None:
    from planner.audit.plan_records import show_plan

    print_json(show_plan(open_store(args), args.plan_id).to_json())


def command_plan_list(args: argparse.Namespace) -> None:
    from planner.store.plans import list_plans

    status = PlanStatus(args.status) if args.status else None
    plans = list_plans(open_store(args), args.cluster, status, args.limit)
    print_json({"plans": [plan.to_json() for plan in plans]})


def command_plans(args: argparse.Namespace) -> None:
    """`plans [list]` and `plans show ID`: `plan list` and `plan show ID` under their earlier name."""
    if not args.words or args.words == ["list"]:
        command_plan_list(args)
        return
    if len(args.words) != 2 or args.words[0] != "show":
        raise InputError(f"pulsar-rebalance plans: unexpected {' '.join(args.words)!r}; did you mean `plans show ID`?")
    try:
        args.plan_id = plan_id(args.words[1])
    except argparse.ArgumentTypeError as error:
        raise InputError(f"pulsar-rebalance plans show: {error}") from None
    command_plan_show(args)


def command_plan_run(args: argparse.Namespace) -> None:
    from planner.durations import parse_duration
    from planner.orchestrate.runner import PlanRequest, run_plan
    from planner.plan.request import Averaging
    from planner.samples.dataset import samples_root
    from planner.settings import planner_settings

    if not args.cluster:
        raise InputError("pulsar-rebalance plan run: --cluster is required (repeatable)")
    config = pulsar_config(args)  # validates the settings before Spark starts
    settings = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
    maintenance = _maintenance_request(args)
    request = PlanRequest(
        clusters=tuple(args.cluster),
        strategy=args.strategy,  # the request keeps it by the registry's name
        settings={key: str(value) for key, value in settings.items()},
        averaging=Averaging.parse(args.averaging),
        history=parse_duration(args.history),
        include_splits=not args.no_splits,
        recompute_averages=args.recompute_averages,
        maintenance=maintenance,
        calibration_window=planner_settings().calibration_window,
        calibrate=planner_settings().calibration,
    )
    spark_conf = parse_assignments(args.spark_conf, "--conf")
    outcome = run_plan(
        open_store(args),
        samples_root(storage_root()),
        request,
        master=args.master,
        spark_conf=spark_conf,
        run_id=args.run_id,
    )
    print_json(
        {
            "plans": [
                {
                    "cluster": cluster,
                    "plan": commit.plan_id,
                    "created": commit.created,
                    "stateVersion": commit.state_version,
                    "mode": result.plan.mode,
                    "actions": len(result.plan.actions),
                    "notes": list(result.plan.notes) if maintenance else None,
                    "averages": result.averages.to_json() if result.averages else None,
                }
                for cluster, (commit, result) in sorted(outcome.items())
            ]
        }
    )


def _maintenance_request(args: argparse.Namespace) -> MaintenanceRequest | None:
    """`--mode drain|fill` with `--brokers`; None for the strategy's rebalance."""
    brokers = [broker.strip() for broker in (args.brokers or "").split(",") if broker.strip()]
    if args.scale_event is not None:
        from planner.orchestrate.scale_events import event_request

        if args.mode != "rebalance" or brokers or len(args.cluster) != 1:
            raise InputError(
                "pulsar-rebalance plan run --scale-event: name exactly one --cluster, and no --mode or --brokers "
                "(the event's broker is filled or drained)"
            )
        return event_request(open_store(args), args.cluster[0], args.scale_event, args.max_moves)
    if args.mode == "rebalance":
        if brokers or args.max_moves is not None:
            raise InputError("pulsar-rebalance plan run: --brokers and --max-moves go with --mode drain or --mode fill")
        return None
    if args.mode == "drain" and not brokers:
        raise InputError("pulsar-rebalance plan run --mode drain: --brokers is required (the brokers to drain, A,B)")
    if len(args.cluster) != 1:
        raise InputError(f"pulsar-rebalance plan run --mode {args.mode}: name exactly one --cluster")
    document = {"mode": args.mode, "brokers": brokers, "maxMoves": args.max_moves}
    return MaintenanceRequest.parse(document, f"plan --mode {args.mode}")


def _add_list_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", help="only this cluster's plans")
    parser.add_argument("--status", choices=[status.value for status in PlanStatus], help="only plans in this state")
    parser.add_argument("--limit", type=COUNT, default=50, help="newest plans at most (default 50)")
    add_store_options(parser)


def add_commands(commands: Commands) -> None:
    plan_parser = commands.add_parser(
        "plan", help="plan run: plan with the Spark job and commit; plan show ID; plan list"
    )
    plan_commands = plan_parser.add_subparsers(dest="plan_command", required=True, parser_class=ArgumentParser)
    plan = plan_commands.add_parser("run", help="plan with the Spark job and commit the plans and the strategy state")
    plan.add_argument("--cluster", action="append", default=[], help="a cluster to plan (required, repeatable)")
    plan.add_argument(
        "--strategy", default="AvgShedder", help=f"{strategy_names()}, or the Java class name (default AvgShedder)"
    )
    plan.add_argument("--averaging", default="pulsar", help="pulsar (sample counts) or window:SHORT,LONG")
    plan.add_argument(
        "--history", type=duration, default="7d", help="how far back a full recompute of the averages reads samples"
    )
    plan.add_argument(
        "--recompute-averages",
        action="store_true",
        help="recompute the bundle averages from the samples within --history, not fold onto the stored state",
    )
    plan.add_argument(
        "--master",
        default="local[*]",
        help="Spark master: local[N], spark://HOST:PORT, yarn, k8s://..., or a Spark Connect endpoint sc://HOST:PORT",
    )
    plan.add_argument(
        "--conf",
        dest="spark_conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. spark.pyspark.python=/opt/python/bin/python3 for the workers",
    )
    plan.add_argument("--run-id", help="identifies the run; a retried commit of the same run changes nothing")
    plan.add_argument("--no-splits", action="store_true", help="plan unloads only")
    plan.add_argument(
        "--mode",
        choices=["rebalance", "drain", "fill"],
        default="rebalance",
        help="rebalance: the strategy's plan; drain: move every bundle off --brokers; fill: bring --brokers "
        "(default: those owning nothing) up to the balanced share",
    )
    plan.add_argument("--brokers", metavar="A,B", help="with --mode drain|fill: broker ids, comma separated")
    plan.add_argument(
        "--max-moves", type=COUNT, metavar="N", help=f"with --mode fill: unloads at most (default {DEFAULT_MAX_MOVES})"
    )
    plan.add_argument(
        "--scale-event",
        type=ID,
        metavar="ID",
        help="the plan that answers a scale event (`brokers events`): fill the broker that joined, drain the one "
        "marked for removal",
    )
    add_config_options(plan)
    add_store_options(plan)
    plan.set_defaults(handler=command_plan_run)

    show = plan_commands.add_parser("show", help="print a committed plan, its actions and what became of them")
    show.add_argument("plan_id", type=plan_id, metavar="ID", help="the plan (see `plan list`)")
    add_store_options(show)
    show.set_defaults(handler=command_plan_show)

    listing = plan_commands.add_parser("list", help="list plans, newest first")
    _add_list_options(listing)
    listing.set_defaults(handler=command_plan_list)

    plans = commands.add_parser("plans", help="plans [list] | plans show ID: the earlier spelling of plan list|show")
    plans.add_argument("words", nargs="*", metavar="list | show ID", help="list (the default) or show ID")
    _add_list_options(plans)
    plans.set_defaults(handler=command_plans)

    spark_code = commands.add_parser(
        "spark-code", help="the planner package as a zip for spark-submit --py-files (and the s3a packages)"
    )
    spark_code.add_argument("--out", type=Path, help="directory for the zip (default: ~/.cache/pulsar-rebalance/spark)")
    spark_code.add_argument(
        "--s3a-packages",
        "--s3a-jars",  # the earlier spelling, when the jars were resolved here
        dest="s3a_packages",
        action="store_true",
        help="also print Hadoop's s3a filesystem for this pyspark as --packages and --exclude-packages",
    )
    spark_code.set_defaults(handler=command_spark_code)
