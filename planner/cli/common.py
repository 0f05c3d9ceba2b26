"""What every command group shares: the parser class, the options several commands take, and JSON in and out."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from planner.arguments import admin_url
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.collect.clusters import ClusterSettings, find_cluster
from planner.errors import InputError, format_validation_error
from planner.plan.shedding.registry import STRATEGIES
from planner.pulsar.config import PulsarConfig, load_config
from planner.pulsar.model import parse_json_document

if TYPE_CHECKING:
    from planner.store.database import Store

logger = logging.getLogger("pulsar_rebalance")

# The exit codes of every command (README.md, "Exit codes"): scripts and schedulers branch on them.
EXIT_OK = 0
# The planner could not do its work, whatever its input: a cluster unreachable or failing, the store unavailable, a
# worker process that died, a file that cannot be written. Trying again later may succeed.
EXIT_RUNTIME_FAILURE = 1
# A usage error or input that cannot be used (argparse's own code): the same command fails again as it is.
EXIT_BAD_INPUT = 2
# `execute` ended without every action done: partial, stopped by `stop`, or expired (its JSON says which). A rerun
# of `execute` resumes a partial or stopped plan.
EXIT_PARTIAL = 3

# The command groups' `add_parser` returns (argparse's own name for the type is private).
Commands = argparse._SubParsersAction


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse `argv` and run the command's handler; its exit code (a handler returns one only to say more than
    success), or a one-line error on stderr: 2 for bad input, 1 for a runtime failure."""
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(message)s",
            stream=sys.stderr,
        )
        code: int | None = args.handler(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    except Exception as error:
        failure = runtime_failure(error)
        if failure is None:
            raise  # a defect: its traceback, and Python's exit code 1, the runtime failure's
        print(f"error: {failure}", file=sys.stderr)
        return EXIT_RUNTIME_FAILURE
    return code or EXIT_OK


# The modules only an extra installs, and that extra (pyproject.toml's optional dependencies).
_EXTRA_OF_MODULE = {"pyspark": "spark", "pandas": "spark", "airflow": "airflow", "psycopg": "postgres"}


def runtime_failure(error: Exception) -> str | None:
    """The one-line message of a failure of what the planner depends on (not of its input), or None for a defect."""
    if isinstance(error, NotImplementedError | RecursionError):
        return None
    if isinstance(error, ModuleNotFoundError) and (extra := _EXTRA_OF_MODULE.get((error.name or "").split(".")[0])):
        # A command of an extra the installation lacks (the bare package has neither Spark nor Airflow).
        return f"this command needs {error.name}: install pulsar-rebalance[{extra}]"
    if isinstance(error, AdminError | RuntimeError):  # the admin API, a worker process, Maven, a concurrent commit
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, OSError):
        return f"{error.strerror or error}" + (f": {error.filename!r}" if error.filename else "")
    # The store's driver errors; SQLAlchemy is imported only by the commands that open the store (see open_store).
    store_errors = sys.modules.get("sqlalchemy.exc")
    if store_errors is not None and isinstance(error, store_errors.OperationalError | store_errors.InterfaceError):
        reason = str(error.orig if error.orig is not None else error).strip().splitlines()
        return f"the store is unavailable: {reason[0] if reason else type(error.orig).__name__}"
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}")


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Pulsar configuration key (or pulsarVersion); repeatable, wins over --broker-conf",
    )
    parser.add_argument("--broker-conf", type=Path, help="read Pulsar keys from a broker.conf file")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="SQLAlchemy URL of the store (default: $PULSAR_REBALANCE_DB_URL or a SQLite file)")


def add_plan_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", help="a cluster of the clusters file (default: the plan's cluster)")
    parser.add_argument("--admin-url", type=admin_url, help="the cluster's admin URL instead of the clusters file")
    parser.add_argument("--token-env", help="with --admin-url: environment variable holding the token")
    parser.add_argument("--ca-file", type=Path, help="with --admin-url: CA bundle for TLS verification")
    parser.add_argument("--clusters", type=Path, help="clusters file (default: $PULSAR_REBALANCE_CLUSTERS)")


def strategy_names() -> str:
    """The shedding strategies a `--strategy` takes, for its help."""
    return ", ".join(strategy.name for strategy in STRATEGIES)


def pulsar_config(args: argparse.Namespace) -> PulsarConfig:
    return load_config(args.broker_conf, args.settings)


def open_store(args: argparse.Namespace) -> Store:
    # Imported here: the store (SQLAlchemy, Alembic) took about 2 s, which every `--help` paid.
    from planner.store.database import Store

    return Store(args.db)


def cluster_settings(args: argparse.Namespace) -> ClusterSettings:
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


@contextlib.contextmanager
def plan_cluster_client(args: argparse.Namespace, store: Store, plan_id: int) -> Iterator[PulsarAdminClient]:
    """An admin client of the plan's cluster: `--cluster`, `--admin-url`, or by default the plan's cluster in
    the clusters file; a URL of another cluster is refused. A cluster that cannot be read is a runtime failure
    (exit 1: `run_command`), not bad input."""
    from planner.audit.plan_records import show_plan

    plan_cluster = show_plan(store, plan_id).cluster
    if args.cluster and args.cluster != plan_cluster:
        raise InputError(f"plan {plan_id} is for cluster {plan_cluster!r}, not --cluster {args.cluster!r}")
    if not args.cluster and not args.admin_url:
        args.cluster = plan_cluster
    with cluster_settings(args).client() as client:
        if args.admin_url and client.cluster_name() != plan_cluster:
            raise InputError(
                f"--admin-url {args.admin_url} belongs to cluster {client.cluster_name()!r}, "
                f"but plan {plan_id} is for {plan_cluster!r}"
            )
        yield client


def read_json_file(path: Path, what: str) -> Any:
    try:
        text = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {what} {str(path)!r}: {error.strerror}") from None
    return parse_json_document(text, what)


def write_json_atomically(path: Path, document: object) -> None:
    """Write to a temporary file beside `path`, then rename, so a reader never sees half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=f".{path.name}.", delete=False) as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
        temporary = Path(handle.name)
    os.replace(temporary, path)


def print_json(document: object) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
