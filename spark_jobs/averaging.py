"""The bundle averages at fleet scale, as Pulsar's leader would hold them, from the samples dataset.

Averaging modes (`planner.plan.request.Averaging`):
- `pulsar`: Pulsar's sample-count rule (10 short-term, 1000 long-term samples), the samples of each
  bundle replayed in time order (snapshot id, then broker). The recurrence has a closed form: a bundle
  with m samples gives the sample r places from the newest the weight 1/m when m <= N, else
  (1/N)(1 - 1/N)^r for the newest m - N samples and (1 - 1/N)^(m - N) / N for the oldest N. Each sample
  is placed among its broker's load reports by what the store records of the snapshots (`ReportPositions`:
  a join on one long per row), so one read sums each segment (a bundle's rows from one broker), plainly and
  weighted by position; where a segment's rows are every report of its broker from its first to its last,
  those sums are its share (`_segment_terms`). The rest are read again, from their files only: the rows up to
  where the oldest N begin in a segment that starts late, and whole bundles with gaps, with two brokers
  reporting them in one snapshot, or outside the record, ranked by a sort.
  A run folds the samples taken since the cluster's stored averages state onto it, or recomputes from the samples
  within the history (`planner.samples.averages_state` says when; `fold_samples`).
- `window`: plain means over wall-clock windows ending at the plan time (short and long window).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from planner import storage
from planner.plan.request import Averaging, AveragingMode
from planner.samples.averages_state import (
    AVERAGE_COLUMNS,
    LATE_WINDOW,
    LONG_SAMPLES,
    RATE_COLUMNS,
    SHORT_SAMPLES,
    STATE_SCHEMA,
    AveragesState,
    StateChoice,
    choose_state,
)
from planner.samples.reports import SnapshotReports
from spark_jobs.tables import spark_ddl, taken_after

HORIZONS = (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES))
# A segment's decayed sums are rescaled by (1 - 1/N)^-later: exact while that factor's inverse stays a normal double
# with room to spare (10^-250), and a segment whose weight is below 10^-330 adds nothing a double can hold.
SAFE_DECADES = 250.0
GONE_DECADES = 330.0
# Rows read again are chosen by date partition and snapshot id ranges (Parquet statistics skip the other files of a
# date); past this many ranges, one range from the first to the last.
MOST_RANGES = 32
# Besides the averages, per bundle: what the next run folds onto them (`planner.samples.averages_state`).
FOLD_COLUMNS = ("samples", "last_snapshot_id", "last_taken_millis")


def _sample_count_weight(count: F.Column, rank: F.Column, samples: int) -> F.Column:
    alpha = 1.0 / samples
    decayed_old = F.pow(F.lit(1 - alpha), count - samples) / samples
    return (
        F.when(count <= samples, 1.0 / count)
        .when(rank < count - samples, alpha * F.pow(F.lit(1 - alpha), rank))
        .otherwise(decayed_old)
    )


@dataclass(frozen=True, slots=True)
class _Reread:
    """Rows to read again: snapshot ids from `first` to `last`, taken from `since` to `until` (epoch millis)."""

    first: int
    last: int
    since: int
    until: int


@dataclass(frozen=True)
class ReportPositions:
    """Where each load report stands among its broker's reports within the history window, so that a bundle's
    samples can be weighted by their position without being sorted.

    `table` rows, per report key (`report_key`: the cluster, the reporter and the snapshot id in one long, which
    Spark joins on by a hash of longs): `position` (0: the oldest), `later` (the reports after it) and per horizon
    `<prefix>_decay`: (1 - 1/N)^later, or for the first N positions (1 - 1/N)^(n - N) where n is the reporter's
    count, the weight of a sample among the oldest N of a bundle reported from the first report on. The brokers
    never missing from a snapshot of their cluster share the cluster's positions (reporter 0); each other broker
    (`irregular`: per cluster, its reporter number) has its own. `reports` per (cluster, reporter number): its
    snapshot ids and times (epoch millis), by position.

    Placing a broker's rows by the cluster's positions is never wrong, only slower: a segment with a snapshot its
    broker missed spans more positions than it has rows, and is ranked (`_segment_terms`).
    """

    table: pa.Table
    clusters: Mapping[str, int]
    irregular: Mapping[str, Mapping[str, int]]
    reports: Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray]]

    # Bits of the report key: snapshot ids below 2^40, up to 2^12 - 1 irregular brokers per cluster (more share the
    # cluster's positions), up to 2^11 - 1 clusters.
    ID_BITS, REPORTER_BITS, CLUSTER_BITS = 40, 12, 11

    @classmethod
    def of_reports(cls, clusters: Mapping[str, SnapshotReports]) -> ReportPositions:
        if len(clusters) >= 1 << cls.CLUSTER_BITS:
            raise ValueError(f"{len(clusters)} clusters in one job: at most {(1 << cls.CLUSTER_BITS) - 1}")
        numbers = {cluster: number for number, cluster in enumerate(sorted(clusters), start=1)}
        parts, irregular, reports = [cls._rows(0, np.empty(0, np.int64))], {}, {}
        for cluster, known in sorted(clusters.items()):
            ids = np.array([snapshot for snapshot, _ in known.snapshots], dtype=np.int64)
            taken = np.array([millis for _, millis in known.snapshots], dtype=np.int64)
            keyed = ids < 1 << cls.ID_BITS  # rows of larger ids go unplaced (ranked)
            ids, taken = ids[keyed], taken[keyed]
            reports[(cluster, 0)] = (ids, taken)
            missing = sorted(broker for broker, snapshots in known.missing.items() if snapshots)
            irregular[cluster] = dict(zip(missing[: (1 << cls.REPORTER_BITS) - 1], itertools.count(1), strict=False))
            for broker, reporter in irregular[cluster].items():
                kept = ~np.isin(ids, known.missing[broker])
                reports[(cluster, reporter)] = (ids[kept], taken[kept])
            parts += [
                cls._rows(cls._key_prefix(numbers[cluster], reporter), ids)
                for (of, reporter), (ids, _) in reports.items()
                if of == cluster
            ]
        return cls(pa.concat_tables(parts), numbers, irregular, reports)

    @classmethod
    def _key_prefix(cls, cluster: int, reporter: int) -> int:
        return (cluster << (cls.REPORTER_BITS + cls.ID_BITS)) | (reporter << cls.ID_BITS)

    @classmethod
    def _rows(cls, key_prefix: int, snapshots: np.ndarray) -> pa.Table:
        position = np.arange(len(snapshots), dtype=np.int64)
        later = len(snapshots) - 1 - position
        columns = {
            "report_key": pa.array(snapshots | key_prefix),
            "position": pa.array(position),
            "later": pa.array(later),
        }
        for prefix, samples in HORIZONS:
            # The first N weigh as the oldest N samples of a bundle in every report do: (1 - 1/N)^(n - N).
            exponent = np.where(position < samples, len(snapshots) - samples, later)
            columns[f"{prefix}_decay"] = pa.array(np.power(1 - 1 / samples, exponent.astype(np.float64)))
        return pa.table(columns)

    def report_key(self) -> F.Column:
        """Per row with `cluster`, `broker` and `snapshot_id`: the key its report's position is found by."""
        cluster, reporter = F.lit(0), F.lit(0)
        for name, number in self.clusters.items():
            of_cluster = F.col("cluster") == F.lit(name)
            cluster = F.when(of_cluster, F.lit(number)).otherwise(cluster)
            for broker, index in self.irregular.get(name, {}).items():
                reporter = F.when(of_cluster & (F.col("broker") == F.lit(broker)), F.lit(index)).otherwise(reporter)
        everyone = sorted({broker for brokers in self.irregular.values() for broker in brokers})
        if everyone:  # one hash lookup for the rows of the other brokers, not a comparison per irregular broker
            reporter = F.when(F.col("broker").isin(everyone), reporter).otherwise(F.lit(0))
        prefix = F.shiftleft(cluster.cast("long"), self.REPORTER_BITS + self.ID_BITS).bitwiseOR(
            F.shiftleft(reporter.cast("long"), self.ID_BITS)
        )
        snapshot = F.col("snapshot_id")
        return F.when(snapshot.between(0, (1 << self.ID_BITS) - 1), prefix.bitwiseOR(snapshot))

    def span(self, cluster: str, broker: str, first: int, last: int) -> _Reread:
        """The snapshot ids and times of the broker's reports at positions `first` to `last`."""
        ids, taken = self.reports[(cluster, self.irregular.get(cluster, {}).get(broker, 0))]
        times = taken[first : last + 1]
        return _Reread(int(ids[first]), int(ids[last]), int(times.min()), int(times.max()))


