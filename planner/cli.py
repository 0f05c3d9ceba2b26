"""`pulsar-rebalance`: the planner's capabilities from the command line (a stable interface, see README.md).

Results go to stdout as JSON; bad input exits 2 with a one-line error on stderr and writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from planner.arguments import (
    COUNT,
    EPOCH_MILLIS,
    ID,
    LOCAL_BROKERS,
    PORT,
    RATE_PER_MINUTE,
    SECONDS,
    SEED,
    SPREAD_POINTS,
    admin_url,
    duration,
)
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.collect.clusters import ClusterSettings, find_cluster
from planner.errors import InputError, format_validation_error
from planner.lifecycle import PlanStatus
from planner.maven import MavenError
from planner.plan.bundles import (
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    topic_count_equally_divide,
)
from planner.plan.bundles.bundle_splitter_task import find_bundles_to_split
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import bundle_for_topic, validate_boundaries
from planner.plan.bundles.flow_or_qps_equally_divide import TopicLoad
from planner.plan.bundles.split import can_split
from planner.plan.maintenance import DEFAULT_MAX_MOVES, MaintenanceRequest
from planner.plan.shedding.registry import STRATEGIES, SheddingStrategy, shedding_strategy
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import SPLIT_ALGORITHMS, PulsarConfig, load_config, parse_assignments
from planner.pulsar.load_manager_shared import remove_expired_recently_unloaded
from planner.pulsar.model import parse_json_document, read_extensible_load_data, read_load_data
from planner.settings import OS_USER_PREFIX, ExecutorSettings, planner_settings, storage_root

if TYPE_CHECKING:
    from planner.store.database import Store

# The store, the collector, the executor and the Spark runner are imported by the commands that use them:
# together they took about 2 s, which every `--help` paid.
logger = logging.getLogger("pulsar_rebalance")

EXIT_BAD_INPUT = 2


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}")


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Pulsar configuration key (or pulsarVersion); repeatable, wins over --broker-conf",
    )
    parser.add_argument("--broker-conf", type=Path, help="read Pulsar keys from a broker.conf file")


def _config(args: argparse.Namespace) -> PulsarConfig:
    return load_config(args.broker_conf, args.settings)


def _read_json_file(path: Path, what: str) -> Any:
    try:
        text = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {what} {str(path)!r}: {error.strerror}") from None
    return parse_json_document(text, what)


def _write_json_atomically(path: Path, document: object) -> None:
    """Write to a temporary file beside `path`, then rename, so a reader never sees half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=f".{path.name}.", delete=False) as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
        temporary = Path(handle.name)
    os.replace(temporary, path)


def _print_json(document: object) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def command_shed(args: argparse.Namespace) -> None:
    strategy = shedding_strategy(args.strategy)
    config = _config(args)
    if strategy.extensible:
        _shed_extensible(args, strategy, config)
        return
    load_data = read_load_data(args.load_data)
    if args.now is not None:
        load_data = remove_expired_recently_unloaded(load_data, args.now, config.shedding_grace_period_millis)
    state = strategy.load_state(_read_json_file(args.state_in, "strategy state") if args.state_in else None)
    runs = []
    for _ in range(args.runs):
        outcome = strategy.run(load_data, config, state)
        state = outcome.state
        runs.append({"unloads": [unload.to_json() for unload in outcome.unloads]})
        for reason in outcome.reasons:
            logger.info("%s: %s", strategy.name, reason)
    if args.state_out:
        _write_json_atomically(args.state_out, strategy.dump_state(state))
    _print_json({"runs": runs})


def _shed_extensible(args: argparse.Namespace, strategy: SheddingStrategy, config: PulsarConfig) -> None:
    """TransferShedder on an ExtensibleLoadData file, at `--now` (default: the current time, as Pulsar's leader
    judges the data's age), carrying the hit counter and the recently unloaded brokers from run to run."""
    load_data = read_extensible_load_data(args.load_data)
    now = args.now if args.now is not None else int(time.time() * 1000)
    grace = config.shedding_grace_period_millis
    recent = {bundle: at for bundle, at in load_data.recently_unloaded_bundles.items() if at >= now - grace}
    load_data = load_data.model_copy(update={"recently_unloaded_bundles": recent})
    state = strategy.load_state(_read_json_file(args.state_in, "strategy state") if args.state_in else None)
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
        _write_json_atomically(args.state_out, strategy.dump_state(state))
    _print_json({"runs": runs})


