"""OAuth2 client credentials and token files in the admin client: the issuer's metadata read for its token endpoint,
the form Pulsar's clients post, tokens refreshed before they expire (one fetch for 64 threads), one renewal and retry
on a 401, worker processes fetching their own, clear one-line errors for an unreachable or refusing issuer and a bad
key file, every secret masked; a token file read again when it is rotated. An issuer and a broker on loopback stand
in for Keycloak and Pulsar here (tests/integration/test_oauth2_cluster.py runs the real ones)."""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from planner.collect import oauth2
from planner.collect.admin_client import AdminAuth, AdminError, PulsarAdminClient
from planner.collect.clusters import ClusterSettings, load_clusters
from planner.collect.oauth2 import OAuth2ClientCredentials, OAuth2Tokens
from planner.errors import InputError

SECRET = "client-secret-9f8e7d"


class Issuer:
    """An OAuth2 issuer and a Pulsar admin endpoint in one loopback server: tokens `access-N-<nonce>` that live
    `expires_in` seconds, and `/admin/v2/clusters` answering 200 only to a token in `accepted` (all by default)."""

    def __init__(self, expires_in: int | None = 300, fetch_delay: float = 0.0) -> None:
        self.expires_in = expires_in
        self.fetch_delay = fetch_delay
        self.issued: list[str] = []
        self.forms: list[dict[str, str]] = []
        self.seen_tokens: list[str] = []
        self.refuse_client: str | None = None  # an error code the token endpoint answers instead
        self.accepted: set[str] | None = None
        self.revoked: set[str] = set()
        self.echo_token = False  # the broker's 401 repeats the token it got (as some proxies do)
        self.on_refuse: Callable[[], None] = lambda: None
        issuer = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _send(self, status: int, document: object) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == "/realms/test/.well-known/openid-configuration":
                    self._send(200, {"issuer": issuer.url, "token_endpoint": f"{issuer.base}/realms/test/token"})
                elif path == "/admin/v2/clusters":
                    token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    issuer.seen_tokens.append(token)
                    accepted = issuer.accepted is None or token in issuer.accepted
                    if token in issuer.issued and accepted and token not in issuer.revoked:
                        self._send(200, ["test"])
                    else:
                        issuer.on_refuse()
                        self._send(401, {"reason": f"token {token} refused" if issuer.echo_token else "refused"})
                else:
                    self._send(404, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {key: values[0] for key, values in parse_qs(self.rfile.read(length).decode()).items()}
                issuer.forms.append(form)
                time.sleep(issuer.fetch_delay)
                if issuer.refuse_client or form.get("client_secret") != SECRET:
                    self._send(401, {"error": "invalid_client", "error_description": "Invalid client credentials"})
                    return
                with lock:
                    token = f"access-{len(issuer.issued) + 1}-{os.urandom(4).hex()}"
                    issuer.issued.append(token)
                answer: dict[str, object] = {"access_token": token, "token_type": "Bearer"}
                if issuer.expires_in is not None:
                    answer["expires_in"] = issuer.expires_in
                self._send(200, answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.base}/realms/test"

    def credentials(self, **options: object) -> OAuth2ClientCredentials:
        values: dict = {"client_id": "planner", "client_secret": SECRET, "audience": "pulsar", "scope": "admin"}
        return OAuth2ClientCredentials(issuer_url=self.url, **(values | options))


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _client(issuer: Issuer, **options: object) -> PulsarAdminClient:
    return PulsarAdminClient(issuer.base, auth=AdminAuth(oauth2=issuer.credentials(**options)), retries=0)


def test_the_token_endpoint_comes_from_the_issuer_metadata_and_gets_pulsars_form(issuer):
    with _client(issuer) as client:
        assert client.get_text("/admin/v2/clusters") == '["test"]'
    assert issuer.forms == [
        {
            "grant_type": "client_credentials",
            "client_id": "planner",
            "client_secret": SECRET,
            "audience": "pulsar",
            "scope": "admin",
        }
    ]
    assert issuer.seen_tokens == issuer.issued[:1]


def test_a_key_file_is_read_at_every_fetch_and_may_name_the_issuer(issuer, tmp_path):
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps({"type": "client_credentials", "client_id": "from-file", "client_secret": SECRET}))
    (tmp_path / "clusters.toml").write_text(
        f'[[clusters]]\nname = "managed"\nadmin_url = "{issuer.base}"\n'
        f'[clusters.oauth2]\nissuer_url = "{issuer.url}"\ncredentials_file = "{key_file}"\n'
    )
    [cluster] = load_clusters(tmp_path / "clusters.toml")
    tokens = cluster.auth().tokens
    assert isinstance(tokens, OAuth2Tokens)
    tokens.token()
    assert issuer.forms[-1]["client_id"] == "from-file" and "audience" not in issuer.forms[-1]
    # The issuer from the key file (Pulsar's KeyFile has issuer_url).
    key_file.write_text(json.dumps({"client_id": "rotated", "client_secret": SECRET, "issuer_url": issuer.url}))
    settings = ClusterSettings(name="managed", admin_url=issuer.base, oauth2={"credentials_file": key_file})
    tokens = settings.auth().tokens
    assert isinstance(tokens, OAuth2Tokens) and tokens.credentials.issuer_url == issuer.url
    tokens.token()
    assert issuer.forms[-1]["client_id"] == "rotated"


