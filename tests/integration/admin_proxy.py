"""A loopback HTTP proxy in front of every broker of the local cluster: it counts the requests that
reach the brokers and injects the faults the real cluster cannot produce on demand.

Each broker gets its own listener; 307 redirects between brokers are rewritten to the matching
listener, so every admin call of a client pointed at `admin_url` passes through here. Faults apply to
requests whose method and path match (`Fault.matches`):
- `hold`: forward, then withhold the answer for `seconds` (the client times out after the broker acted);
- `bad-gateway`: forward, then answer 502 (a proxy error after forwarding);
- `drop`: answer 502 without forwarding (the broker never saw it);
- `delay`: hold the request `seconds` before forwarding it, then follow the brokers' redirects itself to the
  broker that acts (the client has given up by then: the request reaches the broker after its client timed out);
- `park`: forward, then signal `parked` and hold the answer until released (a kill test kills the client
  while its request is in flight and answered by the broker).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Fault:
    kind: str  # hold, bad-gateway, drop, delay, park
    method: str = "PUT"
    path_contains: str = "/unload"
    times: int = 1
    seconds: float = 0.0
    parked: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and self.path_contains in path


@dataclass
class Forwarded:
    method: str
    path: str
    broker: str
    status: int


class AdminProxy:
    def __init__(self, brokers: Sequence[str]) -> None:
        self.brokers = list(brokers)  # host:port of the real brokers
        self.forwarded: list[Forwarded] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self.servers: dict[str, ThreadingHTTPServer] = {}
        for broker in self.brokers:
            server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(broker))
            server.daemon_threads = True
            self.servers[broker] = server
        self.to_proxy = {broker: f"127.0.0.1:{server.server_address[1]}" for broker, server in self.servers.items()}

    @property
    def admin_url(self) -> str:
        return f"http://{self.to_proxy[self.brokers[0]]}"

    def puts(self, path_contains: str = "") -> list[Forwarded]:
        """The PUTs that a broker acted on (a 307 hop to the owner or the leader is not one)."""
        with self.lock:
            return [
                f for f in self.forwarded if f.method == "PUT" and path_contains in f.path and not 300 <= f.status < 400
            ]

    def _fault(self, method: str, path: str, kinds: set[str]) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.kind in kinds and fault.matches(method, path):
                    fault.times -= 1
                    return fault
        return None

    def _handler(self, broker: str) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._fault(self.command, self.path, {"drop", "delay"})
                if fault is not None and fault.kind == "drop":
                    self._answer(502, {}, b'{"reason": "injected: dropped before forwarding"}')
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in {"host", "connection"}}
                if fault is not None:  # delay: the request reaches the broker after its client gave up
                    fault.parked.set()
                    fault.release.wait(fault.seconds)
                    target, path = broker, self.path
                    for _ in range(5):  # the brokers' redirects, followed here as the client would have
                        status, answer_headers, payload = self._forward(target, path, body, headers)
                        location = urlsplit(answer_headers.get("Location") or "")
                        if not 300 <= status < 400 or not location.netloc:
                            break
                        target, path = location.netloc, f"{location.path}?{location.query}".rstrip("?")
                    self._answer(status, answer_headers, payload)
                    return
                status, answer_headers, payload = self._forward(broker, self.path, body, headers)
                location = answer_headers.get("Location")
                if location:
                    for real, fronted in proxy.to_proxy.items():
                        location = location.replace(f"//{real}/", f"//{fronted}/")
                    answer_headers["Location"] = location
                # Faults after forwarding hit the broker that acted, not a redirect hop.
                fault = (
                    None
                    if 300 <= status < 400
                    else proxy._fault(self.command, self.path, {"hold", "park", "bad-gateway"})
                )
                if fault is not None:
                    if fault.kind == "hold":
                        fault.parked.set()
                        fault.release.wait(fault.seconds)
                    elif fault.kind == "park":
                        fault.parked.set()
                        fault.release.wait(600)
                    elif fault.kind == "bad-gateway":
                        self._answer(502, {}, b'{"reason": "injected: bad gateway after forwarding"}')
                        return
                self._answer(status, answer_headers, payload)

            def _forward(
                self, target: str, path: str, body: bytes | None, headers: Mapping[str, str]
            ) -> tuple[int, dict[str, str], bytes]:
                """Send the request on to broker `target` (host:port), recording what it answered."""
                target_host, target_port = target.rsplit(":", 1)
                upstream = http.client.HTTPConnection(target_host, int(target_port), timeout=120)
                try:
                    upstream.request(self.command, path, body=body, headers=dict(headers))
                    response = upstream.getresponse()
                    payload = response.read()
                    answer_headers = dict(response.getheaders())
                    status = response.status
                finally:
                    upstream.close()
                with proxy.lock:
                    proxy.forwarded.append(Forwarded(self.command, path, target, status))
                return status, answer_headers, payload

            def _answer(self, status: int, headers: Mapping[str, str], payload: bytes) -> None:
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        if name.lower() not in {"content-length", "transfer-encoding", "connection"}:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timed out or was killed)

            do_GET = do_PUT = do_POST = do_DELETE = _relay  # noqa: N815 - the names http.server dispatches to

        return Handler

    @contextmanager
    def running(self) -> Iterator[AdminProxy]:
        threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in self.servers.values()]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            for fault in self.faults:
                fault.release.set()
            for server in self.servers.values():
                server.shutdown()
                server.server_close()
