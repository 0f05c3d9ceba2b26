"""Collection from 500 brokers that each answer after 20 ms (goal: <= 2 s, >= 10x faster than one at a time).

A local asyncio HTTP server listens on 500 loopback ports, one per broker, and replays recorded load
reports (the shipped example's) after the delay; the entry broker also answers the cluster calls.
Usage: python bench/bench_collect.py [--brokers N] [--delay-ms N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from pathlib import Path

from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect
from planner.store.database import Store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "load-data.json"


class ReplayingCluster:
    def __init__(self, brokers: int, delay: float) -> None:
        recorded = [json.dumps(report) for report in json.loads(EXAMPLE.read_text())["brokers"].values()]
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.ports: list[int] = []
        self.ready = threading.Event()
        self.recorded = recorded
        self.count = brokers
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait()

    @property
    def ids(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports]

    def _body(self, port: int, path: str) -> bytes:
        if path.startswith("/admin/v2/broker-stats/load-report"):
            return self.recorded[port % len(self.recorded)].encode()
        if path.startswith("/admin/v2/brokers/configuration/runtime"):
            return b'{"clusterName": "bench"}'
        if path.startswith("/admin/v2/brokers/leaderBroker"):
            return json.dumps({"brokerId": self.ids[0]}).encode()
        if path.startswith("/admin/v2/brokers/bench"):
            return json.dumps(self.ids).encode()
        if path.endswith("/bundles"):
            return b'{"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}'
        return b"{}"

    async def _serve(self, port_box: list[int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                path = request.split(b" ", 2)[1].decode()
                await asyncio.sleep(self.delay)
                body = self._body(port_box[0], path)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            for _ in range(self.count):
                box: list[int] = []
                server = await asyncio.start_server(
                    lambda r, w, box=box: self._serve(box, r, w), "127.0.0.1", 0, backlog=256
                )
                box.append(server.sockets[0].getsockname()[1])
                self.ports.append(box[0])

        self.loop.run_until_complete(start())
        self.ready.set()
        self.loop.run_forever()


def timed_collect(cluster: ReplayingCluster, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as home:
        store = Store(f"sqlite:///{home}/planner.db")
        client = PulsarAdminClient(f"http://{cluster.ids[0]}", concurrency=concurrency)
        started = time.perf_counter()
        result = collect(client, store, Path(home))
        elapsed = time.perf_counter() - started
        assert result.brokers == cluster.count and not result.partial, result
        client.close()
        store.dispose()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, default=500)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    cluster = ReplayingCluster(args.brokers, args.delay_ms / 1000)
    timed_collect(cluster, 64)  # warm-up: imports, SQLite, pyarrow
    concurrent = min(timed_collect(cluster, 64) for _ in range(3))
    sequential = timed_collect(cluster, 1)
    print(f"collect from {args.brokers} brokers answering after {args.delay_ms:.0f} ms:")
    print(f"  concurrent (64 workers): {concurrent:.2f} s (best of 3)")
    print(f"  one at a time:           {sequential:.2f} s")
    print(f"  speed-up:                {sequential / concurrent:.1f}x")


if __name__ == "__main__":
    main()
