"""The simulator with cluster policies: scenarios declare isolation policies, failure domains and anti-affinity
groups; Pulsar's simulated leader and this product's plans obey them; a run can ignore them on this product's side,
and each run counts what it left against them."""

from __future__ import annotations

import copy
import json

import pytest

from planner.cli import main
from planner.errors import InputError
from planner.pulsar.declarations import ClusterPolicies, FailureDomain, NamespaceIsolationPolicy
from planner.simulator import report
from planner.simulator.engine import ClusterPolicyMode, Simulation, base_config, parse_policy, simulate
from planner.simulator.maintenance import compare_drain
from planner.simulator.scenario import build_world, load_scenario, scenario_from_mapping
from planner.simulator.violations import PolicyJudge

SHIPPED = "isolation-and-anti-affinity"
FAILOVER = {"policyType": "min_available", "parameters": {"min_limit": 1, "usage_threshold": 80}}


def document(**policies):
    """Five brokers: the tenant `secure` isolated to iso-1 and iso-2, three shared brokers."""
    return {
        "name": "policies",
        "minutes": 60,
        "brokers": [{"name": "iso", "count": 2}, {"name": "shared", "count": 3}],
        "bundles": [
            {"namespace": "secure/app", "count": 8, "owners": ["iso-1"], "score": 80},
            {"namespace": "geo/a", "count": 2, "owners": ["shared-1"], "score": 5},
            {"namespace": "geo/b", "count": 2, "owners": ["shared-2"], "score": 5},
            {"namespace": "geo/c", "count": 2, "owners": ["shared-3"], "score": 5},
        ],
        "policies": policies
        or {
            "isolation": {
                "secure": {"namespaces": ["secure/.*"], "primary": ["iso-[0-9]+"], "autoFailoverPolicy": FAILOVER}
            },
            "failureDomains": {
                "zone-a": ["iso-1", "shared-1"],
                "zone-b": ["iso-2", "shared-2"],
                "zone-c": ["shared-3"],
            },
            "antiAffinityGroups": {"geo/a": "geo", "geo/b": "geo", "geo/c": "geo"},
        },
    }


# --- the scenario format ---------------------------------------------------------------------------


def test_the_policies_of_a_scenario_become_pulsars_records():
    world = build_world(scenario_from_mapping(document(), "test.toml"), seed=1)
    policies = world.policies
    assert policies is not None
    secure = policies.isolation["secure"]
    assert secure.namespaces == ("secure/.*",) and secure.primary == ("iso-[0-9]+",) and secure.secondary == ()
    assert secure.auto_failover_policy is not None
    assert secure.auto_failover_policy.parameters == {"min_limit": "1", "usage_threshold": "80"}
    # Broker and group names resolve to broker ids, as bundle owners do.
    assert policies.failure_domains["zone-a"].brokers == {"iso-1:8080", "shared-1:8080"}
    assert policies.anti_affinity_groups == {"geo/a": "geo", "geo/b": "geo", "geo/c": "geo"}


def test_a_scenario_without_policies_has_none():
    spec = document()
    del spec["policies"]
    assert build_world(scenario_from_mapping(spec, "test.toml"), seed=1).policies is None


def test_the_shipped_scenario_declares_isolation_domains_and_an_anti_affinity_group():
    world = build_world(load_scenario(SHIPPED), seed=1)
    assert world.policies is not None
    assert len(world.brokers.ids) == 5
    assert set(world.policies.failure_domains) == {"zone-a", "zone-b", "zone-c"}
    assert set(world.policies.anti_affinity_groups.values()) == {"geo-replicated"}
    assert len(world.policies.anti_affinity_groups) == 3


