"""The executor's action kinds: one `KindExecutor` per `ActionKind`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from planner.actions import ActionKind
from planner.execute.kinds.protocol import KindExecutor
from planner.execute.kinds.split import Split
from planner.execute.kinds.unload import Unload

KIND_EXECUTORS: Mapping[ActionKind, KindExecutor] = MappingProxyType(
    {executor.kind: executor for executor in (Unload(), Split())}
)


def kind_executor(kind: ActionKind) -> KindExecutor:
    return KIND_EXECUTORS[kind]
