"""Collecting one snapshot of a cluster's load, and rebuilding LoadData from collected snapshots.

A snapshot is: every active broker's own load report (fetched from all brokers concurrently),
the namespaces' bundle boundaries (from the bundles the brokers own where they cover a namespace, else asked),
optionally per-topic stats, and what the cluster declares (`planner.collect.declared`); the raw responses archived
compressed for audit and replay; broker and bundle rows appended to the samples dataset; and a
snapshot row in the store. A broker that cannot be read is recorded as missing and the snapshot is
flagged partial; a declaration that cannot be read is listed in the declarations as unreadable.

A snapshot is complete in all three places or absent from all of them, under kill -9 at any point:
1. its row is committed as `staged` first (so its id is never given out again, even on SQLite);
2. the archive and the two Parquet files are written under staged names that readers skip;
3. each is published by a move (a rename on disks; on an object store a copy and delete, which is no less
   safe: readers go by the row's status, not by which files exist);
4. the row is marked `published`, with its audit event.
Readers see published snapshots only (their ids exclude every other). A collect that failed abandons
its snapshot at once; one that was killed leaves a `staged` row, which the next collect of the cluster
abandons once its collect was last known alive more than `STALE_AFTER` ago: its files are deleted and the row
kept as `abandoned`. A live collect proves itself alive by the row's `heartbeat_at`, set when the row is staged
(not when the fetch began: a slow fetch does not age it) and renewed from a thread until the row is published.
Abandoning, renewing and publishing are each one UPDATE conditional on the row still being `staged`, so the row
count decides between them: a collect whose row was abandoned under it publishes nothing and fails.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from planner import storage
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.collect.declared import NamespaceAnswers, read_declarations, read_namespaces
from planner.collect.extensible import broker_load, read_bundle_stats
from planner.errors import InputError
from planner.failpoints import failpoint
from planner.lifecycle import SnapshotStatus
from planner.names import check_cluster_name
from planner.pulsar.bundle_range import FULL_RANGE_LOWER, FULL_RANGE_UPPER, BundleName, BundleRange, namespace_of
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, is_extensible_load_manager
from planner.pulsar.load_manager_shared import is_system_service_namespace
from planner.pulsar.model import (
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    local_broker_data_from_json,
)
from planner.samples.dataset import read_samples, sample_path, snapshot_tables, staged
from planner.samples.reports import SnapshotReports
from planner.samples.time_average import update_bundle_data
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.snapshots import (
    NewSnapshot,
    abandon_snapshot,
    publish_snapshot,
    published_snapshot,
    published_snapshots,
    read_archive,
    recently_unloaded_bundles,
    renew_heartbeat,
    snapshot_status,
    stage_snapshot,
    stale_snapshot_ids,
    unpublished_snapshot_ids,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Pulsar's leader keeps 1000 long-term samples; older snapshots cannot change the averages much.
REPLAYED_SNAPSHOTS = 1000
# A staged snapshot whose collect was last known alive this long ago belongs to a collect that died: a live one
# renews its row's heartbeat every STALE_AFTER / HEARTBEATS_PER_STALE_AGE, so several renewals in a row must fail.
STALE_AFTER = timedelta(minutes=10)
HEARTBEATS_PER_STALE_AGE = 10
# The step boundaries of a collect; `file-staged` and `file-published` are reached once per file (3 each).
COLLECTOR_POINTS = ("collector.row-staged", "collector.file-staged", "collector.file-published", "collector.published")
SNAPSHOT_FILES = 3


class SnapshotAbandonedError(InputError):
    """The collect's staged snapshot was abandoned under it (it looked dead to another collect): nothing of it is
    published, and the row and its audit event are the abandoner's. A one-line failure, as the executor's
    ClaimLostError: the next collect takes a new snapshot."""


@dataclass(frozen=True, slots=True)
class CollectResult:
    snapshot_id: int
    cluster: str
    brokers: int
    bundles: int
    partial: bool
    missing: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot_id,
            "cluster": self.cluster,
            "brokers": self.brokers,
            "bundles": self.bundles,
            "partial": self.partial,
        }


def archive_root(root: str | Path) -> str:
    return storage.join(storage.to_uri(root), "archive")


def snapshot_files(root: str | Path, cluster: str, snapshot_id: int, taken_at: datetime) -> list[tuple[str, str]]:
    """A snapshot's files as (staged, published) URIs: the archive, then the brokers' and bundles' rows."""
    archive = storage.join(
        archive_root(root), f"cluster={cluster}", f"date={taken_at.date()}", f"snapshot-{snapshot_id:012d}.json.gz"
    )
    published = [
        archive,
        *(sample_path(root, table, cluster, snapshot_id, taken_at) for table in ("brokers", "bundles")),
    ]
    return [(staged(uri), uri) for uri in published]


