"""Unloading a bundle from its source, to a named destination or for Pulsar to place (`admin namespaces unload`)."""

from __future__ import annotations

import math
import time

from planner.actions import ActionKind
from planner.collect.admin_client import PulsarAdminClient
from planner.execute.declared import PoliciesUnreadableError
from planner.execute.events import ExecutionEvent
from planner.execute.fence import fence_name
from planner.execute.kinds.protocol import ActionContext, Seen, Verdict
from planner.failpoints import failpoint
from planner.lifecycle import AttemptStatus
from planner.pulsar.bundle_range import BundleName
from planner.store.actions import ExecutableAction


class Unload:
    kind = ActionKind.UNLOAD
    unloads_bundle = True

    def precheck(self, action: ExecutableAction, run: ActionContext) -> Verdict | None:
        """Still on the planned source, and the destination active, allowed by the cluster's policies in force (not
        fenced among them), and not about to be taken."""
        brokers = run.live.active_brokers()
        owner = run.live.owner(action.bundle, brokers)
        if owner != action.source:
            return (
                AttemptStatus.SKIPPED,
                f"the bundle is owned by {owner or 'nobody'}, not the planned source {action.source}",
            )
        if action.destination is None:
            return None  # Pulsar places it (a strategy that names no destination, e.g. transfers turned off)
        if action.destination not in brokers:
            # Not done: a rerun once the destination is back performs it (the bundle is still on its source).
            return AttemptStatus.DEFERRED, f"destination {action.destination} is not an active broker"
        refused = self._refused_by_policies(action, action.destination, brokers, run)
        if refused is not None:
            return refused
        waiting = self._destination_waiting_on_the_range(action, run)
        if waiting is not None:
            # Not done: a rerun sends it once the other bundle is owned (its destination taken up).
            return AttemptStatus.DEFERRED, (
                f"{waiting} has the same range and nobody owns it yet: before Pulsar 4.2 a broker keeps an unload's "
                "destination by range alone, so this unload would replace that one's destination"
            )
        return None

    def _refused_by_policies(
        self, action: ExecutableAction, destination: str, brokers: list[str], run: ActionContext
    ) -> Verdict | None:
        """The destination checked against the cluster's policies as they are now (Pulsar checks none of them for a
        named destination: `planner.execute.declared`). Fails closed: policies that cannot be read defer the action."""
        declared = run.live.declared
        try:
            if fence_name(destination) in declared.policies().isolation:
                # A plan made before (or beside) a drain must not refill the broker being emptied.
                return AttemptStatus.SKIPPED, f"destination {destination} is fenced: it is being drained"
            refusal = declared.destination_refusal(action.bundle, destination, brokers)
        except PoliciesUnreadableError as error:
            # Not done: a rerun sends it once the policies can be read and allow it.
            return AttemptStatus.DEFERRED, (
                f"not sent: the cluster's policies could not be read to check destination {destination} ({error})"
            )
        if refusal is None:
            return None
        run.record(action, ExecutionEvent.DESTINATION_REFUSED, refusal=refusal)
        return AttemptStatus.SKIPPED, f"refused: the cluster's policies now forbid {destination}: {refusal}"

    def _destination_waiting_on_the_range(self, action: ExecutableAction, run: ActionContext) -> str | None:
        """Before Pulsar 4.2 the destination of an unload waits, keyed by bundle range, for the bundle's next
        lookup. Another unload of this plan with the same range (another namespace's), sent to a destination
        and owned by nobody yet, still has its destination waiting: sending this one now would replace it."""
        if not run.live.destinations_keyed_by_range:
            return None
        key = BundleName.parse(action.bundle).range
        for other in run.actions:
            if other.kind != self.kind or other.destination is None or other.bundle == action.bundle:
                continue
            if BundleName.parse(other.bundle).range != key:
                continue
            if not run.was_applied(other):
                continue
            if run.live.owner(other.bundle) is None and run.live.bundle_exists(other.bundle):
                return other.bundle
        return None

    def send(self, action: ExecutableAction, client: PulsarAdminClient) -> None:
        name = BundleName.parse(action.bundle)
        client.unload_bundle(name.namespace, str(name.range), action.destination)

    def verify(self, action: ExecutableAction, run: ActionContext) -> Verdict:
        """Where the bundle went, polling until it leaves its source or the verify timeout passes."""
        deadline = time.monotonic() + run.settings.verify_timeout_seconds
        while True:
            failpoint("executor.verifying")
            owner = run.live.owner(action.bundle)
            if (owner is not None and owner != action.source) or time.monotonic() >= deadline:
                break
            run.pause(run.settings.verify_interval_seconds)
        if owner == action.destination:
            return AttemptStatus.SUCCEEDED, ""
        if owner is None:
            where = "to the destination" if action.destination else ""
            return (
                AttemptStatus.SUCCEEDED,
                f"unloaded; not owned yet: the next client lookup assigns it {where}".strip(),
            )
        if owner == action.source:
            return AttemptStatus.PLACED_ELSEWHERE, "re-acquired by the source broker"
        if action.destination is None:
            return AttemptStatus.SUCCEEDED, f"Pulsar placed it on {owner}"
        reason = f"Pulsar placed it on {owner}, not {action.destination}"
        if run.live.destinations_keyed_by_range:
            reason += (
                " (before Pulsar 4.2 a destination is kept by range: another namespace's unload may have taken it)"
            )
        return AttemptStatus.PLACED_ELSEWHERE, reason

    def reconcile(self, action: ExecutableAction, run: ActionContext) -> Seen:
        """Settled from the bundle's owner, once the source no longer lists it as being unloaded."""
        owner, active = self._wait_while_unloading(action, run)
        if owner == action.source and not active:
            # Neither done nor not done: never resent while the source may still complete it.
            reason = f"the unload is still in progress: {action.source} lists {action.bundle} as inactive"
            return Seen(AttemptStatus.UNKNOWN, reason)
        if owner == action.source or (owner is None and not run.live.bundle_exists(action.bundle)):
            reason = (
                f"the cluster shows the unload did not take effect: {action.bundle} is still on {owner}"
                if owner
                else f"{action.bundle} no longer exists; nothing to unload"
            )
            return Seen(AttemptStatus.RECONCILED_NOT_APPLIED, reason, {"owner": owner})
        if owner is None or owner == action.destination or action.destination is None:
            where = f"now on {owner}" if owner else "unloaded, not owned yet: the next lookup assigns it"
            reason = f"the cluster shows the unload took effect: {where}"
            return Seen(AttemptStatus.RECONCILED_APPLIED, reason, {"owner": owner})
        reason = f"the cluster shows the unload took effect, but Pulsar placed it on {owner}, not {action.destination}"
        return Seen(AttemptStatus.PLACED_ELSEWHERE, reason, {"owner": owner})

    def _wait_while_unloading(self, action: ExecutableAction, run: ActionContext) -> tuple[str | None, bool]:
        """The bundle's owner and whether it is active, waiting up to the broker's unload timeout while the source
        lists it as inactive (an unload in progress)."""
        owner, active = run.live.ownership(action.bundle)
        polls = math.ceil(run.live.unload_timeout_seconds / run.settings.verify_interval_seconds)
        while owner == action.source and not active and polls > 0:
            run.pause(run.settings.verify_interval_seconds)
            polls -= 1
            owner, active = run.live.ownership(action.bundle)
        return owner, active