def test_a_token_is_refreshed_before_it_expires():
    now = [1000.0]
    server = Issuer(expires_in=100)
    try:
        tokens = OAuth2Tokens(server.credentials(), clock=lambda: now[0])
        first = tokens.token()
        now[0] += 89  # under 90 % of its lifetime: kept
        assert tokens.token() == first and tokens.fetches == 1
        now[0] += 2  # past 90 %: a new one, before the old one expires
        second = tokens.token()
        assert second != first and tokens.fetches == 2 and server.issued == [first, second]
    finally:
        server.server.shutdown()


def test_a_client_sends_the_refreshed_token_once_the_first_is_due(issuer):
    issuer.expires_in = 1
    with _client(issuer) as client:
        client.get_text("/admin/v2/clusters")
        time.sleep(1.0)
        client.get_text("/admin/v2/clusters")
    assert len(issuer.issued) == 2 and issuer.seen_tokens == issuer.issued


def test_64_threads_wait_for_one_fetch():
    server = Issuer(fetch_delay=0.3)
    try:
        with PulsarAdminClient(server.base, auth=AdminAuth(oauth2=server.credentials()), retries=0) as client:
            answers = client.map_concurrently(
                [str(i) for i in range(64)], lambda _: client.get_text("/admin/v2/clusters")
            )
        assert set(answers.values()) == {'["test"]'} and len(server.issued) == 1
    finally:
        server.server.shutdown()


def test_a_401_renews_the_token_once_and_retries(issuer, monkeypatch):
    with _client(issuer) as client:
        client.get_text("/admin/v2/clusters")
        first = issuer.issued[0]
        # The broker no longer takes the first token (expired early, revoked), which is old enough to be renewed.
        issuer.revoked.add(first)
        monkeypatch.setattr(oauth2, "MIN_TOKEN_AGE_FOR_RENEWAL", 0.0)
        assert client.get_text("/admin/v2/clusters") == '["test"]'
        assert len(issuer.issued) == 2 and issuer.seen_tokens == [first, first, issuer.issued[1]]
        # A token fetched moments ago and refused is a refusal of the role: no new fetch, one request, no loop.
        monkeypatch.setattr(oauth2, "MIN_TOKEN_AGE_FOR_RENEWAL", 10.0)
        issuer.revoked.add(issuer.issued[1])
        with pytest.raises(AdminError, match="HTTP 401") as refused:
            client.get_text("/admin/v2/clusters")
        assert refused.value.refused and len(issuer.issued) == 2 and len(issuer.seen_tokens) == 4


