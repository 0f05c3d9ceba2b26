"""What a cluster declares, read at every collect and kept with the snapshot: releases, the leader, the allow-listed
configuration, isolation policies, failure domains and anti-affinity groups; what cannot be read is listed and the
snapshot is published all the same."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import boundaries_of_owned, collect, read_archive
from planner.collect.declared import DECLARED_KEYS
from planner.collect.extensible import bundle_stats_from_topics
from planner.errors import InputError
from planner.orchestrate.runner import PlanRequest, job_request
from planner.pulsar.declarations import (
    AutoFailoverPolicy,
    ClusterDeclarations,
    Declaration,
    FailureDomain,
    NamespaceIsolationPolicy,
)
from planner.store.database import Store
from planner.store.models import Base
from planner.store.snapshots import archive_declarations, latest_declarations, list_snapshots
from tests.fake_pulsar import FakePulsar, Reply, declare, declare_broker, load_report

CLUSTER = "fake"
SECRETS = ("token:eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig-4b1d", "keystore-pass-77f0", "zk-digest-9a9a")
STATS = {"msgRateIn": 100.0, "msgRateOut": 50.0, "msgThroughputIn": 1000.0, "topics": 3}
ISOLATION = {
    "tenant-a": {
        "namespaces": ["t/iso.*"],
        "primary": ["127\\.0\\.0\\.1"],
        "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "80"},
        },
    }
}


def runtime(broker: str, **values: object) -> dict[str, object]:
    """A broker's runtime configuration as Pulsar serves it: every key as a string, secrets among them."""
    return {
        "clusterName": CLUSTER,
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
        "loadBalancerSheddingEnabled": "true",
        "loadBalancerAutoBundleSplitEnabled": "true",
        "loadBalancerOverloadedThresholdPercentage": "85",
        "loadBalancerBrokerOverloadedThresholdPercentage": "85",
        "preferLaterVersions": "false",
        "failureDomainsEnabled": "true",
        "webServicePort": broker.rpartition(":")[2],
        "brokerClientAuthenticationParameters": SECRETS[0],
        "tlsKeyStorePassword": SECRETS[1],
        "zookeeperSessionDigest": SECRETS[2],
        **{key: str(value) for key, value in values.items()},
    }


@pytest.fixture
def cluster():
    """Three fake brokers serving t/ns (two bundles) and t/iso; the third reports no release in its load report."""
    brokers = [FakePulsar(), FakePulsar(), FakePulsar()]
    brokers.sort(key=lambda broker: broker.broker_id)
    ids = [broker.broker_id for broker in brokers]
    entry = brokers[0]
    entry.route("GET", "/admin/v2/brokers/fake", Reply(200, ids))
    entry.route("GET", "/admin/v2/brokers/leaderBroker", Reply(200, {"brokerId": ids[1]}))
    for namespace, boundaries in (
        ("t/ns", ["0x00000000", "0x80000000", "0xffffffff"]),
        ("t/iso", ["0x00000000", "0xffffffff"]),
    ):
        entry.route("GET", f"/admin/v2/namespaces/{namespace}/bundles", Reply(200, {"boundaries": boundaries}))
    reports = [
        {**load_report({"t/ns/0x00000000_0x80000000": STATS}), "brokerVersionString": "3.0.7"},
        {**load_report({"t/ns/0x80000000_0xffffffff": STATS}), "brokerVersionString": "3.0.8"},
        load_report({"t/iso/0x00000000_0xffffffff": STATS}),
    ]
    for broker, report in zip(brokers, reports, strict=True):
        broker.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, report))
    declare_broker(brokers[0], runtime(ids[0]))
    declare_broker(brokers[1], runtime(ids[1], loadBalancerSheddingEnabled="false"))
    declare_broker(brokers[2], runtime(ids[2]), version="3.0.8")
    declare(
        entry,
        CLUSTER,
        isolation=ISOLATION,
        failure_domains={"rack-1": {"brokers": ids[:2]}, "rack-2": {"brokers": ids[2:]}},
        dynamic={"loadBalancerSheddingEnabled": "false", "superUserRoles": SECRETS[0]},
        anti_affinity={"t/ns": "replicated", "t/iso": None},
    )
    yield entry, brokers
    for broker in brokers:
        broker.close()


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield opened
    opened.dispose()


