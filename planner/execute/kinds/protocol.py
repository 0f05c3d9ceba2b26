"""What the executor does per kind of action (`planner.actions.ActionKind`): the checks before sending, the admin
call, what the cluster shows of a request whose answer was lost, and the outcome of one it accepted.

Each kind is one module implementing `KindExecutor`, listed once in `planner.execute.kinds.registry`. The run
(`planner.execute.executor`) does the rest the same way for every kind: the claim, the attempt rows and their audit
events, the settle time before a reconciliation, the pacing and the budgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from planner.actions import ActionKind
from planner.collect.admin_client import PulsarAdminClient
from planner.execute.events import ExecutionEvent
from planner.execute.live import LiveCluster
from planner.lifecycle import AttemptStatus
from planner.settings import ExecutorSettings
from planner.store.actions import ExecutableAction

# An attempt's status, and why: what a check or a verification decided.
Verdict = tuple[AttemptStatus, str]


@dataclass(frozen=True, slots=True)
class Seen:
    """What the cluster shows of a request in doubt, once settled: the attempt's status (`reconciled-applied`,
    `reconciled-not-applied`, `placed-elsewhere`; `unknown` while the request is still being carried out, so it
    stays in doubt and is never resent), why, and what was seen, for the audit log."""

    status: AttemptStatus
    reason: str
    details: Mapping[str, object] = field(default_factory=dict)


class ActionContext(Protocol):
    """What a kind may use of the run that performs its action."""

    @property
    def live(self) -> LiveCluster: ...

    @property
    def settings(self) -> ExecutorSettings: ...

    @property
    def actions(self) -> Sequence[ExecutableAction]:
        """The plan's actions, in order."""
        ...

    def was_applied(self, action: ExecutableAction) -> bool:
        """Whether an attempt at `action` took effect on the cluster (in this run or an earlier one)."""
        ...

    def pause(self, seconds: float) -> None:
        """Sleep, keeping the claim's lease."""
        ...

    def record(self, action: ExecutableAction, event: ExecutionEvent, **details: object) -> None:
        """Write an event about `action` to the audit log."""
        ...


class KindExecutor(Protocol):
    @property
    def kind(self) -> ActionKind: ...

    @property
    def unloads_bundle(self) -> bool:
        """Whether an applied request unloads the bundle: later plans then skip it for the grace period."""
        ...

    def precheck(self, action: ExecutableAction, run: ActionContext) -> Verdict | None:
        """The kind's preconditions on the live cluster, once the bundle is known to exist: None when the action may
        be sent, else the attempt's recorded outcome (skipped, deferred)."""
        ...

    def send(self, action: ExecutableAction, client: PulsarAdminClient) -> None:
        """The admin call; an AdminError says whether it may have been applied."""
        ...

    def verify(self, action: ExecutableAction, run: ActionContext) -> Verdict:
        """The outcome of a request the broker accepted."""
        ...

    def reconcile(self, action: ExecutableAction, run: ActionContext) -> Seen:
        """What the cluster shows of a request whose answer was lost, asked after the settle time."""
        ...