def read_reports(
    samples: str | Path,
    clusters: Sequence[str],
    after: datetime,
    as_of: datetime,
    excluded: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, SnapshotReports]:
    """Per cluster, its load reports taken after `after`, up to `as_of`, from the brokers table of the samples
    dataset at `samples`: three columns of a small file per snapshot, read on the driver. (The store knows the
    same, and the plan runs take it from there: `planner.collect.collector.snapshot_reports`.)"""
    from planner.samples.dataset import read_dataset

    return {
        cluster: SnapshotReports.from_brokers_table(
            read_dataset(
                storage.to_uri(samples),
                "brokers",
                cluster,
                after=after,
                until=as_of,
                exclude=(excluded or {}).get(cluster, ()),
                columns=("snapshot_id", "taken_at", "broker"),
            )
        )
        for cluster in clusters
    }


def _rows_of(frame: DataFrame, rereads: Sequence[_Reread]) -> DataFrame:
    """The rows of `frame` within the id ranges, read from the date partitions they span only; with more than
    `MOST_RANGES` ranges after merging, from the first to the last."""
    merged: list[_Reread] = []
    for reread in sorted(rereads, key=lambda r: r.first):
        if merged and reread.first <= merged[-1].last + 1:
            last = merged[-1]
            merged[-1] = _Reread(
                last.first, max(last.last, reread.last), min(last.since, reread.since), max(last.until, reread.until)
            )
        else:
            merged.append(reread)
    if len(merged) > MOST_RANGES:
        merged = [
            _Reread(
                merged[0].first,
                max(r.last for r in merged),
                min(r.since for r in merged),
                max(r.until for r in merged),
            )
        ]

    def day(millis: int) -> str:
        return datetime.fromtimestamp(millis / 1000, UTC).date().isoformat()

    conditions = [
        F.col("date").between(day(r.since), day(r.until)) & F.col("snapshot_id").between(r.first, r.last)
        for r in merged
    ]
    return frame.where(reduce(operator.or_, conditions))


