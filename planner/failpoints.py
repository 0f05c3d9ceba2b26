"""Named step boundaries where a test can stop the process, to kill it there for real.

Inert unless `PULSAR_REBALANCE_FAILPOINT` is set. With `NAME` (or `NAME#N`, the N-th time the point
is reached), the process sends itself SIGSTOP at that point; the test sees it stopped (state `T` in
`/proc/PID/stat`) and sends SIGKILL. The kill therefore lands exactly between two steps, which a
timer or a log line cannot promise, and the process is a real one killed by a real signal.

Each module lists its points in a tuple (`EXECUTOR_POINTS`, `COLLECTOR_POINTS`), so a kill test can
walk every boundary and a new point cannot be forgotten.
"""

from __future__ import annotations

import os
import signal

from planner.settings import ENV_PREFIX, planner_settings

ENV = f"{ENV_PREFIX}FAILPOINT"  # the variable that sets it (planner/settings.py, `failpoint`)

_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    spec = planner_settings().failpoint
    if not spec:
        return
    target, _, nth = spec.partition("#")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGSTOP)
