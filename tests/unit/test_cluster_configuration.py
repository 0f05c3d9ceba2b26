"""A plan's configuration and release from the cluster: the team's settings over the cluster's own values over
Pulsar's defaults, the source of each value, brokers that disagree, mixed releases, release lines without a patch
level, values the planner refuses, the brokers' own controllers beside the plan; and what the plan page and the
approval request show of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from planner.airflow.gate_text import approval_request_markdown, plan_summary_markdown
from planner.audit.review.app import URL_PREFIX, create_app
from planner.errors import InputError
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.configuration import declared_value, plan_configuration
from planner.plan.document import ConfigSource, PlanDocument
from planner.plan.request import ClusterInputs
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, PulsarConfig, load_config
from planner.pulsar.declarations import ClusterDeclarations, Declaration, Unreadable
from planner.pulsar.model import NamespaceBundleStats
from planner.pulsar.versions import RELEASE_LINES, PulsarVersion
from planner.store.database import Store
from planner.store.plans import commit_plan
from tests.builders import broker, bundle, bundle_data, load_data

# The brokers' own controllers off, as the README asks: no warning unless a test switches one on.
QUIET = {"loadBalancerSheddingEnabled": "false", "loadBalancerAutoBundleSplitEnabled": "false"}
UNIFORM = "org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder"


def declarations(
    configuration: dict[str, dict[str, str]] | None = None,
    *,
    versions: dict[str, str] | None = None,
    leader: str | None = "a:8080",
    dynamic: dict[str, str] | None = None,
    unreadable: tuple[Unreadable, ...] = (),
) -> ClusterDeclarations:
    brokers = configuration if configuration is not None else {"a:8080": {}, "b:8080": {}}
    return ClusterDeclarations(
        broker_versions=versions if versions is not None else dict.fromkeys(brokers, "3.3.6"),
        leader=leader,
        configuration={name: {**QUIET, **values} for name, values in brokers.items()},
        dynamic_configuration=dynamic or {},
        unreadable=unreadable,
    )


def used(plan: PlanDocument) -> dict[str, object]:
    assert plan.cluster_view is not None
    return {value.key: value for value in plan.cluster_view.configuration}


def uneven():
    """a:8080 at 8,000 msg/s in, b:8080 at 2,000, c:8080 at 1,000: UniformLoadShedder unloads from a unless its
    thresholds are high."""
    hot = [bundle(index) for index in range(4)]
    return load_data(
        {
            "a:8080": broker(cpu=(60, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(20, 100), rate_in=2000, throughput_in=2e5, bundles=[bundle(9)]),
            "c:8080": broker(cpu=(10, 100), rate_in=1000, throughput_in=1e5, bundles=[bundle(10)]),
        },
        {
            **{name: bundle_data(2000, 0, 2e5, 0) for name in (*hot, bundle(9))},
            bundle(10): bundle_data(1000, 0, 1e5, 0),
        },
    )


def plan(inputs: ClusterInputs, data=None, strategy: str = "UniformLoadShedder") -> PlanDocument:
    load = ClusterLoad(data or uneven(), 1, {}, {})
    return plan_cluster("east", load, inputs, strategy, now_millis=0, usage_models=None)


# --- the merge and the source of each value --------------------------------------------------------------------


def test_the_team_wins_over_the_cluster_which_wins_over_pulsars_defaults():
    cluster = declarations(
        {
            "a:8080": {"maxUnloadPercentage": "0.6", "minUnloadMessage": "10", "loadBalancerCPUResourceWeight": "0.5"},
            "b:8080": {"maxUnloadPercentage": "0.6", "minUnloadMessage": "10", "loadBalancerCPUResourceWeight": "0.5"},
        }
    )
    configuration = plan_configuration("east", {"minUnloadMessage": "20"}, cluster)
    config = configuration.config
    assert (config.max_unload_percentage, config.min_unload_message, config.cpu_weight) == (0.6, 20, 0.5)
    # Neither gives it: Pulsar's default of the cluster's release (3.3.6 weighs memory 1.0, 4.x 0.0).
    assert config.memory_weight == 1.0 and str(config.pulsar_version) == "3.3.6"

    recorded = used(configuration.record(PlanDocument(cluster="east", strategy="x", actions=()), config, []))
    assert recorded["maxUnloadPercentage"].source is ConfigSource.CLUSTER
    assert recorded["maxUnloadPercentage"].value == 0.6 and recorded["maxUnloadPercentage"].cluster_value is None
    assert recorded["minUnloadMessage"].source is ConfigSource.TEAM
    assert (recorded["minUnloadMessage"].value, recorded["minUnloadMessage"].cluster_value) == (20, "10")
    assert recorded["loadBalancerMemoryResourceWeight"].source is ConfigSource.DEFAULT
    assert "pulsarVersion" not in recorded and set(recorded) == PulsarConfig.known_keys() - {"pulsarVersion"}


def test_the_dynamic_configuration_wins_over_the_runtime_one_and_sets_are_read_as_pulsar_serves_them():
    runtime = {
        "loadBalancerBrokerOverloadedThresholdPercentage": "90",
        "loadBalancerSheddingExcludedNamespaces": "[t/a, t/b]",
    }
    cluster = declarations(
        dict.fromkeys(("a:8080", "b:8080"), runtime),
        versions=dict.fromkeys(("a:8080", "b:8080"), "4.2.4"),
        dynamic={"loadBalancerBrokerOverloadedThresholdPercentage": "95"},
    )
    config = plan_configuration("east", {}, cluster).config
    assert config.broker_overloaded_threshold_percentage == 95
    assert config.shedding_excluded_namespaces == frozenset({"t/a", "t/b"})
    found = declared_value("loadBalancerBrokerOverloadedThresholdPercentage", cluster)
    assert found is not None and found.origin == "the dynamic configuration"
    # The brokers still run 90: shown as differing from the value used.
    assert found.brokers == {"a:8080": "90", "b:8080": "90"}


def test_brokers_that_disagree_are_recorded_and_the_leaders_value_is_used():
    values = {"a:8080": "0.3", "b:8080": "0.5", "c:8080": "0.5"}
    cluster = declarations({name: {"maxUnloadPercentage": value} for name, value in values.items()}, leader="a:8080")
    configuration = plan_configuration("east", {}, cluster)
    assert configuration.config.max_unload_percentage == 0.3
    entry = used(configuration.record(PlanDocument(cluster="east", strategy="x", actions=()), configuration.config, []))
    assert entry["maxUnloadPercentage"].brokers == values
    # 30 and 30.0 are one value to a double: no disagreement.
    same = declarations(
        {"a:8080": {"loadBalancerCPUResourceWeight": "1"}, "b:8080": {"loadBalancerCPUResourceWeight": "1.0"}}
    )
    assert declared_value("loadBalancerCPUResourceWeight", same).brokers == {}  # type: ignore[union-attr]
    # The leader's configuration unread: the value most brokers run.
    unknown = cluster.model_copy(update={"leader": None})
    assert plan_configuration("east", {}, unknown).config.max_unload_percentage == 0.5


def test_without_declarations_the_plan_is_made_exactly_as_before():
    settings = {"minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
    before = plan(ClusterInputs(settings=settings))
    assert before.cluster_view is None
    assert plan_configuration("east", settings, None).config == PulsarConfig.from_settings(settings)
    again = plan(ClusterInputs(settings=settings))
    assert again.to_json() == before.to_json()


def test_a_cluster_planned_with_no_settings_plans_with_its_own_thresholds():
    thresholds = {
        "loadBalancerMsgRateDifferenceShedderThreshold": "10000",
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": "100",
    }
    own = {"loadBalancerLoadSheddingStrategy": UNIFORM, "minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
    brokers = ("a:8080", "b:8080", "c:8080")
    from_cluster = plan(ClusterInputs(declarations=declarations({name: {**own, **thresholds} for name in brokers})))
    assert from_cluster.actions == ()  # the cluster's thresholds: an 8x gap is under both
    as_team = plan(ClusterInputs(settings={**own, **thresholds, "pulsarVersion": "3.3.6"}))
    assert from_cluster.actions == as_team.actions and from_cluster.state_after == as_team.state_after
    # With Pulsar's default thresholds (50 %, 4x) the same load is shed: the cluster's values made the difference.
    assert plan(ClusterInputs(declarations=declarations({name: own for name in brokers}))).actions


# --- the release -------------------------------------------------------------------------------------------------


def test_the_release_is_the_leaders_and_a_mixed_cluster_says_so():
    versions = {"a:8080": "4.0.8", "b:8080": "4.2.4", "c:8080": "4.2.4"}
    cluster = declarations({name: {} for name in versions}, versions=versions, leader="a:8080")
    made = plan(ClusterInputs(settings={"minUnloadMessage": "0"}, declarations=cluster))
    view = made.cluster_view
    assert view is not None and (view.release, view.release_source) == ("4.0.8", ConfigSource.CLUSTER)
    assert view.mixed_releases == versions
    assert any(
        note.startswith("Mixed releases") and "4.0.8 on a:8080; 4.2.4 on b:8080, c:8080" in note for note in made.notes
    )
    # The leader's release unread: the one most brokers run.
    view = plan(ClusterInputs(declarations=cluster.model_copy(update={"leader": None}))).cluster_view
    assert view is not None and view.release == "4.2.4"
    # The team's pulsarVersion wins, a line without a patch level as the newest release of it the planner compared.
    view = plan(ClusterInputs(settings={"pulsarVersion": "3.0"}, declarations=cluster)).cluster_view
    assert view is not None and (view.release, view.release_source) == ("3.0.7", ConfigSource.TEAM)
    # Nothing reported: the newest release the planner knows, said so.
    made = plan(ClusterInputs(declarations=cluster.model_copy(update={"broker_versions": {}})))
    assert made.cluster_view is not None and made.cluster_view.release_source is ConfigSource.DEFAULT
    assert any("release could not be read" in note for note in made.notes)


def test_a_release_line_without_patch_level_is_its_newest_compared_release_or_refused():
    assert {line: str(PulsarVersion.parse(f"{line[0]}.{line[1]}")) for line in RELEASE_LINES} == RELEASE_LINES
    assert str(PulsarConfig.from_settings({"pulsarVersion": "3.0"}).pulsar_version) == "3.0.7"
    assert str(PulsarConfig.from_settings({"pulsarVersion": "4.1.0"}).pulsar_version) == "4.1.0"
    with pytest.raises(InputError) as refused:
        PulsarConfig.from_settings({"pulsarVersion": "4.1"}, source="settings of east")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("invalid settings of east: pulsarVersion: '4.1'")
    assert "give the exact release" in message
    # `plan run --set pulsarVersion=3.0` hands the config's keys on as settings: the release reads back.
    given = load_config(None, ["pulsarVersion=3.0"]).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert given == {"pulsarVersion": "3.0.7"}


def test_the_release_lines_table_is_the_one_documented():
    text = Path("docs/fidelity.md").read_text()
    section = text.split("## Configuration and release from the cluster", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\d+)\.(\d+)` \| (\d+\.\d+\.\d+) \|", section, re.MULTILINE)
    assert {(int(major), int(minor)): release for major, minor, release in rows} == RELEASE_LINES


# --- values the planner refuses ------------------------------------------------------------------------------------


def test_a_cluster_value_the_planner_refuses_names_the_key_the_broker_and_the_cluster():
    cluster = declarations({"a:8080": {"maxUnloadPercentage": "1.5"}, "b:8080": {"maxUnloadPercentage": "1.5"}})
    with pytest.raises(InputError) as refused:
        plan(ClusterInputs(declarations=cluster))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("cluster east: maxUnloadPercentage='1.5' of the leader a:8080 is refused by the planner")
    assert "set maxUnloadPercentage in the cluster's settings" in message
    # The team's own value replaces it, and the plan records the cluster's.
    made = plan(ClusterInputs(settings={"maxUnloadPercentage": "0.5"}, declarations=cluster))
    assert (used(made)["maxUnloadPercentage"].value, used(made)["maxUnloadPercentage"].cluster_value) == (0.5, "1.5")
    # A release the planner does not model: named too.
    old = declarations({"a:8080": {}}, versions={"a:8080": "2.11.2"})
    with pytest.raises(InputError, match=r"^cluster east: broker a:8080 reports release '2.11.2'"):
        plan(ClusterInputs(declarations=old))


def test_a_value_only_a_broker_that_is_not_the_leader_runs_is_shown_not_refused():
    cluster = declarations({"a:8080": {"maxUnloadPercentage": "0.2"}, "b:8080": {"maxUnloadPercentage": "lots"}})
    made = plan(ClusterInputs(declarations=cluster))
    assert used(made)["maxUnloadPercentage"].brokers == {"a:8080": "0.2", "b:8080": "lots"}


# --- the brokers' own controllers ---------------------------------------------------------------------------------


def test_the_brokers_own_shedding_beside_a_plans_unloads_is_listed_and_warned_of_first():
    shedding = {"loadBalancerSheddingEnabled": "true", "minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
    cluster = declarations({"a:8080": shedding, "b:8080": shedding, "c:8080": shedding})
    made = plan(ClusterInputs(declarations=cluster))
    assert made.actions and made.cluster_view is not None
    assert made.cluster_view.competing_controllers == ("loadBalancerSheddingEnabled",)
    assert made.notes[0].startswith("WARNING: the brokers' own load shedding is on")
    # Switched off cluster-wide by the dynamic configuration: nothing to warn of.
    off = cluster.model_copy(update={"dynamic_configuration": {"loadBalancerSheddingEnabled": "false"}})
    assert plan(ClusterInputs(declarations=off)).cluster_view.competing_controllers == ()  # type: ignore[union-attr]
    # ... or by loadBalancerEnabled (not dynamic: broker.conf's, on every broker).
    brokers = {name: {**values, "loadBalancerEnabled": "false"} for name, values in cluster.configuration.items()}
    disabled = cluster.model_copy(update={"configuration": brokers})
    assert plan(ClusterInputs(declarations=disabled)).cluster_view.competing_controllers == ()  # type: ignore[union-attr]
    # The team's settings cannot switch off what the brokers run.
    team = plan(ClusterInputs(settings={"loadBalancerAutoBundleSplitEnabled": "false"}, declarations=cluster))
    assert team.cluster_view is not None and team.cluster_view.competing_controllers == ("loadBalancerSheddingEnabled",)


def test_a_broker_whose_configuration_was_not_read_counts_as_running_pulsars_defaults():
    settings = {"minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
    cluster = declarations({"a:8080": settings})  # b and c unread
    made = plan(ClusterInputs(declarations=cluster))
    assert made.cluster_view is not None and made.cluster_view.competing_controllers == ("loadBalancerSheddingEnabled",)
    assert "unknown on b:8080, c:8080, whose configuration was not read" in made.notes[0]


def test_automatic_splitting_competes_with_splits_only():
    hot = "tenant/ns/0x00000000_0x40000000"  # wide enough to split
    data = load_data(
        {
            "a:8080": broker(rate_in=50000, bundles=[hot], last_stats={hot: NamespaceBundleStats(topics=5)}),
            "b:8080": broker(),
        },
        {hot: bundle_data(50000, topics=5)},
    )
    splitting = {"loadBalancerAutoBundleSplitEnabled": "true"}
    cluster = declarations({"a:8080": splitting, "b:8080": splitting})
    made = plan(ClusterInputs(declarations=cluster), data)
    kinds = {action.kind for action in made.actions}
    assert "split" in kinds and made.cluster_view is not None
    assert made.cluster_view.competing_controllers == ("loadBalancerAutoBundleSplitEnabled",)
    unloads_only = plan(ClusterInputs(include_splits=False, declarations=cluster), data)
    assert unloads_only.cluster_view is not None and unloads_only.cluster_view.competing_controllers == ()


# --- every kind of plan -------------------------------------------------------------------------------------------


def test_maintenance_and_transfer_shedder_plans_record_the_same_view():
    cluster = declarations({"a:8080": {"maxUnloadPercentage": "0.4"}, "b:8080": {"maxUnloadPercentage": "0.4"}})
    drain = plan(ClusterInputs(maintenance={"mode": "drain", "brokers": ["a:8080"]}, declarations=cluster))
    assert drain.maintenance is not None and drain.cluster_view is not None
    assert used(drain)["maxUnloadPercentage"].source is ConfigSource.CLUSTER
    extensible = plan(ClusterInputs(load_manager=EXTENSIBLE_LOAD_MANAGER, declarations=cluster), strategy="AvgShedder")
    assert extensible.cluster_view is not None and used(extensible)["maxUnloadPercentage"].value == 0.4
    assert used(extensible)["loadManagerClassName"].value == EXTENSIBLE_LOAD_MANAGER
    assert used(extensible)["loadManagerClassName"].source is ConfigSource.CLUSTER


def test_policies_read_and_what_could_not_be_read_are_recorded():
    refused = Unreadable(kind=Declaration.ISOLATION_POLICIES, what="isolation policies", reason="HTTP 401", covers=())
    made = plan(ClusterInputs(declarations=declarations(unreadable=(refused,))))
    assert made.cluster_view is not None and not made.cluster_view.policies_read
    assert made.cluster_view.unreadable == ("isolation policies: HTTP 401",)
    assert "Not read at the collect, planned without it: isolation policies: HTTP 401." in made.notes
    assert plan(ClusterInputs(declarations=declarations())).cluster_view.policies_read  # type: ignore[union-attr]


# --- what the approval request and the plan page show ------------------------------------------------------------


def reviewed_plan() -> PlanDocument:
    versions = {"a:8080": "4.0.8", "b:8080": "4.2.4", "c:8080": "4.2.4"}
    shedding = {"loadBalancerSheddingEnabled": "true", "minUnloadMessage": "0"}
    cluster = declarations(
        {"a:8080": {**shedding, "maxUnloadPercentage": "0.5"}, "b:8080": {**shedding, "maxUnloadPercentage": "0.6"},
         "c:8080": {**shedding, "maxUnloadPercentage": "0.5"}},
        versions=versions,
        unreadable=(Unreadable(kind=Declaration.ANTI_AFFINITY_GROUPS, what="anti-affinity group", reason="HTTP 403",
                               covers=("t/a",)),),
    )  # fmt: skip
    return plan(ClusterInputs(settings={"loadBalancerCPUResourceWeight": "0.5"}, declarations=cluster))


def test_the_approval_request_warns_first_and_shows_the_configuration_that_matters():
    made = reviewed_plan()
    assert made.actions
    summary = plan_summary_markdown(made, "http://review/plans/1")
    warning = summary.split("\n\n")[1]
    assert warning.startswith("**Warning: the brokers' own load balancing is still on**")
    assert "load shedding (`loadBalancerSheddingEnabled`)" in warning
    text = approval_request_markdown(made, "http://review/plans/1", 1, None)
    release = "Pulsar 4.0.8 (the brokers' release); mixed releases: 4.0.8 on a:8080; 4.2.4 on b:8080, c:8080."
    assert f"Configuration: {release}" in text and "**Not all policies were read**" in text
    assert "- **Not read**, planned without it: anti-affinity group of t/a: HTTP 403" in text
    assert "| `loadBalancerCPUResourceWeight` | 0.5 | **team** | 1.0 |  |" in text
    assert "| `maxUnloadPercentage` | 0.5 | cluster | 0.2 | **0.5 on a:8080, c:8080; 0.6 on b:8080** |" in text
    assert "| `minUnloadMessage` | 0 | cluster | 1000 |  |" in text
    # Values equal to Pulsar's defaults are counted, not listed.
    assert "`loadBalancerHistoryResourcePercentage`" not in text
    assert re.search(r"\n\d+ other keys at Pulsar's defaults; the plan page lists every key\.\n", text)
    # A plan made before the planner read the cluster: the texts as before.
    quiet = made.model_copy(update={"cluster_view": None})
    assert "Configuration:" not in approval_request_markdown(quiet, "u", 1, None)
    assert "Warning" not in plan_summary_markdown(quiet, "u")


def test_the_plan_page_shows_the_configuration_table_with_overrides_and_disagreements(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    made = reviewed_plan()
    plan_id = commit_plan(store, made, admin_url="http://east:8080", run_key="r:east:x", expected_version=0).plan_id
    old = plan(ClusterInputs(settings={"minUnloadMessage": "0"}))
    old_id = commit_plan(store, old, admin_url="http://east:8080", run_key="s:east:x", expected_version=1).plan_id
    root = FastAPI()
    root.mount(URL_PREFIX, create_app(lambda: store, lambda: tmp_path, []))
    client = TestClient(root)
    page = client.get(f"{URL_PREFIX}/plans/{plan_id}").text
    assert 'id="competing-controllers"' in page and "load shedding (<code>loadBalancerSheddingEnabled</code>)" in page
    assert 'class="flag" id="mixed-releases">mixed releases</span> 4.0.8 on a:8080; 4.2.4 on b:8080, c:8080' in page
    assert "<li>anti-affinity group of t/a: HTTP 403</li>" in page
    rows = re.findall(r'<tr class="([^"]*)">\s*<td><code>(\w+)</code>', page)
    by_key = {key: set(classes.split()) for classes, key in rows}
    assert len(by_key) == len(PulsarConfig.known_keys()) - 1
    assert "override" in by_key["loadBalancerCPUResourceWeight"]
    assert "disagree" in by_key["maxUnloadPercentage"] and "override" not in by_key["maxUnloadPercentage"]
    assert by_key["loadBalancerHistoryResourcePercentage"] == set()
    assert "<strong>0.5 on a:8080, c:8080; 0.6 on b:8080</strong>" in page
    assert "<strong>team</strong>" in page
    assert "WARNING: the brokers&#39; own load shedding is on" in page  # the plan's notes, shown for a rebalance
    before = client.get(f"{URL_PREFIX}/plans/{old_id}").text
    assert 'id="configuration-source"' in before and 'id="configuration"' not in before