def _placed(bundles: DataFrame, positions: ReportPositions) -> DataFrame:
    """The bundle rows with their report's `position`, `later` and decays (null where the positions lack it)."""
    table = bundles.sparkSession.createDataFrame(positions.table)
    return bundles.withColumn("report_key", positions.report_key()).join(F.broadcast(table), "report_key", "left")


# A row without a position gets this one: far from every other, its segment's positions span more than its rows.
UNPLACED = -(1 << 40)


def _segment_sums(placed: DataFrame) -> DataFrame:
    """Pass 1, the only full read: per segment (the rows of one bundle its broker reported), the row count, the
    first and last position and the newest row's `later`, the ids and times of the oldest and newest row, the
    newest row's topics, and per rate the plain sum and per horizon the sum weighted by each row's decay."""
    position = F.coalesce(F.col("position"), F.lit(UNPLACED))
    aggregations = [
        F.count(F.lit(1)).alias("rows"),
        F.min(position).alias("first_position"),
        F.max(position).alias("last_position"),
        F.min("later").alias("newest_later"),
        F.min("snapshot_id").alias("oldest_id"),
        F.max("snapshot_id").alias("newest_id"),
        F.max_by("topics", "snapshot_id").alias("topics"),
        F.min("taken_at").alias("oldest_taken"),
        F.max("taken_at").alias("newest_taken"),
        *[F.sum(c).alias(f"plain_{c}") for c in RATE_COLUMNS],
    ]
    for prefix, _ in HORIZONS:
        aggregations += [
            F.sum(F.col(c) * F.col(f"{prefix}_decay")).alias(f"{prefix}_decayed_{c}") for c in RATE_COLUMNS
        ]
    return placed.groupBy("cluster", "bundle", "broker").agg(*aggregations)