def snapshot_reports(store: Store, cluster: str, after: datetime, until: datetime) -> SnapshotReports:
    """The cluster's published snapshots taken after `after`, up to `until`, and per broker those it is missing
    from: what the Spark job places each sample by (`planner.samples.reports`)."""
    snapshots = published_snapshots(store, cluster, after=after, until=until)
    missing: dict[str, list[int]] = defaultdict(list)
    for snapshot in snapshots:
        for broker in snapshot.missing_brokers:
            missing[broker].append(snapshot.id)
    return SnapshotReports(
        snapshots=[(snapshot.id, int(as_utc(snapshot.taken_at).timestamp() * 1000)) for snapshot in snapshots],
        missing=dict(missing),
    )


def _delete_snapshot_files(root: str | Path, cluster: str, snapshot_id: int, taken_at: datetime) -> None:
    for staged_uri, published_uri in snapshot_files(root, cluster, snapshot_id, taken_at):
        storage.delete(staged_uri)
        storage.delete(published_uri)


def _abandon(
    store: Store,
    root: str | Path,
    snapshot_id: int,
    actor: str,
    reason: str,
    *,
    last_alive_before: datetime | None = None,
) -> bool:
    """Mark a staged snapshot abandoned and delete whatever was written of it (the row is kept: ids are never
    reused); with `last_alive_before`, only if its collect was last known alive before then.

    One conditional UPDATE decides, so of two abandoners, or an abandoner and the collect renewing or publishing
    the row, one wins; returns whether this call did. The files are deleted before that commits: a kill in
    between leaves the row staged, for the next collect to abandon again."""
    return abandon_snapshot(
        store,
        snapshot_id,
        actor,
        reason,
        lambda cluster, taken_at: _delete_snapshot_files(root, cluster, snapshot_id, taken_at),
        last_alive_before=last_alive_before,
    )


def abandon_stale_snapshots(
    store: Store, root: str | Path, cluster: str, *, older_than: timedelta = STALE_AFTER, actor: str = "collector"
) -> list[int]:
    """Abandon the cluster's staged snapshots whose collect was last known alive more than `older_than` ago (left
    by collects that were killed); returns those this call abandoned."""
    cutoff = datetime.now(UTC) - older_than
    candidates = stale_snapshot_ids(store, cluster, cutoff)
    reason = f"its collect was last known alive more than {older_than} ago: it died"
    # Each is checked again as it is abandoned: its collect may have renewed it since, or another abandoned it.
    return [
        snapshot_id
        for snapshot_id in candidates
        if _abandon(store, root, snapshot_id, actor, reason, last_alive_before=cutoff)
    ]


class _Heartbeat:
    """Renews a staged snapshot's heartbeat from a daemon thread while the collect writes its files (a slow
    object store must not make a live collect look dead); notices when the row was abandoned under it. A renewal
    that fails (the database busy or away) is retried at the next beat: only a row no longer staged stops it."""

    def __init__(self, store: Store, snapshot_id: int, every: timedelta) -> None:
        self.snapshot_id = snapshot_id
        self._store, self._every = store, every.total_seconds()
        self._stopped, self._lost = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"snapshot-{snapshot_id}-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stopped.wait(self._every):
            try:
                if not renew_heartbeat(self._store, self.snapshot_id):
                    self._lost.set()
                    return
            except Exception as error:  # the next beat tries again: abandonment needs several missed in a row
                logger.warning("snapshot %s: heartbeat not renewed: %s", self.snapshot_id, error)

    def check(self) -> None:
        """Stop writing at once when the row was abandoned under this collect."""
        if self._lost.is_set():
            raise SnapshotAbandonedError(f"snapshot {self.snapshot_id} was abandoned by another collect")


