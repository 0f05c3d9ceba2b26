"""Admin client behaviour under faults a real broker cannot be made to produce (fault-injecting server)."""

from __future__ import annotations

import json
import logging

import pytest

from planner.collect.admin_client import AdminAuth, AdminError, PulsarAdminClient
from tests.fake_pulsar import FakePulsar, Reply, load_report

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2VuLWZvci10ZXN0cw.zzzz"


@pytest.fixture
def fake():
    server = FakePulsar()
    yield server
    server.close()


def client_for(server, **options):
    options.setdefault("timeout", (1.0, 1.0))
    options.setdefault("backoff_factor", 0.01)
    return PulsarAdminClient(server.url, **options)


def test_5xx_then_success_is_retried(fake):
    fake.route("GET", "/admin/v2/brokers/local", Reply(503, {"reason": "busy"}), Reply(500), Reply(200, ["a:1"]))
    assert client_for(fake).active_brokers("local") == ["a:1"]
    assert fake.calls[("GET", "/admin/v2/brokers/local")] == 3


def test_persistent_5xx_gives_up_after_the_bounded_retries(fake):
    fake.route("GET", "/admin/v2/brokers/local", Reply(503, {"reason": "metadata store unavailable"}))
    with pytest.raises(AdminError) as raised:
        client_for(fake, retries=2).active_brokers("local")
    assert raised.value.status == 503
    assert "metadata store unavailable" in str(raised.value) and fake.broker_id in str(raised.value)
    assert fake.calls[("GET", "/admin/v2/brokers/local")] == 3


def test_actions_are_not_resent_after_a_5xx(fake):
    path = "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/unload"
    fake.route("PUT", path, Reply(500, {"reason": "boom"}))
    with pytest.raises(AdminError):
        client_for(fake).unload_bundle("t/ns", "0x00000000_0x80000000", "127.0.0.1:8081")
    assert fake.calls[("PUT", path)] == 1


@pytest.mark.parametrize(
    ("reply", "limit"),
    [
        (Reply(200, "x" * 5000), 1000),  # a 2xx whose body is over the limit (declared)
        (Reply(200, "x" * 5000, omit_length=True), 1000),  # ... found over it while reading
        (Reply(200, "{}", headers={"Content-Length": "10"}, omit_length=True), 10**6),  # cut short after 2 of 10
    ],
)
def test_an_error_after_the_status_line_may_have_applied(fake, reply, limit):
    """The broker answered: whatever fails after its status line, a 2xx included, leaves the action in doubt
    (reconciled, never taken as not done and resent)."""
    path = "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/unload"
    fake.route("PUT", path, reply)
    with pytest.raises(AdminError) as raised:
        client_for(fake, max_response_bytes=limit).unload_bundle("t/ns", "0x00000000_0x80000000", "127.0.0.1:8081")
    assert raised.value.may_have_applied, str(raised.value)
    assert fake.calls[("PUT", path)] == 1


def test_timeout_is_a_clear_error_naming_broker_and_endpoint(fake):
    fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(), delay=1.5))
    with pytest.raises(AdminError) as raised:
        client_for(fake, timeout=(0.5, 0.3), retries=1).load_report_text(fake.broker_id)
    message = str(raised.value)
    assert "timed out" in message and "/admin/v2/broker-stats/load-report" in message and fake.broker_id in message


def test_redirect_loop_is_bounded_and_reported(fake):
    fake.route(
        "GET",
        "/admin/v2/brokers/leaderBroker",
        Reply(307, headers={"Location": "{self}/admin/v2/brokers/leaderBroker"}),
    )
    with pytest.raises(AdminError, match="more than 3 redirects"):
        client_for(fake, max_redirects=3).leader_broker()
    assert fake.calls[("GET", "/admin/v2/brokers/leaderBroker")] == 4