def _segment_terms(segments: DataFrame) -> DataFrame:
    """Per segment, in its bundle's replay order, how each horizon's average follows from its sums (`how_<prefix>`)
    and the inputs of that: the rows `newer` than it, the bundle's `count`, and `cut_<prefix>`.

    With m rows in the bundle, the sample r places from the newest weighs 1/m when m <= N, else (1/N)(1 - 1/N)^r
    for the newest m - N and (1 - 1/N)^(m - N) / N for the oldest N. Where the segments do not interleave, a
    segment's rows have r = newer + (their rank within it); where the segment also has a row in every report of
    its reporter from its first row to its last (`exact`), that rank is the row's `later` less the newest row's,
    so its decayed sum, rescaled, is its share. How:
    - `small`: m <= N; `uniform`: all its rows among the oldest N; `gone`: its weight is below a double's range;
    - `decayed`: none of its rows among the oldest N, and none among its reporter's first N (exact);
    - `first`: the bundle's oldest segment, from its reporter's first report on (exact): its rows at the first N
      positions are the bundle's oldest N, and their decays are the oldest N's weight (`ReportPositions`), so
      its decayed sum, rescaled, is its share too;
    - `cut`: its rows up to position `cut_<prefix>` are among the oldest N, the rest not, and that position is
      past its reporter's first N (exact; the rows up to it are summed by a second read);
    - `ranked`: none of these: the bundle's rows are ranked by a sort.
    """
    by_bundle = Window.partitionBy("cluster", "bundle")
    newest_first = by_bundle.orderBy(F.col("newest_id").desc(), F.col("broker").desc())
    newer_rows = F.sum("rows").over(newest_first.rowsBetween(Window.unboundedPreceding, -1))
    segments = (
        segments.withColumn("newer", F.coalesce(newer_rows, F.lit(0)))
        .withColumn("count", F.sum("rows").over(by_bundle))
        .withColumn("newer_oldest_id", F.lag("oldest_id").over(newest_first))
        .withColumn("newer_broker", F.lag("broker").over(newest_first))
    )
    in_order = (
        F.col("newer_oldest_id").isNull()
        | (F.col("newer_oldest_id") > F.col("newest_id"))
        | ((F.col("newer_oldest_id") == F.col("newest_id")) & (F.col("newer_broker") > F.col("broker")))
    )
    exact = F.col("rows") == F.col("last_position") - F.col("first_position") + 1
    columns = []
    for prefix, samples in HORIZONS:
        decades = -math.log10(1 - 1 / samples)
        threshold = F.col("count") - samples
        newer, rows = F.col("newer"), F.col("rows")
        exact_and_safe = exact & (F.col("newest_later") * decades <= SAFE_DECADES)
        first_position = F.col("first_position")
        # The segment's rows among the bundle's oldest N are its oldest, up to this position.
        cut = first_position + newer + rows - threshold - 1
        how = (
            F.when(F.col("count") <= samples, "small")
            .when(~in_order, "ranked")
            .when(newer >= threshold, "uniform")
            .when(newer * decades >= GONE_DECADES, "gone")
            .when(~exact_and_safe, "ranked")
            .when((newer + rows <= threshold) & (first_position >= samples), "decayed")
            .when((newer + rows == F.col("count")) & (first_position == 0), "first")
            .when((newer + rows > threshold) & (cut >= samples - 1), "cut")
            .otherwise("ranked")
        )
        columns += [how.alias(f"how_{prefix}"), cut.alias(f"cut_{prefix}")]
    return segments.select("*", *columns)


