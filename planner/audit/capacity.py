"""A cluster's capacity advice (`planner.plan.capacity`) from what the product recorded: the samples dataset through
the storage URIs the product uses (without the snapshots the store has not published), the cluster's configuration
as its plans are made with it (the team's settings over what the cluster declared at its latest snapshot over
Pulsar's defaults: the resource weights of the score), and a cache for the review page.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from planner.errors import InputError
from planner.plan.capacity import (
    DEFAULT_MAX_MOMENTS,
    DEFAULT_TARGET,
    DEFAULT_TOLERANCE,
    CapacityAdvice,
    CapacityInputs,
    advise_capacity,
    capacity_inputs,
    capacity_moments,
)
from planner.plan.configuration import plan_configuration
from planner.plan.usage_model import HISTORY_COLUMNS
from planner.samples.dataset import read_samples
from planner.store.database import Store
from planner.store.snapshots import latest_declarations, unpublished_snapshot_ids

DEFAULT_DAYS = 7
# The usage model's history and the direct memory the advice keeps per broker.
_BROKER_COLUMNS = (*HISTORY_COLUMNS, "direct_memory_usage", "direct_memory_limit")
_BUNDLE_COLUMNS = (
    "snapshot_id",
    "broker",
    "bundle",
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
)


@dataclass(frozen=True, slots=True)
class CapacityQuery:
    cluster: str
    start: datetime
    end: datetime
    target: float = DEFAULT_TARGET
    tolerance: float = DEFAULT_TOLERANCE
    max_moments: int = DEFAULT_MAX_MOMENTS

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise InputError(
                f"capacity of cluster {self.cluster!r}: --to {self.end.isoformat()} is not after "
                f"--from {self.start.isoformat()}"
            )


def window_ending(end: datetime | None, days: float = DEFAULT_DAYS) -> tuple[datetime, datetime]:
    """The `days` before `end` (now when None)."""
    end = end or datetime.now(UTC)
    return end - timedelta(days=days), end


def read_capacity_inputs(
    root: str | Path,
    cluster: str,
    start: datetime,
    end: datetime,
    *,
    hidden: Collection[int] = (),
    max_moments: int = DEFAULT_MAX_MOMENTS,
) -> CapacityInputs:
    """The advice's inputs from the samples of the cluster's snapshots taken from `start` to `end` (inclusive), but
    the `hidden` (unpublished) ones. Of the `bundles` table only the snapshots the advice is evaluated on are read:
    a week of a large cluster is millions of rows."""
    window = {"since": start, "until": end, "exclude": hidden}
    brokers = read_samples(root, "brokers", cluster, columns=_BROKER_COLUMNS, **window)
    if brokers.num_rows == 0:
        raise InputError(
            f"capacity of cluster {cluster!r}: no snapshot recorded from {start.isoformat()} to {end.isoformat()} "
            "(--from, --to, --days)"
        )
    recorded = read_samples(root, "bundles", cluster, columns=("snapshot_id", "broker"), **window)
    broker_snapshots = brokers.column("snapshot_id").to_pylist()
    bundle_snapshots = pc.unique(recorded.column("snapshot_id")).to_pylist()
    wanted = {*capacity_moments(broker_snapshots, bundle_snapshots, max_moments), max(broker_snapshots)}
    bundles = read_samples(root, "bundles", cluster, columns=_BUNDLE_COLUMNS, only=wanted, **window)
    return capacity_inputs(cluster, brokers.to_pydict(), bundles.to_pydict(), max_moments=max_moments)


def read_capacity_advice(
    store: Store, root: str | Path, query: CapacityQuery, settings: Mapping[str, Any] | None = None
) -> CapacityAdvice:
    """The advice for the cluster's published snapshots taken in the query's window (from, to inclusive)."""
    hidden = unpublished_snapshot_ids(store, query.cluster)
    inputs = read_capacity_inputs(
        root, query.cluster, query.start, query.end, hidden=hidden, max_moments=query.max_moments
    )
    config = plan_configuration(query.cluster, dict(settings or {}), latest_declarations(store, query.cluster)).config
    return advise_capacity(
        inputs,
        config.resource_weights,
        target=query.target,
        tolerance=query.tolerance,
        window=(query.start, query.end),
    )


# The review page's advice: a week of snapshots evaluated on this many of them, kept for this long.
PAGE_MAX_MOMENTS = 96
PAGE_CACHE_SECONDS = 15 * 60
_PAGE_CACHE_SIZE = 64


class AdviceCache:
    """Advice kept per cluster and query for a while, so the review page does not recompute it on every request;
    one computation at a time per key (a second request for it waits for the first)."""

    def __init__(self, seconds: float = PAGE_CACHE_SECONDS, size: int = _PAGE_CACHE_SIZE) -> None:
        self.seconds = seconds
        self.size = size
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[tuple[Any, ...], threading.Lock] = {}

    def advice_json(
        self, store: Store, root: str | Path, cluster: str, target: float, *, now: datetime | None = None
    ) -> dict[str, Any]:
        """The last week's advice as JSON (`CapacityAdvice.to_json`, with `computedAt`), from the cache when fresh."""
        target = round(target, 1)  # a tenth of a point is as fine as the figures go: no key per float
        key = (str(root), cluster, target)
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                found = self._entries.get(key)
                if found is not None and time.monotonic() - found[0] < self.seconds:
                    return found[1]
            moment = now or datetime.now(UTC)
            start, end = window_ending(moment)
            query = CapacityQuery(cluster, start, end, target=target, max_moments=PAGE_MAX_MOMENTS)
            document = read_capacity_advice(store, root, query).to_json()
            document["computedAt"] = moment.isoformat()
            with self._lock:
                self._entries[key] = (time.monotonic(), document)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    evicted, _ = self._entries.popitem(last=False)
                    self._computing.pop(evicted, None)
            return document