def _secure(spec):
    return spec["policies"]["isolation"]["secure"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: _secure(d).update(primary=["nope-.*"]), "policies.isolation.secure.primary[0]"),
        (lambda d: _secure(d).update(namespaces=["("]), "policies.isolation.secure.namespaces[0]"),
        (lambda d: _secure(d).update(namespaces=["other/.*"]), "policies.isolation.secure.namespaces[0]"),
        (lambda d: _secure(d).update(secondary=["zzz"]), "policies.isolation.secure.secondary[0]"),
        (lambda d: _secure(d).update(primary=[]), "policies.isolation.secure.primary"),
        (lambda d: _secure(d).pop("autoFailoverPolicy"), "policies.isolation.secure.autoFailoverPolicy"),
        (
            lambda d: _secure(d)["autoFailoverPolicy"].update(policyType="max_available"),
            "policies.isolation.secure.autoFailoverPolicy.policyType",
        ),
        (
            lambda d: _secure(d)["autoFailoverPolicy"]["parameters"].pop("min_limit"),
            "policies.isolation.secure.autoFailoverPolicy.parameters.min_limit",
        ),
        (lambda d: d["policies"]["isolation"].update({"a b": _secure(d)}), "policies.isolation['a b'] (key)"),
        (lambda d: d["policies"]["failureDomains"].update(z=["iso-1"]), "policies.failureDomains.z"),
        (lambda d: d["policies"]["failureDomains"].update(z=["nobody"]), "policies.failureDomains.z"),
        (lambda d: d["policies"]["antiAffinityGroups"].update({"x/y": "geo"}), "policies.antiAffinityGroups['x/y']"),
        (lambda d: d["policies"]["antiAffinityGroups"].update({"geo/a": ""}), "policies.antiAffinityGroups['geo/a']"),
        (lambda d: d["policies"].update(isolaton={}), "policies.isolaton"),
    ],
)
def test_bad_policies_are_refused_naming_the_scenario_and_the_field(mutate, field):
    spec = copy.deepcopy(document())
    mutate(spec)
    with pytest.raises(InputError) as raised:
        scenario_from_mapping(spec, "mine.toml")
    message = str(raised.value)
    assert message.startswith("invalid scenario mine.toml: ") and "\n" not in message
    assert field in message