def _shares(terms: DataFrame, cut_sums: DataFrame | None) -> DataFrame:
    """Each settled segment's share of its bundle's averages, per horizon and rate (`cut_sums` completing the cut
    ones: per segment, horizon and rate, `<prefix>_cut_plain_<rate>` and `<prefix>_cut_decayed_<rate>`)."""
    if cut_sums is not None:
        terms = terms.join(cut_sums, ["cluster", "bundle", "broker"], "left")
    count, newer = F.col("count"), F.col("newer")
    shares = []
    for prefix, samples in HORIZONS:
        how = F.col(f"how_{prefix}")
        oldest = F.pow(F.lit(1 - 1 / samples), count - samples) / samples  # the weight of each of the oldest N
        rescale = F.pow(F.lit(1 - 1 / samples), newer - F.col("newest_later")) / samples
        for c in RATE_COLUMNS:
            plain, decayed = F.col(f"plain_{c}"), F.col(f"{prefix}_decayed_{c}")
            share = (
                F.when(how == "small", plain / count)
                .when(how == "uniform", oldest * plain)
                .when(how == "gone", F.lit(0.0))
                .when((how == "decayed") | (how == "first"), rescale * decayed)
            )
            if cut_sums is not None:
                cut_plain, cut_decayed = F.col(f"{prefix}_cut_plain_{c}"), F.col(f"{prefix}_cut_decayed_{c}")
                share = share.when(how == "cut", rescale * (decayed - cut_decayed) + oldest * cut_plain)
            shares.append(share.alias(f"{prefix}_{c}"))
    return terms.select(
        "cluster",
        "bundle",
        F.when(newer == 0, F.col("topics")).alias("topics"),
        *shares,
        F.least(count, F.lit(SHORT_SAMPLES)).alias("short_samples"),
        F.least(count, F.lit(LONG_SAMPLES)).alias("long_samples"),
        count.alias("samples"),
        F.col("newest_id").alias("last_snapshot_id"),
        F.unix_millis("newest_taken").alias("last_taken_millis"),
    )


def _cut_sums(placed: DataFrame, cuts: DataFrame, rereads: Sequence[_Reread]) -> DataFrame:
    """Pass 2 for the cut segments (`cuts`: their keys and `cut_<prefix>` positions, null where not cut): per
    horizon, the plain and decayed sums of their rows up to the cut, read from the files of `rereads` only."""
    rows = _rows_of(placed, rereads).join(F.broadcast(cuts), ["cluster", "bundle", "broker"])
    aggregations = []
    for prefix, _ in HORIZONS:
        inside = F.col("position") <= F.col(f"cut_{prefix}")
        decayed = F.col(f"{prefix}_decay")
        aggregations += [F.sum(F.when(inside, F.col(c))).alias(f"{prefix}_cut_plain_{c}") for c in RATE_COLUMNS]
        aggregations += [
            F.sum(F.when(inside, F.col(c) * decayed)).alias(f"{prefix}_cut_decayed_{c}") for c in RATE_COLUMNS
        ]
    return rows.groupBy("cluster", "bundle", "broker").agg(*aggregations)


def _ranked_averages(bundles: DataFrame) -> DataFrame:
    """The averages (`AVERAGED_COLUMNS`) of every bundle in `bundles` from its rows ranked by a sort."""
    by_bundle = Window.partitionBy("cluster", "bundle")
    newest_first = by_bundle.orderBy(F.col("snapshot_id").desc(), F.col("broker").desc())
    ranked = bundles.withColumn("count", F.count(F.lit(1)).over(by_bundle)).withColumn(
        "rank", F.row_number().over(newest_first) - 1
    )
    # The weights in a projection first: computed once per row, not once per averaged column.
    weights = [
        _sample_count_weight(F.col("count"), F.col("rank"), samples).alias(f"{prefix}_weight")
        for prefix, samples in HORIZONS
    ]
    aggregations = [F.max(F.when(F.col("rank") == 0, F.col("topics"))).alias("topics")]
    for prefix, samples in HORIZONS:
        weight = F.col(f"{prefix}_weight")
        aggregations += [F.sum(weight * F.col(c)).alias(f"{prefix}_{c}") for c in RATE_COLUMNS]
        aggregations.append(F.least(F.max("count"), F.lit(samples)).alias(f"{prefix}_samples"))
    aggregations += [
        F.max("count").alias("samples"),
        F.max("snapshot_id").alias("last_snapshot_id"),
        F.unix_millis(F.max("taken_at")).alias("last_taken_millis"),
    ]
    columns = ("snapshot_id", "taken_at", "count", "rank", "topics", *RATE_COLUMNS)
    return ranked.select("cluster", "bundle", *columns, *weights).groupBy("cluster", "bundle").agg(*aggregations)


AVERAGED_COLUMNS = ("topics", *AVERAGE_COLUMNS, "short_samples", "long_samples", *FOLD_COLUMNS)


