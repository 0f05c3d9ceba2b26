"""Names from outside (an admin API's answers, the clusters file, the settings) are checked by Pulsar's naming
rule before they become storage paths, and the storage layer refuses paths that step out of its root, on a disk
and in an S3-compatible object store (moto on loopback)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner.cli import main
from planner.collect.clusters import ClusterSettings
from planner.errors import InputError
from planner.names import check_broker_id, check_name, check_namespace
from tests.fake_pulsar import FakePulsar, Reply, load_report
from tests.object_store import TEST_S3_CREDENTIALS, objects, s3_server

HOSTILE_CLUSTER = "x/../../../../outside"
BUCKET = "planner"


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes: what a command may not change."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def hostile_admin() -> Iterator[FakePulsar]:
    """A broker whose runtime configuration names its cluster with a path that leaves any directory."""
    fake = FakePulsar()
    fake.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, {"clusterName": HOSTILE_CLUSTER}))
    fake.route("GET", "/admin/v2/clusters", Reply(200, [HOSTILE_CLUSTER]))
    # Should the name get through, the collect would find a broker and a report, and write.
    for path in (f"/admin/v2/brokers/{HOSTILE_CLUSTER}", "/admin/v2/brokers/x%2F..%2F..%2F..%2F..%2Foutside"):
        fake.route("GET", path, Reply(200, [fake.broker_id]))
    fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report()))
    yield fake
    fake.close()


@pytest.fixture
def planner_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The planner's home under `tmp_path/home`, its store created; the storage root at the home."""
    home = tmp_path / "home"
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(home))
    monkeypatch.delenv("PULSAR_REBALANCE_STORAGE", raising=False)
    monkeypatch.delenv("PULSAR_REBALANCE_DB_URL", raising=False)
    assert main(["db", "upgrade"]) == 0
    return home


def assert_refused_in_one_line(capsys: pytest.CaptureFixture[str], code: int, named: str) -> None:
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], captured.err


def test_a_hostile_cluster_name_from_the_admin_api_writes_nothing_anywhere(
    hostile_admin, planner_home, tmp_path, capsys
):
    capsys.readouterr()
    before = tree(tmp_path)
    code = main(["collect", "--admin-url", hostile_admin.url])
    assert_refused_in_one_line(capsys, code, repr(HOSTILE_CLUSTER))
    assert tree(tmp_path) == before
    assert not (tmp_path.parent / "outside").exists()
    assert not any(request.path.endswith("/load-report") for request in hostile_admin.requests)


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    with s3_server(BUCKET) as endpoint:
        yield endpoint


def test_a_hostile_cluster_name_leaves_the_object_store_untouched(
    hostile_admin, planner_home, s3_endpoint, tmp_path, capsys, monkeypatch
):
    for variable, value in TEST_S3_CREDENTIALS.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv(
        "PULSAR_REBALANCE_STORAGE",
        f"s3://{BUCKET}/fleet/prod?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1",
    )
    capsys.readouterr()
    before = tree(tmp_path)
    code = main(["collect", "--admin-url", hostile_admin.url])
    assert_refused_in_one_line(capsys, code, repr(HOSTILE_CLUSTER))
    assert objects(s3_endpoint, BUCKET) == []
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("route", "answer", "named"),
    [
        ("/admin/v2/brokers/fake", ["../evil:8080"], "'../evil:8080'"),
        ("/admin/v2/brokers/fake", ["evil.example/x:8080"], "'evil.example/x:8080'"),
        (
            "/admin/v2/brokers/BROKER/ownedNamespaces".replace("BROKER", "{broker}"),
            {"t/../0x00000000_0xffffffff": {}},
            "'t/../0x00000000_0xffffffff'",
        ),
    ],
)
def test_hostile_broker_ids_and_bundle_names_from_the_admin_api_are_refused(
    planner_home, tmp_path, capsys, route, answer, named
):
    fake = FakePulsar()
    try:
        fake.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, {"clusterName": "fake"}))
        fake.route("GET", "/admin/v2/brokers/fake", Reply(200, [fake.broker_id]))
        fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report()))
        fake.route("GET", route.format(broker=f"fake/{fake.broker_id}"), Reply(200, answer))
        capsys.readouterr()
        before = tree(tmp_path)
        code = main(["collect", "--admin-url", fake.url])
    finally:
        fake.close()
    assert_refused_in_one_line(capsys, code, named)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "", "nü", "a b", "x/../../outside"])
def test_names_outside_pulsars_rule_are_refused(name):
    with pytest.raises(InputError, match="invalid cluster"):
        check_name(name, "cluster")
    with pytest.raises(InputError, match="invalid namespace"):
        check_namespace(f"tenant/cluster/{name}")
    with pytest.raises(ValidationError, match="invalid cluster name"):
        ClusterSettings(name=name, admin_url="http://127.0.0.1:8080")


@pytest.mark.parametrize("name", ["prod-east", "a.b", "...", "x=y:z_1", "standalone"])
def test_names_pulsar_allows_are_accepted(name):
    assert check_name(name, "cluster") == name
    assert check_namespace(f"{name}/ns") == f"{name}/ns"


@pytest.mark.parametrize("broker_id", ["../x:8080", "a/b:8080", "h:80/", "[::1:8080", "h:8080?x"])
def test_broker_ids_that_are_not_host_and_port_are_refused(broker_id):
    with pytest.raises(InputError, match="host:webServicePort"):
        check_broker_id(broker_id)
    assert check_broker_id("[::1]:8080") == "[::1]:8080"


def test_a_cluster_named_dot_dot_in_the_settings_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTER_NAMES", "prod,..")
    code = main(["snapshots"])
    assert_refused_in_one_line(capsys, code, "PULSAR_REBALANCE_CLUSTER_NAMES")
