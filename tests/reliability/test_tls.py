"""TLS verification of the admin client against a local HTTPS server whose certificate a private CA signed,
and where the admin token may (Authorization header) and may not (errors, logs, URLs, downgrades) appear."""

from __future__ import annotations

import base64
import logging

import certifi
import pytest
from urllib3.exceptions import InsecureRequestWarning

from planner.collect.admin_client import AdminAuth, AdminError, PulsarAdminClient
from planner.collect.clusters import load_clusters
from planner.errors import InputError
from tests.fake_pulsar import FakePulsar, Reply

pytestmark = pytest.mark.reliability

TOKEN = "eyJhbGciOiJIUzI1NiJ9.cmVsaWFiaWxpdHktdGxzLXRlc3Q.c2VjcmV0LXNpZ25hdHVyZQ"


def client_for(server: FakePulsar, **options) -> PulsarAdminClient:
    options.setdefault("timeout", (2.0, 2.0))
    options.setdefault("backoff_factor", 0.01)
    options.setdefault("retries", 1)
    return PulsarAdminClient(server.url, **options)


def test_the_server_is_refused_without_the_ca_file_and_nothing_is_sent(tls_fake):
    tls_fake.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
    with client_for(tls_fake, auth=AdminAuth(token=TOKEN)) as client, pytest.raises(AdminError) as raised:
        client.tenants()
    message = str(raised.value)
    assert "TLS verification failed" in message and "certificate" in message and "ca_file" in message
    assert tls_fake.broker_id in message and "/admin/v2/tenants" in message
    # The handshake failed before any HTTP request, so the token never left the client.
    assert tls_fake.requests == []


def test_the_server_is_accepted_with_the_ca_file(tls_fake, private_ca):
    tls_fake.route("GET", "/admin/v2/tenants", Reply(200, ["public", "sample"]))
    with client_for(tls_fake, ca_file=str(private_ca.ca_file)) as client:
        assert client.tenants() == ["public", "sample"]


def test_verification_can_be_turned_off_and_says_so_on_every_request(tls_fake):
    tls_fake.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
    with client_for(tls_fake, verify_tls=False) as client, pytest.warns(InsecureRequestWarning):
        assert client.tenants() == ["public"]


def test_the_ca_file_wins_over_requests_ca_bundle_in_the_environment(tls_fake, private_ca, monkeypatch):
    # requests lets REQUESTS_CA_BUNDLE replace a session's CA file; the configured one must still be used.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())
    tls_fake.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
    with client_for(tls_fake, ca_file=str(private_ca.ca_file)) as client:
        assert client.tenants() == ["public"]
    with client_for(tls_fake) as client, pytest.raises(AdminError, match="TLS verification failed"):
        client.tenants()


def test_cluster_settings_verify_by_default_and_pass_the_ca_file(tls_fake, private_ca, tmp_path, monkeypatch):
    monkeypatch.setenv("RELIABILITY_TLS_TOKEN", TOKEN)
    clusters_toml = tmp_path / "clusters.toml"
    clusters_toml.write_text(
        f"""
[[clusters]]
name = "default-verify"
admin_url = "{tls_fake.url}"
token_env = "RELIABILITY_TLS_TOKEN"

[[clusters]]
name = "private-ca"
admin_url = "{tls_fake.url}"
token_env = "RELIABILITY_TLS_TOKEN"
ca_file = "{private_ca.ca_file}"

[[clusters]]
name = "unverified"
admin_url = "{tls_fake.url}"
verify_tls = false
"""
    )
    tls_fake.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
    settings = {cluster.name: cluster for cluster in load_clusters(clusters_toml)}
    assert settings["default-verify"].verify_tls is True and settings["default-verify"].ca_file is None
    with settings["default-verify"].client() as client, pytest.raises(AdminError, match="TLS verification failed"):
        client.tenants()
    with settings["private-ca"].client() as client:
        assert client.tenants() == ["public"]
    assert tls_fake.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"
    with settings["unverified"].client() as client, pytest.warns(InsecureRequestWarning):
        assert client.tenants() == ["public"]
    assert TOKEN not in repr(settings["private-ca"]) and TOKEN not in str(settings["private-ca"].auth())


