"""Bad input: generated load reports and LoadData documents, right in shape but wrong in one value, and
random JSON, through the parsers and the CLI. Nothing may crash; a rejection is an `InputError` whose
message names the offending field's path (and the broker); oversized and deeply nested JSON is refused
with a message naming the limit, for files, the CLI and admin API answers.

The default run tries `CI_CASES` documents per family; the slow run `RELIABILITY_FUZZ_CASES` (10,000)
in all, and prints how many it ran and how long it took.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import MAX_JSON_DEPTH, InputError
from planner.plan.shedding.registry import MODULAR_STRATEGIES
from planner.pulsar.model import (
    MAX_JSON_BYTES_ENV,
    load_data_from_json,
    local_broker_data_from_json,
    parse_json_document,
    read_load_data,
)
from planner.settings import DEFAULT_MAX_JSON_BYTES
from tests.fake_pulsar import FakePulsar, Reply, load_report

pytestmark = pytest.mark.reliability

CI_CASES = 100
FUZZ_CASES = int(os.environ.get("RELIABILITY_FUZZ_CASES", "10000"))
# The dedicated run (minutes): RELIABILITY_FUZZ_CASES=10000 pytest -m reliability tests/reliability/test_bad_input.py
FUZZ_RUN_REQUESTED = "RELIABILITY_FUZZ_CASES" in os.environ

# --- valid documents ---------------------------------------------------------------------------------

RATE_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
STATS_COUNTS = ("consumerCount", "producerCount", "topics", "cacheSize")
BROKER_COUNTS = ("lastUpdate", "numTopics", "numBundles", "numConsumers", "numProducers", "startTimestamp")
BROKER_TEXTS = ("webServiceUrl", "webServiceUrlTls", "pulsarServiceUrl", "brokerVersionString")
BROKER_BOOLS = ("persistentTopicsEnabled", "nonPersistentTopicsEnabled")
RESOURCES = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
BUNDLE_SETS = ("bundles", "lastBundleGains", "lastBundleLosses")

rates = st.floats(min_value=0.0, max_value=1e12, allow_nan=False)
counts = st.integers(min_value=0, max_value=2**40)
namespaces = st.sampled_from(["public/default", "tenant/ns", "t-1/ns_2", "a.b/c-d"])


@st.composite
def bundle_names(draw) -> str:
    low, high = sorted(draw(st.lists(st.integers(0, 0xFFFFFFFF), min_size=2, max_size=2, unique=True)))
    return f"{draw(namespaces)}/0x{low:08x}_0x{high:08x}"


broker_ids = st.builds(
    "{}:{}".format, st.sampled_from(["broker-1", "10.0.0.7", "pulsar.example.org", "127.0.0.1"]), st.integers(1, 65535)
)


def stats_documents() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({name: rates for name in RATE_FIELDS} | {name: counts for name in STATS_COUNTS})


def resource_documents() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({"usage": rates, "limit": st.floats(min_value=-1.0, max_value=1e6, allow_nan=False)})


@st.composite
def load_reports(draw) -> dict:
    """A full LocalBrokerData document as `GET /admin/v2/broker-stats/load-report` returns it."""
    owned = draw(st.lists(bundle_names(), max_size=4, unique=True))
    document: dict[str, Any] = {name: draw(rates) for name in RATE_FIELDS}
    document |= {name: draw(counts) for name in BROKER_COUNTS}
    document |= {name: draw(st.none() | st.text(max_size=20)) for name in BROKER_TEXTS}
    document |= {name: draw(st.booleans()) for name in BROKER_BOOLS}
    document |= {name: draw(resource_documents()) for name in RESOURCES}
    document["lastStats"] = {name: draw(stats_documents()) for name in owned}
    document["bundles"] = owned
    document["lastBundleGains"] = draw(st.lists(st.sampled_from(owned), unique=True)) if owned else []
    document["lastBundleLosses"] = []
    document["loadReportType"] = "LocalBrokerData"
    return document


def averages_documents(max_samples: int) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {"maxSamples": st.just(max_samples), "numSamples": st.integers(0, max_samples)}
        | {name: rates for name in RATE_FIELDS}
    )


@st.composite
def load_data_documents(draw) -> dict:
    """A LoadData document (`--load-data`): brokers' reports, the leader's bundle averages, recent unloads."""
    ids = draw(st.lists(broker_ids, min_size=1, max_size=4, unique=True))
    brokers = {broker_id: draw(load_reports()) for broker_id in ids}
    owned = sorted({name for report in brokers.values() for name in report["bundles"]})
    bundle_data = {
        name: {
            "shortTermData": draw(averages_documents(10)),
            "longTermData": draw(averages_documents(1000)),
            "topics": draw(counts),
        }
        for name in owned
    }
    recent = {name: draw(counts) for name in draw(st.lists(st.sampled_from(owned), unique=True))} if owned else {}
    return {"brokers": brokers, "bundleData": bundle_data, "recentlyUnloadedBundles": recent}


# --- one wrong value at a known path -----------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON token Python's json module cannot write (e.g. `1e999`)."""

    token: str


