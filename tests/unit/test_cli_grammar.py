"""The command line's grammar: `plan run|show|list`, the spellings from before it (`plan --cluster ...`,
`plans [list]`, `plans show ID`), which scripts keep using, and the dev tools' own command, `pulsar-rebalance-dev`,
which the product's command no longer carries."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from planner.arguments import Bounded
from planner.cli import build_parser, main
from planner.cli.plans import with_legacy_spellings
from pulsar_rebalance_devtools import cli as dev_cli


def run(entry, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = entry(argv)
    return code, out.getvalue(), err.getvalue()


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize(
    ("argv", "spelled"),
    [
        (["plan", "--cluster", "c1"], ["plan", "run", "--cluster", "c1"]),
        (
            ["-v", "plan", "--cluster", "c1", "--mode", "fill"],
            ["-v", "plan", "run", "--cluster", "c1", "--mode", "fill"],
        ),
        (["plan"], ["plan", "run"]),
        (["plan", "run", "--cluster", "c1"], ["plan", "run", "--cluster", "c1"]),
        (["plan", "show", "3"], ["plan", "show", "3"]),
        (["plan", "list"], ["plan", "list"]),
        (["plan", "--help"], ["plan", "--help"]),
        (["plans", "show", "3"], ["plans", "show", "3"]),
        (["execute", "3", "--cluster", "plan"], ["execute", "3", "--cluster", "plan"]),
    ],
)
def test_a_plan_without_its_command_runs(argv, spelled):
    assert with_legacy_spellings(argv) == spelled


def test_plan_list_and_show_read_as_their_earlier_spellings(tmp_path):
    db = f"sqlite:///{tmp_path / 'planner.db'}"
    listed = {
        tuple(words): run(main, [*words, "--db", db]) for words in (["plan", "list"], ["plans"], ["plans", "list"])
    }
    assert set(listed.values()) == {(0, '{\n  "plans": []\n}\n', "")}
    for words in (["plan", "show", "7"], ["plans", "show", "7"]):
        code, out, err = run(main, [*words, "--db", db])
        assert (code, out) == (2, "") and "unknown plan 7" in err


def test_plan_run_refuses_an_incomplete_request_in_the_new_spelling_too(tmp_path):
    db = f"sqlite:///{tmp_path / 'planner.db'}"
    code, out, err = run(main, ["plan", "run", "--cluster", "c1", "--brokers", "a:8080", "--db", db])
    assert (code, out) == (2, "") and "--brokers and --max-moves go with --mode drain or --mode fill" in err


def test_the_plan_group_lists_its_commands():
    assert set(commands(commands(build_parser())["plan"])) == {"run", "show", "list"}


def test_the_dev_tools_are_a_command_of_their_own():
    assert not {"local-cluster", "demo"} & set(commands(build_parser()))
    assert set(commands(dev_cli.build_parser())) == {"local-cluster", "demo"}


def dev_tool_value_options() -> list[tuple[str, str]]:
    """Every bounded number option of the dev tools' commands, as (command, option)."""
    return [
        (name, max(action.option_strings, key=len))
        for name, parser in commands(dev_cli.build_parser()).items()
        for action in parser._actions
        if isinstance(action.type, Bounded)
    ]


def test_every_number_option_of_the_dev_tools_is_bounded():
    assert set(dev_tool_value_options()) == {
        ("local-cluster", "--brokers"),
        ("demo", "--brokers"),
        ("demo", "--port"),
    }


@pytest.mark.parametrize("command_option", dev_tool_value_options(), ids=" ".join)
@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "1e308", "9" * 30, "70000", ""])
def test_the_dev_tools_refuse_extreme_numbers_in_one_line(command_option, value):
    command, option = command_option
    words = [command, "start"] if command == "local-cluster" else [command]
    code, out, err = run(dev_cli.main, [*words, f"{option}={value}"])
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: pulsar-rebalance-dev") and option in err


def test_the_dev_tools_refuse_an_unknown_action_in_one_line():
    code, out, err = run(dev_cli.main, ["local-cluster", "restart"])
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and "invalid choice: 'restart'" in err
