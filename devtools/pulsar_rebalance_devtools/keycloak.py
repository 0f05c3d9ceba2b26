"""A real OpenID Connect identity provider on loopback: Keycloak's own distribution from Maven Central.

`org.keycloak:keycloak-quarkus-dist:<version>:zip`, unpacked once into the download cache (outside any repository),
started in development mode (`kc.sh start-dev`, plain http on 127.0.0.1) with a realm imported from a JSON file
written here: confidential clients that may use the client-credentials grant, an audience mapper that puts
`audience` into every access token (Pulsar's OpenID provider requires an allowed audience), and a short access-token
lifespan, so that a run outlives its first token.

Public: `KeycloakSettings`, `OAuthClient` (`new_client`, `write_key_file`), `ensure_keycloak`, `realm`, `start`,
`stop` (`running` as a context manager).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from planner.settings import cache_home
from pulsar_rebalance_devtools.maven import DEPENDENCY_PLUGIN, run_maven

log = logging.getLogger(__name__)

DEFAULT_VERSION = "26.5.6"
HOST = "127.0.0.1"


class KeycloakError(RuntimeError):
    """Keycloak could not be downloaded or started; the message says where to look."""


@dataclass(frozen=True, slots=True)
class OAuthClient:
    """A confidential client of the realm (client credentials only), with its secret."""

    client_id: str
    secret: str = field(repr=False)

    def key_file(self, issuer_url: str) -> dict[str, str]:
        """The client as Pulsar's OAuth2 key file (`KeyFile`: type, client_id, client_secret, issuer_url)."""
        return {
            "type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.secret,
            "issuer_url": issuer_url,
        }


@dataclass(frozen=True, slots=True)
class KeycloakSettings:
    home: Path  # the server's data, configuration and log
    port: int
    realm: str = "pulsar"
    audience: str = "pulsar"
    # The realm's access-token lifespan, and shorter ones of some clients (a run outlives their first token).
    access_token_seconds: int = 600
    short_lived: Mapping[str, int] = field(default_factory=dict)
    clients: tuple[OAuthClient, ...] = ()
    version: str = DEFAULT_VERSION
    cache: Path = field(default_factory=lambda: cache_home() / "keycloak")
    start_timeout_seconds: float = 240.0

    @property
    def issuer_url(self) -> str:
        return f"http://{HOST}:{self.port}/realms/{self.realm}"

    @property
    def log_file(self) -> Path:
        return self.home / "keycloak.log"


def new_client(client_id: str) -> OAuthClient:
    return OAuthClient(client_id, secrets.token_urlsafe(24))


