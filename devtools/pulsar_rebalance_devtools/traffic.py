"""A traffic generator for a real Pulsar cluster: skewed, sequence-numbered load that the planner can see.

It creates a tenant and a namespace with a chosen number of bundles, picks topic names whose hash
falls into chosen bundles (Pulsar's own topic→bundle rule), can pin bundles to brokers with
unload-with-destination, and runs one producer and one consumer per topic at a chosen rate. Every
message carries a per-topic sequence number, so `report()` can prove that nothing was lost while the
planner (or a test) unloaded and split bundles under live traffic.

Usage::

    with TrafficGenerator(admin_url, service_url, "local", "traffic/demo",
                          [BundleTraffic(bundle=0, topics=2, rate=200), BundleTraffic(bundle=3, rate=5)]) as gen:
        gen.place_bundles({0: "127.0.0.2:18081"})
        time.sleep(30)
    print(gen.report())
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import pulsar
import requests

from planner.collect.admin_client import ClusterSession
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import bundle_for_topic
from planner.pulsar.bundle_range import BundleRange

log = logging.getLogger(__name__)

_SEQUENCE_PROPERTY = "seq"
_SUBSCRIPTION = "traffic-generator"
_HTTP_TIMEOUT_SECONDS = 10.0


class TrafficError(RuntimeError):
    """The admin API refused a setup step, or a bundle could not be moved where it was asked to go."""


@dataclass(frozen=True, slots=True)
class BundleTraffic:
    """Load for one bundle, by its index in the namespace's initial bundles: `topics` topics at `rate` msg/s each."""

    bundle: int
    topics: int = 1
    rate: float = 10.0


