"""A scriptable HTTP(S) server on 127.0.0.1 that answers like Pulsar's admin API, for fault injection
(5xx bursts, timeouts, redirect loops, malformed JSON, oversized bodies, TLS with a private CA) that a
real broker cannot be made to produce."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Reply:
    status: int = 200
    body: object = None  # JSON-encoded unless it is a str or bytes
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    # Send no Content-Length and close the connection after the body (the client must bound its read).
    omit_length: bool = False


@dataclass
class SeenRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class FakePulsar:
    """Routes `(method, path)` to a list of replies, consumed in order; the last one repeats."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self.scheme = "https" if ssl_context is not None else "http"
        self.routes: dict[tuple[str, str], list[Reply]] = {}
        self.requests: list[SeenRequest] = []
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fake.requests.append(SeenRequest(self.command, parts.path, parts.query, dict(self.headers), body))
                key = (self.command, parts.path)
                replies = fake.routes.get(key) or [Reply(404, {"reason": "no such route"})]
                index = min(fake.calls[key], len(replies) - 1)
                fake.calls[key] += 1
                reply = replies[index]
                if reply.delay:
                    time.sleep(reply.delay)
                if isinstance(reply.body, bytes):
                    data = reply.body
                else:
                    payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                    data = payload.encode() if reply.body is not None else b""
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value.replace("{self}", fake.url))
                    self.send_header("Content-Type", "application/json")
                    if reply.omit_length:
                        self.send_header("Connection", "close")
                        self.close_connection = True
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass

            do_GET = do_PUT = do_POST = _handle  # noqa: N815 - http.server dispatches on these names

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *_: None  # refused TLS handshakes are expected, not news
        if ssl_context is not None:
            # Handshakes happen in each connection's thread, so a refused client cannot stall the server.
            self.server.socket = ssl_context.wrap_socket(
                self.server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def broker_id(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.broker_id}"

    def route(self, method: str, path: str, *replies: Reply) -> None:
        self.routes[(method, path)] = list(replies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load_report(bundles: dict[str, dict] | None = None, cpu: float = 50.0) -> dict:
    """A LocalBrokerData document as a broker returns it."""
    bundles = bundles or {}
    return {
        "cpu": {"usage": cpu, "limit": 100.0},
        "bandwidthIn": {"usage": 10.0, "limit": 100.0},
        "msgRateIn": sum(stats.get("msgRateIn", 0.0) for stats in bundles.values()),
        "msgRateOut": sum(stats.get("msgRateOut", 0.0) for stats in bundles.values()),
        "lastStats": bundles,
        "bundles": sorted(bundles),
        "numBundles": len(bundles),
        "loadReportType": "LocalBrokerData",
    }


def declare(
    entry: FakePulsar,
    cluster: str,
    *,
    isolation: object = None,
    failure_domains: object = None,
    dynamic: object = None,
    anti_affinity: dict[str, str | None] | None = None,
) -> None:
    """Route what a cluster declares on its entry broker: the isolation policies and failure domains of `cluster`,
    the dynamic configuration's values, and each namespace's anti-affinity group (None: no group). An argument left
    None keeps the fake's 404 (older releases answer 404 for a cluster without isolation policies)."""
    if isolation is not None:
        entry.route("GET", f"/admin/v2/clusters/{cluster}/namespaceIsolationPolicies", Reply(200, isolation))
    entry.route("GET", f"/admin/v2/clusters/{cluster}/failureDomains", Reply(200, failure_domains or {}))
    entry.route("GET", "/admin/v2/brokers/configuration/values", Reply(200, dynamic or {}))
    for namespace, group in (anti_affinity or {}).items():
        # Pulsar writes the group as a bare string (a JAX-RS String entity), and no group as an empty 200 (4.2.4).
        entry.route("GET", f"/admin/v2/namespaces/{namespace}/antiAffinity", Reply(200, group or ""))


def declare_broker(broker: FakePulsar, runtime: dict[str, object], version: str | None = None) -> None:
    """Route a broker's own runtime configuration and, when given, the release it says it runs."""
    broker.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, runtime))
    if version is not None:
        broker.route("GET", "/admin/v2/brokers/version", Reply(200, version))
