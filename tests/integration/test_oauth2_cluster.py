"""OAuth2 client credentials against a real identity provider: Keycloak's own distribution on loopback, a realm with
confidential clients, the planner's access tokens living 10 s. Fast (Keycloak only): tokens refreshed before they
expire, a refused client and an unknown realm in one line each. Slow: brokers of Pulsar 3.3.6 accepting Keycloak's
tokens (Pulsar's OpenID provider, `pulsar-broker-auth-oidc`, its role from the token's `azp`), the whole cycle
through the CLI (collect, a drain plan, its paced execution outliving the first token) and through Airflow's plan DAG
with an `auth = oauth2` connection; no client secret and no access token (any JWT) in the planner's logs, its store,
Airflow's home or database (XCom included)."""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from planner.collect.admin_client import AdminAuth, PulsarAdminClient
from planner.collect.collector import collect
from planner.collect.oauth2 import OAuth2ClientCredentials, OAuth2Tokens, TokenError
from planner.store.database import Store
from pulsar_rebalance_devtools import keycloak, local_cluster
from pulsar_rebalance_devtools.broker_settings import openid_auth_settings
from tests.integration.conftest import _free_port, airflow_env, separate_cluster

pytestmark = [pytest.mark.integration]

CLI = str(Path(sys.executable).parent / "pulsar-rebalance")
PLANNER_TOKEN_SECONDS = 10
AUDIENCE = "pulsar"
# A JWT (header.payload.signature, base64url JSON), as every access token Keycloak issues is.
JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.(eyJ[A-Za-z0-9_-]{8,})\.[A-Za-z0-9_-]{16,}")


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[keycloak.KeycloakSettings]:
    """Keycloak with clients `planner` (tokens of 10 s) and `pulsar-broker` (the brokers' own, 30 min)."""
    settings = keycloak.KeycloakSettings(
        home=tmp_path_factory.mktemp("keycloak"),
        port=_free_port(),
        audience=AUDIENCE,
        clients=(keycloak.new_client("planner"), keycloak.new_client("pulsar-broker")),
        short_lived={"planner": PLANNER_TOKEN_SECONDS},
        access_token_seconds=1800,  # the brokers' and the traffic's tokens outlive the test
    )
    with keycloak.running(settings):
        # Once, so that the tests' timings do not include the realm's first request.
        OAuth2Tokens(OAuth2ClientCredentials(settings.issuer_url, "pulsar-broker", settings.clients[1].secret)).token()
        yield settings


def client(idp: keycloak.KeycloakSettings, client_id: str) -> keycloak.OAuthClient:
    return next(entry for entry in idp.clients if entry.client_id == client_id)


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_keycloak_tokens_are_refreshed_before_they_expire(idp):
    planner = client(idp, "planner")
    tokens = OAuth2Tokens(OAuth2ClientCredentials(idp.issuer_url, "planner", planner.secret, audience=AUDIENCE))
    started = time.monotonic()
    first = tokens.token()
    fetched = time.monotonic()
    assert claims(first)["azp"] == "planner" and AUDIENCE in claims(first)["aud"] and claims(first)["nbf"] == 0
    assert claims(first)["exp"] - claims(first)["iat"] == PLANNER_TOKEN_SECONDS
    time.sleep(max(started + PLANNER_TOKEN_SECONDS * 0.85 - time.monotonic(), 0))
    assert tokens.token() == first and tokens.fetches == 1
    # Past 90 % of its life (counted from before the request), before its end: a new one.
    time.sleep(max(fetched + PLANNER_TOKEN_SECONDS * 0.9 + 0.1 - time.monotonic(), 0))
    assert time.time() < claims(first)["exp"] + 1  # Keycloak's times are whole seconds
    second = tokens.token()
    assert second != first and tokens.fetches == 2 and claims(second)["exp"] > claims(first)["exp"]


def test_keycloak_refusing_the_client_or_an_unknown_realm_is_one_line(idp):
    wrong = OAuth2Tokens(OAuth2ClientCredentials(idp.issuer_url, "planner", "not-the-secret"))
    with pytest.raises(TokenError) as refused:
        wrong.token()
    assert (
        f"OAuth2 token endpoint {idp.issuer_url}/protocol/openid-connect/token refused client 'planner' "
        # Keycloak's code for a wrong secret (RFC 6749 has invalid_client; the planner shows what the issuer says).
        "(HTTP 401: unauthorized_client: Invalid client or Invalid client credentials)"
    ) == str(refused.value)
    unknown = idp.issuer_url.replace(idp.realm, "no-such-realm")
    with pytest.raises(TokenError, match=f"OAuth2 issuer {unknown}: .* answered HTTP 404"):
        OAuth2Tokens(OAuth2ClientCredentials(unknown, "planner", "x")).token()


