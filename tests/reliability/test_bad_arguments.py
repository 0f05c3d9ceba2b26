"""Bad command-line values: every number, id and URL option of every command, found in `build_parser()` itself
(a new option is covered without touching this file), is driven in-process with extreme values (inf, nan,
1e308, negatives, ids of 30 digits) and malformed URLs. Each must end in exit 2 with one `error:` line that names
the option, before the store is opened or a connection made, and leave the planner's directories as they were."""

from __future__ import annotations

import argparse
import io
import math
import socket
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.arguments import Bounded, admin_url, duration
from planner.cli import build_parser, main

pytestmark = pytest.mark.reliability

CASES_PER_OPTION = 25
# Values no bounded type accepts: past 2**63, negative, not finite, or larger than any duration, rate or count.
EXTREME_NUMBERS = [
    "inf",
    "-inf",
    "nan",
    "NaN",
    "1e308",
    "-1e308",
    "1e999",
    "1e14",
    "1e300",
    "-1",
    "-0.5",
    "9" * 30,
    "-" + "9" * 30,
    str(2**63),
    str(2**64 + 1),
    "",
    "0x10",
    "1_e5",
]
MALFORMED_URLS = [
    "http://[::1",
    "http://[::1]:99999",
    "http://host:port",
    "http://host:0",
    "http://",
    "https://:8080",
    "ftp://host:21",
    "host:8080",
    "http://host:8080/admin/v2",
    "http://user:secret@host:8080",
    "http://host:8080?x=1",
    "",
]
MALFORMED_DURATIONS = ["99999999999999999d", "1e308d", "-1d", "inf", "nan", "7", "d", "3661d", "9" * 30 + "s"]


def extreme_numbers() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(EXTREME_NUMBERS),
        st.integers(min_value=2**63).map(str),
        st.integers(max_value=-1).map(str),
        st.floats(allow_nan=True, allow_infinity=True)
        .filter(lambda value: not math.isfinite(value) or value < 0 or abs(value) > 1e9)
        .map(repr),
    )


def malformed_urls() -> st.SearchStrategy[str]:
    return st.sampled_from(MALFORMED_URLS) | st.text(max_size=30).filter(
        lambda text: not text.startswith(("http://", "https://"))
    )


def subparsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command's parser with the words that select it (`("db", "upgrade")`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*words, name), child
                yield from subparsers(child, (*words, name))


def value_options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    return [
        (words, action)
        for words, parser in subparsers(build_parser())
        for action in parser._actions
        if isinstance(action.type, Bounded) or action.type in (admin_url, duration)
    ]


def option_id(case: tuple[tuple[str, ...], argparse.Action]) -> str:
    words, action = case
    return " ".join([*words, action.option_strings[0] if action.option_strings else action.metavar or action.dest])


def test_every_number_option_has_a_bounded_type():
    """A plain `type=int` or `type=float` accepts inf, nan and 30-digit values: none may remain."""
    unbounded = [
        f"{' '.join(words)} {action.option_strings or action.dest}"
        for words, parser in subparsers(build_parser())
        for action in parser._actions
        if action.type in (int, float)
    ]
    assert unbounded == []
    covered = {option_id(case) for case in value_options()}
    for expected in ("execute --ttl", "execute --lease", "load-data --snapshot", "snapshots --limit", "plans --limit"):
        assert expected in covered
    assert "collect --admin-url" in covered and "execute PLAN_ID" in covered


@pytest.fixture
def planner_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The planner's home, storage and cache in `tmp_path`, the working directory too; connecting is an error."""
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", str(tmp_path / "storage"))
    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTERS", str(tmp_path / "clusters.toml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PULSAR_REBALANCE_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)

    def no_connection(self: socket.socket, address: object) -> None:
        raise AssertionError(f"a bad value must be refused before connecting (to {address})")

    monkeypatch.setattr(socket.socket, "connect", no_connection)
    monkeypatch.setattr(socket.socket, "connect_ex", no_connection)
    return tmp_path


def everything_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def refused_in_one_line(argv: list[str], named: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    lines = err.getvalue().splitlines()
    assert code == 2, (argv, err.getvalue())
    assert out.getvalue() == ""
    assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err.getvalue())
    assert named in lines[0], (argv, lines[0])


def argv_with(words: tuple[str, ...], action: argparse.Action, value: str) -> tuple[list[str], str]:
    """The command line giving `value` to `action`, and how the error names it. `--option=VALUE` and `-- VALUE`
    keep a value such as `-inf` from being read as an option."""
    if action.option_strings:
        option = max(action.option_strings, key=len)
        return [*words, f"{option}={value}"], option
    return [*words, "--", value], action.metavar or action.dest


@pytest.mark.parametrize("case", value_options(), ids=option_id)
def test_every_number_and_url_option_refuses_extreme_values_before_doing_anything(case, planner_dirs):
    words, action = case
    values = malformed_urls() if action.type is admin_url else extreme_numbers()
    if action.type is duration:
        values = st.sampled_from(MALFORMED_DURATIONS) | extreme_numbers()

    @settings(
        max_examples=CASES_PER_OPTION,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
    )
    @given(value=values)
    def refused(value: str) -> None:
        argv, named = argv_with(words, action, value)
        refused_in_one_line(argv, named)

    before = everything_under(planner_dirs)
    refused()
    assert everything_under(planner_dirs) == before


@pytest.mark.parametrize("command", ["plans", "plan"])
@given(
    plan_id=st.sampled_from(EXTREME_NUMBERS) | st.integers(min_value=2**63).map(str) | st.integers(max_value=0).map(str)
)
@settings(
    max_examples=CASES_PER_OPTION,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_show_refuses_extreme_plan_ids(command, plan_id, planner_dirs):
    refused_in_one_line(
        [command, "show", "--", plan_id] if plan_id.startswith("-") else [command, "show", plan_id], "plan id"
    )
    assert everything_under(planner_dirs) == []