def _add_up(parts: DataFrame) -> DataFrame:
    """Per bundle, its segments' shares summed (the other columns are the newest segment's or the bundle's)."""
    return parts.groupBy("cluster", "bundle").agg(
        *[F.sum(c).alias(c) for c in AVERAGE_COLUMNS],
        *[F.max(c).alias(c) for c in AVERAGED_COLUMNS if c not in AVERAGE_COLUMNS],
    )


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def bundle_averages(
    bundles: DataFrame, averaging: Averaging, as_of: datetime, positions: ReportPositions | None = None
) -> DataFrame:
    """Per (cluster, bundle): short- and long-term averages, sample counts and the latest topic count, and what
    the next run folds onto them (`FOLD_COLUMNS`: the sample count, the newest sample's id and time).

    Samples are in the order the collector replays them: by snapshot id, then broker (a bundle two brokers
    reported in one snapshot gets two samples). `positions` (of the reports within the same window as `bundles`)
    place each row among its broker's reports, so that one read sums the rows per segment, and a second reads
    only the rows `_segment_terms` finds those sums do not settle. Without positions, every row is ranked.
    """
    if averaging.mode is not AveragingMode.PULSAR:
        aggregations = [
            F.max_by("topics", F.struct("snapshot_id", "broker")).alias("topics"),
            F.count(F.lit(1)).alias("samples"),
            F.max("snapshot_id").alias("last_snapshot_id"),
            F.unix_millis(F.max("taken_at")).alias("last_taken_millis"),
        ]
        for prefix, span in (("short", averaging.short_window), ("long", averaging.long_window)):
            inside = F.col("taken_at") > F.lit(as_of - span)
            aggregations += [F.avg(F.when(inside, F.col(c))).alias(f"{prefix}_{c}") for c in RATE_COLUMNS]
            aggregations.append(F.count(F.when(inside, F.lit(1))).alias(f"{prefix}_samples"))
        return bundles.groupBy("cluster", "bundle").agg(*aggregations)
    if positions is None:
        return _ranked_averages(bundles)

    placed = _placed(bundles, positions)
    # Small (a row per bundle and broker that reported it): materialised once for its uses below.
    hows = [F.col(f"how_{prefix}") for prefix, _ in HORIZONS]
    ranked_bundle = F.max(reduce(operator.or_, [how == "ranked" for how in hows])).over(
        Window.partitionBy("cluster", "bundle")
    )
    terms = _segment_terms(_segment_sums(placed)).withColumn("ranked", ranked_bundle).localCheckpoint()
    settled = terms.where(~F.col("ranked"))
    cut_columns = [F.when(F.col(f"how_{p}") == "cut", F.col(f"cut_{p}")).alias(f"cut_{p}") for p, _ in HORIZONS]
    cuts = settled.where(reduce(operator.or_, [how == "cut" for how in hows])).select(
        "cluster", "bundle", "broker", "first_position", *cut_columns
    )
    cut_rows = cuts.collect()
    cut_sums = None
    if cut_rows:
        rereads = [
            positions.span(
                row["cluster"],
                row["broker"],
                row["first_position"],
                max(row[f"cut_{p}"] for p, _ in HORIZONS if row[f"cut_{p}"] is not None),
            )
            for row in cut_rows
        ]
        cut_sums = _cut_sums(placed, cuts.drop("first_position"), rereads)
    parts = [_shares(settled, cut_sums)]
    needed = (
        terms.where("ranked")
        .groupBy("cluster", "bundle")
        .agg(
            F.min("oldest_id").alias("oldest_id"),
            F.max("newest_id").alias("newest_id"),
            F.min("oldest_taken").alias("oldest_taken"),
            F.max("newest_taken").alias("newest_taken"),
        )
    )
    rereads = [
        _Reread(row["oldest_id"], row["newest_id"], _millis(row["oldest_taken"]), _millis(row["newest_taken"]))
        for row in needed.collect()
    ]
    if rereads:
        rows = _rows_of(bundles, rereads).join(F.broadcast(needed.select("cluster", "bundle")), ["cluster", "bundle"])
        parts.append(_ranked_averages(rows))
    return _add_up(reduce(DataFrame.unionByName, parts))