def command_split_candidates(args: argparse.Namespace) -> None:
    config = _config(args)
    load_data = read_load_data(args.load_data)
    _print_json({"bundles": find_bundles_to_split(load_data, config)})


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
    config = _config(args)
    bundle = BundleRange.parse(args.bundle)
    algorithm = args.algorithm
    if algorithm not in config.supported_namespace_bundle_split_algorithms:
        supported = ", ".join(sorted(config.supported_namespace_bundle_split_algorithms))
        raise InputError(
            f"invalid --algorithm {algorithm!r}: not in supportedNamespaceBundleSplitAlgorithms ({supported})"
        )
    topics = [_parse_topic(text) for text in args.topics]
    names = [topic.name for topic in topics]
    positions: list[int]
    if not can_split(bundle):
        positions = []
    elif algorithm == range_equally_divide.NAME:
        positions = range_equally_divide.split_positions(bundle)
    elif algorithm == topic_count_equally_divide.NAME:
        positions = topic_count_equally_divide.split_positions(bundle, names)
    elif algorithm == specified_positions_divide.NAME:
        requested = [_parse_position(text) for text in args.positions]
        positions = specified_positions_divide.split_positions(bundle, requested, names, force=args.force)
    else:
        if config.default_namespace_bundle_split_algorithm != flow_or_qps_equally_divide.NAME:
            logger.warning(
                "Pulsar brokers run %s only when defaultNamespaceBundleSplitAlgorithm names it; a REST call fails",
                flow_or_qps_equally_divide.NAME,
            )
        positions = flow_or_qps_equally_divide.split_positions(bundle, topics, config)
    _print_json({"positions": positions})


def _parse_boundaries(text: str) -> list[int]:
    try:
        boundaries = [int(part.strip(), 16) for part in text.split(",")]
        validate_boundaries(boundaries)
    except ValueError as error:
        raise InputError(f"invalid --boundaries {text!r}: {error}") from None
    return boundaries


def command_topic_bundle(args: argparse.Namespace) -> None:
    _print_json({"topic": args.topic, "bundle": str(bundle_for_topic(args.topic, _parse_boundaries(args.boundaries)))})


def _store(args: argparse.Namespace) -> Store:
    from planner.store.database import Store

    return Store(args.db)


def _cluster_settings(args: argparse.Namespace) -> ClusterSettings:
    if args.cluster and args.admin_url:
        raise InputError("give either --cluster or --admin-url, not both")
    if args.cluster:
        return find_cluster(args.cluster, args.clusters)
    if args.admin_url:
        try:
            return ClusterSettings(
                name="unnamed", admin_url=args.admin_url, token_env=args.token_env, ca_file=args.ca_file
            )
        except ValidationError as error:
            raise InputError(format_validation_error(error, "--admin-url")) from None
    raise InputError(f"{args.command} needs --cluster NAME (from the clusters file) or --admin-url URL")


def command_collect(args: argparse.Namespace) -> None:
    from planner.collect.collector import collect

    settings = _cluster_settings(args)
    store = _store(args)
    with settings.client() as client:
        try:
            result = collect(
                client, store, storage_root(), settings.name if args.cluster else None, topic_stats=args.topic_stats
            )
        except AdminError as error:
            raise InputError(str(error)) from None
    _print_json(result.to_json())


def command_snapshots(args: argparse.Namespace) -> None:
    from planner.collect.collector import list_snapshots

    rows = list_snapshots(_store(args), args.cluster, limit=args.limit)
    if args.format == "json":
        _print_json({"snapshots": rows})
        return
    print(f"{'id':>8}  {'cluster':<20} {'taken at (UTC)':<20} {'brokers':>7} {'bundles':>8}  partial")
    for row in rows:
        print(
            f"{row['id']:>8}  {row['cluster']:<20} {row['takenAt'][:19]:<20} {row['brokers']:>7} "
            f"{row['bundles']:>8}  {'yes' if row['partial'] else 'no'}"
        )


