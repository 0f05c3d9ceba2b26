"""One cluster's plan from the load the Spark job averaged and what the store knows of the cluster: a maintenance
plan when one was asked for, else the plan of the load manager its brokers run (TransferShedder's on the
extensible one, the requested strategy's on ModularLoadManagerImpl). Every kind is made with the configuration and
release the cluster declared at its latest snapshot, under the team's explicit settings
(`planner.plan.configuration`), and records them in its cluster view. Pure: the job calls it per cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.plan.calibration import model_version
from planner.plan.configuration import plan_configuration
from planner.plan.document import CalibrationRecord, PlanDocument
from planner.plan.extensible import extensible_load_data, moving_average
from planner.plan.maintenance import maintenance_plan
from planner.plan.planning import make_plan, make_transfer_plan
from planner.plan.request import ClusterInputs
from planner.plan.usage_model import UsageModels
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.model import LoadData


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """A cluster's load at its latest snapshot as the job averaged it, and what the extensible load manager's
    plans read besides."""

    load_data: LoadData
    snapshot: int | None  # the latest snapshot's id
    # Per broker: its own weightedMaxEMA as its latest report gave it (None where the report has none).
    weighted_max_ema: Mapping[str, float | None]
    # Per broker: its throughput (bytes/s in and out) in each snapshot within the history, as (snapshot id, value).
    throughput_history: Mapping[str, Sequence[tuple[int, float]]]


def plan_cluster(
    cluster: str,
    load: ClusterLoad,
    inputs: ClusterInputs,
    strategy: str,
    *,
    now_millis: int,
    usage_models: UsageModels | None,
) -> PlanDocument:
    """The cluster's plan. Placement draws are seeded by the snapshot planned: the same inputs plan the same.

    With a calibration in the inputs, the strategy and the forecast predict with the calibrated models; the plan
    keeps the fit as it was and names the calibration applied on top of it."""
    load = dataclasses.replace(load, load_data=_with_declared_brokers(load.load_data, inputs))
    load_data = load.load_data
    fitted, usage_models = usage_models, _calibrated(usage_models, inputs.calibration, load_data)
    # The team's settings over the cluster's own configuration and release over Pulsar's defaults.
    configuration = plan_configuration(cluster, inputs.settings, inputs.declarations)
    config = configuration.config
    # The policies the latest snapshot read (None: it read none); placement, shedding and maintenance follow them.
    policies = inputs.declarations.policies if inputs.declarations is not None else None
    if inputs.maintenance is not None:
        plan = maintenance_plan(
            cluster, load_data, config, inputs.maintenance, usage_models, inputs.owned_bundles, policies=policies
        )
        return _with_model(configuration.record(plan, config, load_data.brokers), fitted, inputs.calibration)
    snapshot_keys = []
    if inputs.load_manager:  # what the brokers run, as the latest snapshot found
        config = config.with_settings({"loadManagerClassName": inputs.load_manager}, source=f"settings of {cluster}")
        snapshot_keys.append("loadManagerClassName")
    plan = configuration.record(
        _plan_of_load_manager(cluster, load, inputs, strategy, config, policies, now_millis, usage_models),
        config,
        load_data.brokers,
        snapshot_keys,
    )
    return _with_model(plan, fitted, inputs.calibration)


def _calibrated(
    usage_models: UsageModels | None, calibration: CalibrationRecord | None, load_data: LoadData
) -> UsageModels | None:
    """The models to predict with: the fit, its costs scaled by the calibration when one is applied."""
    if calibration is None or not calibration.enabled:
        return usage_models
    learnt = calibration.calibration()
    if learnt.identity:
        return usage_models
    return learnt.apply(usage_models or UsageModels(), load_data)


def _with_model(
    plan: PlanDocument, usage_models: UsageModels | None, calibration: CalibrationRecord | None
) -> PlanDocument:
    """The plan names the fit it predicted with, as fitted (what the next calibration judges), and the calibration."""
    return plan.model_copy(
        update={
            "usage_models": usage_models.to_json() if usage_models is not None else None,
            "model_version": model_version(usage_models),
            "calibration": calibration,
        }
    )


def _with_declared_brokers(load_data: LoadData, inputs: ClusterInputs) -> LoadData:
    """The averaged load with what each broker's report named besides its traffic, which the samples do not keep:
    its load manager class (Pulsar's class filter leaves out brokers naming another, or none) and its release (the
    version filter's). Taken from the snapshot's declarations; without them the load is planned as it is."""
    declarations = inputs.declarations
    if declarations is None:
        return load_data
    brokers = {}
    for broker, report in load_data.brokers.items():
        declared_class = declarations.configuration.get(broker, {}).get("loadManagerClassName") or inputs.load_manager
        brokers[broker] = report.model_copy(
            update={
                "load_manager_class_name": report.load_manager_class_name or declared_class,
                "broker_version_string": report.broker_version_string or declarations.broker_versions.get(broker),
            }
        )
    return load_data.model_copy(update={"brokers": brokers})


def _plan_of_load_manager(
    cluster: str,
    load: ClusterLoad,
    inputs: ClusterInputs,
    strategy: str,
    config: PulsarConfig,
    policies: ClusterPolicies | None,
    now_millis: int,
    usage_models: UsageModels | None,
) -> PlanDocument:
    """The requested strategy's plan on ModularLoadManagerImpl, TransferShedder's on the extensible load manager."""
    load_data = load.load_data
    if not config.extensible:
        return make_plan(
            cluster,
            load_data,
            config,
            strategy,
            inputs.state,
            now_millis=now_millis,
            include_splits=inputs.include_splits,
            namespace_bundle_counts=inputs.namespace_bundle_counts,
            seed=load.snapshot or 0,
            usage_models=usage_models,
            policies=policies,
        )
    throughput_ema = {
        broker: moving_average((value for _, value in sorted(series)), config.history_resource_percentage)
        for broker, series in load.throughput_history.items()
    }
    extensible = extensible_load_data(
        load_data.brokers,
        load.weighted_max_ema,
        throughput_ema,
        max(report.last_update for report in load_data.brokers.values()),
        config,
        load_data.recently_unloaded_bundles,
        inputs.recently_unloaded_brokers,
        policies,
    )
    return make_transfer_plan(
        cluster,
        load_data,
        extensible,
        config,
        inputs.state,
        now_millis=now_millis,
        include_splits=inputs.include_splits,
        namespace_bundle_counts=inputs.namespace_bundle_counts,
        usage_models=usage_models,
        requested_strategy=strategy,
        policies=policies,
    )