def test_the_token_travels_only_in_the_authorization_header(tls_fake, private_ca):
    tls_fake.route("GET", "/admin/v2/brokers/local", Reply(200, ["127.0.0.1:8080"]))
    tls_fake.route("PUT", "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/split", Reply(204))
    with client_for(tls_fake, auth=AdminAuth(token=TOKEN), ca_file=str(private_ca.ca_file)) as client:
        client.active_brokers("local")
        client.split_bundle("t/ns", "0x00000000_0x80000000", positions=[0x40000000])
    assert len(tls_fake.requests) == 2
    for seen in tls_fake.requests:
        assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
        others = {name: value for name, value in seen.headers.items() if name.lower() != "authorization"}
        assert TOKEN not in repr(others) and TOKEN not in seen.path + seen.query
        assert TOKEN.encode() not in seen.body


@pytest.mark.parametrize(
    "reply",
    [
        Reply(401, {"reason": f"HTTP 401 Unauthorized: token {TOKEN} is expired"}),
        Reply(403, f"Forbidden; request headers were Authorization: Bearer {TOKEN}"),
        Reply(500, {"reason": "x" * 290 + TOKEN}),
        Reply(200, "{not json " + TOKEN),
        Reply(200, "[" * 10_000 + TOKEN),
        Reply(200, ["public"], delay=3.0),
    ],
    ids=["401-echoes-token", "403-echoes-header", "500-token-at-the-cut", "malformed", "deep", "timeout"],
)
def test_the_token_is_in_no_error_and_no_log_line_when_a_call_fails(tls_fake, private_ca, caplog, reply):
    tls_fake.route("GET", "/admin/v2/tenants", reply)
    auth = AdminAuth(token=TOKEN)
    with (
        caplog.at_level(logging.DEBUG),
        client_for(tls_fake, auth=auth, ca_file=str(private_ca.ca_file), timeout=(1.0, 0.5), retries=0) as client,
        pytest.raises(AdminError) as raised,
    ):
        client.tenants()
    logging.getLogger("reliability").error("call failed: %s (%r)", raised.value, raised.value)
    assert TOKEN not in str(raised.value) and TOKEN not in repr(raised.value)
    assert TOKEN not in caplog.text
    # Not even a prefix survives the 300-character cut of error reasons.
    assert TOKEN[:12] not in str(raised.value)


def test_a_tls_failure_after_a_redirect_whose_url_carries_the_token_shows_it_nowhere(tls_fake, private_ca, caplog):
    # The verified server has the token; it redirects to a server the client does not trust, with the token in
    # the URL. The failure must not repeat it: not in the error, not in a log line (urllib3's included).
    untrusted = FakePulsar(ssl_context=tls_fake_context(private_ca), host="127.0.0.2")
    try:
        # 127.0.0.2: the certificate names 127.0.0.1 and localhost, so the handshake fails there.
        location = f"{untrusted.url}/admin/v2/tenants?token={TOKEN}"
        tls_fake.route("GET", "/admin/v2/tenants", Reply(307, headers={"Location": location}))
        client = client_for(tls_fake, auth=AdminAuth(token=TOKEN), ca_file=str(private_ca.ca_file))
        with caplog.at_level(logging.DEBUG), client, pytest.raises(AdminError) as raised:
            client.tenants()
        logging.getLogger("reliability").error("%s", raised.value)
    finally:
        untrusted.close()
    assert tls_fake.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"  # the token was in play
    assert TOKEN not in caplog.text and TOKEN not in str(raised.value) and TOKEN[:12] not in str(raised.value)


def tls_fake_context(private_ca):
    return private_ca.server_context()


def test_basic_credentials_echoed_base64_are_masked_too(tls_fake, private_ca):
    password = "hunter2-reliability-secret"
    encoded = base64.b64encode(f"admin:{password}".encode()).decode()
    tls_fake.route("GET", "/admin/v2/tenants", Reply(401, {"reason": f"bad credentials Basic {encoded}"}))
    auth = AdminAuth(username="admin", password=password)
    client = client_for(tls_fake, auth=auth, ca_file=str(private_ca.ca_file))
    with client, pytest.raises(AdminError) as raised:
        client.tenants()
    assert encoded not in str(raised.value) and password not in str(raised.value)