def test_a_bad_policy_in_a_file_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(
        """
name = "bad"
[[brokers]]
name = "b"
count = 2
[[bundles]]
namespace = "t/ns"
count = 2
owners = ["b"]
score = 10
[policies.isolation.t]
namespaces = ["t/.*"]
primary = ["c-.*"]
autoFailoverPolicy = { policyType = "min_available", parameters = { min_limit = 1, usage_threshold = 80 } }
"""
    )
    assert main(["simulate", "--scenario", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"error: invalid scenario {path}: policies.isolation.t.primary[0]: 'c-.*' matches no broker host"


# --- counting violations ---------------------------------------------------------------------------


BROKERS = ("iso-1:8080", "iso-2:8080", "shared-1:8080", "shared-2:8080", "shared-3:8080")


def judge(domains_enabled: bool = True, min_limit: int = 1) -> PolicyJudge:
    failover = {"policy_type": "min_available", "parameters": {"min_limit": str(min_limit), "usage_threshold": "80"}}
    policies = ClusterPolicies(
        isolation={
            "secure": NamespaceIsolationPolicy.model_validate(
                {
                    "namespaces": ["secure/.*"],
                    "primary": ["iso-[0-9]+"],
                    "secondary": ["shared-3"],
                    "auto_failover_policy": failover,
                }
            )
        },
        failure_domains={
            "zone-a": FailureDomain(brokers=frozenset({"iso-1:8080", "shared-1:8080"})),
            "zone-b": FailureDomain(brokers=frozenset({"iso-2:8080", "shared-2:8080"})),
        },
        anti_affinity_groups={"geo/a": "geo", "geo/b": "GEO", "geo/c": "geo", "other/x": " "},
    )
    return PolicyJudge(policies, domains_enabled)


def test_isolation_violations_count_bundles_where_their_namespace_may_not_be():
    owners = {
        "secure/app/0x00000000_0x80000000": "iso-1:8080",  # a primary: allowed
        "secure/app/0x80000000_0xffffffff": "shared-1:8080",  # not a primary: violation
        "geo/a/0x00000000_0xffffffff": "iso-2:8080",  # another policy's primary: violation
        "geo/b/0x00000000_0xffffffff": "shared-2:8080",  # a shared broker: allowed
    }
    assert judge().isolation_violations(owners, BROKERS) == 2
    # Fewer available primaries than min_limit: the secondaries are allowed too, as the auto-failover policy says.
    assert judge(min_limit=3).isolation_violations({"secure/app/0x00000000_0xffffffff": "shared-3:8080"}, BROKERS) == 0
    assert judge(min_limit=1).isolation_violations({"secure/app/0x00000000_0xffffffff": "shared-3:8080"}, BROKERS) == 1
    # With both primaries down, the namespace fails over.
    up = ("shared-1:8080", "shared-2:8080", "shared-3:8080")
    assert judge().isolation_violations({"secure/app/0x00000000_0xffffffff": "shared-3:8080"}, up) == 0


def test_anti_affinity_violations_count_avoidable_sharing_by_domain_or_broker():
    apart = {
        "geo/a/0x00000000_0xffffffff": "shared-1:8080",  # zone-a
        "geo/b/0x00000000_0xffffffff": "shared-2:8080",  # zone-b
        "geo/c/0x00000000_0xffffffff": "shared-3:8080",  # no domain: Pulsar's "default"
        "other/x/0x00000000_0xffffffff": "shared-3:8080",  # a blank group is no group
    }
    assert judge().anti_affinity_violations(apart, BROKERS) == 0
    together = {**apart, "geo/c/0x00000000_0xffffffff": "iso-1:8080"}  # zone-a, with geo/a
    assert judge().isolation_violations(together, BROKERS) == 1
    assert judge().anti_affinity_violations(together, BROKERS) == 1
    # Without failure domains, brokers are what must differ: iso-1 and shared-1 are two.
    assert judge(domains_enabled=False).anti_affinity_violations(together, BROKERS) == 0
    # Groups compare ignoring case (geo/b is in "GEO"): geo/b with geo/a on one broker is sharing.
    same_broker = {**apart, "geo/b/0x00000000_0xffffffff": "shared-1:8080"}
    assert judge(domains_enabled=False).anti_affinity_violations(same_broker, BROKERS) == 1


def test_sharing_that_the_brokers_up_force_is_no_violation():
    # Only zone-a is up (and shared-3 is down): the three namespaces cannot be apart; 2 must share.
    up = ("iso-1:8080", "shared-1:8080")
    owners = {f"geo/{name}/0x00000000_0xffffffff": "shared-1:8080" for name in "abc"}
    assert judge().anti_affinity_violations(owners, up) == 0
    # With zone-b up too, one of them could be elsewhere.
    assert judge().anti_affinity_violations(owners, (*up, "shared-2:8080")) == 1


# --- runs ------------------------------------------------------------------------------------------


def _violations(run):
    violations = run.metrics.policy_violations
    assert violations is not None
    return violations


@pytest.mark.parametrize("policy", ["ThresholdShedder", "UniformLoadShedder", "AvgShedder"])
def test_pulsars_leader_obeys_the_isolation_policy(policy):
    run = simulate(load_scenario(SHIPPED), policy, minutes=90)
    violations = _violations(run)
    assert run.metrics.moves > 0  # it did shed: the tenant's load between its own two brokers
    assert violations.forbidden_moves == 0 and violations.isolation == 0 and violations.anti_affinity == 0
    secure_destinations = {move.destination for move in run.moves if move.bundle.startswith("secure/")}
    assert secure_destinations <= {"iso-1:8080", "iso-2:8080"}


def test_pulsars_leader_does_not_unload_an_anti_affinity_namespace_that_would_come_back():
    # Each of three shared brokers holds one namespace of the group; one is hot. Every broker the hot one's bundles
    # may go to holds as many of the group's namespaces as it does: shouldAntiAffinityNamespaceUnload says no.
    spec = document(
        failureDomains={"zone-a": ["shared-1"], "zone-b": ["shared-2"], "zone-c": ["shared-3"]},
        antiAffinityGroups={"geo/a": "geo", "geo/b": "geo", "geo/c": "geo"},
    )
    spec["brokers"] = [{"name": "shared", "count": 3}]
    spec["bundles"] = [
        {"namespace": "geo/a", "count": 8, "owners": ["shared-1"], "score": 80},
        {"namespace": "geo/b", "count": 2, "owners": ["shared-2"], "score": 5},
        {"namespace": "geo/c", "count": 2, "owners": ["shared-3"], "score": 5},
    ]
    scenario = scenario_from_mapping(spec, "test")
    run = simulate(scenario, "UniformLoadShedder", minutes=30)
    assert run.metrics.moves == 0
    # Without the group, the same cluster sheds at once.
    del spec["policies"]
    assert simulate(scenario_from_mapping(spec, "test"), "UniformLoadShedder", minutes=30).metrics.moves > 0


def test_ignoring_the_policies_shows_what_they_prevent():
    comparison = report.compare(
        load_scenario(SHIPPED),
        ["offline:UniformLoadShedder", "offline:AvgShedderPredictive"],
        cluster_policies=ClusterPolicyMode.BOTH,
    )
    runs = {run.label: run for run in comparison.runs}
    assert list(runs) == [
        "offline:UniformLoadShedder",
        "offline:UniformLoadShedder (cluster policies ignored)",
        "offline:AvgShedderPredictive",
        "offline:AvgShedderPredictive (cluster policies ignored)",
    ]
    for label, run in runs.items():
        violations = _violations(run)
        if run.cluster_policies_ignored:
            assert violations.isolation > 0 and violations.forbidden_moves > 0, label
            assert violations.refused_moves == 0  # the executor did not look either
        else:
            assert (violations.isolation, violations.anti_affinity, violations.forbidden_moves) == (0, 0, 0), label
            assert violations.refused_moves == 0, label  # the plan and the executor agree
    assert sum(_violations(run).anti_affinity for run in comparison.runs if run.cluster_policies_ignored) > 0


def test_the_simulated_executor_refuses_a_destination_the_policies_forbid():
    scenario = load_scenario(SHIPPED)
    world = build_world(scenario, seed=1)
    owners = {
        name: world.brokers.ids[owner]
        for name, owner in zip(world.bundles.names, world.bundles.initial_owner.tolist(), strict=True)
    }
    bundle = next(name for name in owners if name.startswith("secure/"))

    def simulation(ignore: bool) -> Simulation:
        options = {"seed": 1, "minutes": 10, "cadence_minutes": 60, "target_spread": 20.0}
        offline = parse_policy("offline:AvgShedder")
        return Simulation(world, offline, base_config(scenario), ignore_cluster_policies=ignore, **options)

    obeying = simulation(ignore=False)
    assert obeying.refuses(bundle, "shared-1:8080", owners) and obeying.refused_moves == 1
    assert owners[bundle] != "shared-1:8080"
    assert not obeying.refuses(bundle, "iso-2:8080", owners) and owners[bundle] == "iso-2:8080"
    # This product before it read the policies: its executor sent whatever the plan said.
    ignoring = simulation(ignore=True)
    assert not ignoring.refuses(bundle, "shared-1:8080", owners) and ignoring.refused_moves == 0


def test_ignoring_changes_nothing_for_pulsars_own_shedders():
    comparison = report.compare(load_scenario(SHIPPED), ["UniformLoadShedder"], cluster_policies=ClusterPolicyMode.BOTH)
    assert [run.label for run in comparison.runs] == ["UniformLoadShedder"]


def test_a_drain_obeys_the_isolation_policy_unless_it_ignores_it():
    spec = document()
    spec["events"] = [{"at": 10, "kind": "loss", "brokers": ["iso-1"]}]
    runs = compare_drain(scenario_from_mapping(spec, "test"), cluster_policies=ClusterPolicyMode.BOTH)
    assert [run.label for run in runs][1:] == [
        "drain, 6 unloads/min",
        "drain, 6 unloads/min (cluster policies ignored)",
    ]
    shutdown, obeying, ignoring = runs
    assert shutdown.policy_violations is not None and shutdown.policy_violations.isolation == 0
    assert obeying.policy_violations is not None and obeying.policy_violations.isolation == 0
    assert obeying.moves == 8
    assert ignoring.policy_violations is not None and ignoring.policy_violations.isolation > 0
    assert "isolationViolations" in ignoring.to_json()


# --- the report and the command --------------------------------------------------------------------


def test_the_report_shows_violations_side_by_side(capsys):
    arguments = ["--scenario", SHIPPED, "--policy", "offline:UniformLoadShedder", "--minutes", "120"]
    assert main(["simulate", *arguments, "--cluster-policies", "both"]) == 0
    document = json.loads(capsys.readouterr().out)
    obeyed = document["policies"]["offline:UniformLoadShedder"]
    ignored = document["clusterPoliciesIgnored"]["offline:UniformLoadShedder"]
    assert obeyed["isolationViolations"] == 0 and obeyed["forbiddenMoves"] == 0
    assert ignored["isolationViolations"] > 0 and ignored["forbiddenMoves"] > 0
    assert main(["simulate", *arguments, "--cluster-policies", "both", "--format", "table"]) == 0
    table = capsys.readouterr().out
    assert "isolation violations" in table and "offline:UniformLoadShedder (cluster policies ignored)" in table


def test_a_scenario_without_policies_reports_as_before(capsys):
    comparison = report.compare(load_scenario("spike"), ["UniformLoadShedder", "offline:AvgShedder"], minutes=30)
    document = report.to_json(comparison)
    assert "clusterPoliciesIgnored" not in document
    for metrics in document["policies"].values():
        assert not {"isolationViolations", "antiAffinityViolations", "forbiddenMoves"} & set(metrics)
    assert "violations" not in report.text_table(comparison)
    # Nothing to ignore: asking to is an error naming the scenario.
    assert main(["simulate", "--scenario", "spike", "--cluster-policies", "both"]) == 2
    assert "scenario spike declares no [policies]" in capsys.readouterr().err
