"""A cluster's calibration for its next plan, learnt from the outcomes of its last executed and measured plans.

The plan run asks for it (`planner.orchestrate.runner.cluster_inputs`) and hands it to the job in the request
(`ClusterInputs.calibration`), so the plan predicts with it and records its version. Each outcome is rebuilt from
the store alone (`planner.plan.outcome`), disturbed ones included: `planner.plan.calibration` skips those and
counts them by reason.
"""

from __future__ import annotations

from planner.plan.calibration import BrokerObservation, PlanObservation, calibrate
from planner.plan.document import CalibrationRecord
from planner.plan.outcome import PlanOutcome, plan_outcome
from planner.plan.usage_model import UsageModels
from planner.store.database import Store
from planner.store.plans import measured_plans


def observation_of(outcome: PlanOutcome, usage_models: UsageModels) -> PlanObservation:
    """The outcome as calibration reads it: each broker measured with its usage and traffic on both sides; the
    plan's fitted models (before any calibration, as its document keeps them) to judge the costs against."""
    brokers = []
    for broker in outcome.brokers:
        before, after = broker.usage_before, broker.usage_measured
        if before is None or after is None or broker.traffic_before is None or broker.traffic_measured is None:
            continue
        brokers.append(
            BrokerObservation(
                broker.broker,
                {"cpu": before.cpu, "bandwidthIn": before.bandwidth_in, "bandwidthOut": before.bandwidth_out},
                {"cpu": after.cpu, "bandwidthIn": after.bandwidth_in, "bandwidthOut": after.bandwidth_out},
                broker.traffic_before,
                broker.traffic_measured,
            )
        )
    disturbances = tuple(reason.value for reason in outcome.reasons if reason.disturbs)
    return PlanObservation(f"plan-{outcome.plan_id}", usage_models, tuple(brokers), disturbances)


def cluster_calibration(store: Store, cluster: str, window: int, *, enabled: bool = True) -> CalibrationRecord:
    """What the cluster's last `window` measured plans teach its next plan's usage model; `enabled` False: recorded
    for the plan, not applied to its prediction."""
    observations = []
    for measured in measured_plans(store, cluster, limit=window):
        document = measured.record.document
        models = document.get("usageModels")
        outcome = plan_outcome(measured.record, measured.measurement)
        observations.append(observation_of(outcome, UsageModels.from_json(models) if models else UsageModels()))
    return CalibrationRecord.of(calibrate(observations), enabled=enabled)
