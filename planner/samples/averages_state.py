"""Each cluster's bundle averages as a plan run left them, kept so that the next run folds in only the samples
taken since (`spark_jobs.averaging`), as Pulsar's leader folds each sample into the averages it holds.

A state is one Parquet file per cluster and run, `<samples>/averages-state/cluster=<name>/state-<as of>.parquet`,
written whole. Its rows, per bundle: the samples folded (not capped), the eight averages, and the newest sample's
topics, snapshot id and time. Its footer (`AveragesState`): what it was folded from. A state is a function of the
published samples it names alone, so two runs writing one at once, or a run that dies before its commit, leave
nothing wrong behind.

A run starts from the newest state written as of its `as_of` (`choose_state`), and recomputes from the samples
instead, saying why, when:
- there is none, or it cannot be read, or it was folded with other settings;
- a full recompute is asked for;
- it is older than the history window (recomputing then reads less than folding);
- a snapshot that was unpublished when it was written has been published since;
- a snapshot not folded into it has a lower id than one that was (published late; the Spark job checks this,
  over the samples taken since `LATE_WINDOW` before the state).

An incremental run has no history window: like Pulsar's leader, it keeps folding from the full recompute it
descends from (`origin`). Bundles with no sample within the history window are dropped, as a recompute drops them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError

from planner import storage
from planner.errors import format_validation_error

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
RATE_COLUMNS = ("msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out")
AVERAGE_COLUMNS = tuple(f"{prefix}_{column}" for prefix in ("short", "long") for column in RATE_COLUMNS)
# A snapshot published this long after its time would be missed; the collector abandons a staged one after 10 min.
LATE_WINDOW = timedelta(hours=1)
# States kept per cluster: all from the last day before the newest, and at least this many.
KEEP_STATES = 3
KEEP_FOR = timedelta(days=1)
_METADATA_KEY = b"pulsar-rebalance.averages-state"

STATE_SCHEMA = pa.schema(
    [
        ("bundle", pa.string()),
        ("samples", pa.int64()),
        *[(column, pa.float64()) for column in AVERAGE_COLUMNS],
        ("topics", pa.int64()),
        ("last_snapshot_id", pa.int64()),
        ("last_taken_millis", pa.int64()),
    ]
)


class AveragesState(BaseModel):
    """What a state was folded from (its file's footer)."""

    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    cluster: str
    as_of: datetime
    origin: datetime  # where the full recompute it descends from began reading
    horizons: tuple[int, int] = (SHORT_SAMPLES, LONG_SAMPLES)
    newest_snapshot: int  # the highest snapshot id folded
    recent_snapshots: tuple[int, ...]  # the ids folded that were taken after as_of - LATE_WINDOW
    unpublished: tuple[int, ...]  # the cluster's unpublished snapshot ids then, none of them folded


@dataclass(frozen=True, slots=True)
class StateChoice:
    """The state a run folds onto (`state`, at `uri`), or none and why the run recomputes."""

    reason: str
    state: AveragesState | None = None
    uri: str | None = None


def state_directory(samples: str, cluster: str) -> str:
    return storage.join(samples, "averages-state", f"cluster={cluster}")


def state_uri(samples: str, cluster: str, as_of: datetime) -> str:
    # Named by the time in milliseconds, zero-padded: name order is time order.
    return storage.join(state_directory(samples, cluster), f"state-{int(as_of.timestamp() * 1000):015d}.parquet")


def read_state_footer(uri: str) -> AveragesState:
    """A state's footer, validated; raises ValueError naming the file and what is wrong."""
    filesystem, path = storage.filesystem(uri)
    try:
        schema = pq.read_schema(path, filesystem=filesystem)
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"averages state {storage.display(uri)} cannot be read: {error}") from None
    if not schema.remove_metadata().equals(STATE_SCHEMA):
        raise ValueError(f"averages state {storage.display(uri)}: its columns are not {STATE_SCHEMA.names}")
    metadata = (schema.metadata or {}).get(_METADATA_KEY)
    if metadata is None:
        raise ValueError(f"averages state {storage.display(uri)}: its footer has no {_METADATA_KEY.decode()}")
    try:
        return AveragesState.model_validate_json(metadata)
    except ValidationError as error:
        raise ValueError(format_validation_error(error, f"averages state {storage.display(uri)}")) from None


def choose_state(
    samples: str,
    cluster: str,
    as_of: datetime,
    history: timedelta,
    unpublished: Collection[int],
    *,
    recompute: bool = False,
) -> StateChoice:
    """The newest state of the cluster written as of `as_of` that a run may fold onto, or why it may not."""
    if recompute:
        return StateChoice("a full recompute was asked for")
    as_of_millis = int(as_of.timestamp() * 1000)
    candidates = [
        uri
        for uri in storage.list_files(state_directory(samples, cluster))
        if (millis := _millis_in_name(uri)) is not None and millis <= as_of_millis
    ]
    if not candidates:
        return StateChoice("no stored averages state")
    uri = candidates[-1]
    try:
        state = read_state_footer(uri)
    except ValueError as error:
        return StateChoice(str(error))
    if state.cluster != cluster or state.horizons != (SHORT_SAMPLES, LONG_SAMPLES):
        return StateChoice(f"averages state {storage.display(uri)} was folded for other settings")
    if state.as_of <= as_of - history:
        return StateChoice(f"the averages state of {state.as_of.isoformat()} is older than the history window")
    published_since = sorted(set(state.unpublished) - set(unpublished))
    if published_since:
        return StateChoice(f"snapshot {published_since[0]} was published after the averages state was written")
    return StateChoice("folded onto the stored averages state", state, uri)


def _millis_in_name(uri: str) -> int | None:
    name = storage.display(uri).rpartition("/")[2]
    digits = name.removeprefix("state-").removesuffix(".parquet")
    return int(digits) if name.startswith("state-") and name.endswith(".parquet") and digits.isdigit() else None


def write_state(samples: str, state: AveragesState, rows: Sequence[dict[str, object]]) -> str:
    """Write a state whole, then delete the cluster's states older than `KEEP_FOR` before it (keeping
    `KEEP_STATES`); returns its URI."""
    table = pa.Table.from_pylist(list(rows), schema=STATE_SCHEMA)
    table = table.replace_schema_metadata({_METADATA_KEY: state.model_dump_json().encode()})
    uri = state_uri(samples, state.cluster, state.as_of)
    storage.write_parquet(table, uri)
    keep_after = int((state.as_of - KEEP_FOR).timestamp() * 1000)
    older = [u for u in storage.list_files(state_directory(samples, state.cluster)) if u != uri]
    for old in older[:-KEEP_STATES] if len(older) > KEEP_STATES else []:
        millis = _millis_in_name(old)
        if millis is not None and millis < keep_after:
            storage.delete(old)
    return uri