def _fold_weights(samples: int, stored: F.Column, new: F.Column, position: F.Column) -> tuple[F.Column, F.Column]:
    """Pulsar's rule, n = min(n + 1, N) and avg = ((n - 1) avg + x) / n, applied `new` times to an average of
    `stored` samples, in closed form: the weight of the new sample at `position` (1 = the oldest new one), and
    the stored average's.

    The sample folded k-th is divided by n_k = min(stored + k, N), then each later step j multiplies it by
    (n_j - 1) / n_j: while n_j < N, the product telescopes to (stored + k) / (stored + J), where J = min(new, L)
    and L = N - stored is the step at which n reaches N; after that, each step multiplies by (1 - 1/N).
    The stored average's weight is the same product from k = 0, without the division (0 when nothing was stored).
    """
    capped_at = F.greatest(F.lit(samples) - stored, F.lit(0))
    uncapped = F.least(new, capped_at)

    def carried(k: F.Column) -> F.Column:
        telescoped = F.when(uncapped > k, (stored + k) / (stored + uncapped)).otherwise(F.lit(1.0))
        decayed = F.pow(F.lit(1 - 1 / samples), F.greatest(new - F.greatest(k, capped_at), F.lit(0)))
        return telescoped * decayed

    return carried(position) / F.least(stored + position, F.lit(samples)), carried(F.lit(0))


def fold_samples(state: DataFrame, new_rows: DataFrame, as_of: datetime, history: timedelta) -> DataFrame:
    """The averages of `bundle_averages` (with `FOLD_COLUMNS`) from a stored state (`STATE_SCHEMA` rows with their
    `cluster`) and the samples taken since, read in the collector's replay order. Bundles with no sample within
    `history` are dropped, as a recompute drops them."""
    by_bundle = Window.partitionBy("cluster", "bundle")
    newest_first = by_bundle.orderBy(F.col("snapshot_id").desc(), F.col("broker").desc())
    stored = state.select("cluster", "bundle", F.col("samples").alias("stored"))
    ranked = (
        new_rows.select("cluster", "bundle", "snapshot_id", "broker", "taken_at", "topics", *RATE_COLUMNS)
        .withColumn("new", F.count(F.lit(1)).over(by_bundle))
        .withColumn("position", F.col("new") - F.row_number().over(newest_first) + 1)
        .join(stored, ["cluster", "bundle"], "left")
        .withColumn("stored", F.coalesce("stored", F.lit(0).cast("long")))
    )
    aggregations = [
        F.max("new").alias("new"),
        F.max_by("topics", "position").alias("new_topics"),
        F.max("snapshot_id").alias("new_last_snapshot_id"),
        F.unix_millis(F.max("taken_at")).alias("new_last_taken_millis"),
    ]
    for prefix, samples in HORIZONS:
        weight, _ = _fold_weights(samples, F.col("stored"), F.col("new"), F.col("position"))
        ranked = ranked.withColumn(f"{prefix}_weight", weight)
        aggregations += [F.sum(F.col(f"{prefix}_weight") * F.col(c)).alias(f"new_{prefix}_{c}") for c in RATE_COLUMNS]
    folded = ranked.groupBy("cluster", "bundle").agg(*aggregations).join(state, ["cluster", "bundle"], "full")
    stored_samples = F.coalesce("samples", F.lit(0).cast("long"))
    new_samples = F.coalesce("new", F.lit(0).cast("long"))
    columns = [
        F.coalesce("new_topics", "topics").alias("topics"),
        (stored_samples + new_samples).alias("samples"),
        F.coalesce("new_last_snapshot_id", "last_snapshot_id").alias("last_snapshot_id"),
        F.coalesce("new_last_taken_millis", "last_taken_millis").alias("last_taken_millis"),
    ]
    for prefix, samples in HORIZONS:
        _, carried = _fold_weights(samples, stored_samples, new_samples, F.lit(0))
        for c in RATE_COLUMNS:
            new_part = F.coalesce(F.col(f"new_{prefix}_{c}"), F.lit(0.0))
            columns.append((F.coalesce(F.col(f"{prefix}_{c}"), F.lit(0.0)) * carried + new_part).alias(f"{prefix}_{c}"))
        columns.append(F.least(stored_samples + new_samples, F.lit(samples)).alias(f"{prefix}_samples"))
    window_start = int((as_of - history).timestamp() * 1000)
    return folded.select("cluster", "bundle", *columns).where(F.col("last_taken_millis") > F.lit(window_start))