def to_json_text(document: Any) -> str:
    raws: dict[str, str] = {}

    def encode(value: Any) -> Any:
        if isinstance(value, Raw):
            marker = f"@raw{len(raws)}@"
            raws[marker] = value.token
            return marker
        if isinstance(value, dict):
            return {key: encode(item) for key, item in value.items()}
        if isinstance(value, list):
            return [encode(item) for item in value]
        return value

    text = json.dumps(encode(document))  # NaN and infinities come out as NaN / Infinity tokens
    for marker, token in raws.items():
        text = text.replace(f'"{marker}"', token)
    return text


NON_FINITE = [math.nan, math.inf, -math.inf, Raw("1e999"), Raw("-1e999"), Raw("NaN"), Raw("-Infinity")]
NOT_NUMBERS = ["12", "", True, False, None, [], {}, [1.0], {"value": 1}]
BAD_RATES = [-1.0, -1e-300, -(2**63), *NON_FINITE, *NOT_NUMBERS]
BAD_LIMITS = [*NON_FINITE, *NOT_NUMBERS]
BAD_COUNTS = [-1, 1.5, 2.0, 1e20, 2**64, *NON_FINITE, *NOT_NUMBERS]
BAD_MAX_SAMPLES = [0, -3, *BAD_COUNTS]
BAD_BOOLS = ["true", 1, 0, None, 1.0, [], {}]
BAD_TEXTS = [5, 1.5, True, [], {"url": "x"}]
BAD_OBJECTS = [[], "x", 1, True, None]
BAD_LISTS = [{}, {"a": 1}, "x", 1, True, None]
BAD_BUNDLE_NAMES = [
    "tenant/ns/0x80000000_0x40000000",  # bounds out of order
    "tenant/ns/0x40000000_0x40000000",  # empty range
    "tenant/ns/0x00000000_0x100000000",  # upper bound past 0xffffffff
    "tenant/ns/0x0_0x40000000",  # not 8 hex digits
    "tenant/ns/0xgggggggg_0xffffffff",
    "0x00000000_0xffffffff",  # no namespace
    "tenant/0x00000000_0xffffffff",
    "tenant/ns/00000000_ffffffff",
    "",
    "tenant/ns/0x00000000_0xffffffff/extra",
    "tenant/../0x00000000_0xffffffff",  # a name Pulsar's rule allows but that leaves a directory
    "ten ant/ns/0x00000000_0xffffffff",
]
BAD_BROKER_IDS = [
    "broker-1",
    "broker-1:",
    ":8080",
    "broker 1:8080",
    "broker-1:123456",
    "broker-1:http",
    "",
    "../broker-1:8080",
    "evil.example/x:8080",
]


def bad_values_for(path: tuple[Any, ...]) -> list[Any]:
    """The wrong values for the leaf at `path`, by what the field holds."""
    name, parent = path[-1], path[-2] if len(path) > 1 else None
    if parent in BUNDLE_SETS:
        return [*BAD_BUNDLE_NAMES, 7, None]
    if parent == "recentlyUnloadedBundles":
        return BAD_COUNTS
    if name == "usage" or name in RATE_FIELDS:
        return BAD_RATES
    if name == "limit":
        return BAD_LIMITS
    if name == "maxSamples":
        return BAD_MAX_SAMPLES
    if name in STATS_COUNTS or name in BROKER_COUNTS or name == "numSamples":
        return BAD_COUNTS
    if name in BROKER_BOOLS:
        return BAD_BOOLS
    if name in BROKER_TEXTS:
        return BAD_TEXTS
    return []


KEYED_MAPS = {"brokers": BAD_BROKER_IDS, "lastStats": BAD_BUNDLE_NAMES, "bundleData": BAD_BUNDLE_NAMES}
KEYED_MAPS["recentlyUnloadedBundles"] = BAD_BUNDLE_NAMES
OBJECT_FIELDS = {*RESOURCES, "shortTermData", "longTermData", *KEYED_MAPS}


