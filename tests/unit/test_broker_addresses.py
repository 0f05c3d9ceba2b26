"""Where each broker's own web service is reached (`broker_urls`, `broker_url_template`), the check that a mapped URL
reaches that broker, and the one-line error when a broker cannot be reached, against real local HTTP servers."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from planner.collect.admin_client import AdminAuth, AdminError, PulsarAdminClient
from planner.collect.broker_addresses import BrokerAddresses, check_template
from planner.collect.clusters import load_clusters
from planner.errors import InputError
from tests.fake_pulsar import FakePulsar, Reply, load_report

TOKEN = "eyJhbGciOiJIUzI1NiJ9.bWFwcGVkLWJyb2tlcnMtdGVzdA.qqqq"
CLUSTER = "local"
# Broker ids as Pulsar advertises them, reachable only through the mapping (nothing listens at these).
BROKER_A, BROKER_B = "10.0.0.7:8080", "10.0.0.8:8080"
LOAD_REPORT = "/admin/v2/broker-stats/load-report"


def owned_path(broker: str) -> str:
    return f"/admin/v2/brokers/{CLUSTER}/{broker}/ownedNamespaces"


@pytest.fixture
def admin():
    server = FakePulsar()
    server.route("GET", f"/admin/v2/brokers/{CLUSTER}", Reply(200, [BROKER_A, BROKER_B]))
    yield server
    server.close()


@pytest.fixture
def proxy():
    """A proxy exposing each broker under its own path, on another loopback host than the admin URL's: there each
    broker answers for itself, and redirects a question about another broker to that one, as Pulsar's brokers do."""
    server = FakePulsar(host="127.0.0.2")
    for broker, path in ((BROKER_A, "/brokers/a"), (BROKER_B, "/brokers/b")):
        server.route("GET", path + owned_path(broker), Reply(200, {}))
        for other in {BROKER_A, BROKER_B} - {broker}:
            redirect = Reply(307, headers={"Location": f"http://{other}{owned_path(other)}"})
            server.route("GET", path + owned_path(other), redirect)
        server.route("GET", path + LOAD_REPORT, Reply(200, load_report()))
        server.route("GET", path + "/admin/v2/broker-stats/topics", Reply(200, {"t/ns": {}}))
    yield server
    server.close()


def client(admin: FakePulsar, **options: object) -> PulsarAdminClient:
    options.setdefault("timeout", (1.0, 1.0))
    options.setdefault("backoff_factor", 0.01)
    return PulsarAdminClient(admin.url, **options)  # type: ignore[arg-type]


def mapped(admin: FakePulsar, proxy: FakePulsar, **options: object) -> PulsarAdminClient:
    urls = {BROKER_A: f"{proxy.url}/brokers/a/", BROKER_B: f"{proxy.url}/brokers/b"}
    return client(admin, broker_urls=urls, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the addresses ------------------------------------------------------------------------------------------------


def test_the_map_wins_over_the_template_which_wins_over_the_id():
    addresses = BrokerAddresses.of(
        "https", "https://proxy.example:443/brokers/{host}-{port}/", {BROKER_A: "https://b7.example:8443/"}
    )
    assert addresses.url(BROKER_A) == "https://b7.example:8443"
    assert addresses.source(BROKER_A) == "broker_urls"
    assert addresses.url(BROKER_B) == "https://proxy.example:443/brokers/10.0.0.8-8080"
    assert addresses.source(BROKER_B) == "broker_url_template"
    plain = BrokerAddresses.of("https", None, None)
    assert (plain.url(BROKER_A), plain.source(BROKER_A)) == ("https://10.0.0.7:8080", None)
    assert (
        BrokerAddresses.of("http", "{scheme}://{id}/x/{host}", None).url(BROKER_A) == "http://10.0.0.7:8080/x/10.0.0.7"
    )


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        ('broker_url_template = "https://{host}:{web_port}"', "broker_url_template", "unknown placeholder {web_port}"),
        ('broker_url_template = "ftp://{host}:21"', "broker_url_template", "expected an http or https URL"),
        ('broker_url_template = "https://{host!r}"', "broker_url_template", "takes no format"),
        ('broker_url_template = "https://{host"', "broker_url_template", "'https://{host'"),
        ('broker_urls = { "10.0.0.7:8080" = "10.0.0.7:8443" }', "broker_urls", "broker 10.0.0.7:8080"),
        ('broker_urls = { "10.0.0.7:8080" = "https://h:port" }', "broker_urls", "port is not a number"),
        ('broker_urls = { "10.0.0.7" = "https://h:8443" }', "broker_urls", "invalid broker id '10.0.0.7'"),
    ],
)
def test_a_bad_mapping_is_one_line_naming_the_cluster_and_the_field(tmp_path, entry, field, says):
    path = tmp_path / "clusters.toml"
    path.write_text(f'[[clusters]]\nname = "east"\nadmin_url = "https://pulsar.example:8443"\n{entry}\n')
    with pytest.raises(InputError) as raised:
        load_clusters(path)
    message = str(raised.value)
    assert "\n" not in message and "cluster east" in message and f": {field}" in message and says in message