def command_load_data(args: argparse.Namespace) -> None:
    from planner.collect.collector import load_data_for_snapshot

    load_data = load_data_for_snapshot(_store(args), storage_root(), args.snapshot)
    sys.stdout.write(load_data.model_dump_json(by_alias=True, indent=2))
    sys.stdout.write("\n")


def command_spark_code(args: argparse.Namespace) -> None:
    from spark_jobs.session import code_zip, s3a_jars

    document: dict[str, Any] = {"pyFiles": str(code_zip(args.out))}
    if args.s3a_jars:
        document["jars"] = ",".join(str(jar) for jar in s3a_jars())
    _print_json(document)


def command_db_upgrade(args: argparse.Namespace) -> None:
    from planner.store.database import Store, migration_heads, upgrade

    store = Store(args.db, migrate=False)
    changed = upgrade(store.engine)
    _print_json({"database": store.safe_url, "upgraded": changed, "revision": sorted(migration_heads())})


def _plan_to_show(words: Sequence[str], command: str) -> int:
    """The plan id of `show ID`."""
    if len(words) != 2 or words[0] != "show":
        raise InputError(
            f"pulsar-rebalance {command}: unexpected {' '.join(words)!r}; did you mean `{command} show ID`?"
        )
    try:
        return ID(words[1])
    except argparse.ArgumentTypeError as error:
        raise InputError(f"pulsar-rebalance {command} show: invalid plan id: {error}") from None