def mutation_sites(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[str, tuple[Any, ...]]]:
    """Every place one value can be made wrong: ("value", path), ("key", path of the key), ("container", path)."""
    sites: list[tuple[str, tuple[Any, ...]]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            child = (*path, key)
            if path and path[-1] in KEYED_MAPS:
                sites.append(("key", child))
            if key in OBJECT_FIELDS or key in BUNDLE_SETS:
                sites.append(("container", child))
            sites.extend(mutation_sites(value, child))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            sites.extend(mutation_sites(value, (*path, index)))
    elif bad_values_for(path):
        sites.append(("value", path))
    return sites


def expected_path(path: tuple[Any, ...]) -> str:
    """The path as errors print it: `brokers['h:8080'].cpu.usage`, `lastStats['t/ns/0x..']`, `bundles[2]`."""
    text = ""
    for part in path:
        if isinstance(part, int) or not part.isidentifier():
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
    return text


def get_at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


@dataclass(frozen=True)
class Mutation:
    document: Any
    named: str  # the path the rejection must name
    must_fail: bool


def wrong_values_at(kind: str, path: tuple[Any, ...]) -> list[Any]:
    """The wrong values for a "value" or "container" site."""
    if kind == "value":
        return bad_values_for(path)
    return BAD_LISTS if path[-1] in BUNDLE_SETS else BAD_OBJECTS


@st.composite
def mutated(draw, documents: st.SearchStrategy[dict]) -> Mutation:
    document = draw(documents)
    kind, path = draw(st.sampled_from(mutation_sites(document)))
    parent = get_at(document, path[:-1])
    if kind in ("value", "container"):
        parent[path[-1]] = draw(st.sampled_from(wrong_values_at(kind, path)))
        return Mutation(document, expected_path(path), must_fail=True)
    bad_key = draw(st.sampled_from(KEYED_MAPS[path[-2]]))
    if bad_key in parent:
        return Mutation(document, "", must_fail=False)
    parent[bad_key] = parent.pop(path[-1])
    return Mutation(document, expected_path((*path[:-1], bad_key)) + " (key)", must_fail=True)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@st.composite
def grafted(draw, documents: st.SearchStrategy[dict]) -> Mutation:
    """A valid document with random JSON put in place of one of its values (any error must lie under it)."""
    document = draw(documents)
    _, path = draw(st.sampled_from([site for site in mutation_sites(document) if site[0] != "key"]))
    get_at(document, path[:-1])[path[-1]] = draw(json_values)
    return Mutation(document, expected_path(path), must_fail=False)


# --- the oracle --------------------------------------------------------------------------------------


def check(parse: Callable[[str], Any], mutation: Mutation, names: str = "") -> None:
    """Success, or an InputError naming the path (and `names`, e.g. the broker); anything else is a crash."""
    text = to_json_text(mutation.document)
    try:
        parse(text)
    except InputError as error:
        message = str(error)
        assert mutation.named in message, f"{message!r} does not name {mutation.named!r}"
        assert names in message
        assert "\n" not in message
        return
    assert not mutation.must_fail, f"accepted a wrong value at {mutation.named}: {text[:500]}"


BROKER = "broker-7.example:8080"


def parse_report(text: str) -> Any:
    return local_broker_data_from_json(text, BROKER)


def run_cli_on(text: str, strategy: str) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "load-data.json"
        path.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["shed", "--load-data", str(path), "--strategy", strategy, "--runs", "2"])
    return code, out.getvalue(), err.getvalue()


def check_cli(mutation: Mutation, strategy: str) -> None:
    """The CLI exits 0 with JSON, or 2 with one line naming the path; any exception is a crash."""
    code, out, err = run_cli_on(to_json_text(mutation.document), strategy)
    if code == 0:
        assert not mutation.must_fail, f"accepted a wrong value at {mutation.named}"
        json.loads(out)
        return
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith("error: invalid LoadData") and mutation.named in err, err


# LoadData documents: the modular load manager's strategies (TransferShedder takes ExtensibleLoadData).
strategy_names = st.sampled_from([strategy.name for strategy in MODULAR_STRATEGIES])