def _write_archive(uri: str, document: dict[str, Any]) -> None:
    storage.write_bytes(uri, gzip.compress(json.dumps(document).encode()))


def collect(
    client: PulsarAdminClient,
    store: Store,
    root: str | Path,
    cluster_name: str | None = None,
    *,
    topic_stats: bool = False,
    actor: str = "collector",
    stale_after: timedelta = STALE_AFTER,
) -> CollectResult:
    """Take one snapshot of the cluster behind `client` and record it everywhere (the store, and the archive and
    samples under the storage root `root`, a path or URI), or nowhere.

    `stale_after`: how long a staged snapshot's collect may be silent before it is taken for dead (every collect
    of a cluster must use the same; tests shorten it)."""
    runtime = client.runtime_configuration()
    # The name becomes the snapshot's storage paths: checked by Pulsar's rule before anything is written.
    cluster = check_cluster_name(cluster_name, "the clusters file") if cluster_name else client.cluster_name(runtime)
    load_manager = str(runtime["loadManagerClassName"]) if runtime.get("loadManagerClassName") else None
    extensible = is_extensible_load_manager(load_manager)
    taken_at = datetime.now(UTC)
    brokers = client.active_brokers(cluster)
    leader_answer, leader_error = None, None
    try:
        leader_answer = client.leader_broker().get("brokerId")
    except AdminError as error:
        logger.warning("%s: no leader answer: %s", cluster, error)
        leader_error = error
    leader = leader_answer if isinstance(leader_answer, str) else None

    def read_groups(owned_namespaces: set[str]) -> NamespaceAnswers:
        return read_namespaces(client, [], sorted(ns for ns in owned_namespaces if not is_system_service_namespace(ns)))

    groups_read: NamespaceAnswers | None = None
    if extensible:
        loads, groups_read = _extensible_loads(client, cluster, brokers, taken_at, read_groups)
    else:
        loads = _modular_loads(client, cluster, brokers, topic_stats)
        if load_manager is None and brokers and not loads.reports:
            # The runtime configuration was not readable (a role without that right), and no broker gave a load
            # report: an extensible load manager's brokers answer the load report with HTTP 500; their metrics tell.
            probe, probe_groups = _extensible_loads(client, cluster, brokers, taken_at, read_groups)
            if probe.reports:
                loads, load_manager, groups_read = probe, EXTENSIBLE_LOAD_MANAGER, probe_groups
    reports, weighted_max_ema, missing = loads.reports, loads.weighted_max_ema, loads.missing
    raw_reports, topics, owned = loads.raw_reports, loads.topics, loads.owned
    for broker_id, reason in missing.items():
        logger.warning("%s: broker %s missing from the snapshot: %s", cluster, broker_id, reason)

    reported_namespaces = {namespace_of(bundle) for report in reports.values() for bundle in report.last_stats}
    namespaces = sorted(ns for ns in reported_namespaces if not is_system_service_namespace(ns))
    # A namespace whose owned bundles cover its whole range once are its bundles: no call for its boundaries.
    owned_boundaries = boundaries_of_owned(loads.active)
    # Anti-affinity counts every namespace a broker owns, idle ones too (Pulsar's filters read the brokers' bundles).
    owned_namespaces = {namespace_of(bundle) for report in reports.values() for bundle in report.bundles}
    grouped = sorted(ns for ns in reported_namespaces | owned_namespaces if not is_system_service_namespace(ns))
    # Read while the topic stats were decoded, for every broker's namespaces: kept for the brokers in the snapshot.
    groups_read = groups_read.of(set(grouped)) if groups_read else NamespaceAnswers()
    namespace_answers = groups_read.merged(
        read_namespaces(
            client,
            [ns for ns in namespaces if ns not in owned_boundaries],
            [ns for ns in grouped if ns not in groups_read.groups_asked],
        )
    )
    boundaries = {
        ns: owned_boundaries[ns] if ns in owned_boundaries else namespace_answers.boundaries[ns] for ns in namespaces
    }
    declarations = read_declarations(
        client,
        cluster,
        sorted(reports),
        reported_versions={broker: report.broker_version_string for broker, report in reports.items()},
        leader=leader_answer,
        leader_error=leader_error,
        namespaces=namespace_answers,
    )

    archive = {
        "cluster": cluster,
        "adminUrl": client.admin_url,
        "takenAt": taken_at.isoformat(),
        "loadManager": load_manager,
        "weightedMaxEMA": weighted_max_ema,
        "leader": leader,
        "activeBrokers": brokers,
        "loadReports": {b: raw for b, raw in raw_reports.items() if not isinstance(raw, AdminError)},
        "missingBrokers": missing,
        "bundleBoundaries": {
            ns: [f"0x{value:08x}" for value in found] for ns, found in boundaries.items() if isinstance(found, list)
        },
        "boundaryErrors": {ns: str(found) for ns, found in boundaries.items() if isinstance(found, AdminError)},
        "topicStats": {b: stats for b, stats in topics.items() if not isinstance(stats, AdminError)},
        "ownedBundles": {b: bundles for b, bundles in owned.items() if not isinstance(bundles, AdminError)},
        # What the cluster declares (releases, allow-listed configuration, policies): `archive_declarations`.
        "declarations": declarations.model_dump(mode="json"),
    }
    bundle_count = sum(len(report.last_stats) for report in reports.values())
    abandon_stale_snapshots(store, root, cluster, older_than=stale_after, actor=actor)
    new = NewSnapshot(cluster, client.admin_url, taken_at, len(reports), bundle_count, missing, load_manager, leader)
    snapshot_id = stage_snapshot(store, new, lambda staged_id: snapshot_files(root, cluster, staged_id, taken_at)[0][1])
    files = snapshot_files(root, cluster, snapshot_id, taken_at)
    failpoint("collector.row-staged")
    try:
        with _Heartbeat(store, snapshot_id, stale_after / HEARTBEATS_PER_STALE_AGE) as heartbeat:
            heartbeat.check()
            _write_archive(files[0][0], archive)
            failpoint("collector.file-staged")
            for (staged_path, _), rows in zip(
                files[1:], snapshot_tables(snapshot_id, taken_at, reports, weighted_max_ema).values(), strict=True
            ):
                heartbeat.check()
                storage.write_parquet(rows, staged_path)
                failpoint("collector.file-staged")
            for staged_path, published_path in files:
                heartbeat.check()
                storage.move(staged_path, published_path)
                failpoint("collector.file-published")
            _publish(store, snapshot_id, cluster, actor, brokers=len(reports), missing=sorted(missing))
    except BaseException as error:
        if not _abandon(store, root, snapshot_id, actor, f"the collect failed: {type(error).__name__}"):
            _after_losing_the_row(store, root, cluster, snapshot_id, taken_at, error)
        raise
    failpoint("collector.published")
    return CollectResult(snapshot_id, cluster, len(reports), bundle_count, bool(missing), missing)


