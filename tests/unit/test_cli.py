"""The `pulsar-rebalance` command line: output formats, vectors end to end, and bad input (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "load-data.json"


def run_cli(capsys, *args):
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_json(path, document):
    path.write_text(json.dumps(document))
    return path


def report(cpu, rate_in=0.0, rate_out=0.0, bundles=()):
    return {
        "cpu": {"usage": cpu, "limit": 100.0},
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "bundles": list(bundles),
        "lastStats": {name: {"topics": 2} for name in bundles},
    }


def short_term(rate_in, rate_out):
    return {"shortTermData": {"maxSamples": 10, "numSamples": 3, "msgRateIn": rate_in, "msgRateOut": rate_out}}


@pytest.fixture
def v1_file(tmp_path):
    names = [f"tenant/ns/0x{i:08x}_0x{i + 1:08x}" for i in range(11)]
    return write_json(
        tmp_path / "v1.json",
        {
            "brokers": {
                "broker1:8080": report(80, 10000, 10000, names),
                "broker2:8080": report(30, 1000, 1000),
                "broker3:8080": report(50, 5000, 5000),
            },
            "bundleData": {name: short_term(450, 450) for name in names},
        },
    )


def test_shed_v1_through_the_cli_with_state_carried_between_runs(capsys, v1_file, tmp_path):
    state = tmp_path / "state.json"
    code, out, _ = run_cli(
        capsys,
        "shed",
        "--load-data",
        v1_file,
        "--strategy",
        "AvgShedder",
        "--set",
        "maxUnloadPercentage=0.5",
        "--runs",
        "2",
        "--state-out",
        state,
    )
    assert code == 0
    runs = json.loads(out)["runs"]
    assert runs[0]["unloads"] == []
    assert len(runs[1]["unloads"]) == 10
    assert {(u["broker"], u["destination"]) for u in runs[1]["unloads"]} == {("broker1:8080", "broker2:8080")}
    assert json.loads(state.read_text()) == {"strategy": "AvgShedder", "highHitCount": {}, "lowHitCount": {}}


def test_shed_resumes_from_a_stored_state(capsys, v1_file, tmp_path):
    first = tmp_path / "first.json"
    run_cli(capsys, "shed", "--load-data", v1_file, "--strategy", "AvgShedder", "--state-out", first)
    assert json.loads(first.read_text())["highHitCount"] == {"broker1:8080": 1, "broker2:8080": 1}
    code, out, _ = run_cli(
        capsys,
        "shed",
        "--load-data",
        v1_file,
        "--strategy",
        "org.apache.pulsar.broker.loadbalance.impl.AvgShedder",
        "--state-in",
        first,
    )
    assert code == 0
    assert len(json.loads(out)["runs"][0]["unloads"]) == 4  # default maxUnloadPercentage 0.2


def test_shed_reads_broker_conf_and_set_overrides_it(capsys, v1_file, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("maxUnloadPercentage=0.5\nloadBalancerAvgShedderHitCountHighThreshold=1\n")
    code, out, _ = run_cli(capsys, "shed", "--load-data", v1_file, "--strategy", "AvgShedder", "--broker-conf", conf)
    assert code == 0 and len(json.loads(out)["runs"][0]["unloads"]) == 10
    code, out, _ = run_cli(
        capsys,
        "shed",
        "--load-data",
        v1_file,
        "--strategy",
        "AvgShedder",
        "--broker-conf",
        conf,
        "--set",
        "maxUnloadPercentage=0.2",
    )
    assert len(json.loads(out)["runs"][0]["unloads"]) == 4


def test_now_drops_expired_recently_unloaded_entries(capsys, v1_file, tmp_path):
    document = json.loads(v1_file.read_text())
    document["recentlyUnloadedBundles"] = {f"tenant/ns/0x{i:08x}_0x{i + 1:08x}": 1_000 for i in range(11)}
    path = write_json(tmp_path / "recent.json", document)
    args = ["shed", "--load-data", path, "--strategy", "AvgShedder", "--runs", "2"]
    _, out, _ = run_cli(capsys, *args)
    assert json.loads(out)["runs"][1]["unloads"] == []
    _, out, _ = run_cli(capsys, *args, "--now", 1_000 + 31 * 60 * 1000)
    assert len(json.loads(out)["runs"][1]["unloads"]) == 4


def test_uniform_vector_v5_through_the_cli(capsys, tmp_path):
    names = [f"t/ns/0x{i:08x}_0x{i + 1:08x}" for i in range(5)]
    path = write_json(
        tmp_path / "v5.json",
        {
            "brokers": {"broker-1:8080": report(0, 250, 250, names), "broker-2:8080": report(0)},
            "bundleData": {name: short_term(50, 50) for name in names},
        },
    )
    code, out, _ = run_cli(
        capsys,
        "shed",
        "--load-data",
        path,
        "--strategy",
        "UniformLoadShedder",
        "--set",
        "minUnloadMessage=0",
        "--set",
        "minUnloadMessageThroughput=0",
        "--set",
        "maxUnloadPercentage=0.5",
    )
    unloads = json.loads(out)["runs"][0]["unloads"]
    assert code == 0 and len(unloads) == 2 and all(u["destination"] is None for u in unloads)


def test_split_candidates_on_the_shipped_example_and_a_hot_bundle(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "split-candidates", "--load-data", EXAMPLE)
    assert code == 0 and json.loads(out) == {"bundles": ["acme/telemetry/0x02000000_0x03000000"]}
    hot = "t/ns/0x00000000_0x80000000"
    path = write_json(
        tmp_path / "hot.json",
        {
            "brokers": {"b:8080": report(10, bundles=[hot])},
            "bundleData": {hot: {"longTermData": {"maxSamples": 1000, "numSamples": 5, "msgRateIn": 40000}}},
        },
    )
    code, out, _ = run_cli(capsys, "split-candidates", "--load-data", path)
    assert json.loads(out) == {"bundles": [hot]}
    _, out, _ = run_cli(
        capsys, "split-candidates", "--load-data", path, "--set", "loadBalancerNamespaceBundleMaxMsgRate=50000"
    )
    assert json.loads(out) == {"bundles": []}


@pytest.mark.parametrize("position", ["999999999999999999999999999999", str(2**63), str(-(2**63) - 1), "0x1p3"])
def test_a_split_position_beyond_a_java_long_is_refused(capsys, position):
    code, out, err = run_cli(
        capsys,
        "split-positions",
        "--algorithm",
        "specified_positions_divide",
        "--bundle",
        "0x00000000_0xffffffff",
        "--topic",
        "a",
        "--topic",
        "b",
        "--position",
        position,
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "--position" in err


def test_split_positions_for_each_algorithm(capsys):
    code, out, _ = run_cli(
        capsys, "split-positions", "--algorithm", "range_equally_divide", "--bundle", "0x0000000a_0xffffffff"
    )
    assert code == 0 and json.loads(out) == {"positions": [0x80000004]}
    _, out, _ = run_cli(
        capsys,
        "split-positions",
        "--algorithm",
        "specified_positions_divide",
        "--bundle",
        "0x00000001_0x000003e8",
        "--topic",
        "topic",
        "--topic",
        "topic2",
        *[arg for p in (-1, 0, 1, 100, 200, 500, 800, 1000, 1100) for arg in ("--position", p)],
    )
    assert json.loads(out) == {"positions": [100, 200, 500, 800]}
    _, out, _ = run_cli(
        capsys,
        "split-positions",
        "--algorithm",
        "topic_count_equally_divide",
        "--bundle",
        "0x00000000_0xffffffff",
        "--topic",
        "a",
        "--topic",
        "b",
        "--topic",
        "c",
    )
    assert json.loads(out) == {"positions": [0x3C3C67B4]}
    _, out, _ = run_cli(
        capsys,
        "split-positions",
        "--algorithm",
        "topic_count_equally_divide",
        "--bundle",
        "0x00000000_0xffffffff",
        "--topic",
        "a",
    )
    assert json.loads(out) == {"positions": []}
    _, out, _ = run_cli(
        capsys, "split-positions", "--algorithm", "range_equally_divide", "--bundle", "0x00000005_0x00000006"
    )
    assert json.loads(out) == {"positions": []}


def test_split_positions_reads_topic_rates_from_the_right(capsys):
    topics = [f"persistent://test-tenant1/test-namespace1/test-partition-{i}" for i in range(5)]
    from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash

    lowest = min(topics, key=topic_hash)
    args = []
    for topic in topics:
        args += ["--topic", f"{topic}:{2000 if topic == lowest else 49.5}:2000"]
    code, out, err = run_cli(
        capsys,
        "split-positions",
        "--algorithm",
        "flow_or_qps_equally_divide",
        "--bundle",
        "0x00000000_0xffffffff",
        "--set",
        "loadBalancerNamespaceBundleMaxMsgRate=1010",
        "--set",
        "defaultNamespaceBundleSplitAlgorithm=flow_or_qps_equally_divide",
        *args,
    )
    assert code == 0 and json.loads(out) == {"positions": [0x43FC608C]} and err == ""


def test_topic_bundle_prints_the_range(capsys):
    topic = "persistent://public/default/my-topic"
    code, out, _ = run_cli(
        capsys, "topic-bundle", "--boundaries", "0x00000000,0x40000000,0x80000000,0xc0000000,0xffffffff", topic
    )
    from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash

    lower = (topic_hash(topic) >> 30) << 30
    upper = min(lower + 0x40000000, 0xFFFFFFFF)
    assert code == 0 and json.loads(out) == {"topic": topic, "bundle": f"0x{lower:08x}_0x{upper:08x}"}


BAD_LOAD_DATA = [
    ("{not json", "malformed JSON"),
    ('{"brokers": {"b:8080": {"cpu": {"usage": "80", "limit": 100}}}}', "brokers['b:8080'].cpu.usage"),
    ('{"brokers": {"b:8080": {"msgRateIn": -5}}}', "brokers['b:8080'].msgRateIn"),
    ('{"brokers": {"b:8080": {"msgRateIn": NaN}}}', "brokers['b:8080'].msgRateIn: Input should be a finite number"),
    ('{"brokers": {"b:8080": {"msgThroughputOut": Infinity}}}', "brokers['b:8080'].msgThroughputOut"),
    ('{"brokers": {"b:8080": {"msgRateIn": 1e999}}}', "brokers['b:8080'].msgRateIn"),
    ('{"bundleData": {"tenant/ns/bundle-1": {}}}', "tenant/ns/bundle-1"),
    ('{"bundleData": {"t/ns/0x80000000_0x40000000": {}}}', "out of order"),
    (
        '{"bundleData": {"t/ns/0x00000000_0x40000000": {"shortTermData": {"msgRateIn": -1}}}}',
        "bundleData['t/ns/0x00000000_0x40000000'].shortTermData.msgRateIn",
    ),
    ('{"brokers": {"b:8080": {"bundles": "t/ns/0x00000000_0x40000000"}}}', "brokers['b:8080'].bundles"),
    ('{"brokers": {"no-port": {}}}', "no-port"),
    ('{"bundleData": {"t/ns/0x00000000_0x40000000": {"topics": 2.5}}}', "topics"),
    ("[1, 2]", "invalid LoadData: <root>: Input should be an object"),
    ('{"brokers": ' + "[" * 300 + "]" * 300 + "}", "recursion limit exceeded"),
]


@pytest.mark.parametrize(("text", "named"), BAD_LOAD_DATA)
def test_bad_load_data_exits_2_with_one_line_naming_the_field(capsys, tmp_path, text, named):
    path = tmp_path / "bad.json"
    path.write_text(text)
    state = tmp_path / "state.json"
    code, out, err = run_cli(capsys, "shed", "--load-data", path, "--strategy", "AvgShedder", "--state-out", state)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and named in err
    assert not state.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["shed", "--load-data", EXAMPLE, "--strategy", "FancyShedder"], "FancyShedder"),
        (
            ["shed", "--load-data", EXAMPLE, "--strategy", "AvgShedder", "--set", "maxUnloadPercentage=x"],
            "maxUnloadPercentage",
        ),
        (
            ["shed", "--load-data", EXAMPLE, "--strategy", "AvgShedder", "--set", "pulsarVersion=3.0.2"],
            "AvgShedder does not exist in Pulsar 3.0.2",
        ),
        (["shed", "--load-data", EXAMPLE, "--strategy", "AvgShedder", "--runs", "0"], "--runs"),
        (["shed", "--load-data", "/nonexistent.json", "--strategy", "AvgShedder"], "/nonexistent.json"),
        (["shed", "--strategy", "AvgShedder"], "--load-data"),
        (["split-positions", "--algorithm", "middle_divide", "--bundle", "0x00000000_0xffffffff"], "middle_divide"),
        (["split-positions", "--algorithm", "range_equally_divide", "--bundle", "0x0_0xffffffff"], "0x0_0xffffffff"),
        (
            [
                "split-positions",
                "--algorithm",
                "specified_positions_divide",
                "--bundle",
                "0x00000000_0xffffffff",
                "--topic",
                "a",
                "--topic",
                "b",
            ],
            "splitBoundaries",
        ),
        (
            [
                "split-positions",
                "--algorithm",
                "specified_positions_divide",
                "--bundle",
                "0x00000000_0xffffffff",
                "--position",
                "ten",
            ],
            "--position",
        ),
        (["topic-bundle", "--boundaries", "0x00000000,0x80000000", "t"], "--boundaries"),
        (["topic-bundle", "--boundaries", "0x00000000,0xc0000000,0x80000000,0xffffffff", "t"], "out of order"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, args, named):
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and named in err


def test_state_of_another_strategy_is_refused(capsys, tmp_path, v1_file):
    state = write_json(tmp_path / "state.json", {"strategy": "ThresholdShedder", "brokerAvgResourceUsage": {}})
    code, _, err = run_cli(capsys, "shed", "--load-data", v1_file, "--strategy", "AvgShedder", "--state-in", state)
    assert code == 2 and "strategy" in err


def test_console_script_is_installed_and_exits_2_on_bad_input(tmp_path):
    executable = shutil.which("pulsar-rebalance") or str(Path(sys.executable).parent / "pulsar-rebalance")
    done = subprocess.run(
        [executable, "shed", "--load-data", str(EXAMPLE), "--strategy", "AvgShedder", "--runs", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and len(json.loads(done.stdout)["runs"]) == 2
    bad = subprocess.run(
        [executable, "shed", "--strategy", "Nope", "--load-data", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1


def test_spark_code_is_the_planner_package_in_a_zip_named_by_its_content(capsys, tmp_path):
    import zipfile

    code, out, _ = run_cli(capsys, "spark-code", "--out", tmp_path)
    assert code == 0
    archive = Path(json.loads(out)["pyFiles"])
    names = zipfile.ZipFile(archive).namelist()
    assert "planner/plan/usage_model.py" in names and "planner/pulsar/java_numbers.py" in names
    assert not [name for name in names if "__pycache__" in name or not name.endswith(".py")]
    # The same code gives the same name: executors and Spark Connect sessions can tell the versions apart.
    assert run_cli(capsys, "spark-code", "--out", tmp_path)[1] == out
    assert [path.name for path in tmp_path.iterdir()] == [archive.name]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "drain"], "--mode drain: --brokers is required"),
        (["--brokers", "a:8080"], "--brokers and --max-moves go with --mode drain or --mode fill"),
        (["--mode", "fill", "--max-moves", "0"], "argument --max-moves: must be from 1"),
        (["--mode", "fill", "--cluster", "other"], "name exactly one --cluster"),
    ],
)
def test_maintenance_plans_refuse_incomplete_requests_before_spark_starts(capsys, tmp_path, args, message):
    db = f"sqlite:///{tmp_path / 'planner.db'}"
    code, out, err = run_cli(capsys, "plan", "--cluster", "c1", "--db", db, *args)
    assert code == 2 and out == "" and message in err


def test_rollback_of_an_unknown_or_unexecuted_plan_is_refused(capsys, tmp_path):
    db = f"sqlite:///{tmp_path / 'planner.db'}"
    code, _, err = run_cli(capsys, "rollback", "42", "--db", db, "--admin-url", "http://127.0.0.1:9")
    assert code == 2 and "unknown plan 42" in err


def test_help_loads_neither_the_store_nor_the_dataset_nor_spark():
    """`--help` stays fast: the heavy modules load only in the commands that use them (about 2 s together)."""
    script = (
        "import sys, contextlib, io\n"
        "from planner.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--help'])\n"
        "heavy = ('sqlalchemy', 'alembic', 'pyarrow.dataset', 'pyspark', 'pandas')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_demo_closes_with_msg_rates_per_broker_before_and_after():
    from pulsar_rebalance_devtools.demo import closing_table

    table = closing_table({"a:8080": 321.4, "b:8080": 0.0}, {"a:8080": 160.2, "b:8080": 80.0, "c:8080": 79.6})
    rows = {line.split()[1]: line.split()[3:6:2] for line in table.splitlines() if ":8080" in line}
    assert rows == {"a:8080": ["321", "160"], "b:8080": ["0", "80"], "c:8080": ["0", "80"]}
    assert "score" not in table  # shared-host scores move together: left out


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from planner.cli import build_parser

    silent = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])
            elif not action.help and action.dest != "help":
                silent.append(" ".join([*words, *(action.option_strings or [action.dest])]))

    walk(build_parser(), [])
    assert silent == []