def test_issuer_failures_are_one_line_errors_naming_it_without_the_secret(issuer, tmp_path):
    with (
        PulsarAdminClient(
            issuer.base,
            auth=AdminAuth(oauth2=OAuth2ClientCredentials("http://127.0.0.1:1/realms/x", "planner", SECRET)),
            retries=0,
        ) as client,
        pytest.raises(AdminError) as unreachable,
    ):
        client.get_text("/admin/v2/clusters")
    assert "OAuth2 issuer http://127.0.0.1:1/realms/x unreachable: connection refused" in str(unreachable.value)
    with _client(issuer, client_secret="wrong-secret") as client, pytest.raises(AdminError) as refused:
        client.get_text("/admin/v2/clusters")
    message = str(refused.value)
    assert "refused client 'planner' (HTTP 401: invalid_client: Invalid client credentials)" in message
    assert "\n" not in message and "wrong-secret" not in message and not refused.value.refused
    # A bad key file is bad input (exit 2), named with the cluster and the field.
    key_file = tmp_path / "key.json"
    for content, expected in (
        ("{not json", "not JSON"),
        (json.dumps({"client_id": "p"}), "client_secret is missing"),
        (json.dumps({"type": "jwt_bearer", "client_id": "p", "client_secret": "s"}), "type must be"),
    ):
        key_file.write_text(content)
        settings = ClusterSettings(
            name="managed", admin_url=issuer.base, oauth2={"issuer_url": issuer.url, "credentials_file": key_file}
        )
        with pytest.raises(InputError, match=f"cluster managed: oauth2.credentials_file: .*{expected}"):
            settings.auth()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            'token_env = "T"\n[clusters.oauth2]\nissuer_url = "http://127.0.0.1:1"\ncredentials_file = "k"',
            "token_env and oauth2",
        ),
        ('username = "u"\n[clusters.oauth2]\ncredentials_file = "k"', "username and oauth2"),
        ('token_env = "T"\ntoken_file = "/run/t"', "one kind of auth per cluster: token_env and token_file given"),
        ('[clusters.oauth2]\nissuer_url = "http://127.0.0.1:1"\nclient_id = "p"', "oauth2: client_id needs one secret"),
        ('[clusters.oauth2]\ncredentials_file = "k"\nclient_id = "p"', "oauth2: give credentials_file or client_id"),
        ('[clusters.oauth2]\nclient_id = "p"\nclient_secret_env = "S"', "oauth2: issuer_url is required"),
        ('[clusters.oauth2]\nissuer_url = "http://h"\ncredentials_file = "k"\nscopes = "x"', r"oauth2.scopes: Extra"),
    ],
)
def test_bad_auth_combinations_are_one_line_input_errors_naming_cluster_and_field(tmp_path, entry, expected):
    (tmp_path / "clusters.toml").write_text(f'[[clusters]]\nname = "east"\nadmin_url = "https://h:8443"\n{entry}\n')
    with pytest.raises(InputError, match=f"cluster east in .*: {expected}") as error:
        load_clusters(tmp_path / "clusters.toml")
    assert "\n" not in str(error.value)


def test_the_client_secret_goes_from_its_environment_variable_and_never_plain_http_elsewhere(monkeypatch):
    oauth2 = {"issuer_url": "http://idp.example/realms/x", "client_id": "p", "client_secret_env": "PLANNER_SECRET"}
    settings = ClusterSettings(name="east", admin_url="https://h:8443", oauth2=oauth2)
    with pytest.raises(InputError, match="cluster east: environment variable PLANNER_SECRET"):
        settings.auth()
    monkeypatch.setenv("PLANNER_SECRET", SECRET)
    with pytest.raises(InputError, match=r"cluster east: oauth2.issuer_url .* plain http"):
        settings.auth()
    allowed = ClusterSettings(
        name="east", admin_url="https://h:8443", oauth2=oauth2, allow_insecure_http_credentials=True
    )
    assert allowed.auth().oauth2 == OAuth2ClientCredentials("http://idp.example/realms/x", "p", SECRET)


def test_the_client_secret_and_every_token_fetched_are_masked(issuer, caplog):
    issuer.echo_token = True
    auth = AdminAuth(oauth2=issuer.credentials())
    with PulsarAdminClient(issuer.base, auth=auth, retries=0) as client:
        client.get_text("/admin/v2/clusters")
        issuer.accepted = set()
        with pytest.raises(AdminError) as refused:
            client.get_text("/admin/v2/clusters")
        token = issuer.issued[0]
        assert "token *** refused" in str(refused.value) and token not in str(refused.value)
        # A record of the HTTP libraries (urllib3 logs URLs when it retries) passes the secrets filter.
        with caplog.at_level(logging.DEBUG, logger="urllib3.connectionpool"):
            logging.getLogger("urllib3.connectionpool").warning("retrying /x?t=%s&s=%s", token, SECRET)
        assert caplog.records[-1].getMessage() == "retrying /x?t=***&s=***"
    for shown in (
        repr(auth),
        repr(auth.oauth2),
        repr(auth.tokens),
        str(
            ClusterSettings(
                name="e",
                admin_url="https://h:1",
                oauth2={"issuer_url": issuer.url, "client_id": "p", "client_secret": SECRET},
            )
        ),
    ):
        assert SECRET not in shown and token not in shown, shown
    # What crosses to a worker process is the configuration: never a token fetched here.
    assert token.encode() not in pickle.dumps(auth)


def _first_token(client: PulsarAdminClient, key: str) -> str:
    tokens = client._auth.tokens
    assert isinstance(tokens, OAuth2Tokens)
    client.get_text("/admin/v2/clusters")
    return f"{os.getpid()} {tokens.fetches}"


def test_worker_processes_fetch_tokens_of_their_own(issuer):
    with PulsarAdminClient(issuer.base, auth=AdminAuth(oauth2=issuer.credentials()), retries=0, read_processes=2) as c:
        answers = c.map_in_processes(["a", "b", "c", "d"], _first_token)
    workers = {str(answer).split()[0] for answer in answers.values()}
    assert len(workers) == 2 and str(os.getpid()) not in workers
    # Each worker fetched one token (its first request), the parent none.
    assert len(issuer.issued) == 2 and set(issuer.seen_tokens) == set(issuer.issued)


