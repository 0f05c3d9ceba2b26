"""Shared by the executor tests on the real cluster: a counting admin client and approved plans."""

from __future__ import annotations

import time
from collections.abc import Sequence

from planner.actions import actions_hash
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.store.approvals import record_decision
from planner.store.plans import commit_plan, read_state


class CountingClient(PulsarAdminClient):
    """The real client, counting the unloads and splits it sends (and optionally failing unloads: fault
    injection)."""

    def __init__(self, *args, fail_unloads=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.unloads: list[str] = []
        self.splits: list[str] = []
        self.fail_unloads = fail_unloads

    def unload_bundle(self, namespace, bundle_range, destination=None):
        if self.fail_unloads:
            raise AdminError(
                "127.0.0.1", "PUT", f"/admin/v2/namespaces/{namespace}/{bundle_range}/unload", "injected failure", 503
            )
        self.unloads.append(f"{namespace}/{bundle_range}")
        super().unload_bundle(namespace, bundle_range, destination)

    def split_bundle(self, namespace, bundle_range, **options):
        self.splits.append(f"{namespace}/{bundle_range}")
        super().split_bundle(namespace, bundle_range, **options)


def unload(bundle: str, source: str, destination: str) -> dict:
    return {
        "kind": "unload",
        "bundle": bundle,
        "source": source,
        "destination": destination,
        "msgRate": 10.0,
        "throughput": 1000.0,
        "reason": "test",
    }


def approved(store, cluster, actions: Sequence[dict], approver: str = "alice") -> int:
    plan = {"cluster": cluster["cluster"], "strategy": "AvgShedder", "actions": list(actions), "stateAfter": {}}
    committed = commit_plan(
        store,
        PlanDocument.parse(plan, "plan"),
        admin_url=cluster["brokers"][0]["adminUrl"],
        run_key=f"t-{time.time()}",
        expected_version=read_state(store, cluster["cluster"], "AvgShedder").version,
    )
    record_decision(store, committed.plan_id, Decision.APPROVED, approver=approver, approved_hash=actions_hash(actions))
    return committed.plan_id


def approved_plan(store, cluster, bundles, source, destination) -> int:
    return approved(store, cluster, [unload(bundle, source, destination) for bundle in bundles])


def owners(client, cluster, bundles) -> dict[str, str]:
    found = {}
    for broker in client.active_brokers(cluster["cluster"]):
        for bundle in client.owned_bundles(cluster["cluster"], broker):
            if bundle in bundles:
                found[bundle] = broker
    return found
