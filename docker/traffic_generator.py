"""Skewed traffic for docker-compose.yml's Pulsar cluster until stopped (`docker compose --profile traffic up`).

Runs `pulsar_rebalance_devtools.traffic.TrafficGenerator` in a fresh namespace whose bundles all start on one broker,
with the same message rate in each, so the planner has an imbalance to find and fix. Every minute it
logs how much was produced and consumed; on SIGTERM it stops, drains, logs the final report (a gap
in the sequence numbers would show as `missing`) and deletes the namespace.

Environment: PULSAR_ADMIN_URL, PULSAR_SERVICE_URL, PULSAR_CLUSTER, TRAFFIC_BUNDLES,
TRAFFIC_TOPICS_PER_BUNDLE, TRAFFIC_RATE_PER_TOPIC (msg/s), TRAFFIC_HOT_BROKER (a broker id such as
`broker-1:8080`; empty leaves placement to Pulsar), TRAFFIC_HEARTBEAT_FILE (touched while traffic
flows, for the container's health check).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator

log = logging.getLogger("traffic-generator")

_REPORT_EVERY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class TrafficSettings:
    admin_url: str
    service_url: str
    cluster: str
    bundles: int
    topics_per_bundle: int
    rate_per_topic: float
    hot_broker: str
    heartbeat_file: Path | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrafficSettings:
        return cls(
            admin_url=env.get("PULSAR_ADMIN_URL", "http://broker-1:8080"),
            service_url=env.get("PULSAR_SERVICE_URL", "pulsar://broker-1:6650"),
            cluster=env.get("PULSAR_CLUSTER", "local"),
            bundles=int(env.get("TRAFFIC_BUNDLES", "4")),
            topics_per_bundle=int(env.get("TRAFFIC_TOPICS_PER_BUNDLE", "1")),
            rate_per_topic=float(env.get("TRAFFIC_RATE_PER_TOPIC", "40")),
            hot_broker=env.get("TRAFFIC_HOT_BROKER", "broker-1:8080"),
            heartbeat_file=Path(env["TRAFFIC_HEARTBEAT_FILE"]) if env.get("TRAFFIC_HEARTBEAT_FILE") else None,
        )


def run(settings: TrafficSettings, stop: threading.Event) -> dict[str, object]:
    """Produce until `stop` is set; returns the final report."""
    generator = TrafficGenerator(
        settings.admin_url,
        settings.service_url,
        settings.cluster,
        # A new namespace each start: an earlier run's namespace may have been split by an executed plan.
        f"traffic/compose-{secrets.token_hex(3)}",
        [
            BundleTraffic(bundle=index, topics=settings.topics_per_bundle, rate=settings.rate_per_topic)
            for index in range(settings.bundles)
        ],
        num_bundles=settings.bundles,
    )
    generator.setup()
    if settings.hot_broker:
        log.info("placing every bundle of %s on %s", generator.namespace, settings.hot_broker)
        generator.place_bundles(dict.fromkeys(range(settings.bundles), settings.hot_broker))
    total_rate = settings.bundles * settings.topics_per_bundle * settings.rate_per_topic
    log.info("producing %.0f msg/s into %s", total_rate, generator.namespace)
    generator.start()
    try:
        _beat(settings.heartbeat_file)
        while not stop.wait(_REPORT_EVERY_SECONDS):
            report = generator.report()
            log.info("produced %d, consumed %d so far", report.produced, report.consumed)
            _beat(settings.heartbeat_file)
    finally:
        generator.stop()
    final = dataclasses.asdict(generator.report()) | {"namespace": generator.namespace}
    generator.delete_namespace()
    return final


def _beat(heartbeat_file: Path | None) -> None:
    if heartbeat_file is not None:
        heartbeat_file.touch()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    final = run(TrafficSettings.from_env(os.environ), stop)
    print(json.dumps(final), flush=True)
    return 0 if not final["missing"] else 1


if __name__ == "__main__":
    sys.exit(main())
