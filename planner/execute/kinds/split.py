"""Splitting a bundle in place (`admin namespaces split-bundle`, without unloading the halves)."""

from __future__ import annotations

from planner.actions import ActionKind
from planner.collect.admin_client import PulsarAdminClient
from planner.execute.kinds.protocol import ActionContext, Seen, Verdict
from planner.lifecycle import AttemptStatus
from planner.pulsar.bundle_range import BundleName
from planner.store.actions import ExecutableAction


class Split:
    kind = ActionKind.SPLIT
    unloads_bundle = False  # both halves stay on the source

    def precheck(self, action: ExecutableAction, run: ActionContext) -> Verdict | None:
        return None  # the bundle exists: whoever owns it splits it

    def send(self, action: ExecutableAction, client: PulsarAdminClient) -> None:
        name = BundleName.parse(action.bundle)
        client.split_bundle(
            name.namespace,
            str(name.range),
            algorithm=action.split_algorithm,
            positions=action.split_positions,
            unload=False,
        )

    def verify(self, action: ExecutableAction, run: ActionContext) -> Verdict:
        if run.live.bundle_exists(action.bundle):
            return AttemptStatus.FAILED, "the split left the bundle in place (Pulsar found no valid split position)"
        return AttemptStatus.SUCCEEDED, ""

    def reconcile(self, action: ExecutableAction, run: ActionContext) -> Seen:
        """Settled from the namespace's boundaries: the bundle's range is gone and boundaries lie inside it."""
        name = BundleName.parse(action.bundle)
        ranges = run.live.ranges(name.namespace)
        inside = sorted({low for low, _ in ranges if name.range.lower < low < name.range.upper})
        if (name.range.lower, name.range.upper) not in ranges and inside:
            reason = f"the cluster shows the split took effect: boundaries {[f'0x{b:08x}' for b in inside]}"
            return Seen(AttemptStatus.RECONCILED_APPLIED, reason, {"boundaries": inside})
        reason = "the cluster shows the split did not take effect: the bundle is unchanged"
        return Seen(AttemptStatus.RECONCILED_NOT_APPLIED, reason, {"exists": not inside})
