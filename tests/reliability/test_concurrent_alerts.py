"""Two checks of the accuracy bound at once (two report tasks finishing together, a report task and `accuracy
measure`), on SQLite and on a real PostgreSQL: the crossing is recorded and returned once between them, so the
notifiers are told once."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from planner.audit.accuracy import AccuracyBound, AlertState
from planner.audit.outcomes import BOUND_EVENT, bound_state, check_bound
from planner.store.audit_log import cluster_events
from planner.store.database import Store
from planner.store.models import AuditEvent
from tests.unit.test_accuracy import NOW, executed_plan, reset_state

pytestmark = pytest.mark.reliability

BOUND = AccuracyBound(p90=5.0, window=timedelta(days=7))
# How long a check waits for the other at the rendezvous below.
RENDEZVOUS_SECONDS = 2.0


def test_two_checks_at_once_record_and_tell_one_crossing(stores: tuple[Store, Store]) -> None:
    store = stores[0]
    for index in range(3):  # three plans 20 points off: the p90 leaves the 5-point bound
        executed_plan(store, f"run-{index}", measured_at=NOW - timedelta(hours=index + 1), scores=(60, 38))
        reset_state(store)

    # Each check, once the transaction in which it read the alert's last state has committed, waits for the other's
    # to have committed too: two checks that read and record in separate transactions both read "never crossed" and
    # both record the crossing. When the read and the write share one transaction, the other reads what the first
    # recorded. The wait times out only if the other cannot commit before this one goes on.
    rendezvous = threading.Barrier(2, timeout=RENDEZVOUS_SECONDS)
    read_state = threading.local()

    def read(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and f"FROM {AuditEvent.__tablename__}" in statement:
            read_state.pending = True

    def committed(_session: Session) -> None:
        if getattr(read_state, "pending", False):
            read_state.pending = False
            with contextlib.suppress(threading.BrokenBarrierError):
                rendezvous.wait()

    for each in stores:
        event.listen(each.engine, "after_cursor_execute", read)
    event.listen(Session, "after_commit", committed)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            alerts = list(pool.map(lambda each: check_bound(each, "west", BOUND, NOW, actor="test"), stores))
    finally:
        event.remove(Session, "after_commit", committed)
        for each in stores:
            event.remove(each.engine, "after_cursor_execute", read)

    told = [alert for alert in alerts if alert is not None]
    assert len(told) == 1, alerts
    assert told[0].state is AlertState.OUTSIDE
    assert len(cluster_events(store, "west", BOUND_EVENT, NOW - timedelta(days=30))) == 1
    assert bound_state(store, "west") is AlertState.OUTSIDE