# One entry per family: what is generated and how it is checked.
FAMILIES: dict[str, tuple[st.SearchStrategy, Callable[[Any], None]]] = {
    "load report, one wrong value": (mutated(load_reports()), lambda m: check(parse_report, m, f"broker {BROKER}")),
    "load report, random JSON inside": (grafted(load_reports()), lambda m: check(parse_report, m, f"broker {BROKER}")),
    "LoadData, one wrong value": (mutated(load_data_documents()), lambda m: check(load_data_from_json, m)),
    "LoadData, random JSON inside": (grafted(load_data_documents()), lambda m: check(load_data_from_json, m)),
    "random JSON and bytes, every parser": (
        json_values.map(json.dumps) | st.binary(max_size=64) | st.text(max_size=64),
        lambda text: [
            _accept_or_input_error(parse, text)
            for parse in (load_data_from_json, parse_report, lambda t: parse_json_document(t, "state"))
        ],
    ),
    "CLI shed --load-data": (
        st.tuples(st.one_of(mutated(load_data_documents()), grafted(load_data_documents())), strategy_names),
        lambda drawn: check_cli(*drawn),
    ),
}


def _accept_or_input_error(parse: Callable[[Any], Any], text: str | bytes) -> None:
    try:
        parse(text)
    except InputError as error:
        assert str(error).startswith("invalid ") and "\n" not in str(error)


def fuzz(family: str, cases: int, derandomize: bool = False) -> int:
    """Run `cases` generated inputs of one family; returns how many were run."""
    documents, checker = FAMILIES[family]
    ran = 0

    @settings(
        max_examples=cases,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(documents)
    def run(drawn: Any) -> None:
        nonlocal ran
        ran += 1
        checker(drawn)

    run()
    return ran


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generated_bad_input_is_refused_naming_the_field(family):
    # Derandomized so that every CI run tries the same cases; the dedicated run below explores at random.
    assert fuzz(family, CI_CASES, derandomize=True) >= CI_CASES * 0.9


def every_single_mutation(document: dict) -> list[Mutation]:
    """Each wrong value at each value site and each wrong container, applied one at a time to `document`."""
    mutations = []
    for kind, path in mutation_sites(document):
        if kind == "key":
            continue
        for value in wrong_values_at(kind, path):
            copy = json.loads(json.dumps(document))
            get_at(copy, path[:-1])[path[-1]] = value
            mutations.append(Mutation(copy, expected_path(path), must_fail=True))
    return mutations


@settings(max_examples=5, derandomize=True, deadline=None, database=None)
@given(load_data_documents().filter(lambda document: document["bundleData"]))
def test_every_wrong_value_at_every_field_of_a_load_data_document_is_refused(document):
    """Exhaustive over whole documents, so that no listed wrong value depends on the fuzzer drawing it."""
    mutations = every_single_mutation(document)
    for mutation in mutations:
        check(load_data_from_json, mutation)
    assert len(mutations) > 200


@pytest.mark.slow
@pytest.mark.skipif(not FUZZ_RUN_REQUESTED, reason="set RELIABILITY_FUZZ_CASES=10000 for the dedicated fuzz run")
def test_fuzz_run_of_ten_thousand_cases(capsys):
    per_family = math.ceil(FUZZ_CASES / len(FAMILIES))
    figures = {}
    started = time.perf_counter()
    for family in FAMILIES:
        family_started = time.perf_counter()
        figures[family] = (fuzz(family, per_family), time.perf_counter() - family_started)
    elapsed = time.perf_counter() - started
    total = sum(ran for ran, _ in figures.values())
    with capsys.disabled():
        print(f"\nfuzz run: {total} cases in {elapsed:.1f} s")
        for family, (ran, seconds) in figures.items():
            print(f"  {family}: {ran} cases, {seconds:.1f} s")
    assert total >= FUZZ_CASES


# --- oversized and deeply nested JSON ---------------------------------------------------------------

DEEP = "[" * 10_000 + "]" * 10_000
DEEP_IN_A_REPORT = '{"brokers": {"h:8080": {"lastStats": ' + "[" * 10_000 + "]" * 10_000 + "}}}"
NESTING_LIMIT = f"nested deeper than the limit of {MAX_JSON_DEPTH} levels"


@pytest.mark.parametrize("text", [DEEP, DEEP_IN_A_REPORT, '{"a":' * 10_000 + "1" + "}" * 10_000])
def test_deeply_nested_json_is_refused_naming_the_limit_by_every_parser(text):
    for parse, what in [
        (load_data_from_json, "invalid LoadData"),
        (parse_report, f"invalid load report of broker {BROKER}"),
        (lambda t: parse_json_document(t, "strategy state"), "invalid strategy state"),
    ]:
        with pytest.raises(InputError) as raised:
            parse(text)
        assert str(raised.value).startswith(what) and NESTING_LIMIT in str(raised.value)


def test_the_nesting_limit_is_where_the_message_says():
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json_document(at_limit, "x") is not None
    with pytest.raises(InputError, match=NESTING_LIMIT):
        parse_json_document("[" + at_limit + "]", "x")


def test_the_cli_refuses_deep_and_oversized_load_data_naming_the_limit(tmp_path, monkeypatch):
    for text in (DEEP, DEEP_IN_A_REPORT):
        code, out, err = run_cli_on(text, "AvgShedder")
        assert code == 2 and out == "" and NESTING_LIMIT in err and err.count("\n") == 1
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"brokers": {}, "padding": "x" * 5000}))
    monkeypatch.setenv(MAX_JSON_BYTES_ENV, "4096")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["shed", "--load-data", str(big), "--strategy", "AvgShedder"])
    assert code == 2 and out.getvalue() == ""
    assert "larger than the limit of 4096 bytes" in err.getvalue() and MAX_JSON_BYTES_ENV in err.getvalue()


