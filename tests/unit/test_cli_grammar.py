"""The command line's grammar: `plan run|show|list`, the spellings from before it (`plan --cluster ...`,
`plans [list]`, `plans show ID`), which scripts keep using, and the dev tools' own command, `pulsar-rebalance-dev`,
which the product's command no longer carries."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

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


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["local-cluster", "start", "--brokers=0"], "--brokers"),
        (["local-cluster", "start", "--brokers=255"], "--brokers"),
        (["local-cluster", "start", "--brokers=inf"], "--brokers"),
        (["local-cluster", "restart"], "action"),
        (["demo", "--port=70000"], "--port"),
        (["demo", "--brokers=-1"], "--brokers"),
    ],
)
def test_the_dev_tools_refuse_bad_input_in_one_line(argv, named):
    code, out, err = run(dev_cli.main, argv)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: pulsar-rebalance-dev") and named in err
