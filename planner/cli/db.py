"""Store maintenance: `db upgrade`."""

from __future__ import annotations

import argparse

from planner.cli.common import ArgumentParser, Commands, add_store_options, print_json


def command_db_upgrade(args: argparse.Namespace) -> None:
    from planner.store.database import Store, migration_heads, upgrade

    store = Store(args.db, migrate=False)
    changed = upgrade(store.engine)
    print_json({"database": store.safe_url, "upgraded": changed, "revision": sorted(migration_heads())})


def add_commands(commands: Commands) -> None:
    database = commands.add_parser("db", help="store maintenance")
    database_commands = database.add_subparsers(dest="db_command", required=True, parser_class=ArgumentParser)
    upgrade_parser = database_commands.add_parser("upgrade", help="apply migrations (idempotent)")
    add_store_options(upgrade_parser)
    upgrade_parser.set_defaults(handler=command_db_upgrade)
