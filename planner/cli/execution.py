"""A committed plan's decision and execution: `approve`, `execute`, `stop`, `rollback`."""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from planner.arguments import COUNT, ID, RATE_PER_MINUTE, SECONDS
from planner.cli.common import (
    EXIT_OK,
    EXIT_PARTIAL,
    Commands,
    add_plan_cluster_options,
    add_store_options,
    cluster_settings,
    open_store,
    plan_cluster_client,
    print_json,
)
from planner.collect.admin_client import PulsarAdminClient
from planner.errors import InputError
from planner.settings import OS_USER_PREFIX, ExecutorSettings, planner_settings

if TYPE_CHECKING:
    from planner.execute.report import ExecutionReport, ProgressEvent
    from planner.store.database import Store


def command_approve(args: argparse.Namespace) -> None:
    """A decision recorded in the store, for teams that run the planner without Airflow's approval gate."""
    from planner.approval.decisions import approve_by_policies, os_user_approver
    from planner.audit.plan_records import show_plan
    from planner.lifecycle import Decision
    from planner.store.approvals import record_decision

    if args.by_policy:
        if args.reject or args.as_name or args.expect_hash:
            raise InputError("--by-policy: the policies decide; --reject, --as and --expect-hash are for a person")
        policies = planner_settings().approval_policies
        stored = show_plan(open_store(args), args.plan_id).checked_document()
        now = datetime.now(UTC)
        decision = approve_by_policies(open_store(args), args.plan_id, stored, policies, now, record=not args.dry_run)
        if decision.approved_by is None and not args.dry_run:
            raise InputError(f"plan {args.plan_id}: {decision.why_not()}")
        print_json({"plan": args.plan_id, "recorded": not args.dry_run, **decision.to_json()})
        return
    if args.dry_run:
        raise InputError("--dry-run goes with --by-policy: a person's decision is recorded or not given")
    os_user = getpass.getuser()
    plan = show_plan(open_store(args), args.plan_id)
    name = os_user_approver(open_store(args), args.plan_id, planner_settings().approvers, os_user, args.as_name)
    if args.expect_hash and args.expect_hash != plan.actions_hash:
        raise InputError(
            f"plan {args.plan_id}: its actions hash is {plan.actions_hash}, not the reviewed {args.expect_hash}"
        )
    decision = Decision.REJECTED if args.reject else Decision.APPROVED
    record_decision(
        open_store(args),
        args.plan_id,
        decision,
        approver=name,
        approver_id=f"{OS_USER_PREFIX}{os_user}",
        approved_hash=plan.actions_hash,
        source="cli",
        actor=f"cli:{os_user}" + (f" as {args.as_name}" if args.as_name else ""),
    )
    print_json({"plan": args.plan_id, "decision": decision.value, "approver": name, "osUser": os_user})


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


def print_progress(event: ProgressEvent) -> None:
    """One line on stderr per step of `execute`, for the operator watching it (stdout keeps the JSON result)."""
    from planner.execute.report import Step

    where = f"[{event.index}/{event.total}]"
    if event.step is Step.STARTED:
        line = f"{where} {event.kind} {event.bundle}: started"
    elif event.step is Step.ENDED:
        outcome = event.outcome.value if event.outcome is not None else "?"
        line = f"{where} {event.kind} {event.bundle}: {outcome}" + (f" ({event.reason})" if event.reason else "")
    elif event.step is Step.WAITING:
        line = f"waiting {event.seconds:.1f} s before action {event.index}/{event.total} (pacing)"
    else:
        stop = event.stop
        by = f" by {stop.requested_by}" + (f": {stop.reason}" if stop.reason else "") if stop is not None else ""
        line = f"{where} stopped{by}; no further action is started"
    print(line, file=sys.stderr, flush=True)


def command_execute(args: argparse.Namespace) -> int:
    """Exit 0 when the plan ended executed, 3 (EXIT_PARTIAL) when it ended partial, stopped or expired."""
    from planner.execute.executor import execute_plan
    from planner.lifecycle import PlanStatus

    settings = _executor_settings(args)  # bad settings fail before anything is read or sent
    store = open_store(args)
    with plan_cluster_client(args, store, args.plan_id) as client:
        client.timeout = (client.timeout[0], settings.request_timeout_seconds)
        report = execute_plan(
            store,
            client,
            args.plan_id,
            settings,
            actor=f"cli:{getpass.getuser()}",
            claim_wait=args.wait_for_claim,
            ignore_windows=args.ignore_windows,
            # The plan's cluster entry decides (an --admin-url alone never allows it).
            allow_beside_broker_controllers=cluster_settings(args).allow_beside_broker_controllers,
            progress=print_progress if not args.quiet else _silent,
        )
        measured = None if args.no_measure else _measure_after(store, client, report)
    print_json({**report.to_json(), **({"measured": measured} if measured is not None else {})})
    return EXIT_OK if report.status is PlanStatus.EXECUTED else EXIT_PARTIAL


