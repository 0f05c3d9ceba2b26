"""Progress on the terminal for steps that take minutes (rich progress bars on stderr).

Shown only when stderr is a terminal: logs, CI and scripts that read the JSON on stdout see nothing of
it. Each bar polls what it measures from a background thread, so the step itself stays unchanged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

POLL_SECONDS = 0.5


def _console() -> Console:
    return Console(stderr=True)


def shown() -> bool:
    return _console().is_terminal


def directory_bytes(root: Path) -> int:
    """Bytes under `root` so far (files being written included)."""
    total = 0
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


def _bar(*columns: ProgressColumn) -> Progress:
    """A spinner, the description, the given columns and the time elapsed; erased when the step ends."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *columns,
        TimeElapsedColumn(),
        console=_console(),
        transient=True,
    )


@contextlib.contextmanager
def _polling(progress: Progress, update: Callable[[], None]) -> Iterator[None]:
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            with contextlib.suppress(Exception):  # a measure that fails must not stop the step
                update()

    thread = threading.Thread(target=poll, daemon=True)
    with progress:
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with contextlib.suppress(Exception):
                update()


@contextlib.contextmanager
def download(label: str, measure: Callable[[], int]) -> Iterator[None]:
    """Bytes downloaded so far (`measure`), with the speed; the total is not known in advance."""
    if not shown():
        yield
        return
    progress = _bar(DownloadColumn(), TransferSpeedColumn())
    task = progress.add_task(label, total=None)
    with _polling(progress, lambda: progress.update(task, completed=measure())):
        yield


@contextlib.contextmanager
def spark_stages(spark: Any, label: str) -> Iterator[None]:
    """One bar per running Spark stage (its tasks done of all), from the driver's status tracker. A Spark
    Connect session has no tracker in this process: then a spinner only."""
    if not shown():
        yield
        return
    progress = _bar(BarColumn(), MofNCompleteColumn())
    overall = progress.add_task(label, total=None)
    tracker = None
    with contextlib.suppress(Exception):
        tracker = spark.sparkContext.statusTracker()
    bars: dict[int, Any] = {}

    def update() -> None:
        progress.update(overall)
        if tracker is None:
            return
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is None:
                continue
            if stage_id not in bars:
                bars[stage_id] = progress.add_task(f"  stage {stage_id}: {info.name[:40]}", total=info.numTasks)
            progress.update(bars[stage_id], completed=info.numCompletedTasks, total=info.numTasks)
        active = set(tracker.getActiveStageIds())
        for stage_id, bar in list(bars.items()):
            if stage_id not in active:
                progress.remove_task(bar)
                del bars[stage_id]

    with _polling(progress, update):
        yield


@contextlib.contextmanager
def steps(label: str) -> Iterator[Callable[[str], None]]:
    """A spinner with the step under way; call the yielded function with each new step's name."""
    if not shown():
        yield lambda _step: None
        return
    progress = _bar()
    task = progress.add_task(label, total=None)

    def step(name: str) -> None:
        progress.update(task, description=f"{label}: {name}")

    with progress:
        yield step