@dataclass(frozen=True, slots=True)
class TrafficReport:
    """What the producers got acknowledged and what the consumers received, per topic and in total."""

    produced: int
    consumed: int
    duplicates: int
    send_retries: int
    missing: dict[str, list[int]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every acknowledged message reached its consumer."""
        return not self.missing


@dataclass(slots=True)
class _TopicState:
    topic: str
    bundle: BundleRange
    rate: float
    sent: int = 0
    send_retries: int = 0
    received: set[int] = field(default_factory=set)
    duplicates: int = 0


class TrafficGenerator:
    """Producers and consumers with sequence numbers on topics hashed into chosen bundles of one namespace.

    Lifecycle: `setup()` (tenant, namespace, topic names), optional `place_bundles()`, `start()`,
    `stop()`, `report()`; the context manager runs `setup()`+`start()` and `stop()`. `delete_namespace()`
    cleans up afterwards. Producers retry a send that failed (e.g. during an unload) with the same
    sequence number, so a retry may show up as a duplicate but never as a gap.
    """

    def __init__(
        self,
        admin_url: str,
        service_url: str,
        cluster: str,
        namespace: str,
        traffic: Sequence[BundleTraffic],
        *,
        num_bundles: int = 4,
        payload_bytes: int = 1024,
        drain_timeout_seconds: float = 60.0,
        token: str | None = None,
        broker_hosts: Collection[str] = (),
    ) -> None:
        tenant, _, name = namespace.partition("/")
        if not tenant or not name or "/" in name:
            raise ValueError(f"namespace must be tenant/name, got {namespace!r}")
        for item in traffic:
            if not 0 <= item.bundle < num_bundles or item.topics < 1 or item.rate <= 0:
                raise ValueError(f"invalid {item} for a namespace with {num_bundles} bundles")
        self.admin_url = admin_url.rstrip("/")
        self.service_url = service_url
        self._token = token
        # Redirects between the brokers keep the token; it never leaves the admin URL's and the brokers' hosts.
        trusted = {urlsplit(admin_url).hostname, *broker_hosts}
        self._http = ClusterSession(lambda url: urlsplit(url).hostname in trusted)
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"
        self.cluster = cluster
        self.namespace = namespace
        self.traffic = list(traffic)
        self.num_bundles = num_bundles
        self.payload_bytes = payload_bytes
        self.drain_timeout_seconds = drain_timeout_seconds
        self.run_id = secrets.token_hex(3)
        self.boundaries: list[int] = []
        self._topics: dict[str, _TopicState] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._client: pulsar.Client | None = None
        # Held so the consumers (and their listeners) live until stop() closes the client.
        self._consumers: list[Any] = []

    @classmethod
    def for_cluster(
        cls, cluster_info: Mapping[str, Any], namespace: str, traffic: Sequence[BundleTraffic], **options: Any
    ) -> TrafficGenerator:
        """A generator for a cluster as `local_cluster.start()` describes it (first broker's URLs, and the superuser's
        token when the cluster authenticates)."""
        first = cluster_info["brokers"][0]
        if cluster_info.get("tokenFile"):
            options.setdefault("token", Path(cluster_info["tokenFile"]).read_text().strip())
        options.setdefault(
            "broker_hosts", {urlsplit(broker["adminUrl"]).hostname for broker in cluster_info["brokers"]}
        )
        return cls(first["adminUrl"], first["serviceUrl"], cluster_info["cluster"], namespace, traffic, **options)

    # ---------------------------------------------------------------- setup

    def setup(self) -> None:
        """Create the tenant and namespace if missing and choose topic names in the requested bundles."""
        tenant = self.namespace.split("/")[0]
        self._put(f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": [self.cluster]}, ok={409})
        self._put(f"/admin/v2/namespaces/{self.namespace}", {"bundles": {"numBundles": self.num_bundles}}, ok={409})
        self.boundaries = self.current_boundaries()
        ranges = [BundleRange(lo, hi) for lo, hi in zip(self.boundaries, self.boundaries[1:], strict=False)]
        if len(ranges) != self.num_bundles:
            raise TrafficError(f"{self.namespace} already exists with {len(ranges)} bundles, not {self.num_bundles}")
        self._topics = {}
        for item in self.traffic:
            for name in self._topic_names(ranges[item.bundle], item.topics):
                self._topics[name] = _TopicState(name, ranges[item.bundle], item.rate)

    def _topic_names(self, bundle: BundleRange, count: int) -> list[str]:
        names: list[str] = []
        candidate = 0
        while len(names) < count:
            name = f"persistent://{self.namespace}/load-{self.run_id}-{candidate}"
            if bundle_for_topic(name, self.boundaries) == bundle and name not in self._topics:
                names.append(name)
            candidate += 1
        return names

    @property
    def topics(self) -> dict[str, BundleRange]:
        """Each generated topic and the bundle range it hashed into at setup."""
        return {name: state.bundle for name, state in self._topics.items()}

    def topics_in(self, bundle: BundleRange) -> list[str]:
        return [name for name, state in self._topics.items() if state.bundle == bundle]

    def current_boundaries(self) -> list[int]:
        """The namespace's bundle boundaries as the broker reports them now."""
        data = self._get(f"/admin/v2/namespaces/{self.namespace}/bundles")
        return [int(boundary, 16) for boundary in data["boundaries"]]

    def owner(self, topic: str) -> str:
        """The broker id (`host:webPort`) owning `topic`; the lookup assigns its bundle if it is unowned."""
        domain, _, rest = topic.partition("://")
        data = self._get(f"/lookup/v2/topic/{domain}/{rest}")
        return str(data["httpUrl"]).removeprefix("http://").removeprefix("https://").rstrip("/")

    def place_bundles(self, placement: Mapping[int, str], timeout_seconds: float = 60.0) -> None:
        """Move each bundle (index into the initial bundles) to a broker id, via unload with destinationBroker."""
        for index, broker in placement.items():
            bundle = BundleRange(self.boundaries[index], self.boundaries[index + 1])
            topics = self.topics_in(bundle)
            if not topics:
                raise ValueError(f"no generated topic in bundle {index} ({bundle})")
            self.move_bundle(str(bundle), topics[0], broker, timeout_seconds)

    def move_bundle(self, bundle: str, probe_topic: str, broker: str, timeout_seconds: float = 60.0) -> None:
        """Unload `bundle` towards `broker` until a lookup of `probe_topic` (in that bundle) answers `broker`.

        The destination is a one-shot hint on the leader that the next assignment consumes; a reconnecting
        client can win that race, so the unload is repeated (bounded) until the bundle sits where asked.
        """
        deadline = time.monotonic() + timeout_seconds
        last_error: Exception | None = None
        while True:
            try:
                if self.owner(probe_topic) == broker:
                    return
                self._put(
                    f"/admin/v2/namespaces/{self.namespace}/{bundle}/unload", params={"destinationBroker": broker}
                )
            except (TrafficError, requests.RequestException) as error:  # brokers answer 5xx mid-unload
                last_error = error
            if time.monotonic() > deadline:
                raise TrafficError(
                    f"{self.namespace}/{bundle} did not move to {broker} in {timeout_seconds:.0f} s"
                    f" (last error: {last_error})"
                )
            time.sleep(0.5)

    def delete_namespace(self) -> None:
        """Force-delete the namespace and its topics (the brokers allow it with `forceDeleteNamespaceAllowed`)."""
        response = self._http.delete(
            f"{self.admin_url}/admin/v2/namespaces/{self.namespace}", params={"force": "true"}, timeout=60
        )
        if response.status_code not in (204, 404):
            raise TrafficError(f"deleting {self.namespace}: HTTP {response.status_code} {response.text}")

    # ---------------------------------------------------------------- traffic

    def start(self) -> None:
        """Subscribe every consumer, then start one pacing producer thread per topic."""
        if self._client is not None:
            raise TrafficError("traffic is already running; stop() it first")
        if not self._topics:
            self.setup()
        self._stopping.clear()
        self._client = pulsar.Client(
            self.service_url,
            authentication=pulsar.AuthenticationToken(self._token) if self._token else None,
            operation_timeout_seconds=30,
            logger=logging.getLogger(f"{__name__}.client"),
        )
        for state in self._topics.values():
            self._consumers.append(
                self._client.subscribe(
                    state.topic,
                    _SUBSCRIPTION,
                    message_listener=self._on_message(state),
                    initial_position=pulsar.InitialPosition.Earliest,
                )
            )
        for state in self._topics.values():
            producer = self._client.create_producer(state.topic, block_if_queue_full=True, batching_enabled=False)
            thread = threading.Thread(
                target=self._produce,
                args=(producer, state),
                daemon=True,
                name=f"traffic-{state.topic.rsplit('/', 1)[-1]}",
            )
            thread.start()
            self._threads.append(thread)
        log.info("traffic on %d topics of %s started", len(self._topics), self.namespace)

    def stop(self) -> None:
        """Stop producing, wait (bounded) until consumers caught up with every acknowledged send, close."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self._threads = []
        deadline = time.monotonic() + self.drain_timeout_seconds
        while self._missing_now() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._client is not None:
            self._client.close()
            self._client = None
        self._consumers = []

    def run(self, duration_seconds: float) -> TrafficReport:
        """Produce for `duration_seconds`, then stop and report."""
        self.start()
        try:
            time.sleep(duration_seconds)
        finally:
            self.stop()
        return self.report()

    def report(self) -> TrafficReport:
        """Totals so far; `missing` lists acknowledged sequence numbers that no consumer received."""
        with self._lock:
            return TrafficReport(
                produced=sum(state.sent for state in self._topics.values()),
                consumed=sum(len(state.received) for state in self._topics.values()),
                duplicates=sum(state.duplicates for state in self._topics.values()),
                send_retries=sum(state.send_retries for state in self._topics.values()),
                missing=self._missing_now_locked(),
            )

    def __enter__(self) -> TrafficGenerator:
        self.setup()
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def _produce(self, producer: Any, state: _TopicState) -> None:
        payload_pad = b"x" * max(self.payload_bytes - 12, 0)
        interval = 1.0 / state.rate
        next_send = time.monotonic()
        try:
            while not self._stopping.is_set():
                delay = next_send - time.monotonic()
                if delay > 0 and self._stopping.wait(delay):
                    break
                sequence = state.sent
                while True:
                    try:
                        producer.send(b"%012d" % sequence + payload_pad, properties={_SEQUENCE_PROPERTY: str(sequence)})
                        break
                    except pulsar.PulsarException as error:  # e.g. timeout while its bundle moves
                        with self._lock:
                            state.send_retries += 1
                        log.info("send %d on %s failed (%s); retrying", sequence, state.topic, error)
                        if self._stopping.wait(0.5):
                            return
                with self._lock:
                    state.sent = sequence + 1
                next_send = max(next_send + interval, time.monotonic() - 1.0)
        finally:
            producer.close()

    def _on_message(self, state: _TopicState) -> Callable[[Any, Any], None]:
        def listener(consumer: Any, message: Any) -> None:
            sequence = int(message.properties()[_SEQUENCE_PROPERTY])
            with self._lock:
                if sequence in state.received:
                    state.duplicates += 1
                state.received.add(sequence)
            consumer.acknowledge(message)

        return listener

    def _missing_now(self) -> dict[str, list[int]]:
        with self._lock:
            return self._missing_now_locked()

    def _missing_now_locked(self) -> dict[str, list[int]]:
        missing = {}
        for state in self._topics.values():
            gaps = [sequence for sequence in range(state.sent) if sequence not in state.received]
            if gaps:
                missing[state.topic] = gaps
        return missing

    # ---------------------------------------------------------------- HTTP

    def _get(self, path: str) -> Any:
        response = self._http.get(f"{self.admin_url}{path}", timeout=_HTTP_TIMEOUT_SECONDS)
        if response.status_code != 200:
            raise TrafficError(f"GET {path}: HTTP {response.status_code} {response.text}")
        return response.json()

    def _put(
        self,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        ok: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        # requests re-sends a PUT with its body on 307, which is how brokers redirect to the owner or leader.
        response = self._http.put(f"{self.admin_url}{path}", json=body, params=params, timeout=_HTTP_TIMEOUT_SECONDS)
        if response.status_code not in {200, 204} | set(ok):
            raise TrafficError(f"PUT {path}: HTTP {response.status_code} {response.text}")