def _measure_after(store: Store, client: PulsarAdminClient, report: ExecutionReport) -> dict[str, object] | None:
    """The load measured again once the whole plan took effect (`accuracy measure` does it later): a measurement that
    fails is one warning line, and the execution's own result and exit code stand. A stopped or partial execution
    exits at once, as its operator expects, rather than wait for the load to settle: its outcome would be disturbed
    (actions not applied) and teach the calibration nothing."""
    from planner.cli.accuracy import measure_executed
    from planner.cli.common import runtime_failure
    from planner.lifecycle import APPLIED_ATTEMPT_STATUSES, PlanStatus

    if not any(status in APPLIED_ATTEMPT_STATUSES for status in report.results.values()):
        return None
    if report.status is not PlanStatus.EXECUTED:
        print(
            f"plan {report.plan_id} not measured: its execution ended {report.status.value}; "
            f"`accuracy measure {report.plan_id}` measures it when you want",
            file=sys.stderr,
        )
        return None
    try:
        since = datetime.now(UTC)
        return measure_executed(
            store, client, report.plan_id, since=since, wait=None, actor=f"cli:{getpass.getuser()}"
        ).to_json()
    except Exception as error:
        failure = str(error) if isinstance(error, InputError) else runtime_failure(error)
        if failure is None:
            raise
        print(
            f"warning: plan {report.plan_id} not measured: {failure}; "
            f"`accuracy measure {report.plan_id}` measures it later",
            file=sys.stderr,
        )
        return None


def _silent(_event: ProgressEvent) -> None:
    """`execute --quiet`: no progress lines."""


def command_stop(args: argparse.Namespace) -> None:
    """Record a request to stop the plan's execution before its next action (honoured by whichever run holds it)."""
    from planner.store.stops import request_stop

    os_user = getpass.getuser()
    actor = f"cli:{os_user}" + (f" as {args.as_name}" if args.as_name else "")
    recorded = request_stop(open_store(args), args.plan_id, actor, args.reason or "")
    print_json(recorded.to_json())


def command_rollback(args: argparse.Namespace) -> None:
    from planner.orchestrate.rollback import plan_rollback

    store = open_store(args)
    with plan_cluster_client(args, store, args.plan_id) as client:
        committed, document = plan_rollback(store, client, args.plan_id, actor=f"cli:{getpass.getuser()}")
    print_json(
        {
            "plan": committed.plan_id,
            "created": committed.created,
            "rollsBack": args.plan_id,
            "actions": len(document.actions),
            "notes": document.notes,
        }
    )


def add_commands(commands: Commands) -> None:
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
    add_store_options(approve)
    approve.set_defaults(handler=command_approve)

    execute = commands.add_parser("execute", help="execute an approved plan (or resume a stopped execution)")
    execute.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the approved plan (see `plans`)")
    add_plan_cluster_options(execute)
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
    execute.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr (each action as it starts and ends)"
    )
    execute.add_argument(
        "--no-measure",
        action="store_true",
        help="do not collect and record the load after the moves (measured by default once something moved)",
    )
    add_store_options(execute)
    execute.set_defaults(handler=command_execute)

    stop = commands.add_parser(
        "stop",
        help="stop an executing plan gracefully: the run starts no action after this (exit 2 if not executing)",
    )
    stop.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the executing plan")
    stop.add_argument("--reason", metavar="TEXT", help="why, for the audit log")
    stop.add_argument("--as", dest="as_name", metavar="NAME", help="who asks, for the audit log (default: the OS user)")
    add_store_options(stop)
    stop.set_defaults(handler=command_stop)

    rollback = commands.add_parser(
        "rollback", help="plan the undo of an executed plan: each moved bundle back to its source (then approve)"
    )
    rollback.add_argument("plan_id", type=ID, metavar="PLAN_ID", help="the executed (or partly executed) plan")
    add_plan_cluster_options(rollback)
    add_store_options(rollback)
    rollback.set_defaults(handler=command_rollback)