def test_307_is_followed_with_the_same_method_body_and_credentials():
    entry, owner = FakePulsar(), FakePulsar()
    try:
        path = "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/split"
        entry.route("PUT", path, Reply(307, headers={"Location": f"{owner.url}{path}?unload=false"}))
        owner.route("PUT", path, Reply(204))
        client = client_for(entry, auth=AdminAuth(token=TOKEN))
        client.split_bundle(
            "t/ns", "0x00000000_0x80000000", algorithm="specified_positions_divide", positions=[0x40000000]
        )
        forwarded = owner.requests[-1]
        assert forwarded.method == "PUT"
        assert json.loads(forwarded.body) == [0x40000000]
        assert forwarded.headers["Authorization"] == f"Bearer {TOKEN}"
    finally:
        entry.close()
        owner.close()


def test_malformed_json_names_broker_and_endpoint(fake):
    fake.route("GET", "/admin/v2/brokers/local", Reply(200, "[not json"))
    with pytest.raises(AdminError) as raised:
        client_for(fake).active_brokers("local")
    assert "malformed JSON" in str(raised.value) and "/admin/v2/brokers/local" in str(raised.value)
    assert fake.broker_id in str(raised.value)


def test_basic_auth_and_token_are_sent_but_never_shown(fake, caplog):
    fake.route("GET", "/admin/v2/tenants", Reply(401, {"reason": "Unauthorized"}))
    auth = AdminAuth(token=TOKEN)
    with caplog.at_level(logging.DEBUG), pytest.raises(AdminError) as raised:
        client_for(fake, auth=auth).tenants()
    assert fake.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in str(raised.value) and TOKEN not in repr(auth) and TOKEN not in caplog.text
    basic = AdminAuth(username="admin", password="hunter2-secret")
    fake.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
    assert client_for(fake, auth=basic).tenants() == ["public"]
    assert fake.requests[-1].headers["Authorization"].startswith("Basic ")
    assert "hunter2-secret" not in repr(basic)


def test_topic_lookup_paths_and_bundle_answer(fake):
    fake.route("GET", "/lookup/v2/topic/persistent/t/ns/my%20topic/bundle", Reply(200, "0x40000000_0x80000000"))
    assert client_for(fake).topic_bundle("persistent://t/ns/my topic") == "0x40000000_0x80000000"


def test_concurrent_map_returns_failures_as_values(fake):
    fake.route("GET", "/admin/v2/namespaces/t/a/bundles", Reply(200, {"boundaries": ["0x00000000", "0xffffffff"]}))
    fake.route("GET", "/admin/v2/namespaces/t/b/bundles", Reply(404, {"reason": "Namespace does not exist"}))
    client = client_for(fake)
    found = client.map_concurrently(["t/a", "t/b"], client.bundle_boundaries)
    assert found["t/a"] == [0, 0xFFFFFFFF]
    assert isinstance(found["t/b"], AdminError) and found["t/b"].status == 404


def test_a_cluster_without_isolation_policies_has_none_rather_than_an_error(fake):
    """Pulsar answers 404 until a cluster's first isolation policy exists; the executor checks fences before every
    unload, so that must read as no policy, not as a cluster it cannot read."""
    path = "/admin/v2/clusters/c1/namespaceIsolationPolicies"
    fake.route("GET", path, Reply(404, {"reason": "NamespaceIsolationPolicies for cluster c1 does not exist"}))
    assert client_for(fake).isolation_policies("c1") == {}
    fake.route("GET", path, Reply(500, {"reason": "metadata store down"}))
    with pytest.raises(AdminError):
        client_for(fake).isolation_policies("c1")


def test_a_token_stays_masked_in_http_library_logs_after_an_equal_clients_auth_is_collected(caplog):
    """Two clients with equal credentials: when the first is gone, the second's token is still masked in urllib3's
    records (a value-keyed weak set once forgot it, and a full test run logged a token)."""
    import gc

    token = "eyJ.masked-after-collection.sig"
    first = PulsarAdminClient("http://127.0.0.1:1", auth=AdminAuth(token=token))
    second = PulsarAdminClient("http://127.0.0.1:1", auth=AdminAuth(token=token))
    del first
    gc.collect()
    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        logging.getLogger("urllib3.connectionpool").warning("Retrying: /admin/v2/tenants?token=%s", token)
    assert token not in caplog.text and "token=***" in caplog.text
    second.close()