def test_a_good_mapping_loads_and_reaches_the_client(tmp_path):
    path = tmp_path / "clusters.toml"
    path.write_text(
        '[[clusters]]\nname = "east"\nadmin_url = "https://pulsar.example:8443"\n'
        'broker_url_template = "https://{host}:8443"\nbroker_urls = { "10.0.0.7:8080" = "https://b7.example/" }\n'
    )
    (entry,) = load_clusters(path)
    addresses = entry.client().broker_addresses
    assert addresses.url(BROKER_A) == "https://b7.example" and addresses.url(BROKER_B) == "https://10.0.0.8:8443"
    assert check_template("https://{host}:8443") == "https://{host}:8443"


# --- reads through the mapping ------------------------------------------------------------------------------------


def test_only_per_broker_reads_go_to_the_mapped_url_checked_once_with_the_credentials(admin, proxy):
    with mapped(admin, proxy, auth=AdminAuth(token=TOKEN)) as pulsar:
        assert pulsar.active_brokers(CLUSTER) == [BROKER_A, BROKER_B]
        pulsar.load_report_text(BROKER_A)
        pulsar.load_report_text(BROKER_A)
        pulsar.topic_stats(BROKER_B)
    # The mapping check, once: the broker answers for itself, and redirects a question about another broker.
    assert proxy.calls[("GET", "/brokers/a" + owned_path(BROKER_A))] == 1
    assert proxy.calls[("GET", "/brokers/a" + owned_path(BROKER_B))] == 1
    assert proxy.calls[("GET", "/brokers/a" + LOAD_REPORT)] == 2
    assert proxy.calls[("GET", "/brokers/b" + owned_path(BROKER_B))] == 1
    assert [r.path for r in admin.requests] == [f"/admin/v2/brokers/{CLUSTER}"]  # cluster calls stay on the admin URL
    # The operator mapped the brokers to the proxy's host: it is trusted with the token, like the brokers.
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in proxy.requests)


def test_a_mapping_that_reaches_another_broker_is_refused_before_any_read(admin, proxy):
    other = "http://10.0.0.9:8080"
    redirect = Reply(307, headers={"Location": other + owned_path(BROKER_A)})
    proxy.route("GET", "/brokers/a" + owned_path(BROKER_A), redirect)
    with mapped(admin, proxy) as pulsar:
        pulsar.active_brokers(CLUSTER)
        for _ in range(2):
            with pytest.raises(AdminError) as raised:
                pulsar.load_report_text(BROKER_A)
            message = str(raised.value)
            assert "\n" not in message and raised.value.status == 307
            assert f"{proxy.url}/brokers/a (broker_urls) does not reach broker {BROKER_A}" in message
            assert f"redirected to {other}{owned_path(BROKER_A)}" in message
    assert proxy.calls[("GET", "/brokers/a" + LOAD_REPORT)] == 0
    assert proxy.calls[("GET", "/brokers/a" + owned_path(BROKER_A))] == 1  # a settled answer is kept


def test_a_mapping_to_a_url_that_follows_redirects_itself_is_refused(admin, proxy):
    """Pulsar's proxy follows the brokers' redirects on its /admin route: asked about any broker, it answers 200,
    and a per-broker read there is answered by whichever broker it picked."""
    proxy.route("GET", "/brokers/a" + owned_path(BROKER_B), Reply(200, {}))
    with mapped(admin, proxy) as pulsar:
        pulsar.active_brokers(CLUSTER)
        with pytest.raises(AdminError) as raised:
            pulsar.load_report_text(BROKER_A)
    message = str(raised.value)
    assert f"{proxy.url}/brokers/a (broker_urls) answers for other brokers too (it follows Pulsar's" in message
    assert f"map {BROKER_A} to its own web service" in message and "\n" not in message
    assert proxy.calls[("GET", "/brokers/a" + LOAD_REPORT)] == 0


def test_the_mapping_reaches_worker_processes_checked_by_the_parent_only(admin, proxy):
    with mapped(admin, proxy, read_processes=2) as pulsar:
        pulsar.active_brokers(CLUSTER)
        for broker in (BROKER_A, BROKER_B):
            pulsar.broker_base(broker)  # the collect's first reads check the mapping, as here
        answers = pulsar.map_in_processes([BROKER_A, BROKER_B], read_topic_stats)
    assert answers == {BROKER_A: b'{"t/ns": {}}', BROKER_B: b'{"t/ns": {}}'}
    assert proxy.calls[("GET", "/brokers/a/admin/v2/broker-stats/topics")] == 1
    assert proxy.calls[("GET", "/brokers/a" + owned_path(BROKER_A))] == 1


def read_topic_stats(pulsar: PulsarAdminClient, broker: str) -> bytes:
    return pulsar.topic_stats_body(broker)


# --- a broker that cannot be reached ------------------------------------------------------------------------------