def _after_losing_the_row(
    store: Store, root: str | Path, cluster: str, snapshot_id: int, taken_at: datetime, error: BaseException
) -> None:
    """The collect failed and its row was no longer staged. Abandoned under it: the row and its audit event are
    the abandoner's, but files this collect wrote after the abandoner's deletes are left, and their names carry
    the snapshot's id, which nobody reuses, so it deletes them; the failure says why (a move of a file the
    abandoner deleted fails with FileNotFoundError). Published (the failure came after the commit): the files are
    the snapshot, and stay."""
    if snapshot_status(store, snapshot_id) is not SnapshotStatus.ABANDONED:
        return
    _delete_snapshot_files(root, cluster, snapshot_id, taken_at)
    if not isinstance(error, SnapshotAbandonedError | KeyboardInterrupt | SystemExit):
        raise SnapshotAbandonedError(
            f"snapshot {snapshot_id} was abandoned by another collect while this one wrote it ({error})"
        ) from error


def _publish(store: Store, snapshot_id: int, cluster: str, actor: str, *, brokers: int, missing: list[str]) -> None:
    """Mark the snapshot published, with its audit event, if it is still staged (still this collect's)."""
    if not publish_snapshot(store, snapshot_id, cluster, actor, brokers=brokers, missing=missing):
        raise SnapshotAbandonedError(f"snapshot {snapshot_id} was abandoned by another collect before it was published")