def test_an_oversized_file_is_refused_without_being_read(tmp_path, monkeypatch):
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(64 * 1024**3)  # a sparse 64 GiB file: reading it whole would exhaust memory
    monkeypatch.setenv(MAX_JSON_BYTES_ENV, str(1024**2))
    started = time.perf_counter()
    with pytest.raises(InputError, match=f"larger than the limit of {1024**2} bytes"):
        read_load_data(huge)
    assert time.perf_counter() - started < 5


def test_the_size_limit_defaults_to_256_mib_and_a_bad_setting_is_named(monkeypatch, tmp_path):
    assert DEFAULT_MAX_JSON_BYTES == 256 * 1024**2
    monkeypatch.delenv(MAX_JSON_BYTES_ENV, raising=False)
    path = tmp_path / "small.json"
    path.write_text('{"brokers": {}}')
    assert read_load_data(path).brokers == {}
    for setting in ("0", "-5", "lots"):
        monkeypatch.setenv(MAX_JSON_BYTES_ENV, setting)
        with pytest.raises(InputError, match=MAX_JSON_BYTES_ENV):
            read_load_data(path)
    with pytest.raises(InputError, match="larger than the limit of 10 bytes"):
        load_data_from_json('{"brokers": {}}', max_bytes=10)


# --- admin API answers --------------------------------------------------------------------------------


@pytest.fixture
def fake():
    server = FakePulsar()
    yield server
    server.close()


def admin_client(server: FakePulsar, **options) -> PulsarAdminClient:
    return PulsarAdminClient(server.url, timeout=(2.0, 2.0), backoff_factor=0.01, retries=1, **options)


@pytest.mark.parametrize("omit_length", [False, True], ids=["content-length", "read-until-close"])
def test_an_admin_answer_larger_than_the_limit_is_refused(fake, omit_length):
    fake.route("GET", "/admin/v2/tenants", Reply(200, json.dumps(["t" * 100] * 1000), omit_length=omit_length))
    with admin_client(fake, max_response_bytes=10_000) as client, pytest.raises(AdminError) as raised:
        client.tenants()
    message = str(raised.value)
    assert "larger than the limit of 10000 bytes (max_response_bytes)" in message
    assert "/admin/v2/tenants" in message and fake.broker_id in message
    with admin_client(fake, max_response_bytes=200_000) as client:
        assert len(client.tenants()) == 1000


def test_an_oversized_error_answer_is_refused_too(fake):
    fake.route("GET", "/admin/v2/tenants", Reply(500, "x" * 50_000, omit_length=True))
    with admin_client(fake, max_response_bytes=10_000) as client, pytest.raises(AdminError, match="larger than"):
        client.tenants()


@pytest.mark.parametrize("body", [DEEP, DEEP_IN_A_REPORT])
def test_a_deeply_nested_admin_answer_is_refused_naming_the_limit(fake, body):
    fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, body))
    fake.route("GET", "/admin/v2/broker-stats/topics", Reply(200, body))
    client = admin_client(fake)
    for call in (client.load_report_text, client.topic_stats):
        with pytest.raises(AdminError) as raised:
            call(fake.broker_id)
        assert NESTING_LIMIT in str(raised.value) and fake.broker_id in str(raised.value)


def test_a_normal_load_report_still_reads_and_parses(fake):
    report = load_report({"t/ns/0x00000000_0x80000000": {"msgRateIn": 5.0}})
    fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, report))
    text = admin_client(fake).load_report_text(fake.broker_id)
    parsed = local_broker_data_from_json(text, fake.broker_id)
    assert parsed.last_stats["t/ns/0x00000000_0x80000000"].msg_rate_in == 5.0
