"""A cluster's own recorded history as a simulation's source, in place of a synthetic scenario.

The history is what collects recorded (the samples dataset: one row per broker and per bundle of each snapshot). The
replay runs the same one-minute loop as a scenario (`planner.simulator.engine`) with:

- the brokers as recorded: each one's hardware (cores from its CPU limit, NIC from its bandwidth limit) and costs
  (background, CPU per msg/s and per byte/s) fitted on its own reports with the usage model the plans predict with
  (`planner.plan.usage_model`); a broker without a usable fit gets the cluster's;
- every bundle's traffic as recorded in each snapshot, held until the next snapshot (or interpolated linearly between
  two), in the minute it was taken, counted from the first snapshot of the window;
- the initial ownership of the first snapshot; brokers joining, leaving and coming back in the minutes the snapshots
  show it. A broker the collect could not read (a partial snapshot) is kept up with its bundles' last traffic: the
  recording does not say it stopped.

What it cannot reproduce, by construction: the moves themselves (the policy under test decides them, so ownership
after the first snapshot is the replay's own), memory and direct memory (they do not follow traffic, the score here is
CPU and NIC), traffic within the minutes between two snapshots, and a bundle first recorded after the first snapshot
(a split's children, a new namespace): idle until its first record, placed by a lookup as Pulsar places it.

Pure: the history comes in as tables already read (`planner.simulator.recorded` reads them).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from planner.audit.replays import LiveConsistency, PolicyOutcome, StoredReplay
from planner.errors import InputError
from planner.plan.configuration import plan_configuration
from planner.plan.usage_model import ResourceFit, UsageModels, fit_usage_models, histories_from_columns
from planner.pulsar.config import MIB, PulsarConfig
from planner.pulsar.declarations import ClusterDeclarations, ClusterPolicies
from planner.simulator.engine import OFFLINE_PREFIX, Policy, RunResult, run_source
from planner.simulator.report import Comparison
from planner.simulator.scenario import BrokerEvent, Brokers, Bundles, Scenario, World
from planner.simulator.traffic import Minute, MinuteSource

# A broker whose NIC limit is unknown (Pulsar reports none on hosts it cannot read): its NIC never limits it.
UNLIMITED_NIC_GBPS = 1e6
DEFAULT_TARGET_SPREAD = 20.0
DEFAULT_CADENCE_MINUTES = 60
_RATE_COLUMNS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
# The `bundles` table's columns a replay reads: a week of a large cluster is millions of rows, so no more are read.
RECORDED_BUNDLE_COLUMNS = ("snapshot_id", "broker", "bundle", *_RATE_COLUMNS, "topics")


class Interpolation(StrEnum):
    """How a bundle's traffic between two snapshots is taken: the last snapshot's, or a straight line to the next."""

    HOLD = "hold"
    LINEAR = "linear"


@dataclass(frozen=True, slots=True)
class RecordedHistory:
    """A cluster's snapshots within a window, as the samples dataset holds them, oldest first.

    `brokers` and `bundles` are the dataset's tables (`planner.samples.dataset.BROKER_SCHEMA`, `BUNDLE_SCHEMA`; of
    `bundles`, at least `RECORDED_BUNDLE_COLUMNS`) with only the window's published snapshots; `missing`: per
    snapshot id, the brokers its collect could not read; `declarations`: what the cluster declared at the latest
    snapshot (its configuration, release and placement policies; None: not read)."""

    cluster: str
    brokers: pa.Table
    bundles: pa.Table
    missing: Mapping[int, frozenset[str]] = field(default_factory=dict)
    declarations: ClusterDeclarations | None = None
    # Read once from the table: the replay asks for them per snapshot, and reading them per call made it quadratic.
    _taken_at: Mapping[int, datetime] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.brokers.num_rows == 0:
            raise InputError(f"replay of cluster {self.cluster!r}: no snapshots recorded in the window")
        ids = self.brokers.column("snapshot_id").to_pylist()
        times = self.brokers.column("taken_at").to_pylist()
        object.__setattr__(self, "_taken_at", MappingProxyType(dict(sorted(zip(ids, times, strict=True)))))

    @property
    def policies(self) -> ClusterPolicies | None:
        return self.declarations.policies if self.declarations is not None else None

    @property
    def snapshot_ids(self) -> list[int]:
        return list(self._taken_at)

    @property
    def taken_at(self) -> Mapping[int, datetime]:
        """Each snapshot's time."""
        return self._taken_at

    @property
    def start(self) -> datetime:
        return min(self._taken_at.values())

    @property
    def end(self) -> datetime:
        return max(self._taken_at.values())

    def minute_of(self, moment: datetime) -> int:
        """The replay's minute of a moment: whole minutes since the first snapshot."""
        return int((moment - self.start).total_seconds() // 60)

    def usage_models(self) -> UsageModels:
        """Every broker's costs, fitted on its reports of the window."""
        return fit_usage_models(histories_from_columns(self.brokers.to_pydict()))


@dataclass(frozen=True, slots=True)
class BrokerHardware:
    """A broker as the simulator models it, from its recorded limits and fitted costs."""

    cores: float
    cpu_per_msg: float  # percent of one core per msg/s
    cpu_per_mib: float  # percent of one core per MiB/s
    nic_gbps: float
    background: float  # percent


def broker_hardware(history: RecordedHistory, models: UsageModels) -> dict[str, BrokerHardware]:
    """Per broker: cores and NIC from its latest recorded limits, costs from its CPU fit (the cluster's when its own is
    not usable, the cluster's CPU over its messages when none is). A negative fitted cost or background (noise on a
    quiet broker) is taken as zero: the simulator's load grows with traffic."""
    rows = history.brokers.select(["broker", "cpu_limit", "bandwidth_in_limit", "cpu_usage", "msg_rate_in"])
    latest: dict[str, dict[str, Any]] = {}
    for row in rows.to_pylist():
        latest[row["broker"]] = row  # rows come ordered by snapshot: the last one wins
    fallback = _cluster_cpu_per_message(history)
    hardware = {}
    for broker, row in sorted(latest.items()):
        cores = row["cpu_limit"] / 100.0 if row["cpu_limit"] and row["cpu_limit"] > 0 else 1.0
        nic = row["bandwidth_in_limit"] / (1024.0 * 1024.0) if row["bandwidth_in_limit"] > 0 else UNLIMITED_NIC_GBPS
        fit = models.fit(broker, "cpu") or fallback
        hardware[broker] = BrokerHardware(
            cores=cores,
            # The fit's figures are percent of the broker's whole CPU; the simulator's are percent of one core.
            cpu_per_msg=max(fit.per_msg, 0.0) * cores,
            cpu_per_mib=max(fit.per_byte, 0.0) * MIB * cores,
            nic_gbps=nic,
            background=min(max(fit.intercept, 0.0), 100.0),
        )
    return hardware


def _cluster_cpu_per_message(history: RecordedHistory) -> ResourceFit:
    """The first-order estimate with no usable fit: the cluster's CPU percent over its messages, no background."""
    columns = history.brokers.select(["cpu_usage", "cpu_limit", "msg_rate_in", "msg_rate_out"]).to_pydict()
    percent = sum(
        usage / limit * 100.0 for usage, limit in zip(columns["cpu_usage"], columns["cpu_limit"], strict=True) if limit
    )
    messages = sum(columns["msg_rate_in"]) + sum(columns["msg_rate_out"])
    per_msg = percent / messages if messages > 0 else 0.0
    return ResourceFit(0.0, per_msg, 0.0, None, len(columns["cpu_usage"]), "history")


@dataclass(frozen=True)
class RecordedTraffic:
    """Every bundle's recorded traffic per minute: `stats[k]` is snapshot k's (bundle x NamespaceBundleStats rates),
    taken at minute `minutes[k]`; before the first record of a bundle, and in a snapshot where its broker was read and
    did not report it, it has none. `minute(t)` can be asked in any order (it keeps no state)."""

    minutes: np.ndarray  # snapshot minute, ascending
    stats: np.ndarray  # (snapshots, bundles, 4)
    interpolation: Interpolation = Interpolation.HOLD

    def minute(self, t: int) -> Minute:
        k = int(np.searchsorted(self.minutes, t, side="right")) - 1
        k = max(k, 0)
        stats = self.stats[k]
        if self.interpolation is Interpolation.LINEAR and k + 1 < len(self.minutes) and t > self.minutes[k]:
            share = (t - self.minutes[k]) / (self.minutes[k + 1] - self.minutes[k])
            stats = stats + (self.stats[k + 1] - stats) * share
        return Minute(np.array(stats, dtype=float), np.zeros(stats.shape[0], dtype=bool))


@dataclass(frozen=True)
class ReplayWorld:
    """A recorded history compiled for the engine: the world, its traffic and the minutes it lasts."""

    world: World
    traffic: RecordedTraffic
    minutes: int
    hardware: Mapping[str, BrokerHardware]
    removed: tuple[str, ...]


def replay_scenario(history: RecordedHistory, minutes: int, target_spread: float, cadence: int) -> Scenario:
    """The run's scenario record: its name and figures as the reports print them (no generated parts)."""
    return Scenario.model_construct(
        name=f"replay-{history.cluster}",
        description=(
            f"the recorded snapshots of cluster {history.cluster} from {history.start.isoformat()} "
            f"to {history.end.isoformat()}"
        ),
        minutes=minutes,
        target_spread=target_spread,
        spike_lag_minutes=10,
        offline_cadence_minutes=cadence,
        settings={},
        brokers=[],
        bundles=[],
        events=[],
        policies=None,
    )


def build_replay_world(
    history: RecordedHistory,
    *,
    remove: Collection[str] = (),
    interpolation: Interpolation = Interpolation.HOLD,
    target_spread: float = DEFAULT_TARGET_SPREAD,
    cadence_minutes: int = DEFAULT_CADENCE_MINUTES,
) -> ReplayWorld:
    """The history as the engine's world, without the `remove`d brokers (their bundles are looked up and placed by
    Pulsar's leader in the first minute, as when a broker is taken away)."""
    recorded = sorted(set(history.brokers.column("broker").to_pylist()))
    unknown = sorted(set(remove) - set(recorded))
    if unknown:
        raise InputError(f"replay of cluster {history.cluster!r}: remove: {unknown[0]} is not a recorded broker")
    ids = [broker for broker in recorded if broker not in set(remove)]
    if not ids:
        raise InputError(f"replay of cluster {history.cluster!r}: remove: no broker would be left")
    position = {broker: index for index, broker in enumerate(ids)}
    snapshots = history.snapshot_ids
    times = history.taken_at
    snapshot_minutes = np.array([history.minute_of(times[s]) for s in snapshots], dtype=int)
    minutes = int(snapshot_minutes[-1]) + 1
    hardware = broker_hardware(history, history.usage_models())

    # Who is up in each snapshot: those who reported, and those the collect could not read.
    present: dict[int, set[str]] = {s: set(history.missing.get(s, frozenset())) for s in snapshots}
    for snapshot_id, broker in zip(
        history.brokers.column("snapshot_id").to_pylist(), history.brokers.column("broker").to_pylist(), strict=True
    ):
        present[snapshot_id].add(broker)
    join_at = np.full(len(ids), -1, dtype=int)
    events: list[BrokerEvent] = []
    up = [False] * len(ids)
    for k, snapshot_id in enumerate(snapshots):
        minute = int(snapshot_minutes[k])
        for broker, b in position.items():
            now = broker in present[snapshot_id]
            if now and join_at[b] < 0:
                join_at[b] = minute
            if k > 0 and now != up[b]:
                events.append(BrokerEvent(minute, b, now))
            up[b] = now
    # A first appearance after minute 0 is a join (an up event); stops before starts within a minute, as scenarios do.
    events = sorted(events, key=lambda e: (e.minute, e.up, e.broker))
    join_at = np.where(join_at < 0, minutes + 1, join_at)  # never up in the window: never joins

    brokers = Brokers(
        ids=tuple(ids),
        cores=np.array([hardware[b].cores for b in ids], dtype=float),
        cpu_per_msg=np.array([hardware[b].cpu_per_msg for b in ids], dtype=float),
        cpu_per_mib=np.array([hardware[b].cpu_per_mib for b in ids], dtype=float),
        nic_gbps=np.array([hardware[b].nic_gbps for b in ids], dtype=float),
        background=np.array([hardware[b].background for b in ids], dtype=float),
        join_at=join_at,
    )
    bundles, stats = _bundles_and_stats(history, snapshots, position, join_at)
    scenario = replay_scenario(history, minutes, target_spread, cadence_minutes)
    world = World(scenario, brokers, bundles, tuple(events), history.policies)
    traffic = RecordedTraffic(snapshot_minutes, stats, interpolation)
    return ReplayWorld(world, traffic, minutes, hardware, tuple(sorted(remove)))


def _bundles_and_stats(
    history: RecordedHistory, snapshots: Sequence[int], position: Mapping[str, int], join_at: np.ndarray
) -> tuple[Bundles, np.ndarray]:
    # Column arrays, not Python rows: a week of a 1,000-bundle cluster is two million rows.
    table = history.bundles.select(list(RECORDED_BUNDLE_COLUMNS))
    bundle_codes, names = _codes(table.column("bundle"))
    broker_codes, broker_names = _codes(table.column("broker"))
    snapshot_array = np.asarray(snapshots, dtype=np.int64)
    recorded = table.column("snapshot_id").to_numpy().astype(np.int64)
    slot = np.minimum(np.searchsorted(snapshot_array, recorded), len(snapshot_array) - 1)
    kept = snapshot_array[slot] == recorded  # rows of snapshots outside the window are not replayed
    order = np.flatnonzero(kept)
    ks, rows, owners = slot[order], bundle_codes[order], broker_codes[order]
    rates = np.column_stack([table.column(name).to_numpy().astype(float) for name in _RATE_COLUMNS])[order]
    # A bundle read twice in one snapshot (reported by two brokers mid-move): its later row counts.
    flat = ks * len(names) + rows
    last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
    stats = np.zeros((len(snapshots), len(names), 4))
    stats[ks[last], rows[last]] = rates[last]
    seen = np.zeros((len(snapshots), len(names)), dtype=bool)
    seen[ks, rows] = True
    owner = np.full((len(snapshots), len(names)), -1, dtype=np.int32)
    owner[ks[last], rows[last]] = owners[last]
    # Each bundle's first record: the earliest snapshot, the first row of it.
    first_rows = np.lexsort((np.arange(len(order)), ks, rows))
    starts = first_rows[np.flatnonzero(np.diff(rows[first_rows], prepend=-1))]
    first_k = np.full(len(names), len(snapshots), dtype=int)
    first_k[rows[starts]] = ks[starts]
    topics = np.ones(len(names), dtype=int)
    topic_counts = table.column("topics").to_numpy(zero_copy_only=False)
    topics[rows[starts]] = [max(int(count or 1), 1) for count in topic_counts[order][starts].tolist()]
    first_owner = {int(row): broker_names[code] for row, code in zip(rows[starts], owners[starts], strict=True)}
    # A bundle unseen in a snapshot keeps its last traffic when its broker was not read then (a partial snapshot).
    code_of = {name: code for code, name in enumerate(broker_names)}
    last_owner = np.full(len(names), -1, dtype=np.int32)
    for k, snapshot_id in enumerate(snapshots):
        missing = [code_of[broker] for broker in history.missing.get(snapshot_id, ()) if broker in code_of]
        if k and missing:
            held = ~seen[k] & np.isin(last_owner, missing)
            stats[k, held] = stats[k - 1, held]
        last_owner[seen[k]] = owner[k, seen[k]]
    initial_owner = np.full(len(names), -1, dtype=int)
    for row, broker in first_owner.items():
        b = position.get(broker)
        if first_k[row] == 0 and b is not None and join_at[b] == 0:
            initial_owner[row] = b
    first = stats[np.minimum(first_k, len(snapshots) - 1), np.arange(len(names))]
    rate_in = first[:, 0]
    fanout = np.divide(first[:, 1], rate_in, out=np.zeros(len(names)), where=rate_in > 0)
    messages = first[:, 0] + first[:, 1]
    size = np.divide(first[:, 2] + first[:, 3], messages, out=np.zeros(len(names)), where=messages > 0)
    zeros = np.zeros(len(names))
    bundles = Bundles(
        names=tuple(names),
        initial_owner=initial_owner,
        rate_in=rate_in,
        fanout=fanout,
        message_size=size,
        topics=topics,
        diurnal=zeros,
        diurnal_peak_minute=zeros,
        growth_per_day=zeros,
        noise=zeros,
        spikes=(),
    )
    return bundles, stats


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Each value's index in the column's distinct values, sorted, and those values."""
    encoded = column.combine_chunks().dictionary_encode()
    values = encoded.dictionary.to_pylist()
    order = sorted(range(len(values)), key=values.__getitem__)
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values))
    return rank[encoded.indices.to_numpy()], [values[index] for index in order]


def replay_config(history: RecordedHistory, overrides: Mapping[str, Any] | None = None) -> PulsarConfig:
    """The configuration the cluster's plans are made with (`planner.plan.configuration`): the caller's settings (the
    team's, the CLI's --set) over what the cluster declared at the latest snapshot over Pulsar's defaults."""
    return plan_configuration(history.cluster, dict(overrides or {}), history.declarations).config


@dataclass(frozen=True)
class RecordedSource:
    """A recorded history as a simulation source (`planner.simulator.engine.ScenarioSource`): compiled once, the
    same world and traffic whatever the seed (the seed still draws placement among equally good brokers)."""

    history: RecordedHistory
    remove: Collection[str] = ()
    interpolation: Interpolation = Interpolation.HOLD
    target_spread: float = DEFAULT_TARGET_SPREAD
    cadence_minutes: int = DEFAULT_CADENCE_MINUTES
    compiled: ReplayWorld = field(init=False)

    def __post_init__(self) -> None:
        compiled = build_replay_world(
            self.history,
            remove=self.remove,
            interpolation=self.interpolation,
            target_spread=self.target_spread,
            cadence_minutes=self.cadence_minutes,
        )
        object.__setattr__(self, "compiled", compiled)

    @property
    def scenario(self) -> Scenario:
        return self.compiled.world.scenario

    @property
    def minutes(self) -> int:
        return self.compiled.minutes

    def world(self, seed: int, minutes: int) -> World:
        if minutes > self.compiled.minutes:
            raise InputError(
                f"replay of cluster {self.history.cluster!r}: minutes: the recording lasts {self.compiled.minutes}"
            )
        return self.compiled.world

    def traffic(self, world: World, seed: int) -> MinuteSource:
        return self.compiled.traffic

    def config(self, overrides: Mapping[str, Any] | None) -> PulsarConfig:
        return replay_config(self.history, overrides)


def replay(
    history: RecordedHistory,
    policy: str | Policy,
    *,
    remove: Collection[str] = (),
    overrides: Mapping[str, Any] | None = None,
    seed: int = 1,
    cadence_minutes: int = DEFAULT_CADENCE_MINUTES,
    target_spread: float = DEFAULT_TARGET_SPREAD,
    interpolation: Interpolation = Interpolation.HOLD,
) -> RunResult:
    """What `policy` would have done on the recorded traffic, with the `remove`d brokers gone from the start (the
    capacity question: "and without broker X?"). `p95_score` of the result says how hot the rest ran."""
    source = RecordedSource(history, remove, interpolation, target_spread, cadence_minutes)
    return run_source(source, policy, seed=seed, overrides=overrides)


def p95_score(result: RunResult) -> float:
    """The 95th percentile of every live broker's score over every minute of the run (points)."""
    scores = result.scores[np.isfinite(result.scores)]
    if not len(scores):
        return math.nan
    return float(np.percentile(scores, 95))


# What a replay cannot reproduce, said with every stored result.
NOT_REPRODUCED = (
    "ownership after the first snapshot: the moves are each strategy's own, not those that happened",
    "memory and direct memory: the score follows CPU and NIC, which follow traffic",
    "traffic between two snapshots: held from the last one, or a straight line to the next",
    "bundles first recorded after the first snapshot (split children, new namespaces): idle until then",
)


def compare_replay(
    history: RecordedHistory,
    policies: Sequence[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    seed: int = 1,
    cadence_minutes: int = DEFAULT_CADENCE_MINUTES,
    target_spread: float = DEFAULT_TARGET_SPREAD,
    interpolation: Interpolation = Interpolation.HOLD,
    calibration: bool = False,
) -> tuple[Comparison, ReplayWorld]:
    """Every policy on the same compiled history, as the evaluation compares them on a scenario; `calibration`: this
    product's plans calibrate their usage models on their own executed plans, as with `simulate --calibration on`."""
    source = RecordedSource(history, (), interpolation, target_spread, cadence_minutes)
    runs = tuple(
        run_source(source, policy, seed=seed, overrides=overrides, calibration=calibration) for policy in policies
    )
    comparison = Comparison(source.scenario, seed, source.minutes, target_spread, runs)
    return comparison, source.compiled


def hourly_max(result: RunResult) -> tuple[float | None, ...]:
    """The hottest live broker's score in each hour of the run (None: no broker up in that hour)."""
    hours = []
    for first in range(0, len(result.scores), 60):
        block = result.scores[first : first + 60]
        live = block[np.isfinite(block)]
        hours.append(round(float(live.max()), 2) if len(live) else None)
    return tuple(hours)


def policy_outcome(result: RunResult) -> PolicyOutcome:
    metrics = result.metrics
    return PolicyOutcome(
        policy=result.policy,
        offline=result.policy.startswith(OFFLINE_PREFIX),
        moves=metrics.moves,
        disconnections=metrics.disconnections,
        rounds=len(result.rounds),
        minutes_to_balance=metrics.minutes_to_balance,
        peak_score=round(metrics.peak_score, 2),
        p95_score=round(p95_score(result), 2),
        final_spread=round(metrics.final_spread, 2),
        prediction_error=None if metrics.prediction_error is None else round(metrics.prediction_error, 2),
        hourly_max=hourly_max(result),
    )


def stored_replay(
    history: RecordedHistory, comparison: Comparison, made_at: datetime, live: LiveConsistency | None = None
) -> StoredReplay:
    """The result as the review's replay page reads it."""
    return StoredReplay(
        cluster=history.cluster,
        start=history.start,
        end=history.end,
        made_at=made_at,
        minutes=comparison.minutes,
        snapshots=len(history.snapshot_ids),
        brokers=comparison.runs[0].brokers if comparison.runs else (),
        target_spread=comparison.target_spread,
        not_reproduced=NOT_REPRODUCED,
        outcomes=tuple(policy_outcome(run) for run in comparison.runs),
        live=live,
    )


def replay_markdown() -> str:
    """How to read a replay of a cluster's own history: the evaluation document's section."""
    return "\n".join(
        [
            "## Reading a replay of your own history",
            "",
            "`pulsar-rebalance simulate --replay CLUSTER --from T1 --to T2` runs the policies above on what the",
            "collects recorded instead of a scenario (`planner/simulator/replay.py`): each broker with its recorded",
            "CPU and NIC limits and the background and costs its usage model fitted on its own reports, each bundle",
            "with its recorded rates (held between snapshots, or `--interpolation linear`), the first snapshot's",
            "ownership, and brokers joining and leaving when the snapshots show it. The table has the columns",
            "defined above, plus the p95 score over every broker and minute. How to read it:",
            "",
            "- **Compare the rows with each other, not with what happened.** Every row starts from the same ownership",
            "  and sees the same traffic; from its first move on, the cluster is the policy's own. The row of the",
            "  strategy that ran live is what that strategy does in the simulator's world, not a re-enactment: the",
            "  live cluster's moves are not replayed.",
            "- **Moves and disconnects** are the price clients pay; **p95 score** and **peak** what the hottest",
            "  brokers carried; **minutes to balance** `never` on real traffic often means a spread that a daily",
            "  cycle keeps reopening: look at the hottest broker per hour on the review's replay page.",
            "- **Prediction error** (offline rows) compares each executed plan's forecast with the next minute's",
            "  simulated load. The simulated brokers follow their fitted costs exactly, so it understates the live",
            "  error: the accuracy tracked after each executed plan is the figure to trust for the live cluster.",
            "- **What it cannot reproduce** is listed with every result: memory and direct memory (the score here",
            "  follows CPU and NIC), traffic within the minutes between snapshots, and bundles first recorded",
            "  later (split children, new namespaces), idle until then.",
            "- **The check of the live plans** (`--check-live`, and the daily replay) is separate from the rows:",
            "  each live plan of the window is planned again by the same planner from what was recorded when it",
            "  ran. `consistent` says the preview an approver saw is what the recording gives; a plan that",
            "  differs names the unloads only one side has, and the notes say what the recording could not",
            "  settle (another run's state in between, an executed unload the next snapshot shows elsewhere).",
            "",
        ]
    )
