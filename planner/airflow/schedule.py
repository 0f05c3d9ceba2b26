"""When the plan DAGs run: the `plan_profile` setting as an Airflow schedule."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset
from airflow.timetables.assets import AssetOrTimeSchedule
from airflow.timetables.trigger import CronTriggerTimetable

from planner.settings import planner_settings

PROFILES = {"hourly": "0 * * * *", "nightly": "0 2 * * *"}


def samples_asset_name(cluster: str) -> str:
    """The Asset the collect DAG emits for a cluster after each snapshot."""
    return f"pulsar-rebalance-samples-{cluster}"


def plan_schedule(cluster: str, profile: str | None = None) -> Any:
    """`hourly` (default), `nightly`, `assets` (after each fresh collect of the cluster), `hourly+assets`
    (whichever comes first), a cron expression, or `manual` (only when triggered)."""
    # The profile shapes the DAG, so it is read from the environment: the DAG's parse reads no Variable.
    profile = profile or planner_settings().plan_profile
    if profile == "manual":
        return None
    samples = Asset(samples_asset_name(cluster))
    if profile == "assets":
        return [samples]
    if profile.endswith("+assets"):
        cron = PROFILES.get(profile.removesuffix("+assets"), profile.removesuffix("+assets"))
        return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=samples)
    return PROFILES.get(profile, profile)
