"""The cluster simulator: `simulate` compares shedding policies (or a drain or fill) on a simulated cluster."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from planner.arguments import COUNT, SEED, SPREAD_POINTS
from planner.cli import replay
from planner.cli.common import Commands, add_config_options, print_json
from planner.errors import InputError

if TYPE_CHECKING:
    from planner.simulator.engine import ClusterPolicyMode
    from planner.simulator.scenario import Scenario


def command_simulate(args: argparse.Namespace) -> int | None:
    # Imported here: numpy and the simulator load only for this command.
    from planner.simulator import report
    from planner.simulator.engine import ClusterPolicyMode
    from planner.simulator.scenario import builtin_scenarios, load_scenario

    if args.replay:
        return replay.command_replay(args)
    if args.maintenance:
        _simulate_maintenance(args)
        return None
    if bool(args.all) == bool(args.scenario):
        raise InputError("simulate needs either --scenario NAME, --all or --replay CLUSTER")
    if args.all and args.plot:
        raise InputError("--plot draws one scenario; with --all use --markdown FILE (plots go beside it)")
    policies, overrides = replay.simulation_choices(args)
    names = [*builtin_scenarios(), "random:1", "random:2"] if args.all else [args.scenario]
    scenarios = [load_scenario(name) for name in names]
    mode = ClusterPolicyMode(args.cluster_policies)
    if not args.all:
        _check_policies_declared(scenarios[0], mode)
    comparisons = [
        report.compare(
            scenario,
            policies,
            seed=args.seed,
            minutes=args.minutes,
            cadence_minutes=args.cadence,
            target_spread=args.target,
            overrides=overrides,
            cluster_policies=mode,
            calibration=args.calibration == "on",
        )
        for scenario in scenarios
    ]
    if args.plot:
        report.write_plot(comparisons[0], args.plot)
    if args.markdown:
        # The command that regenerates the document, as the document itself records it.
        words = ["pulsar-rebalance simulate", "--all" if args.all else f"--scenario {args.scenario}"]
        words += [f"--policy {policy}" for policy in args.policies]
        options = (("--minutes", args.minutes), ("--cadence", args.cadence), ("--target", args.target))
        words += [f"{name} {value}" for name, value in options if value is not None]
        words += [f"--seed {args.seed}"] if args.seed != 1 else []
        words += [f"--set {setting}" for setting in args.settings]
        words += [f"--cluster-policies {mode}"] if mode is not ClusterPolicyMode.OBEY else []
        words += ["--calibration on"] if args.calibration == "on" else []
        words += [f"--markdown {args.markdown}"]
        maintenance = ""
        if args.all:
            from planner.simulator.maintenance import DEFAULT_PACE, MAINTENANCE_SCENARIOS, compare_drain, compare_fill

            drain, fill = (load_scenario(MAINTENANCE_SCENARIOS[mode]) for mode in ("drain", "fill"))
            maintenance = report.maintenance_markdown(
                compare_drain(drain, seed=args.seed), compare_fill(fill, seed=args.seed), DEFAULT_PACE
            )
            from planner.simulator.calibration_report import calibration_markdown, compare_calibration

            maintenance += "\n" + calibration_markdown(compare_calibration(seed=args.seed))
            from planner.simulator.capacity_report import capacity_markdown, check_capacity

            maintenance += "\n" + capacity_markdown(check_capacity(seed=args.seed))
            from planner.simulator.replay import replay_markdown

            maintenance += "\n" + replay_markdown()
        report.write_evaluation(comparisons, args.markdown, " ".join(words), maintenance)
    if args.format == "json":
        documents = [report.to_json(comparison) for comparison in comparisons]
        print_json(documents[0] if not args.all else {"scenarios": {d["scenario"]: d for d in documents}})
    else:
        print("\n\n".join(report.text_table(comparison) for comparison in comparisons))


def _check_policies_declared(scenario: Scenario, mode: ClusterPolicyMode) -> None:
    from planner.simulator.engine import ClusterPolicyMode

    if mode is not ClusterPolicyMode.OBEY and scenario.policies is None:
        raise InputError(
            f"invalid --cluster-policies {mode}: scenario {scenario.name} declares no [policies], nothing to ignore"
        )


def _simulate_maintenance(args: argparse.Namespace) -> None:
    """A drain or fill against what Pulsar does on its own (`planner.simulator.maintenance`)."""
    from planner.simulator.engine import ClusterPolicyMode
    from planner.simulator.maintenance import MAINTENANCE_SCENARIOS, compare_drain, compare_fill
    from planner.simulator.scenario import load_scenario

    if args.all or args.policies or args.plot or args.markdown:
        raise InputError("simulate --maintenance takes --scenario, --pace, --seed, --cluster-policies and --json only")
    scenario = load_scenario(args.scenario or MAINTENANCE_SCENARIOS[args.maintenance])
    mode = ClusterPolicyMode(args.cluster_policies)
    _check_policies_declared(scenario, mode)
    compare = compare_drain if args.maintenance == "drain" else compare_fill
    runs = compare(scenario, seed=args.seed, pace=args.pace, cluster_policies=mode)
    print_json({"scenario": scenario.name, "mode": args.maintenance, "runs": [run.to_json() for run in runs]})


def add_commands(commands: Commands) -> None:
    simulate = commands.add_parser("simulate", help="compare shedding policies on a simulated cluster")
    simulate.add_argument("--scenario", help="a shipped scenario, a .toml file, or random:SEED")
    simulate.add_argument("--all", action="store_true", help="every shipped scenario plus random:1 and random:2")
    simulate.add_argument(
        "--policy",
        dest="policies",
        action="append",
        default=[],
        metavar="NAME",
        help="Strategy[+Placement] (in-broker, every minute) or offline:Strategy[@MINUTES]; repeatable",
    )
    simulate.add_argument("--minutes", type=COUNT, help="simulated minutes (default: the scenario's)")
    simulate.add_argument("--seed", type=SEED, default=1, help="traffic, sizes and placement draws (default 1)")
    simulate.add_argument("--cadence", type=COUNT, help="minutes between offline plans (default: the scenario's, 60)")
    simulate.add_argument("--target", type=SPREAD_POINTS, help="balanced = spread below this many points")
    simulate.add_argument(
        "--format", choices=["json", "table"], default="json", help="json (default) or a table for people"
    )
    # Before --format, JSON was asked for with --json: still accepted.
    simulate.add_argument("--json", dest="format", action="store_const", const="json", help=argparse.SUPPRESS)
    simulate.add_argument(
        "--maintenance",
        choices=["drain", "fill"],
        help="compare this product's drain (or fill) with Pulsar's shutdown (or in-broker shedders); prints JSON",
    )
    simulate.add_argument("--pace", type=COUNT, default=6, help="with --maintenance: unloads a minute (default 6)")
    simulate.add_argument(
        "--cluster-policies",
        choices=["obey", "ignore", "both"],
        default="obey",
        help="this product's plans obey a scenario's [policies] (isolation, anti-affinity, failure domains), ignore "
        "them, or both side by side; Pulsar's own shedders obey them always (default obey)",
    )
    simulate.add_argument(
        "--calibration",
        choices=["off", "on"],
        default="off",
        help="this product's plans calibrate their usage models on their own executed plans' outcomes, or not "
        "(default off; --all --markdown shows the noisy scenarios both ways)",
    )
    simulate.add_argument("--plot", type=Path, metavar="FILE", help="write a PNG of broker scores per policy")
    simulate.add_argument("--markdown", type=Path, metavar="FILE", help="write a report with plots in FILE's stem dir")
    replay.add_replay_options(simulate)
    add_config_options(simulate)
    simulate.set_defaults(handler=command_simulate)