def test_a_refused_connection_is_said_so_at_once_with_what_to_set(admin, caplog):
    port = free_port()
    broker = f"127.0.0.1:{port}"
    admin.route("GET", f"/admin/v2/brokers/{CLUSTER}", Reply(200, [broker]))
    caplog.set_level(logging.DEBUG)
    with client(admin, retries=3, backoff_factor=0.5) as pulsar:
        pulsar.active_brokers(CLUSTER)
        started = time.monotonic()
        with pytest.raises(AdminError) as raised:
            pulsar.load_report_text(broker)
    message = str(raised.value)
    assert "\n" not in message
    assert f"cluster {CLUSTER}: broker {broker} unreachable at http://{broker}: connection refused;" in message
    assert "broker_url_template or broker_urls" in message and "timed out" not in message
    assert raised.value.status is None and not raised.value.may_have_applied
    # Not retried: no back-off (0.5 s, 1 s, 2 s) and none of urllib3's "Retrying" warnings.
    assert time.monotonic() - started < 0.5
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


def test_a_name_that_does_not_resolve_names_the_mapping_tried(admin):
    with client(admin, broker_url_template="http://{host}.no-such-domain.invalid:{port}") as pulsar:
        pulsar.active_brokers(CLUSTER)
        with pytest.raises(AdminError) as raised:
            pulsar.load_report_text(BROKER_A)
    message = str(raised.value)
    url = "http://10.0.0.7.no-such-domain.invalid:8080"
    assert f"broker {BROKER_A} unreachable at {url} (from broker_url_template): name does not resolve;" in message


def test_a_read_timeout_and_a_gateway_error_are_told_apart(admin, proxy):
    proxy.route("GET", "/brokers/a" + LOAD_REPORT, Reply(200, load_report(), delay=1.5))
    proxy.route("GET", "/brokers/b" + LOAD_REPORT, Reply(502, "Bad Gateway"))
    with mapped(admin, proxy, timeout=(1.0, 0.3), retries=1) as pulsar:
        pulsar.active_brokers(CLUSTER)
        with pytest.raises(AdminError) as slow:
            pulsar.load_report_text(BROKER_A)
        with pytest.raises(AdminError) as gateway:
            pulsar.load_report_text(BROKER_B)
    assert "read timed out, retries exhausted; the planner reads each broker's own" in str(slow.value)
    assert str(gateway.value).startswith(f"GET {LOAD_REPORT} on {BROKER_B} failed (HTTP 502): cluster {CLUSTER}: ")
    assert f"unreachable at {proxy.url}/brokers/b (from broker_urls): Bad Gateway;" in str(gateway.value)


def test_a_mapped_url_that_refuses_the_credentials_is_named(admin, proxy):
    proxy.route("GET", "/brokers/b" + LOAD_REPORT, Reply(401, {"reason": "Authentication required"}))
    with mapped(admin, proxy) as pulsar:
        pulsar.active_brokers(CLUSTER)
        with pytest.raises(AdminError) as raised:
            pulsar.load_report_text(BROKER_B)
    assert raised.value.refused and raised.value.status == 401
    assert str(raised.value).endswith(
        f"(HTTP 401): cluster {CLUSTER}: broker {BROKER_B} at {proxy.url}/brokers/b (from broker_urls) refused the "
        "request: Authentication required"
    )


def test_a_connect_timeout_is_not_a_refusal():
    """A listener whose accept queue is full drops new connections' SYNs, as a firewall does."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        held = []
        for _ in range(4):  # fill the backlog (its size is rounded up by the kernel)
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            held.append(sock)
        time.sleep(0.1)
        try:
            pulsar = PulsarAdminClient(f"http://127.0.0.1:{port}", timeout=(0.3, 0.3), retries=0)
            with pulsar, pytest.raises(AdminError) as raised:
                pulsar.broker_version(f"127.0.0.1:{port}")
        finally:
            for sock in held:
                sock.close()
    assert "connect timed out" in str(raised.value) and "refused" not in str(raised.value)
    assert not raised.value.may_have_applied


# --- the Airflow connection ---------------------------------------------------------------------------------------


def test_the_pulsar_connection_takes_the_mapping_in_its_extras(monkeypatch):
    from planner.airflow.hooks import PulsarAdminHook

    extra = {"broker_url_template": "https://{host}:8443", "broker_urls": {BROKER_A: "https://b7.example/"}}
    connection = {"conn_type": "pulsar", "host": "https://pulsar.example:8443", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_PULSAR_EAST", json.dumps(connection))
    addresses = PulsarAdminHook.for_cluster("east").get_conn().broker_addresses
    assert (addresses.url(BROKER_A), addresses.url(BROKER_B)) == ("https://b7.example", "https://10.0.0.8:8443")
    bad = {**connection, "extra": {"broker_url_template": "https://{hostname}:8443"}}
    monkeypatch.setenv("AIRFLOW_CONN_PULSAR_EAST", json.dumps(bad))
    with pytest.raises(InputError) as raised:
        PulsarAdminHook.for_cluster("east").cluster_settings()
    message = str(raised.value)
    assert "connection pulsar_east" in message and "broker_url_template" in message and "{hostname}" in message