@dataclass
class _BrokerLoads:
    """What the brokers said of their load, by broker: the reports (LocalBrokerData), each one's own weightedMaxEMA
    (extensible load manager), why a broker is missing, and the raw answers kept in the archive."""

    reports: dict[str, LocalBrokerData] = field(default_factory=dict)
    weighted_max_ema: dict[str, float | None] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    raw_reports: dict[str, Any] = field(default_factory=dict)
    topics: dict[str, Any] = field(default_factory=dict)
    owned: dict[str, Any] = field(default_factory=dict)
    # The bundles the brokers said they own and serve (`is_active`), from `ownedNamespaces`.
    active: set[str] = field(default_factory=set)

    def own(self, broker: str, owned: Mapping[str, Any]) -> None:
        """Record what a broker's `ownedNamespaces` answered: its bundles (archived), and the active ones."""
        self.owned[broker] = sorted(owned)
        self.active.update(
            b for b, status in owned.items() if not isinstance(status, dict) or status.get("is_active", True)
        )


def boundaries_of_owned(bundles: Iterable[str]) -> dict[str, list[int]]:
    """Per namespace, its bundle boundaries when `bundles` (those the brokers own) cover its hash range exactly once,
    end to end: a namespace's bundles partition its range, so these are all of them. A namespace with a bundle nobody
    owns (idle since the last unload), or caught mid-split (a parent beside its children), is left out."""
    ranges: dict[str, list[BundleRange]] = defaultdict(list)
    for bundle in bundles:
        name = BundleName.parse(bundle)
        ranges[name.namespace].append(name.range)
    found = {}
    for namespace, owned in ranges.items():
        owned.sort()
        tiled = owned[0].lower == FULL_RANGE_LOWER and owned[-1].upper == FULL_RANGE_UPPER
        if tiled and all(left.upper == right.lower for left, right in itertools.pairwise(owned)):
            found[namespace] = [bundle_range.lower for bundle_range in owned] + [FULL_RANGE_UPPER]
    return found


def _modular_loads(client: PulsarAdminClient, cluster: str, brokers: list[str], topic_stats: bool) -> _BrokerLoads:
    """The brokers' load reports (ModularLoadManagerImpl), and with `topic_stats` their topic stats."""
    loads = _BrokerLoads(raw_reports=client.map_concurrently(brokers, client.load_report_text))
    for broker_id, raw in loads.raw_reports.items():
        if isinstance(raw, AdminError):
            loads.missing[broker_id] = str(raw)
            continue
        try:
            loads.reports[broker_id] = local_broker_data_from_json(raw, broker_id)
        except InputError as error:
            loads.missing[broker_id] = str(error)
    loads.topics = client.map_concurrently(sorted(loads.reports), client.topic_stats) if topic_stats else {}
    # Load reports list only bundles with loaded topics; an idle bundle's owner shows only here (drains need it).
    for broker, owned in client.map_concurrently(
        sorted(loads.reports), lambda broker: client.owned_bundles(cluster, broker)
    ).items():
        if isinstance(owned, AdminError):
            loads.owned[broker] = owned
        else:
            loads.own(broker, owned)
    return loads