# --- brokers accepting Keycloak's tokens --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oidc_cluster(idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two brokers of Pulsar 3.3.6 (its distribution ships the OpenID provider) taking Keycloak's tokens, the
    planner's and the brokers' own clients super-users; their own client's key file by path."""
    root = tmp_path_factory.mktemp("oidc-cluster")
    key_file = keycloak.write_key_file(root / "broker-client.json", client(idp, "pulsar-broker"), idp.issuer_url)
    settings = openid_auth_settings(idp.issuer_url, AUDIENCE, str(key_file), ["planner", "pulsar-broker"])
    options = {local_cluster.ENV_VERSION: "3.3.6"}
    with separate_cluster(root, "oidc", (24181, 25181, 29081, 27651), 2, options, settings) as cluster:
        yield cluster


def admin(cluster: dict[str, Any], method: str, path: str, base: str | None = None, **kwargs: Any) -> requests.Response:
    """The admin API as the brokers' own client (a super-user), on the first broker (or `base`), following Pulsar's
    redirects to the owning broker with the credentials (requests drops them on a redirect to another host)."""
    url = (base or cluster["brokers"][0]["adminUrl"]) + path
    headers = local_cluster.admin_headers(cluster)
    for _ in range(5):
        response = requests.request(method, url, headers=headers, timeout=60, allow_redirects=False, **kwargs)
        if not response.is_redirect:
            break
        url = response.headers["Location"]
    assert response.status_code < 300, (method, path, response.status_code, response.text[:300])
    return response


def clusters_file(idp: keycloak.KeycloakSettings, cluster: dict[str, Any]) -> str:
    return (
        f'[[clusters]]\nname = "{cluster["cluster"]}"\nadmin_url = "{cluster["brokers"][0]["adminUrl"]}"\n'
        f'[clusters.oauth2]\nissuer_url = "{idp.issuer_url}"\nclient_id = "planner"\n'
        f'client_secret_env = "PLANNER_OAUTH2_SECRET"\naudience = "{AUDIENCE}"\n'
    )