def ensure_keycloak(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path:
    """The unpacked distribution (its `bin/kc.sh` inside), downloaded from Maven Central on first use."""
    cache = cache or cache_home() / "keycloak"
    target = cache / version
    home = target / f"keycloak-{version}"
    marker = target / "COMPLETE"
    if marker.exists():
        return home
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="download-", dir=target) as tmp:
        work = Path(tmp)
        artifact = f"org.keycloak:keycloak-quarkus-dist:{version}:zip"
        run_maven(
            [f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={work}"],
            work,
            f"Keycloak {version} from Maven Central",
        )
        shutil.rmtree(home, ignore_errors=True)
        with zipfile.ZipFile(next(work.glob("keycloak-quarkus-dist-*.zip"))) as archive:
            archive.extractall(target)
    for script in (home / "bin").glob("*.sh"):
        script.chmod(0o755)
    marker.write_text(f"{version}\n")
    return home


def realm(settings: KeycloakSettings) -> dict[str, Any]:
    """The realm to import: one confidential, service-account-only client per `settings.clients`, each adding
    `settings.audience` to its access tokens, which live `access_token_seconds` (or the client's `short_lived`)."""
    audience_mapper = {
        "name": "pulsar-audience",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-audience-mapper",
        "config": {"included.custom.audience": settings.audience, "access.token.claim": "true"},
    }
    # Pulsar's OpenID provider requires an `nbf` claim (its JWT verifier is told the claim must be present), which
    # Keycloak does not issue: a constant 0 (valid since 1970) satisfies it and changes nothing else.
    not_before_mapper = {
        "name": "pulsar-not-before",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-hardcoded-claim-mapper",
        "config": {
            "claim.name": "nbf",
            "claim.value": "0",
            "jsonType.label": "long",
            "access.token.claim": "true",
            "id.token.claim": "false",
            "userinfo.token.claim": "false",
        },
    }
    return {
        "realm": settings.realm,
        "enabled": True,
        "accessTokenLifespan": settings.access_token_seconds,
        "clients": [
            {
                "clientId": client.client_id,
                "enabled": True,
                "protocol": "openid-connect",
                "publicClient": False,
                "clientAuthenticatorType": "client-secret",
                "secret": client.secret,
                "serviceAccountsEnabled": True,
                "standardFlowEnabled": False,
                "directAccessGrantsEnabled": False,
                "protocolMappers": [audience_mapper, not_before_mapper],
                **(
                    {"attributes": {"access.token.lifespan": str(settings.short_lived[client.client_id])}}
                    if client.client_id in settings.short_lived
                    else {}
                ),
            }
            for client in settings.clients
        ],
    }


def _command(server: Path, settings: KeycloakSettings) -> list[str]:
    """Development mode (plain http, its own H2 database under the server's copy), the realm imported from the
    server's `data/import` at start."""
    return [
        str(server / "bin" / "kc.sh"),
        "start-dev",
        f"--http-host={HOST}",
        f"--http-port={settings.port}",
        f"--hostname=http://{HOST}:{settings.port}",
        "--import-realm",
        # Off: the management interface would listen on port 9000 of every address.
        "--health-enabled=false",
        "--metrics-enabled=false",
    ]


def start(settings: KeycloakSettings) -> subprocess.Popen[bytes]:
    """Keycloak serving `settings.realm` on 127.0.0.1:`settings.port`, once its OpenID metadata answers."""
    distribution = ensure_keycloak(settings.version, settings.cache)
    settings.home.mkdir(parents=True, exist_ok=True)
    # `--import-realm` reads the distribution's data/import: a copy of the distribution per server keeps the
    # cached one untouched and lets servers of other tests run beside this one.
    server = settings.home / "server"
    if not server.exists():
        shutil.copytree(distribution, server, symlinks=True)
    import_dir = server / "data" / "import"
    import_dir.mkdir(parents=True, exist_ok=True)
    realm_file = import_dir / f"{settings.realm}-realm.json"
    descriptor = os.open(realm_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the clients' secrets
    with os.fdopen(descriptor, "w") as handle:
        json.dump(realm(settings), handle)
    env = {
        **os.environ,
        "JAVA_OPTS_KC_HEAP": "-Xms64m -Xmx384m",
        "JAVA_OPTS_APPEND": "-XX:TieredStopAtLevel=1",  # C1 only: a faster start on a busy machine
    }
    command = _command(server, settings)
    with settings.log_file.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    metadata = f"{settings.issuer_url}/.well-known/openid-configuration"
    deadline = time.monotonic() + settings.start_timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise KeycloakError(f"Keycloak exited ({process.returncode}) while starting; see {settings.log_file}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(metadata, timeout=2).status_code == 200:
                log.info("Keycloak %s serves %s (pid %d)", settings.version, settings.issuer_url, process.pid)
                return process
        time.sleep(1)
    stop(process)
    raise KeycloakError(
        f"Keycloak did not serve {metadata} in {settings.start_timeout_seconds:.0f} s; see {settings.log_file}"
    )


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM the server's process group (kc.sh and its JVM), SIGKILL it after `timeout`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def running(settings: KeycloakSettings) -> Iterator[KeycloakSettings]:
    process = start(settings)
    try:
        yield settings
    finally:
        stop(process)


def write_key_file(path: Path, client: OAuthClient, issuer_url: str) -> Path:
    """The client's Pulsar key file, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(client.key_file(issuer_url), handle)
    return path