def client(entry: FakePulsar, **options) -> PulsarAdminClient:
    return PulsarAdminClient(entry.url, timeout=(1.0, 0.5), backoff_factor=0.01, retries=1, **options)


def archived(store: Store) -> dict:
    return read_archive(list_snapshots(store, CLUSTER, limit=1)[0].archive_path)


def test_the_declarations_are_read_at_the_collect_and_stored_with_the_snapshot(cluster, store, tmp_path):
    entry, brokers = cluster
    ids = [broker.broker_id for broker in brokers]
    result = collect(client(entry), store, tmp_path)
    assert not result.partial

    declared = latest_declarations(store, CLUSTER)
    assert declared is not None and declared.unreadable == ()
    # Releases from the load reports; the third broker's, whose report has none, from the broker itself.
    assert declared.broker_versions == {ids[0]: "3.0.7", ids[1]: "3.0.8", ids[2]: "3.0.8"}
    assert brokers[2].calls[("GET", "/admin/v2/brokers/version")] == 1
    assert brokers[0].calls[("GET", "/admin/v2/brokers/version")] == 0
    assert declared.leader == ids[1]
    # Each broker's own configuration, read from that broker: where they disagree shows.
    assert declared.configuration[ids[0]]["loadBalancerSheddingEnabled"] == "true"
    assert declared.configuration[ids[1]]["loadBalancerSheddingEnabled"] == "false"
    assert declared.configuration[ids[2]]["failureDomainsEnabled"] == "true"
    assert declared.dynamic_configuration == {"loadBalancerSheddingEnabled": "false"}
    assert declared.policies.isolation == {
        "tenant-a": NamespaceIsolationPolicy(
            namespaces=("t/iso.*",),
            primary=("127\\.0\\.0\\.1",),
            auto_failover_policy=AutoFailoverPolicy(parameters={"min_limit": "1", "usage_threshold": "80"}),
        )
    }
    assert declared.policies.failure_domains == {
        "rack-1": FailureDomain(brokers=frozenset(ids[:2])),
        "rack-2": FailureDomain(brokers=frozenset(ids[2:])),
    }
    assert declared.policies.anti_affinity_groups == {"t/ns": "replicated"}

    # The plan run hands them to the job as they were stored.
    request = job_request(store, PlanRequest(clusters=(CLUSTER,), strategy="UniformLoadShedder", settings={}))
    assert request.inputs[CLUSTER].declarations == declared
    assert type(request).model_validate_json(request.model_dump_json()).inputs[CLUSTER].declarations == declared


def test_each_namespace_costs_one_task_of_two_calls_and_a_refusing_tenant_is_not_asked_again(cluster, store, tmp_path):
    entry, _ = cluster
    for namespace in ("t/ns", "t/iso"):
        entry.route("GET", f"/admin/v2/namespaces/{namespace}/antiAffinity", Reply(403, {"reason": "Not tenant admin"}))
    collect(client(entry, concurrency=1), store, tmp_path)

    # One call per namespace for its boundaries; the group asked once, the tenant's second namespace not at all.
    assert entry.calls[("GET", "/admin/v2/namespaces/t/ns/bundles")] == 1
    assert entry.calls[("GET", "/admin/v2/namespaces/t/iso/bundles")] == 1
    asked = [entry.calls[("GET", f"/admin/v2/namespaces/{ns}/antiAffinity")] for ns in ("t/iso", "t/ns")]
    assert asked == [1, 0]
    declared = latest_declarations(store, CLUSTER)
    assert declared is not None and declared.policies.anti_affinity_groups == {}
    (refusal,) = declared.unread(Declaration.ANTI_AFFINITY_GROUPS)
    assert refusal.covers == ("t/iso", "t/ns") and refusal.reason == "HTTP 403: Not tenant admin"
    assert refusal.what == "anti-affinity groups of 2 namespaces"