def _extensible_loads(
    client: PulsarAdminClient,
    cluster: str,
    brokers: list[str],
    taken_at: datetime,
    while_decoding: Callable[[set[str]], T],
) -> tuple[_BrokerLoads, T | None]:
    """The brokers' load on the extensible load manager, from their metrics, owned bundles and topic stats. Each
    broker's topic stats are summed per bundle as they arrive and not kept: the bundle sums are its load report.

    When the topic stats are decoded in worker processes (`PulsarAdminClient.map_in_processes`), this process is
    idle meanwhile: `while_decoding` runs then, in a thread, on the namespaces the brokers own (and its result is
    returned); otherwise it is not called (decoding here holds the GIL, and the two would only slow each other)."""
    taken_millis = int(taken_at.timestamp() * 1000)
    first = client.map_concurrently(
        brokers, lambda broker: (client.broker_metrics(broker), client.owned_bundles(cluster, broker))
    )
    readable = [broker for broker in brokers if not isinstance(first[broker], AdminError)]
    meanwhile: Future[T] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="collect-meanwhile") as side:
        if client.worker_processes(len(readable)):
            owned_namespaces = {
                namespace_of(bundle) for answer in first.values() if isinstance(answer, tuple) for bundle in answer[1]
            }
            meanwhile = side.submit(while_decoding, owned_namespaces)
        stats = client.map_in_processes(readable, read_bundle_stats)
    loads = _BrokerLoads()
    for broker_id in brokers:
        answer = first[broker_id]
        if isinstance(answer, AdminError):
            loads.missing[broker_id] = str(answer)
            continue
        metrics, owned = answer
        bundle_stats = stats[broker_id]
        try:
            if isinstance(bundle_stats, AdminError | InputError):
                raise bundle_stats
            load = broker_load(broker_id, metrics, bundle_stats, sorted(owned), taken_millis)
        except (AdminError, InputError) as error:
            loads.missing[broker_id] = str(error)
            continue
        loads.own(broker_id, owned)
        loads.reports[broker_id], loads.weighted_max_ema[broker_id] = load.report, load.weighted_max_ema
        loads.raw_reports[broker_id] = load.report.model_dump_json(by_alias=True)
    return loads, meanwhile.result() if meanwhile is not None else None


def load_data_for_snapshot(store: Store, root: str | Path, snapshot_id: int) -> LoadData:
    """The LoadData a Pulsar leader would hold right after this snapshot.

    Brokers: the snapshot's load reports. Bundle averages: the cluster's snapshots up to this one
    replayed in time order through Pulsar's 10/1000-sample rule, one sample per snapshot for every
    bundle reported in it (as the leader samples every bundle on each report event); bundles not
    reported now are dropped. Recently unloaded bundles come from the store, all of them: the
    planning cycle drops the expired ones with its own clock and grace period.
    """
    snapshot = published_snapshot(store, snapshot_id)
    cluster, missing = snapshot.cluster, snapshot.missing_brokers
    recent = recently_unloaded_bundles(store, cluster)
    archive = read_archive(snapshot.archive_path)
    # A report the collect refused is kept in the archive for audit; the snapshot counts that broker as missing,
    # and so does its LoadData, as Pulsar's leader goes on without a broker whose report it cannot read.
    for broker in sorted(missing):
        logger.warning(
            "snapshot %s: broker %s left out (missing from the snapshot: %s)", snapshot_id, broker, missing[broker]
        )
    reports = {
        broker: local_broker_data_from_json(raw, broker)
        for broker, raw in archive["loadReports"].items()
        if broker not in missing
    }

    bundle_table = read_samples(
        root, "bundles", cluster, up_to_snapshot=snapshot_id, exclude=unpublished_snapshot_ids(store, cluster)
    )
    snapshot_ids = sorted(set(bundle_table.column("snapshot_id").to_pylist()))[-REPLAYED_SNAPSHOTS:]
    first_replayed = snapshot_ids[0] if snapshot_ids else snapshot_id
    averages: dict[str, BundleData] = {}
    columns = bundle_table.select(
        ["snapshot_id", "bundle", "msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out", "topics"]
    ).to_pylist()
    for row in columns:
        if row["snapshot_id"] < first_replayed:
            continue
        sample = NamespaceBundleStats(
            msg_rate_in=row["msg_rate_in"],
            msg_throughput_in=row["msg_throughput_in"],
            msg_rate_out=row["msg_rate_out"],
            msg_throughput_out=row["msg_throughput_out"],
            topics=row["topics"],
        )
        averages[row["bundle"]] = update_bundle_data(averages.get(row["bundle"], BundleData()), sample)
    current = {bundle for report in reports.values() for bundle in report.last_stats}
    return LoadData(
        brokers=reports,
        bundle_data={bundle: data for bundle, data in averages.items() if bundle in current},
        recently_unloaded_bundles=recent,
    )