def run(home: Path, idp: keycloak.KeycloakSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PULSAR_REBALANCE_HOME": str(home),
        "PULSAR_REBALANCE_CLUSTERS": str(home / "clusters.toml"),
        "PLANNER_OAUTH2_SECRET": client(idp, "planner").secret,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PULSAR_REBALANCE_DB_URL", None)
    return subprocess.run([CLI, "-v", *args], env=env, capture_output=True, text=True, timeout=600, check=False)


def owned(cluster: dict[str, Any], broker: str, namespace: str) -> list[str]:
    # Asked of the broker itself: another answers with a redirect to it.
    path = f"/admin/v2/brokers/{cluster['cluster']}/{broker}/ownedNamespaces"
    answer = admin(cluster, "GET", path, base=f"http://{broker}").json()
    return sorted(bundle for bundle in answer if bundle.startswith(namespace + "/"))


def holds_secret(data: bytes, idp: keycloak.KeycloakSettings) -> bool:
    """Whether `data` holds the planner's client secret or an access token of `idp` (a JWT it issued: Airflow's own
    tokens for its task API are JWTs too, and not the planner's to hide)."""
    if client(idp, "planner").secret.encode() in data:
        return True
    for match in JWT.finditer(data):
        payload = match.group(1).decode()
        try:
            issuer = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("iss")
        except ValueError:
            continue
        if issuer == idp.issuer_url:
            return True
    return False


def leaked(places: list[Path], idp: keycloak.KeycloakSettings) -> list[str]:
    """Files under `places` holding the client secret or an access token."""
    files = [path for place in places for path in place.rglob("*") if path.is_file()]
    assert files
    return [str(path) for path in files if holds_secret(path.read_bytes(), idp)]


def leaked_rows(database: Path, idp: keycloak.KeycloakSettings) -> list[str]:
    """Tables of a SQLite database with a row holding the client secret or an access token."""
    connection = sqlite3.connect(database)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        found = []
        for table in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"'):
                if holds_secret(repr(row).encode(), idp):
                    found.append(table)
        return found
    finally:
        connection.close()


@pytest.mark.slow  # a Pulsar cluster of its own, a Spark plan and a paced execution (~3 minutes)
def test_the_whole_cycle_through_the_cli_with_oauth2_and_a_token_refreshed_mid_run(idp, oidc_cluster, tmp_path):
    assert requests.get(f"{oidc_cluster['brokers'][0]['adminUrl']}/admin/v2/clusters", timeout=10).status_code == 401
    namespace = "public/oauth2"
    admin(oidc_cluster, "PUT", f"/admin/v2/namespaces/{namespace}", json={"bundles": {"numBundles": 4}})
    for index in range(16):
        admin(oidc_cluster, "GET", f"/lookup/v2/topic/persistent/{namespace}/topic-{index}")
    brokers = [broker["id"] for broker in oidc_cluster["brokers"]]
    drained = max(brokers, key=lambda broker: len(owned(oidc_cluster, broker, namespace)))
    before = owned(oidc_cluster, drained, namespace)
    assert before
    home = tmp_path / "home"
    home.mkdir()
    (home / "clusters.toml").write_text(clusters_file(idp, oidc_cluster))

    outputs = []
    for _ in range(2):
        collected = run(home, idp, "collect", "--cluster", "oidc")
        outputs.append(collected)
        assert collected.returncode == 0, collected.stderr[-3000:]
    assert "OAuth2 token 1 for client planner" in collected.stderr
    planned = run(
        home, idp, "plan", "run", "--cluster", "oidc", "--mode", "drain", "--brokers", drained,
        "--master", "local[1]", "--set", "loadBalancerBrokerOverloadedThresholdPercentage=1000",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    [plan] = json.loads(planned.stdout)["plans"]
    approved = run(home, idp, "approve", str(plan["plan"]), "--as", "operator")
    assert approved.returncode == 0, approved.stderr[-3000:]
    # Paced at one action every 10 s: the execution outlives its first token (10 s), which is refreshed before it
    # expires; no request is refused (no renewal after a 401).
    executed = run(
        home, idp, "execute", str(plan["plan"]), "--cluster", "oidc", "--quiet", "--verify-timeout", "30",
        "--actions-per-minute", "6",
    )  # fmt: skip
    outputs += [planned, approved, executed]
    assert executed.returncode == 0, (executed.stdout[-3000:], executed.stderr[-3000:])
    assert json.loads(executed.stdout)["status"] == "executed", executed.stdout
    assert "OAuth2 token 2 for client planner" in executed.stderr and "(refreshed before expiry)" in executed.stderr
    assert "renewed after a 401" not in executed.stderr, executed.stderr[-3000:]
    assert owned(oidc_cluster, drained, namespace) == []
    # Nothing of the secret or of any token in what the planner wrote: its home (store, archives, samples) and its
    # logs (stderr at INFO).
    assert leaked([home], idp) == []
    [database] = home.rglob("*.db")
    assert leaked_rows(database, idp) == []
    for output in outputs:
        assert not holds_secret((output.stdout + output.stderr).encode(), idp)


@pytest.mark.slow  # Airflow's plan DAG on the OpenID cluster (~4 minutes)
@pytest.mark.airflow
def test_the_plan_dag_runs_with_an_oauth2_connection_and_writes_no_secret(idp, oidc_cluster, tmp_path):
    from pulsar_rebalance_devtools.demo import run_plan_cycle
    from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator
    from tests.integration.conftest import CYCLE_CONF

    planner = client(idp, "planner")
    brokers_token = local_cluster.admin_headers(oidc_cluster)["Authorization"].removeprefix("Bearer ")
    hot = oidc_cluster["brokers"][0]["id"]
    generator = TrafficGenerator.for_cluster(
        oidc_cluster, f"public/airflow-{os.urandom(3).hex()}", [BundleTraffic(i, 1, 40) for i in range(4)],
        token=brokers_token,
    )  # fmt: skip
    generator.setup()
    try:
        generator.place_bundles(dict.fromkeys(range(4), hot))
        generator.start()
        time.sleep(12)  # two load-report intervals
        env = airflow_env(oidc_cluster, tmp_path)
        connection = f"AIRFLOW_CONN_PULSAR_{oidc_cluster['cluster'].upper()}"
        extra = {"auth": "oauth2", "issuer_url": idp.issuer_url, "audience": AUDIENCE}
        env[connection] = json.dumps(
            {**json.loads(env[connection]), "login": "planner", "password": planner.secret, "extra": extra}
        )
        store = Store(env["PULSAR_REBALANCE_DB_URL"])
        credentials = OAuth2ClientCredentials(idp.issuer_url, "planner", planner.secret, audience=AUDIENCE)
        with PulsarAdminClient(
            oidc_cluster["brokers"][0]["adminUrl"], auth=AdminAuth(oauth2=credentials)
        ) as admin_client:
            for _ in range(3):
                collect(admin_client, store, Path(env["PULSAR_REBALANCE_HOME"]))
                time.sleep(2)
        store.dispose()
        outcome = run_plan_cycle(env, oidc_cluster["cluster"], "Approve", CYCLE_CONF, timeout=900)
    finally:
        generator.stop()
        generator.delete_namespace()
    assert outcome["tasks"]["execute"] == "success" and outcome["tasks"]["report"] == "success", outcome
    places = [Path(env["AIRFLOW_HOME"]), Path(env["PULSAR_REBALANCE_HOME"])]
    assert leaked(places, idp) == []
    # Airflow's database holds the task instances' XCom; the planner's its plans and audit.
    for database in (Path(env["AIRFLOW_HOME"]) / "airflow.db", tmp_path / "planner.db"):
        assert leaked_rows(database, idp) == [], database