def _new_samples(bundles: DataFrame, folding: Mapping[str, AveragesState]) -> DataFrame:
    """The rows of each folding cluster that its state has not folded: taken since `LATE_WINDOW` before the state,
    other than the snapshots it folded then (the date partitions before are never listed)."""
    conditions = []
    for cluster, state in folding.items():
        condition = (F.col("cluster") == F.lit(cluster)) & taken_after(state.as_of - LATE_WINDOW)
        if state.recent_snapshots:
            condition &= ~F.col("snapshot_id").isin(list(state.recent_snapshots))
        conditions.append(condition)
    return bundles.where(reduce(operator.or_, conditions))


def _choose_states(
    bundles: DataFrame,
    samples: str,
    clusters: Sequence[str],
    as_of: datetime,
    history: timedelta,
    excluded: Mapping[str, Sequence[int]],
    recompute: bool,
) -> dict[str, StateChoice]:
    """Per cluster, the averages state its run folds onto, or why it recomputes (`choose_state`, and here the check
    that needs the samples: none of those not folded is older than the newest folded)."""
    choices = {
        cluster: choose_state(samples, cluster, as_of, history, excluded[cluster], recompute=recompute)
        for cluster in clusters
    }
    folding = {cluster: choice.state for cluster, choice in choices.items() if choice.state is not None}
    if folding:
        oldest_new = _new_samples(bundles, folding).groupBy("cluster").agg(F.min("snapshot_id").alias("id")).collect()
        for row in oldest_new:
            newest_folded = folding[row["cluster"]].newest_snapshot
            if row["id"] <= newest_folded:
                choices[row["cluster"]] = StateChoice(
                    f"snapshot {row['id']} was published after the averages state's newest, {newest_folded}"
                )
    return choices


def recent_snapshots(bundles: DataFrame, as_of: datetime) -> dict[str, list[int]]:
    """Per cluster, the snapshot ids taken after `as_of - LATE_WINDOW` (what a state records as folded lately)."""
    recent = bundles.where(taken_after(as_of - LATE_WINDOW)).groupBy("cluster")
    rows = recent.agg(F.sort_array(F.collect_set("snapshot_id")).alias("ids")).collect()
    return {row["cluster"]: list(row["ids"]) for row in rows}


def cluster_averages(
    spark: SparkSession,
    bundles: DataFrame,
    samples: str,
    clusters: Sequence[str],
    averaging: Averaging,
    as_of: datetime,
    history: timedelta,
    excluded: Mapping[str, Sequence[int]],
    recompute: bool = False,
    reports: Mapping[str, SnapshotReports] | None = None,
) -> tuple[DataFrame, dict[str, StateChoice]]:
    """The clusters' bundle averages (`bundle_averages`' columns) from the `bundles` table up to `as_of`, and for
    `pulsar` averaging each cluster's choice of state: folded onto it, or recomputed over `history` with the
    cluster's load reports within it (`reports`, the store's, where given; else read from the samples dataset at
    `samples`)."""
    choices: dict[str, StateChoice] = {}
    if averaging.mode is AveragingMode.PULSAR:
        choices = _choose_states(bundles, samples, clusters, as_of, history, excluded, recompute)
    folding = {cluster: choice for cluster, choice in choices.items() if choice.state is not None}
    recomputed = [cluster for cluster in clusters if cluster not in folding]
    parts = []
    if recomputed:
        of_recomputed = F.col("cluster").isin(recomputed)
        within = of_recomputed & (F.col("taken_at") > F.lit(as_of - history))
        positions = None
        if averaging.mode is AveragingMode.PULSAR:
            known = {cluster: reports[cluster] for cluster in recomputed if cluster in (reports or {})}
            unknown = [cluster for cluster in recomputed if cluster not in known]
            known |= read_reports(samples, unknown, as_of - history, as_of, excluded)
            positions = ReportPositions.of_reports(known)
        parts.append(bundle_averages(bundles.where(within), averaging, as_of, positions))
    if folding:
        states = [
            spark.read.schema(spark_ddl(STATE_SCHEMA))
            .parquet(storage.spark_uri(choice.uri or ""))
            .withColumn("cluster", F.lit(cluster))
            for cluster, choice in folding.items()
        ]
        new_rows = _new_samples(bundles, {cluster: choice.state for cluster, choice in folding.items() if choice.state})
        parts.append(fold_samples(reduce(DataFrame.unionByName, states), new_rows, as_of, history))
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts), choices
