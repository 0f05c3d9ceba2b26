"""The daily replay: each cluster's last week of recorded snapshots under every strategy and this product's offline
plans, with the check of the week's live plans, stored for the review's replay page (`planner.audit.replays`). The
replay DAG runs it once a day per cluster; `simulate --replay ... --check-live --store` runs the same by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from planner import storage
from planner.audit.replays import write_replay
from planner.simulator.engine import DEFAULT_POLICIES
from planner.simulator.live_check import check_live_plans
from planner.simulator.recorded import read_history
from planner.simulator.replay import compare_replay, stored_replay
from planner.store.database import Store

REPLAY_WINDOW = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class DailyReplay:
    """What the task hands on (XCom): where the result went and the check's verdict."""

    cluster: str
    stored: str
    snapshots: int
    live_plans: int
    consistent: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "stored": self.stored,
            "snapshots": self.snapshots,
            "livePlans": self.live_plans,
            "consistent": self.consistent,
        }


def replay_last_week(
    store: Store, root: str | Path, cluster: str, now: datetime, window: timedelta = REPLAY_WINDOW
) -> DailyReplay:
    """The window before `now` replayed, checked and stored; an InputError when the cluster has no snapshot in it."""
    start = now - window
    history = read_history(root, store, cluster, start, now)
    comparison, _ = compare_replay(history, DEFAULT_POLICIES)
    live = check_live_plans(store, root, history, start, now)
    uri = write_replay(root, stored_replay(history, comparison, now, live.record()))
    return DailyReplay(cluster, storage.display(uri), len(history.snapshot_ids), len(live.plans), live.consistent)