def test_a_redirect_from_https_to_http_drops_the_token(tls_fake, private_ca):
    plain = FakePulsar()
    try:
        plain.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
        tls_fake.route("GET", "/admin/v2/tenants", Reply(307, headers={"Location": f"{plain.url}/admin/v2/tenants"}))
        with client_for(tls_fake, auth=AdminAuth(token=TOKEN), ca_file=str(private_ca.ca_file)) as client:
            assert client.tenants() == ["public"]
        assert tls_fake.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"
        assert "Authorization" not in plain.requests[-1].headers
    finally:
        plain.close()


def test_a_redirect_to_a_host_that_is_neither_the_admin_url_nor_a_broker_gets_no_credentials(caplog):
    admin, elsewhere = FakePulsar(), FakePulsar(host="127.0.0.2")
    try:
        elsewhere.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
        admin.route("GET", "/admin/v2/tenants", Reply(307, headers={"Location": f"{elsewhere.url}/admin/v2/tenants"}))
        with client_for(admin, auth=AdminAuth(token=TOKEN)) as client:
            assert client.tenants() == ["public"]
    finally:
        admin.close()
        elsewhere.close()
    assert admin.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"
    assert "Authorization" not in elsewhere.requests[-1].headers
    assert "credentials dropped" in caplog.text and TOKEN not in caplog.text


def test_a_redirect_to_an_active_broker_keeps_the_credentials():
    admin, broker = FakePulsar(), FakePulsar(host="127.0.0.2")
    try:
        admin.route("GET", "/admin/v2/brokers/c1", Reply(200, [broker.broker_id]))
        admin.route("GET", "/admin/v2/tenants", Reply(307, headers={"Location": f"{broker.url}/admin/v2/tenants"}))
        broker.route("GET", "/admin/v2/tenants", Reply(200, ["public"]))
        with client_for(admin, auth=AdminAuth(token=TOKEN)) as client:
            assert client.active_brokers("c1") == [broker.broker_id]
            assert client.tenants() == ["public"]
            # Per-broker calls go straight to the broker, with the credentials.
            broker.route("GET", "/admin/v2/broker-stats/topics", Reply(200, {}))
            assert client.topic_stats(broker.broker_id) == {}
    finally:
        admin.close()
        broker.close()
    assert [seen.headers.get("Authorization") for seen in broker.requests] == [f"Bearer {TOKEN}"] * 2


def test_credentials_never_go_over_plain_http_to_a_host_that_is_not_loopback(monkeypatch):
    def no_connection(*_args, **_kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr("socket.create_connection", no_connection)
    monkeypatch.setattr("urllib3.util.connection.create_connection", no_connection)
    with pytest.raises(InputError, match="allow_insecure_http_credentials"):
        PulsarAdminClient("http://10.255.255.1:8080", auth=AdminAuth(token=TOKEN))
    with pytest.raises(InputError, match="plain http"):
        PulsarAdminClient("http://pulsar.example:8080", auth=AdminAuth(username="u", password="p"))
    # Without credentials there is nothing to protect; with the explicit setting the operator chose it.
    assert not PulsarAdminClient("http://10.255.255.1:8080").credentials_allowed("http://10.255.255.1:8080/x")
    allowed = PulsarAdminClient(
        "http://10.255.255.1:8080", auth=AdminAuth(token=TOKEN), allow_insecure_http_credentials=True
    )
    assert allowed.credentials_allowed("http://10.255.255.1:8080/admin/v2/tenants")
    assert not allowed.credentials_allowed("http://10.255.255.2:8080/admin/v2/tenants")
    # A broker the cluster lists on another host, over plain http, is refused the token too.
    https = PulsarAdminClient("https://127.0.0.1:8443", auth=AdminAuth(token=TOKEN))
    https._trusted_hosts.add("10.255.255.3")
    assert https.credentials_allowed("https://10.255.255.3:8443/x")
    assert not https.credentials_allowed("http://10.255.255.3:8080/x")