@pytest.mark.parametrize("status", [401, 403])
def test_a_role_that_may_not_read_the_policies_gets_a_snapshot_planned_without_them(cluster, store, tmp_path, status):
    entry, brokers = cluster
    refusal = Reply(status, {"reason": "This operation requires super-user access"})
    entry.route("GET", f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies", refusal)
    entry.route("GET", f"/admin/v2/clusters/{CLUSTER}/failureDomains", refusal)
    entry.route("GET", "/admin/v2/brokers/configuration/values", refusal)
    for broker in brokers:
        broker.route("GET", "/admin/v2/brokers/configuration/runtime", refusal)
    result = collect(client(entry), store, tmp_path, cluster_name=CLUSTER)

    assert not result.partial and list_snapshots(store, CLUSTER)[0].id == result.snapshot_id
    declared = latest_declarations(store, CLUSTER)
    assert declared is not None
    assert declared.policies.isolation == {} and declared.policies.failure_domains == {}
    assert declared.configuration == {} and declared.dynamic_configuration == {}
    # Still read: what the role may read.
    assert declared.policies.anti_affinity_groups == {"t/ns": "replicated"} and len(declared.broker_versions) == 3
    unread = {entry.kind: entry for entry in declared.unreadable}
    assert set(unread) == {
        Declaration.ISOLATION_POLICIES,
        Declaration.FAILURE_DOMAINS,
        Declaration.DYNAMIC_CONFIGURATION,
        Declaration.CONFIGURATION,
    }
    assert unread[Declaration.ISOLATION_POLICIES].reason == f"HTTP {status}: This operation requires super-user access"
    # One entry for the three brokers that refused alike, naming them.
    assert unread[Declaration.CONFIGURATION].what == "configurations of 3 brokers"
    assert unread[Declaration.CONFIGURATION].covers == tuple(broker.broker_id for broker in brokers)


def test_secrets_of_the_configuration_are_never_stored(cluster, store, tmp_path):
    entry, _ = cluster
    collect(client(entry), store, tmp_path)
    stored = [gzip.decompress(path.read_bytes()).decode() for path in tmp_path.rglob("*.json.gz")]
    with store.session() as session:
        stored += [
            json.dumps([list(row) for row in session.execute(table.select())], default=str)
            for table in Base.metadata.sorted_tables
        ]
    assert stored and not [secret for secret in SECRETS for text in stored if secret in text]
    assert set(archived(store)["declarations"]["configuration"].popitem()[1]) <= DECLARED_KEYS


def test_the_allow_list_names_load_balancing_keys_only():
    # A key the config learns later joins the list by itself: none may be a credential.
    assert not [key for key in DECLARED_KEYS if re.search(r"(?i)auth|password|secret|token|credential|digest", key)]
    assert {
        "loadBalancerSheddingEnabled",
        "loadBalancerSheddingBundlesWithPoliciesEnabled",
        "clusterName",
    } <= DECLARED_KEYS


@pytest.mark.parametrize(
    ("route", "answer", "kind"),
    [
        (
            f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies",
            ["not", "an", "object"],
            Declaration.ISOLATION_POLICIES,
        ),
        (
            f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies",
            {"p": {"auto_failover_policy": {"policy_type": "max_available"}}},
            Declaration.ISOLATION_POLICIES,
        ),
        (f"/admin/v2/clusters/{CLUSTER}/failureDomains", "{not json", Declaration.FAILURE_DOMAINS),
        ("/admin/v2/brokers/configuration/values", [1, 2], Declaration.DYNAMIC_CONFIGURATION),
        ("/admin/v2/brokers/leaderBroker", {"brokerId": 42}, Declaration.LEADER),
    ],
)
def test_a_broken_answer_loses_that_declaration_not_the_snapshot(cluster, store, tmp_path, route, answer, kind):
    entry, _ = cluster
    entry.route("GET", route, Reply(200, answer))
    result = collect(client(entry), store, tmp_path, cluster_name=CLUSTER)
    assert list_snapshots(store, CLUSTER)[0].id == result.snapshot_id
    declared = latest_declarations(store, CLUSTER)
    assert declared is not None and [entry.kind for entry in declared.unreadable] == [kind]
    assert declared.policies.anti_affinity_groups == {"t/ns": "replicated"}


def test_a_broker_that_answers_garbage_for_its_release_or_configuration_is_listed(cluster, store, tmp_path):
    entry, brokers = cluster
    brokers[2].route("GET", "/admin/v2/brokers/version", Reply(200, "<html>oops</html>"))
    brokers[1].route("GET", "/admin/v2/brokers/configuration/runtime", Reply(500, {"reason": "boom"}))
    collect(client(entry), store, tmp_path)
    declared = latest_declarations(store, CLUSTER)
    assert declared is not None and brokers[2].broker_id not in declared.broker_versions
    assert sorted(declared.configuration) == sorted(broker.broker_id for broker in (brokers[0], brokers[2]))
    release, configuration = declared.unread(Declaration.RELEASE), declared.unread(Declaration.CONFIGURATION)
    assert [entry.covers for entry in release] == [(brokers[2].broker_id,)] and "not a release" in release[0].reason
    assert configuration[0].what == f"configuration of {brokers[1].broker_id}" and "boom" in configuration[0].reason


def test_a_snapshot_from_before_the_declarations_has_none_and_a_damaged_one_is_refused():
    assert archive_declarations({"cluster": CLUSTER}, 7) is None
    assert archive_declarations({"declarations": {}}, 7) == ClusterDeclarations()
    with pytest.raises(InputError, match=r"declarations of snapshot 7.*policies"):
        archive_declarations({"declarations": {"policies": {"isolation": []}}}, 7)


def test_a_cluster_without_snapshots_has_no_declarations(store):
    assert latest_declarations(store, CLUSTER) is None


def test_boundaries_come_from_the_owned_bundles_where_they_cover_the_namespace_exactly_once():
    tiled = ["t/a/0x00000000_0x80000000", "t/a/0x80000000_0xffffffff", "t/whole/0x00000000_0xffffffff"]
    gap = ["t/gap/0x00000000_0x40000000", "t/gap/0x80000000_0xffffffff"]  # 0x4..0x8 owned by nobody
    mid_split = ["t/split/0x00000000_0xffffffff", "t/split/0x00000000_0x80000000", "t/split/0x80000000_0xffffffff"]
    short = ["t/short/0x00000000_0x80000000"]
    assert boundaries_of_owned([*tiled, *gap, *mid_split, *short]) == {
        "t/a": [0, 0x80000000, 0xFFFFFFFF],
        "t/whole": [0, 0xFFFFFFFF],
    }


def test_a_namespace_the_owned_bundles_cover_costs_only_its_anti_affinity_call(cluster, store, tmp_path):
    entry, brokers = cluster
    active = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    owned = {
        brokers[0]: {"t/ns/0x00000000_0x80000000": active},
        brokers[1]: {"t/ns/0x80000000_0xffffffff": active},
        # t/iso's only bundle is being unloaded: not taken as proof of its boundaries.
        brokers[2]: {"t/iso/0x00000000_0xffffffff": {**active, "is_active": False}},
    }
    for broker, bundles in owned.items():
        entry.route("GET", f"/admin/v2/brokers/{CLUSTER}/{broker.broker_id}/ownedNamespaces", Reply(200, bundles))
    collect(client(entry), store, tmp_path)
    assert entry.calls[("GET", "/admin/v2/namespaces/t/ns/bundles")] == 0
    assert entry.calls[("GET", "/admin/v2/namespaces/t/iso/bundles")] == 1
    assert archived(store)["bundleBoundaries"] == {
        "t/ns": ["0x00000000", "0x80000000", "0xffffffff"],
        "t/iso": ["0x00000000", "0xffffffff"],
    }
    assert entry.calls[("GET", "/admin/v2/namespaces/t/ns/antiAffinity")] == 1


def test_topic_stats_are_decoded_for_the_summed_fields_and_a_bad_one_is_named():
    topic = {"msgRateIn": 2.5, "producerCount": 1, "subscriptions": {"s": {"consumers": [{"x": 1}, {}]}}}
    body = json.dumps({"t/ns": {"0x00000000_0xffffffff": {"persistent": {"persistent://t/ns/a": topic}}}})
    stats = bundle_stats_from_topics(body.encode(), "b:1")["t/ns/0x00000000_0xffffffff"]
    assert (stats.msg_rate_in, stats.producer_count, stats.consumer_count, stats.topics) == (2.5, 1, 2, 1)
    bad = body.replace('"producerCount": 1', '"producerCount": "many"').encode()
    with pytest.raises(InputError, match=r"topic stats of broker b:1: persistent://t/ns/a: producerCount: Expected"):
        bundle_stats_from_topics(bad, "b:1")
    deep = b'{"t/ns": {"0x00000000_0xffffffff": {"persistent": {"p://t/ns/a": {"x": ' + b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(InputError, match="topic stats of broker b:1: not a JSON document"):
        bundle_stats_from_topics(deep + b"}}}}}", "b:1")