def _rotate(path: Path, token: str) -> None:
    """As Kubernetes updates a mounted secret: a new file swapped in."""
    temporary = path.with_suffix(".new")
    temporary.write_text(token + "\n")
    os.replace(temporary, path)


def test_a_token_file_is_read_again_when_it_is_rotated(issuer, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("")
    settings = ClusterSettings(name="east", admin_url=issuer.base, token_file=token_file)
    with pytest.raises(InputError, match=r"cluster east: token_file .* is empty"):
        settings.auth()
    issuer.issued += ["file-token-1", "file-token-2", "file-token-3"]
    _rotate(token_file, "file-token-1")
    with settings.client() as client:
        client.get_text("/admin/v2/clusters")
        _rotate(token_file, "file-token-2")
        client.get_text("/admin/v2/clusters")
        # Rewritten in place, same size: its modification time tells.
        time.sleep(0.01)
        token_file.write_text("file-token-3\n")
        client.get_text("/admin/v2/clusters")
        # Gone for a moment (a rotation under way): the last token is sent.
        token_file.unlink()
        client.get_text("/admin/v2/clusters")
        assert issuer.seen_tokens == ["file-token-1", "file-token-2", "file-token-3", "file-token-3"]
        # Every token read is masked, the old ones too.
        assert client._auth.redact("file-token-1 file-token-3") == "*** ***"


def test_a_401_reads_the_token_file_again_and_retries(issuer, tmp_path):
    token_file = tmp_path / "token"
    _rotate(token_file, "old-token")
    issuer.issued += ["old-token", "new-token"]
    issuer.accepted = {"new-token"}
    with PulsarAdminClient(issuer.base, auth=AdminAuth(token_file=str(token_file)), retries=0) as client:
        # Refused, the file unchanged: one request, no retry.
        with pytest.raises(AdminError, match="HTTP 401"):
            client.get_text("/admin/v2/clusters")
        assert issuer.seen_tokens == ["old-token"]
        # Rotated while the broker refused the old token: sent once more, with the new one.
        issuer.on_refuse = lambda: _rotate(token_file, "new-token")
        assert client.get_text("/admin/v2/clusters") == '["test"]'
    assert issuer.seen_tokens == ["old-token", "old-token", "new-token"]


def test_the_pulsar_connection_takes_oauth2_and_a_token_file(tmp_path, monkeypatch):
    from planner.airflow.hooks import PulsarAdminHook

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))

    def connection(name: str, **fields: object) -> PulsarAdminHook:
        monkeypatch.setenv(f"AIRFLOW_CONN_PULSAR_{name.upper()}", json.dumps({"conn_type": "pulsar", **fields}))
        return PulsarAdminHook.for_cluster(name)

    extra = {"auth": "oauth2", "issuer_url": "https://idp.example/realms/x", "audience": "pulsar", "scope": "admin"}
    hook = connection("managed", host="https://h:8443", login="planner", password=SECRET, extra=extra)
    auth = hook.cluster_settings().auth()
    assert auth.oauth2 == OAuth2ClientCredentials(
        "https://idp.example/realms/x", "planner", SECRET, audience="pulsar", scope="admin"
    )
    assert SECRET not in repr(hook.cluster_settings())
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps({"client_id": "from-file", "client_secret": SECRET}))
    by_file = connection("keyed", host="https://h:8443", extra={**extra, "credentials_file": str(key_file)})
    assert by_file.cluster_settings().auth().oauth2 == OAuth2ClientCredentials(
        "https://idp.example/realms/x", credentials_file=str(key_file), audience="pulsar", scope="admin"
    )
    token_file = tmp_path / "token"
    _rotate(token_file, "mounted-token")
    mounted = connection("mounted", host="https://h:8443", extra={"token_file": str(token_file)})
    assert mounted.cluster_settings().auth() == AdminAuth(token_file=str(token_file))
    for name, fields, expected in (
        ("both", {"password": "t", "extra": {"token_file": str(token_file)}}, "Password or extra token_file"),
        ("stray", {"password": "t", "extra": {"issuer_url": "https://i"}}, r"\['issuer_url'\] belong to another"),
        ("twice", {"login": "p", "extra": {**extra, "credentials_file": "k"}}, "Login and Password .* or credentials"),
        ("nosecret", {"login": "p", "extra": extra}, "oauth2: <root>: client_id needs one secret"),
        ("kind", {"extra": {"auth": "kerberos"}}, "auth must be one of token, basic, oauth2, not 'kerberos'"),
    ):
        with pytest.raises(InputError, match=f"connection pulsar_{name}.*{expected}"):
            connection(name, host="https://h:8443", **fields).cluster_settings()
