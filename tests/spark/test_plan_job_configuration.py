"""The Spark job plans with the configuration the latest snapshot read of the cluster when the run gives no
settings (the scheduled DAG's `settings: {}`), from the store through `job_request` as the DAG runs it: the
cluster's thresholds decide, the team's explicit settings still win, and snapshots that read nothing plan on
Pulsar's defaults."""

from __future__ import annotations

from datetime import timedelta

import pytest

from planner.orchestrate.runner import PlanRequest, job_request
from planner.plan.document import ConfigSource
from planner.samples.dataset import samples_root
from planner.store.database import Store
from spark_jobs.plan_job import plan_clusters
from tests.spark.test_plan_job import T0, register, skewed_reports, write_history

pytestmark = pytest.mark.spark

HIT_COUNT = "loadBalancerAvgShedderHitCountHighThreshold"
# The brokers fire AvgShedder on the first run over its high threshold (Pulsar's default: the second).
BROKER_CONF = {HIT_COUNT: "1", "loadBalancerSheddingEnabled": "false", "loadBalancerAutoBundleSplitEnabled": "false"}


def test_a_run_without_settings_plans_with_the_clusters_own_thresholds(spark, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    declared = {
        "broker_versions": {"hot:8080": "4.2.4", "cold:8080": "4.2.4"},
        "leader": "hot:8080",
        "configuration": {"hot:8080": BROKER_CONF, "cold:8080": BROKER_CONF},
    }
    for first_id, cluster, declarations in ((1, "own", declared), (101, "unread", None)):
        write_history(tmp_path, cluster, 12, skewed_reports(50), first_id=first_id)
        register(store, tmp_path, cluster, first_id + 11, declarations)

    def planned(cluster: str, settings: dict[str, str]):
        request = PlanRequest(clusters=(cluster,), strategy="AvgShedder", settings=settings)
        job = job_request(store, request, as_of=T0 + timedelta(hours=1))
        return plan_clusters(spark, samples_root(tmp_path), job)[cluster].plan

    own = planned("own", {})
    assert own.actions, "the cluster's hit count of 1 fires on the first run over a 50-point gap"
    view = own.cluster_view
    assert view is not None and (view.release, view.release_source) == ("4.2.4", ConfigSource.CLUSTER)
    recorded = {value.key: value for value in view.configuration}
    assert (recorded[HIT_COUNT].value, recorded[HIT_COUNT].source) == (1, ConfigSource.CLUSTER)
    assert recorded["loadBalancerAvgShedderHighThreshold"].source is ConfigSource.DEFAULT
    assert view.competing_controllers == ()

    # The same load, the same run, on Pulsar's default (2): no move on the first run.
    unread = planned("unread", {})
    assert unread.actions == () and unread.cluster_view is None

    # The team's explicit value wins over the cluster's, which the plan keeps beside it.
    team = planned("own", {HIT_COUNT: "2"})
    assert team.actions == ()
    assert team.cluster_view is not None
    entry = {value.key: value for value in team.cluster_view.configuration}[HIT_COUNT]
    assert (entry.value, entry.source, entry.cluster_value) == (2, ConfigSource.TEAM, "1")