def command_plan(args: argparse.Namespace) -> None:
    from planner.audit.plan_records import show_plan
    from planner.orchestrate.runner import PlanRequest, run_plan
    from planner.samples.dataset import samples_root

    if args.words:
        plan_id = _plan_to_show(args.words, "plan")
        _print_json(show_plan(_store(args), plan_id))
        return
    if not args.cluster:
        raise InputError("pulsar-rebalance plan: --cluster is required (repeatable)")
    config = _config(args)  # validates the settings before Spark starts
    settings = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
    maintenance = _maintenance_request(args)
    request = PlanRequest(
        clusters=tuple(args.cluster),
        strategy=shedding_strategy(args.strategy).name,
        settings={key: str(value) for key, value in settings.items()},
        averaging=args.averaging,
        history=args.history,
        include_splits=not args.no_splits,
        recompute_averages=args.recompute_averages,
        maintenance=maintenance,
    )
    spark_conf = parse_assignments(args.spark_conf, "--conf")
    outcome = run_plan(
        _store(args),
        samples_root(storage_root()),
        request,
        master=args.master,
        spark_conf=spark_conf,
        run_id=args.run_id,
    )
    _print_json(
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
    if args.mode == "rebalance":
        if brokers or args.max_moves is not None:
            raise InputError("pulsar-rebalance plan: --brokers and --max-moves go with --mode drain or --mode fill")
        return None
    if args.mode == "drain" and not brokers:
        raise InputError("pulsar-rebalance plan --mode drain: --brokers is required (the brokers to drain, A,B)")
    if len(args.cluster) != 1:
        raise InputError(f"pulsar-rebalance plan --mode {args.mode}: name exactly one --cluster")
    document = {"mode": args.mode, "brokers": brokers, "maxMoves": args.max_moves}
    return MaintenanceRequest.parse(document, f"plan --mode {args.mode}")


def command_approve(args: argparse.Namespace) -> None:
    """A decision recorded in the store, for teams that run the planner without Airflow's approval gate."""
    from planner.approval.decisions import approve_by_policies, os_user_approver, record_decision
    from planner.audit.plan_records import show_plan
    from planner.plan.document import PlanDocument

    if args.by_policy:
        if args.reject or args.as_name or args.expect_hash:
            raise InputError("--by-policy: the policies decide; --reject, --as and --expect-hash are for a person")
        policies = planner_settings().approval_policies
        stored = PlanDocument.parse(show_plan(_store(args), args.plan_id), f"stored plan {args.plan_id}")
        now = datetime.now(UTC)
        decision = approve_by_policies(_store(args), args.plan_id, stored, policies, now, record=not args.dry_run)
        if decision.approved_by is None and not args.dry_run:
            raise InputError(f"plan {args.plan_id}: {decision.why_not()}")
        _print_json({"plan": args.plan_id, "recorded": not args.dry_run, **decision.to_json()})
        return
    if args.dry_run:
        raise InputError("--dry-run goes with --by-policy: a person's decision is recorded or not given")
    os_user = getpass.getuser()
    plan = show_plan(_store(args), args.plan_id)
    name = os_user_approver(_store(args), args.plan_id, planner_settings().approvers, os_user, args.as_name)
    if args.expect_hash and args.expect_hash != plan["actionsHash"]:
        raise InputError(
            f"plan {args.plan_id}: its actions hash is {plan['actionsHash']}, not the reviewed {args.expect_hash}"
        )
    record_decision(
        _store(args),
        args.plan_id,
        approved=not args.reject,
        approver=name,
        approver_id=f"{OS_USER_PREFIX}{os_user}",
        approved_hash=plan["actionsHash"],
        source="cli",
        actor=f"cli:{os_user}" + (f" as {args.as_name}" if args.as_name else ""),
    )
    decision = "rejected" if args.reject else "approved"
    _print_json({"plan": args.plan_id, "decision": decision, "approver": name, "osUser": os_user})


# `execute` options → executor settings; they override the configured ones (planner/settings.py).
_EXECUTOR_OPTIONS = {
    "ttl": "ttl",
    "resume_window": "resume_window",
    "actions_per_minute": "actions_per_minute",
    "max_actions": "max_actions",
    "max_failures": "max_failures",
    "attempts": "attempts_per_action",
    "verify_timeout": "verify_timeout_seconds",
    "settle": "settle_seconds",
    "lease": "lease",
    "request_timeout": "request_timeout_seconds",
}
_DURATION_OPTIONS = {"ttl", "resume_window", "lease"}


def _executor_settings(args: argparse.Namespace) -> ExecutorSettings:
    values: dict[str, Any] = {}
    for option, field in _EXECUTOR_OPTIONS.items():
        value = getattr(args, option)
        if value is not None and option in _DURATION_OPTIONS:  # bounded by the parser's SECONDS type
            value = timedelta(seconds=value)
        values[field] = value
    return planner_settings().executor.overridden(values, "execute options")


@contextlib.contextmanager
def _plan_cluster_client(args: argparse.Namespace, store: Store, plan_id: int) -> Iterator[PulsarAdminClient]:
    """An admin client of the plan's cluster: `--cluster`, `--admin-url`, or by default the plan's cluster in
    the clusters file; a URL of another cluster is refused."""
    from planner.audit.plan_records import show_plan

    plan_cluster = show_plan(store, plan_id)["cluster"]
    if args.cluster and args.cluster != plan_cluster:
        raise InputError(f"plan {plan_id} is for cluster {plan_cluster!r}, not --cluster {args.cluster!r}")
    if not args.cluster and not args.admin_url:
        args.cluster = plan_cluster
    with _cluster_settings(args).client() as client:
        try:
            if args.admin_url and client.cluster_name() != plan_cluster:
                raise InputError(
                    f"--admin-url {args.admin_url} belongs to cluster {client.cluster_name()!r}, "
                    f"but plan {plan_id} is for {plan_cluster!r}"
                )
            yield client
        except AdminError as error:
            raise InputError(str(error)) from None


def command_execute(args: argparse.Namespace) -> None:
    from planner.execute.executor import execute_plan

    settings = _executor_settings(args)  # bad settings fail before anything is read or sent
    store = _store(args)
    with _plan_cluster_client(args, store, args.plan_id) as client:
        client.timeout = (client.timeout[0], settings.request_timeout_seconds)
        report = execute_plan(
            store,
            client,
            args.plan_id,
            settings,
            actor=f"cli:{getpass.getuser()}",
            claim_wait=args.wait_for_claim,
            ignore_windows=args.ignore_windows,
        )
    _print_json(report.to_json())


def command_rollback(args: argparse.Namespace) -> None:
    from planner.orchestrate.rollback import plan_rollback

    store = _store(args)
    with _plan_cluster_client(args, store, args.plan_id) as client:
        committed, document = plan_rollback(store, client, args.plan_id, actor=f"cli:{getpass.getuser()}")
    _print_json(
        {
            "plan": committed.plan_id,
            "created": committed.created,
            "rollsBack": args.plan_id,
            "actions": len(document.actions),
            "notes": document.notes,
        }
    )


def command_plans(args: argparse.Namespace) -> None:
    from planner.audit.plan_records import list_plans, show_plan

    if args.words and args.words != ["list"]:
        plan_id = _plan_to_show(args.words, "plans")
        _print_json(show_plan(_store(args), plan_id))
        return
    _print_json({"plans": list_plans(_store(args), args.cluster, args.status, args.limit)})


def command_local_cluster(args: argparse.Namespace) -> None:
    from planner.devtools import local_cluster

    try:
        if args.action == "start":
            settings = local_cluster.settings_from_env()
            settings = dataclasses.replace(
                settings, auth=args.auth, load_manager=args.load_manager or settings.load_manager
            )
            _print_json(local_cluster.start(brokers=args.brokers, settings=settings))
        elif args.action == "status":
            _print_json(local_cluster.status() or {"running": False})
        elif args.action == "stop":
            local_cluster.stop()
        else:
            local_cluster.wipe()
    except (local_cluster.LocalClusterError, MavenError) as error:
        raise InputError(f"local-cluster {args.action}: {error}") from None


def command_simulate(args: argparse.Namespace) -> None:
    # Imported here: numpy and the simulator load only for this command.
    from planner.pulsar.config import parse_assignments, read_properties
    from planner.simulator import report
    from planner.simulator.engine import DEFAULT_POLICIES, parse_policy
    from planner.simulator.scenario import builtin_scenarios, load_scenario

    if args.maintenance:
        _simulate_maintenance(args)
        return
    if bool(args.all) == bool(args.scenario):
        raise InputError("simulate needs either --scenario NAME or --all")
    if args.all and args.plot:
        raise InputError("--plot draws one scenario; with --all use --markdown FILE (plots go beside it)")
    if args.target is not None and not args.target > 0:
        raise InputError(f"invalid --target {args.target}: must be a positive number of points")
    policies = [parse_policy(text).name for text in args.policies or DEFAULT_POLICIES]
    if len(set(policies)) != len(policies):
        raise InputError("invalid --policy: a policy is given twice")
    overrides: dict[str, str] = {}
    if args.broker_conf is not None:
        known = PulsarConfig.known_keys()
        overrides.update({k: v for k, v in read_properties(args.broker_conf).items() if k in known})
    overrides.update(parse_assignments(args.settings))
    PulsarConfig.from_settings(overrides, source="--set")  # bad values fail before anything runs
    names = [*builtin_scenarios(), "random:1", "random:2"] if args.all else [args.scenario]
    scenarios = [load_scenario(name) for name in names]
    comparisons = [
        report.compare(
            scenario,
            policies,
            seed=args.seed,
            minutes=args.minutes,
            cadence_minutes=args.cadence,
            target_spread=args.target,
            overrides=overrides,
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
        words += [f"--markdown {args.markdown}"]
        maintenance = ""
        if args.all:
            from planner.simulator.maintenance import DEFAULT_PACE, MAINTENANCE_SCENARIOS, compare_drain, compare_fill

            drain, fill = (load_scenario(MAINTENANCE_SCENARIOS[mode]) for mode in ("drain", "fill"))
            maintenance = report.maintenance_markdown(
                compare_drain(drain, seed=args.seed), compare_fill(fill, seed=args.seed), DEFAULT_PACE
            )
        report.write_evaluation(comparisons, args.markdown, " ".join(words), maintenance)
    if args.format == "json":
        documents = [report.to_json(comparison) for comparison in comparisons]
        _print_json(documents[0] if not args.all else {"scenarios": {d["scenario"]: d for d in documents}})
    else:
        print("\n\n".join(report.text_table(comparison) for comparison in comparisons))


def _simulate_maintenance(args: argparse.Namespace) -> None:
    """A drain or fill against what Pulsar does on its own (`planner.simulator.maintenance`)."""
    from planner.simulator.maintenance import MAINTENANCE_SCENARIOS, compare_drain, compare_fill
    from planner.simulator.scenario import load_scenario

    if args.all or args.policies or args.plot or args.markdown:
        raise InputError("simulate --maintenance takes --scenario, --pace, --seed and --json only")
    scenario = load_scenario(args.scenario or MAINTENANCE_SCENARIOS[args.maintenance])
    compare = compare_drain if args.maintenance == "drain" else compare_fill
    runs = compare(scenario, seed=args.seed, pace=args.pace)
    _print_json({"scenario": scenario.name, "mode": args.maintenance, "runs": [run.to_json() for run in runs]})


def command_demo(args: argparse.Namespace) -> None:
    from planner.devtools.demo import run_demo

    # Importing Airflow (for its DAG file) set the root logger to INFO: the steps and the result, not every
    # client's connection log, are what a first run should show (`-v` shows them).
    logging.getLogger().setLevel(logging.INFO if args.verbose else logging.WARNING)
    result = run_demo(approve=args.approve, brokers=args.brokers, port=args.port)
    print(json.dumps(result))


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="SQLAlchemy URL of the store (default: $PULSAR_REBALANCE_DB_URL or a SQLite file)")


def _add_plan_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", help="a cluster of the clusters file (default: the plan's cluster)")
    parser.add_argument("--admin-url", type=admin_url, help="the cluster's admin URL instead of the clusters file")
    parser.add_argument("--token-env", help="with --admin-url: environment variable holding the token")
    parser.add_argument("--ca-file", type=Path, help="with --admin-url: CA bundle for TLS verification")
    parser.add_argument("--clusters", type=Path, help="clusters file (default: $PULSAR_REBALANCE_CLUSTERS)")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="pulsar-rebalance", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log the strategies' reasons to stderr")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    names = ", ".join(strategy.name for strategy in STRATEGIES)
    shed = commands.add_parser("shed", help="run a shedding strategy on a LoadData file")
    shed.add_argument(
        "--load-data",
        type=Path,
        required=True,
        help="LoadData JSON: Pulsar's /admin/v2/broker-stats/load-report shape per broker (README.md)",
    )
    shed.add_argument("--strategy", required=True, help=f"{names}, or the Java class name")
    shed.add_argument("--runs", type=COUNT, default=1, help="consecutive runs on the same input, carrying state")
    shed.add_argument("--state-in", type=Path, help="strategy state JSON to start from")
    shed.add_argument("--state-out", type=Path, help="write the strategy state after the last run")
    shed.add_argument(
        "--now",
        type=EPOCH_MILLIS,
        metavar="EPOCH_MILLIS",
        help="first drop recently-unloaded entries older than the grace period",
    )
    _add_config_options(shed)
    shed.set_defaults(handler=command_shed)

    candidates = commands.add_parser("split-candidates", help="bundles Pulsar's BundleSplitterTask would split")
    candidates.add_argument("--load-data", type=Path, required=True, help="LoadData JSON (as for shed)")
    _add_config_options(candidates)
    candidates.set_defaults(handler=command_split_candidates)

    positions = commands.add_parser("split-positions", help="where a split algorithm would cut a bundle")
    positions.add_argument(
        "--algorithm", required=True, choices=SPLIT_ALGORITHMS, help="Pulsar's split algorithm to apply"
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
    _add_config_options(positions)
    positions.set_defaults(handler=command_split_positions)

    topic = commands.add_parser("topic-bundle", help="the bundle range a topic hashes into")
    topic.add_argument("--boundaries", required=True, help="comma-separated hex boundaries, 0x00000000..0xffffffff")
    topic.add_argument("topic", help="full topic name, e.g. persistent://tenant/ns/name")
    topic.set_defaults(handler=command_topic_bundle)

    collect_parser = commands.add_parser("collect", help="take a load snapshot of a cluster through its admin API")
    collect_parser.add_argument("--cluster", help="a cluster of the clusters file")
    collect_parser.add_argument(
        "--admin-url", type=admin_url, help="a broker's admin URL; registered under its Pulsar cluster name"
    )
    collect_parser.add_argument("--token-env", help="with --admin-url: environment variable holding the token")
    collect_parser.add_argument("--ca-file", type=Path, help="with --admin-url: CA bundle for TLS verification")
    collect_parser.add_argument("--clusters", type=Path, help="clusters file (default: $PULSAR_REBALANCE_CLUSTERS)")
    collect_parser.add_argument("--topic-stats", action="store_true", help="also archive per-topic stats")
    _add_store_options(collect_parser)
    collect_parser.set_defaults(handler=command_collect)

    snapshots = commands.add_parser("snapshots", help="list collected snapshots")
    snapshots.add_argument("--cluster", help="only this cluster's snapshots")
    snapshots.add_argument("--limit", type=COUNT, default=50, help="newest snapshots at most (default 50)")
    snapshots.add_argument(
        "--format", choices=["json", "table"], default="json", help="json (default) or a table for people"
    )
    # Before --format, JSON was asked for with --json: still accepted.
    snapshots.add_argument("--json", dest="format", action="store_const", const="json", help=argparse.SUPPRESS)
    _add_store_options(snapshots)
    snapshots.set_defaults(handler=command_snapshots)

    spark_code = commands.add_parser(
        "spark-code", help="the planner package as a zip for spark-submit --py-files (and the s3a jars)"
    )
    spark_code.add_argument("--out", type=Path, help="directory for the zip (default: ~/.cache/pulsar-rebalance/spark)")
    spark_code.add_argument(
        "--s3a-jars", action="store_true", help="also resolve Hadoop's s3a jars for this pyspark (Maven Central)"
    )
    spark_code.set_defaults(handler=command_spark_code)

    load_data = commands.add_parser("load-data", help="print the LoadData JSON of a snapshot")
    load_data.add_argument("--snapshot", type=ID, required=True, help="the snapshot id (see `snapshots`)")
    _add_store_options(load_data)
    load_data.set_defaults(handler=command_load_data)

    plan = commands.add_parser("plan", help="plan with the Spark job and commit (or: plan show ID)")
    plan.add_argument("words", nargs="*", metavar="show ID", help="`show ID` prints a committed plan")
    plan.add_argument("--cluster", action="append", default=[], help="a cluster to plan (required, repeatable)")
    plan.add_argument("--strategy", default="AvgShedder", help=f"{names}, or the Java class name (default AvgShedder)")
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
    _add_config_options(plan)
    _add_store_options(plan)
    plan.set_defaults(handler=command_plan)

    approve = commands.add_parser("approve", help="record a decision on a pending plan (without Airflow)")
    approve.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the pending plan (see `plans`)")
    approve.add_argument("--reject", action="store_true", help="reject the plan instead of approving it")
    approve.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="the approver's name (default: the OS user's approver, or the OS user when no approvers are set)",
    )
    approve.add_argument("--expect-hash", metavar="HASH", help="refuse unless the plan's actions hash is this one")
    approve.add_argument(
        "--by-policy",
        action="store_true",
        help="let the configured approval policies decide (approval_policies); refused when none approves",
    )
    approve.add_argument("--dry-run", action="store_true", help="with --by-policy: print the verdicts, record nothing")
    _add_store_options(approve)
    approve.set_defaults(handler=command_approve)

    execute = commands.add_parser("execute", help="execute an approved plan (or resume a stopped execution)")
    execute.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the approved plan (see `plans`)")
    _add_plan_cluster_options(execute)
    execute.add_argument("--actions-per-minute", type=RATE_PER_MINUTE, help="pacing; 0 for none (default 30)")
    execute.add_argument("--max-actions", type=COUNT, help="actions at most in this run (default 100)")
    execute.add_argument("--max-failures", type=COUNT, help="stop after this many failed actions (default 3)")
    execute.add_argument("--attempts", type=COUNT, help="attempts per action (default 2)")
    execute.add_argument(
        "--ttl",
        type=SECONDS,
        metavar="SECONDS",
        help="a plan older than this is not started (6 h; never past the approval's)",
    )
    execute.add_argument(
        "--resume-window",
        type=SECONDS,
        metavar="SECONDS",
        help="a started execution may run this long past the TTL (1 h; never past the approval's)",
    )
    execute.add_argument("--request-timeout", type=SECONDS, metavar="SECONDS", help="admin API read timeout (30)")
    execute.add_argument("--verify-timeout", type=SECONDS, metavar="SECONDS", help="wait for a new owner (60)")
    execute.add_argument(
        "--settle",
        type=SECONDS,
        metavar="SECONDS",
        help="after an unanswered request ended, wait this long, and at least the brokers' unload timeout + 5 s, "
        "before asking the cluster what happened (30)",
    )
    execute.add_argument("--lease", type=SECONDS, metavar="SECONDS", help="the execution claim's lease (300)")
    execute.add_argument(
        "--wait-for-claim",
        type=SECONDS,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another run's claim on the plan or the cluster",
    )
    execute.add_argument(
        "--ignore-windows",
        action="store_true",
        help="run outside the execution windows the approval bound (audited as plan.windows-ignored)",
    )
    _add_store_options(execute)
    execute.set_defaults(handler=command_execute)

    rollback = commands.add_parser(
        "rollback", help="plan the undo of an executed plan: each moved bundle back to its source (then approve)"
    )
    rollback.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the executed (or partly executed) plan")
    _add_plan_cluster_options(rollback)
    _add_store_options(rollback)
    rollback.set_defaults(handler=command_rollback)

    plans = commands.add_parser("plans", help="list plans (plans [list]), or show one (plans show ID)")
    plans.add_argument("words", nargs="*", metavar="list | show ID", help="list (the default) or show ID")
    plans.add_argument("--cluster", help="only this cluster's plans")
    plans.add_argument("--status", choices=[status.value for status in PlanStatus], help="only plans in this state")
    plans.add_argument("--limit", type=COUNT, default=50, help="newest plans at most (default 50)")
    _add_store_options(plans)
    plans.set_defaults(handler=command_plans)

    cluster = commands.add_parser("local-cluster", help="a real Pulsar cluster on 127.0.0.1 for trying things out")
    cluster.add_argument(
        "action",
        choices=["start", "status", "stop", "wipe"],
        help="start it (downloading Pulsar on first use), show it, stop it, or stop it and delete its data",
    )
    cluster.add_argument("--brokers", type=LOCAL_BROKERS, default=3, help="with start: how many brokers")
    cluster.add_argument(
        "--auth",
        choices=["none", "token"],
        default="none",
        help="with start: token enables Pulsar's JWT authentication; the superuser token's file is in the output",
    )
    cluster.add_argument(
        "--load-manager",
        choices=["modular", "extensible"],
        help="with start: the brokers' load manager, ModularLoadManagerImpl (default) or the extensible one (PIP-192)",
    )
    cluster.set_defaults(handler=command_local_cluster)

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
    simulate.add_argument("--plot", type=Path, metavar="FILE", help="write a PNG of broker scores per policy")
    simulate.add_argument("--markdown", type=Path, metavar="FILE", help="write a report with plots in FILE's stem dir")
    _add_config_options(simulate)
    simulate.set_defaults(handler=command_simulate)

    demo = commands.add_parser("demo", help="the full cycle on a local cluster with Airflow (see README)")
    demo.add_argument("--approve", action="store_true", help="approve the plan automatically instead of in the UI")
    demo.add_argument("--brokers", type=LOCAL_BROKERS, default=3, help="brokers of the local cluster (default 3)")
    demo.add_argument("--port", type=PORT, default=8080, help="Airflow UI port on 127.0.0.1 (without --approve)")
    demo.set_defaults(handler=command_demo)

    database = commands.add_parser("db", help="store maintenance")
    database_commands = database.add_subparsers(dest="db_command", required=True, parser_class=_ArgumentParser)
    upgrade_parser = database_commands.add_parser("upgrade", help="apply migrations (idempotent)")
    _add_store_options(upgrade_parser)
    upgrade_parser.set_defaults(handler=command_db_upgrade)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(message)s",
            stream=sys.stderr,
        )
        args.handler(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
