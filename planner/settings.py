"""Every setting of the product, in one place.

Three models, all read through pydantic-settings:

- `PlannerSettings`: where the planner keeps its state and files, which clusters the DAGs serve, the
  approval gate and the Spark submission. Environment variables `PULSAR_REBALANCE_<FIELD>`; inside
  Airflow also the Variable `pulsar_rebalance_settings` (a JSON object of the same fields), which the
  environment overrides, read when tasks run; `cluster_names` and `plan_profile` shape the DAGs, whose parse
  reads no Variable, so they come from the environment only.
- `ExecutorSettings`: the executor's pacing, budgets, TTL, attempts and timeouts. Defaults, then
  `PULSAR_REBALANCE_EXECUTOR__<FIELD>` (or the Variable's `executor` object), then the cluster's Pulsar
  connection extras, then the plan DAG's params or the CLI's options, each overriding the one before.
- `DevClusterSettings`: the local Pulsar cluster the dev tools start (`devtools/`, `pulsar-rebalance-dev`).

`python -m planner.settings` prints the reference table of docs/settings.md, which a test keeps equal to
the models.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from planner.durations import Seconds
from planner.errors import InputError, format_validation_error
from planner.names import check_name

ENV_PREFIX = "PULSAR_REBALANCE_"
# An approver whose id starts with this is an OS user, who decides with the CLI's `approve` (Airflow has no such id).
OS_USER_PREFIX = "os:"
# A LoadData of 10,000 brokers with 100,000 bundles is about 60 MiB of JSON.
DEFAULT_MAX_JSON_BYTES = 256 * 1024 * 1024
AIRFLOW_VARIABLE = "pulsar_rebalance_settings"
# Settings that shape the DAGs: read when the DAG file is parsed, which reads no Variable (Airflow's top-level
# code rule), so only from the environment.
DAG_SHAPE_SETTINGS = ("cluster_names", "plan_profile")


def _default_home() -> Path:
    return Path.home() / ".local" / "share" / "pulsar-rebalance"


def _comma_separated(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


# --- approval policies and time windows (`planner.approval.policies` applies them to plans) -------------
#
# A window opens at each time its cron expression names, in its time zone, and stays open for its duration:
# `{"cron": "0 1 * * *", "duration": "PT3H", "timezone": "Europe/Paris"}` is 01:00 to 04:00 Paris time every
# night, daylight saving included (croniter resolves the local times).

# Just after `now`, so that a window opening exactly now counts as open.
_INSTANT = timedelta(microseconds=1)


class TimeWindow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cron: str = Field(description="When the window opens: a five-field cron expression, e.g. `0 1 * * *`.")
    duration: Seconds = Field(description="How long it stays open: seconds, or an ISO 8601 duration such as `PT3H`.")
    timezone: str = Field("UTC", description="The IANA time zone the cron expression is read in.")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (minute hour day-of-month month day-of-week)")
        return value

    @field_validator("duration")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Paris)") from None
        return value

    def opened_at(self, now: datetime) -> datetime | None:
        """When the window `now` falls in opened (UTC), or None when it is closed."""
        local = now.astimezone(ZoneInfo(self.timezone))
        opened: datetime = croniter(self.cron, local + _INSTANT).get_prev(datetime)
        return opened.astimezone(UTC) if now < opened + self.duration else None

    def next_opening(self, now: datetime) -> datetime:
        """The first time after `now` the window opens (UTC)."""
        local = now.astimezone(ZoneInfo(self.timezone))
        opening: datetime = croniter(self.cron, local).get_next(datetime)
        return opening.astimezone(UTC)

    def describe(self) -> str:
        hours = self.duration.total_seconds() / 3600
        return f"`{self.cron}` ({self.timezone}) for {hours:g} h"


class ExecutionWindow(TimeWindow):
    """When approved plans of the matching clusters may execute."""

    clusters: tuple[str, ...] = Field(("*",), description="Cluster names or shell patterns (`prod-*`).")


def matches_any(patterns: Iterable[str], name: str) -> bool:
    """`name` (a cluster, a `tenant/namespace`) matches one of the shell patterns."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def is_open(windows: Sequence[TimeWindow], now: datetime) -> bool:
    """No window configured means always open."""
    return not windows or any(window.opened_at(now) is not None for window in windows)


def next_opening(windows: Sequence[TimeWindow], now: datetime) -> datetime | None:
    """None when a window is open now (or none is configured); else the earliest opening after `now`."""
    if is_open(windows, now):
        return None
    return min(window.next_opening(now) for window in windows)


PlanMode = Literal["rebalance", "drain", "fill", "rollback"]


class ApprovalPolicy(BaseModel):
    """Rules a plan must all meet to be approved without a person; an unset rule does not limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Audited as `policy:<name>`.")
    clusters: tuple[str, ...] = Field(("*",), description="Cluster names or shell patterns (`prod-*`).")
    modes: tuple[PlanMode, ...] = Field(
        ("rebalance",), description="Plan kinds it may approve: `rebalance` (the strategies), drain, fill, rollback."
    )
    strategies: tuple[str, ...] | None = Field(None, description="Strategies it may approve, e.g. `AvgShedder`.")
    max_actions: int | None = Field(None, ge=1, description="At most this many actions (unloads and splits).")
    max_msg_rate_share: float | None = Field(
        None, gt=0, le=1, description="At most this share of the cluster's msg/s moved by the unloads (0.1 = 10 %)."
    )
    max_throughput_share: float | None = Field(
        None, gt=0, le=1, description="At most this share of the cluster's bytes/s moved by the unloads."
    )
    min_spread_improvement: float | None = Field(
        None,
        description="The predicted spread of the broker scores (highest minus lowest, in percentage points) must "
        "shrink by at least this much.",
    )
    excluded_namespaces: tuple[str, ...] = Field(
        (), description="`tenant/namespace` or shell patterns: a plan touching any of them goes to a person."
    )
    windows: tuple[TimeWindow, ...] = Field((), description="When it may approve; empty: at any time.")
    allow_beside_broker_controllers: bool = Field(
        False,
        description="Approve plans made while the brokers' own load shedding or automatic bundle splitting is on "
        "(the plan's `competing_controllers`); by default such a plan goes to a person.",
    )
    scale_events: tuple[Literal["join", "removal"], ...] | None = Field(
        None,
        description="Only plans proposed for these scale events: `join` (the fill of a broker that joined), "
        "`removal` (the drain of one marked for removal); with `modes` naming fill or drain. Unset: any plan of the "
        "modes, proposed or asked for.",
    )


class ClusterExecution(BaseModel):
    """Per cluster: what executing its plans may do. The keys of its `clusters.toml` entry (the CLI), or of its
    `pulsar_<cluster>` connection's extras (Airflow)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_beside_broker_controllers: bool = Field(
        False,
        description="Execute while the brokers' own load shedding or automatic bundle splitting is on "
        "(`loadBalancerSheddingEnabled`, `loadBalancerAutoBundleSplitEnabled`, under `loadBalancerEnabled`). "
        "Off: the executor reads the brokers' configuration before it sends anything and again before each batch "
        "of actions, and refuses to run beside them, since the brokers could move back or split what the plan "
        "moves.",
    )


class Approver(BaseModel):
    """A person allowed to decide on plans: the auth manager's user id (the approval gate), or `os:<user>` for
    an OS user deciding with the CLI's `approve`, and a name people read."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    name: str

    @classmethod
    def parse(cls, entry: str) -> Approver:
        """`ID[:Name]`; an OS user's `os:` belongs to the id (`os:alice:Alice Doe`)."""
        entry = entry.strip()
        prefix = OS_USER_PREFIX if entry.startswith(OS_USER_PREFIX) else ""
        user_id, _, name = entry.removeprefix(prefix).partition(":")
        return cls(id=prefix + user_id.strip(), name=name.strip() or user_id.strip())


class ApprovalNotifier(BaseModel):
    """A notifier a deployment adds to the approval gate's `notifiers` (Airflow's Slack or email providers', its
    own): built with `kwargs` when a gate of a matching DAG asks for approval, and called by Airflow with the gate's
    context, in which `plan_notification` is the planner's message (`title`, `text`, `link` to the approval form,
    `review_link` to the plan's page)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    notifier: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$",
        description="The `BaseNotifier` class's import path, e.g. "
        "`airflow.providers.slack.notifications.slack.SlackNotifier`.",
    )
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Its arguments (JSON), templated as the notifier templates them, e.g. "
        '`{"slack_conn_id": "slack", "channel": "#pulsar", "text": "{{ plan_notification.text }}"}`. Secrets '
        "belong in the connection the notifier names, not here.",
    )
    dags: tuple[str, ...] = Field(
        ("*",), description="DAG ids or shell patterns (`pulsar_rebalance_plan_prod-*`) whose gate it notifies."
    )


class ExecutorSettings(BaseModel):
    """How an approved plan is executed. Durations are seconds (or ISO 8601 durations)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttl: Seconds = Field(
        timedelta(hours=6),
        description="An approved plan is not started after this age. Bound by the approval: a later setting, option "
        "or param may shorten it, never extend it.",
    )
    resume_window: Seconds = Field(
        timedelta(hours=1),
        description="A started execution may continue or be resumed this long past the TTL (bound like the TTL).",
    )
    actions_per_minute: float = Field(30.0, ge=0, description="Pacing: at most this many actions start per minute.")
    max_actions: int = Field(100, ge=1, description="At most this many actions per run; a rerun continues.")
    max_failures: int = Field(3, ge=1, description="The execution stops after this many failed actions.")
    attempts_per_action: int = Field(2, ge=1, description="Requests per action before it counts as failed.")
    verify_timeout_seconds: float = Field(60.0, ge=0, description="How long an action's effect is awaited.")
    verify_interval_seconds: float = Field(1.0, gt=0, description="Polling interval of the verification.")
    settle_seconds: float = Field(
        30.0,
        ge=0,
        description="After an unanswered request ended, wait this long, and at least the brokers' unload timeout "
        "(`namespaceBundleUnloadingTimeoutMs`, 60 s if unreadable) + 5 s, before asking the cluster what happened.",
    )
    lease: Seconds = Field(
        timedelta(minutes=5),
        description="The execution claims' lease (the plan's and its cluster's), renewed before every request; must "
        "outlast one step. A request leaves only with more than the request timeout + 5 s of it left.",
    )
    request_timeout_seconds: float = Field(30.0, gt=0, description="The admin API read timeout during execution.")

    @model_validator(mode="after")
    def _lease_outlasts_a_step(self) -> ExecutorSettings:
        if self.ttl <= timedelta(0):
            raise ValueError(f"ttl must be positive ({self.ttl})")
        if self.resume_window < timedelta(0):
            raise ValueError(f"resume_window must not be negative ({self.resume_window})")
        step = timedelta(seconds=self.request_timeout_seconds + self.verify_timeout_seconds + self.settle_seconds)
        if self.lease <= step:
            raise ValueError(
                f"lease ({self.lease}) must outlast one step: request timeout + verify timeout + settle time ({step})"
            )
        return self

    def overridden(self, values: Mapping[str, Any], what: str) -> ExecutorSettings:
        """These settings with `values` (connection extras, DAG params) on top; `None` values are skipped."""
        unknown = sorted(set(values) - set(type(self).model_fields))
        if unknown:
            raise InputError(f"{what}: unknown executor setting(s) {unknown}")
        given = {key: value for key, value in values.items() if value is not None}
        return ExecutorSettings.build({**self.model_dump(), **given}, what)

    @classmethod
    def build(cls, values: Mapping[str, Any], what: str = "executor settings") -> ExecutorSettings:
        """Settings from `values`; a bad value is an InputError naming `what` and the field."""
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise InputError(format_validation_error(error, what)) from None


class ExecutionBinding(BaseModel):
    """What a decision binds, recorded with it: the freshness the approver granted and the windows the plan may
    run in. An executor may shorten the TTL and the resume window, never extend them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttl: Seconds
    resume_window: Seconds
    windows: tuple[ExecutionWindow, ...] = ()

    @classmethod
    def of(cls, executor: ExecutorSettings, windows: Iterable[ExecutionWindow], cluster: str) -> ExecutionBinding:
        """The binding of a decision taken now on `cluster`'s plan: the executor's TTL and resume window, and the
        execution windows that match the cluster."""
        matching = tuple(window for window in windows if matches_any(window.clusters, cluster))
        return cls(ttl=executor.ttl, resume_window=executor.resume_window, windows=matching)

    def bound(self, executor: ExecutorSettings) -> ExecutorSettings:
        """`executor` with its TTL and resume window no longer than the approved ones."""
        return executor.model_copy(
            update={
                "ttl": min(executor.ttl, self.ttl),
                "resume_window": min(executor.resume_window, self.resume_window),
            }
        )

    @classmethod
    def recorded(
        cls, ttl_seconds: float | None, resume_window_seconds: float | None, windows: Iterable[Mapping[str, Any]] | None
    ) -> ExecutionBinding:
        """A binding as the store keeps it; a decision recorded before bindings were stored binds the default TTL
        and resume window (no setting can extend those either) and no windows."""
        if ttl_seconds is None or resume_window_seconds is None:
            defaults = ExecutorSettings()
            return cls(ttl=defaults.ttl, resume_window=defaults.resume_window)
        return cls(
            ttl=timedelta(seconds=ttl_seconds),
            resume_window=timedelta(seconds=resume_window_seconds),
            windows=tuple(ExecutionWindow.model_validate(window) for window in windows or ()),
        )


# Maven coordinates as spark-submit's --packages takes them; --exclude-packages takes `group:artifact`.
_COORDINATE = r"[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+"
_MODULE = r"[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+"


def _spark_property_value(value: object) -> object:
    """JSON scalars as Spark writes them: `true`, `2`, `0.5`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return value


class SparkSubmitSettings(BaseModel):
    """What the plan DAG's spark-submit is given besides the job, per deployment; read when the task runs.
    Lists are comma-separated in the environment, JSON lists in the Airflow Variable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conf: dict[str, str] = Field(
        default_factory=dict,
        description='Spark properties passed as `--conf` (a JSON object, e.g. `{"spark.executor.memory": "2g", '
        '"spark.driver.host": "10.0.0.7"}`); they win over the cluster\'s `spark-defaults.conf`, and what they '
        "leave unset keeps its value there. On a remote master the driver's address is Spark's own choice (the "
        "host's address) unless `spark.driver.host` / `spark.driver.bindAddress` are set here; its ports are "
        "random unless `spark.driver.port` / `spark.blockManager.port` are.",
    )
    py_files: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="`--py-files`: zips, eggs or .py files the executors import (paths or URIs), e.g. the "
        "`pulsar-rebalance spark-code` zip on storage the workers read.",
    )
    archives: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="`--archives`: archives unpacked in each executor's directory, `URI#name` for the directory "
        "name, e.g. a packed virtualenv `s3a://bucket/venv.tar.gz#environment` with `spark.pyspark.python` "
        "`./environment/bin/python` in `conf`.",
    )
    packages: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="`--packages`: Maven coordinates (`group:artifact:version`) Spark resolves with Ivy."
    )
    exclude_packages: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="`--exclude-packages`: `group:artifact` left out of the packages' dependencies."
    )
    repositories: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="`--repositories`: Maven repositories searched for the packages besides Maven Central; a "
        "mirror that needs credentials goes in an Ivy settings file (`spark.jars.ivySettings` in `conf`).",
    )
    s3a_packages: bool = Field(
        True,
        description="With `s3://` storage, add Hadoop's s3a filesystem for this pyspark's Hadoop to the packages "
        "(hadoop-aws and the two AWS SDK modules it uses, at the versions Hadoop names), unless `packages` name "
        "hadoop-aws or `conf` sets `spark.jars` / `spark.jars.packages`. Off when the cluster's Spark has them.",
    )

    @field_validator("py_files", "archives", "packages", "exclude_packages", "repositories", mode="before")
    @classmethod
    def _split_lists(cls, value: object) -> object:
        return _comma_separated(value)

    @field_validator("py_files", "archives", "packages", "exclude_packages", "repositories", mode="after")
    @classmethod
    def _one_item_each(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # spark-submit joins each list with commas: an entry holding one would be read as two.
        for item in value:
            if "," in item or not item.strip():
                raise ValueError(f"{item!r}: one entry per item, without commas")
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_values(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {key: _spark_property_value(item) for key, item in value.items()}
        return value

    @field_validator("conf", mode="after")
    @classmethod
    def _spark_properties(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith("spark."):
                # spark-submit would drop it with a warning in the task's log.
                raise ValueError(f"{key!r} is not a Spark property (they start with `spark.`)")
        return value

    @field_validator("packages", mode="after")
    @classmethod
    def _coordinates(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not re.fullmatch(_COORDINATE, item):
                raise ValueError(f"{item!r} is not a Maven coordinate `group:artifact:version`")
        return value

    @field_validator("repositories", mode="after")
    @classmethod
    def _no_credentials(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if "@" in item.split("://", 1)[-1].split("/", 1)[0]:
                # spark-submit's argv and the task's log would show them.
                raise ValueError(
                    f"{item.split('://', 1)[0]}://...@...: credentials in a repository URL are refused; put them in "
                    "an Ivy settings file (`spark.jars.ivySettings` in `conf`)"
                )
        return value

    @field_validator("exclude_packages", mode="after")
    @classmethod
    def _modules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not re.fullmatch(_MODULE, item):
                raise ValueError(f"{item!r} is not `group:artifact`")
        return value


class _AirflowVariableSource(PydanticBaseSettingsSource):
    """The Airflow Variable `pulsar_rebalance_settings`: a JSON object with the settings' field names."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # the whole object is returned by __call__

    def __call__(self) -> dict[str, Any]:
        from airflow.sdk import Variable

        raw = Variable.get(AIRFLOW_VARIABLE, default=None)
        if raw is None:
            return {}
        try:
            values = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as error:
            raise InputError(f"Airflow Variable {AIRFLOW_VARIABLE}: not JSON ({error.msg})") from None
        if not isinstance(values, dict):
            raise InputError(f"Airflow Variable {AIRFLOW_VARIABLE}: must be a JSON object")
        # Refused, not ignored: the DAGs would serve other clusters than the tasks read here.
        for field in DAG_SHAPE_SETTINGS:
            if field in values:
                raise InputError(
                    f"Airflow Variable {AIRFLOW_VARIABLE}: {field} shapes the DAGs and is read from the environment "
                    f"only; set {ENV_PREFIX}{field.upper()} for the dag-processor and the workers instead"
                )
        return values


class PlannerSettings(BaseSettings):
    """The product's settings. Environment: `PULSAR_REBALANCE_<FIELD>`; nested executor settings as
    `PULSAR_REBALANCE_EXECUTOR__<FIELD>`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore", frozen=True, validate_default=True
    )

    home: Path = Field(
        default_factory=_default_home,
        description="The planner's own state: the SQLite store (unless `db_url`), clusters.toml, the local cluster.",
    )
    storage: str | None = Field(
        None,
        description="Root of the samples dataset, the snapshots' archives and the plan runs' files: a path every "
        "Airflow worker and the Spark job share, a `file://` URI, or an object store's `s3://bucket/prefix` (with "
        "pyarrow's options as a query string, e.g. `?endpoint_override=host:9000&scheme=http`; credentials from the "
        "AWS environment). Default: `home`.",
    )
    db_url: SecretStr | None = Field(
        None,
        description="SQLAlchemy URL of the store. Inside Airflow the `pulsar_rebalance_db` connection is used when "
        "this is unset. Default: `sqlite:///<home>/planner.db`.",
    )
    clusters: Path | None = Field(None, description="The clusters file of the CLI. Default: `<home>/clusters.toml`.")
    cluster_names: Annotated[tuple[str, ...], NoDecode] = Field(
        ("local",),
        description="Comma-separated clusters the DAGs serve; each needs a `pulsar_<name>` connection. Environment "
        "only (not the Airflow Variable): read when the DAG file is parsed.",
    )
    plan_profile: str = Field(
        "hourly",
        description="When the plan DAGs run: `hourly`, `nightly`, `assets` (after each fresh collect), "
        "`hourly+assets`, a cron expression, or `manual` (only when triggered). Environment only (not the Airflow "
        "Variable): read when the DAG file is parsed.",
    )
    approval_timeout: Seconds = Field(
        timedelta(hours=4), description="Seconds the approval gate waits; then it rejects the plan."
    )
    capacity_target: float = Field(
        80.0,
        ge=1,
        le=1000,
        description="The p95 broker score the capacity advice keeps the cluster under with one broker down "
        "(`pulsar-rebalance capacity`, the review's capacity page); `--target` and `?target=` override it.",
    )
    approvers: Annotated[tuple[Approver, ...], NoDecode] = Field(
        (),
        description="Comma-separated `ID[:Name]` of the people who may decide: Airflow user ids answer the gate, "
        "`os:<user>` entries are OS users deciding with the CLI's `approve` (each only under its own name). Empty: "
        "anyone Airflow lets answers the gate, and any OS user may `approve`.",
    )
    approval_policies: tuple[ApprovalPolicy, ...] = Field(
        (),
        description="Rules under which a plan is approved without a person (JSON list; see the README's approval "
        "policies); empty: every plan goes to a person.",
    )
    execution_windows: tuple[ExecutionWindow, ...] = Field(
        (),
        description="When approved plans execute (JSON list of `{cron, duration, timezone, clusters}`); a plan "
        "approved outside them waits for the next opening. Bound with each decision: the executor starts actions "
        "only while one of the approved windows is open, whatever the entry point (`execute --ignore-windows`, "
        "audited, sets them aside). Empty: at once.",
    )
    notify_email_to: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Comma-separated addresses told when a plan awaits approval, is decided and has run; empty: no "
        "email. Sent through the `notify_email_conn_id` connection.",
    )
    notify_email_conn_id: str = Field(
        "smtp_default", description="The SMTP connection of those emails; its `from_email` extra is the sender."
    )
    notify_webhook_conn_id: str | None = Field(
        None,
        description="A `pulsar_rebalance_webhook` connection (or an `http` one) whose URL gets the same notifications "
        "as JSON (Slack, Teams, or with a `routing_key` extra PagerDuty); unset: no webhook.",
    )
    approval_notifiers: tuple[ApprovalNotifier, ...] = Field(
        (),
        description="The deployment's own notifiers of the approval gate's request (JSON list of `{notifier, kwargs, "
        "dags}`), called through the gate's `notifiers` after the planner's email and webhook.",
    )
    spark_local_ip: str = Field(
        "127.0.0.1",
        description="The plan job's driver address (`SPARK_LOCAL_IP`) when `spark_default`'s master is local "
        "(`local`, `local[N]`, `local-cluster[...]`). A remote master's driver gets none: executors elsewhere must "
        "reach it (see `spark`'s `conf`).",
    )
    spark: SparkSubmitSettings = Field(
        default_factory=SparkSubmitSettings, description="See the Spark submission's table."
    )
    measure_wait: float = Field(
        120.0, ge=0, description="Seconds the report task waits for load reports newer than the execution."
    )
    accuracy_p90_bound: float = Field(
        10.0,
        gt=0,
        description="Score points: when the p90 of the cluster's prediction errors (each undisturbed measured plan's "
        "largest broker score error, over `accuracy_window`) rises above this, the notifiers are told once, and once "
        "more when it is back within (`pulsar-rebalance accuracy`).",
    )
    accuracy_window: Seconds = Field(
        timedelta(days=7), description="The measured plans the accuracy figures and their alert are computed over."
    )
    scale_event_proposals: bool = Field(
        True,
        description="The collect DAG triggers the cluster's maintenance DAG for each scale event not yet planned: a "
        "fill for a broker that joined, a drain for one marked for removal (`brokers mark-removal`). Off: the events "
        "are recorded and listed (`brokers events`) only.",
    )
    scale_event_rejoin_after: Seconds = Field(
        timedelta(days=1),
        description="A known broker seen again after an absence from every collected snapshot longer than this joined "
        "again (a machine replaced at its address) and gets a fill proposed; a shorter absence is a restart or a "
        "flap and proposes nothing.",
    )
    calibration: bool = Field(
        True,
        description="Plans predict with the usage model calibrated on the cluster's executed plans' measured "
        "outcomes (a cost scale per broker and resource; disturbed outcomes skipped). Off: the calibration is still "
        "learnt and recorded in the plan, not applied.",
    )
    calibration_window: int = Field(
        20, ge=1, le=1000, description="The cluster's last measured plans the calibration learns from."
    )
    max_json_bytes: int = Field(DEFAULT_MAX_JSON_BYTES, gt=0, description="Size limit of JSON files read.")
    failpoint: str | None = Field(
        None, description="Testing only: stop the process at the named step boundary (`NAME[#N]`)."
    )
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings, description="See the executor's table.")

    _read_airflow_variable: ClassVar[bool] = False

    @field_validator("cluster_names", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        return _comma_separated(value)

    @field_validator("cluster_names", mode="after")
    @classmethod
    def _pulsar_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # They name the DAGs and the plan runs' directories.
        return tuple(check_name(name, "cluster name") for name in value)

    @field_validator("notify_email_to", mode="before")
    @classmethod
    def _split_recipients(cls, value: object) -> object:
        return _comma_separated(value)

    @field_validator("approvers", mode="before")
    @classmethod
    def _split_approvers(cls, value: object) -> object:
        value = _comma_separated(value)
        if isinstance(value, tuple | list):
            return tuple(Approver.parse(item) if isinstance(item, str) else item for item in value)
        return value

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if cls._read_airflow_variable:
            return init_settings, env_settings, _AirflowVariableSource(settings_cls)
        return init_settings, env_settings

    @property
    def storage_root(self) -> str:
        """Where samples, archives and plan files live, as a URI (`planner.storage`)."""
        from planner.storage import check_root

        return check_root(self.storage if self.storage is not None else self.home)

    @property
    def database_url(self) -> str | None:
        return self.db_url.get_secret_value() if self.db_url else None


class AirflowPlannerSettings(PlannerSettings):
    """The same settings inside Airflow, where the Variable `pulsar_rebalance_settings` also counts."""

    _read_airflow_variable: ClassVar[bool] = True


_last_read: tuple[tuple[tuple[str, str], ...], PlannerSettings] | None = None


def planner_settings(*, airflow: bool = False) -> PlannerSettings:
    """The settings as configured now; errors name the setting."""
    global _last_read
    # Reading the settings costs milliseconds and every JSON parse asks for its size limit: outside Airflow
    # (whose Variable can change under us) the last reading serves while the environment it came from holds.
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX) or k == "HOME"))
    if not airflow and _last_read is not None and _last_read[0] == environment:
        return _last_read[1]
    model = AirflowPlannerSettings if airflow else PlannerSettings
    try:
        settings = model()
        if not airflow:
            _last_read = environment, settings
        return settings
    except ValidationError as error:
        # Nested settings have variables of their own (`EXECUTOR__TTL`); a list is one JSON variable.
        location = list(itertools.takewhile(lambda part: isinstance(part, str), error.errors()[0]["loc"]))
        variable = ENV_PREFIX + "__".join(str(part) for part in location).upper()
        raise InputError(f"{format_validation_error(error, 'settings')} (set by {variable})") from None


def planner_home() -> Path:
    return planner_settings().home


def storage_root() -> str:
    return planner_settings().storage_root


def cache_home() -> Path:
    """Downloads that can be fetched again (the Pulsar distribution), outside any repository."""
    configured = os.environ.get("XDG_CACHE_HOME")
    return (Path(configured) if configured else Path.home() / ".cache") / "pulsar-rebalance"


class DevClusterSettings(BaseSettings):
    """The local Pulsar cluster of the dev tools (`pulsar-rebalance-dev local-cluster`, the demo, the tests)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    cache: Path | None = Field(
        None, description="Pulsar downloads. Default: `$XDG_CACHE_HOME/pulsar-rebalance/pulsar` (`~/.cache`)."
    )
    pulsar_version: str = Field("4.2.4", description="The Pulsar release the local cluster runs.")
    cluster: str = Field("local", description="The local cluster's name.")
    zk_port: int = Field(12181, description="ZooKeeper's port.")
    bookie_port: int = Field(13181, description="The bookie's port.")
    web_port: int = Field(18081, description="The first broker's admin (web) port; broker i uses this + i.")
    broker_port: int = Field(16651, description="The first broker's binary protocol port; broker i uses this + i.")
    start_timeout: float = Field(300.0, gt=0, description="Seconds to wait for the cluster to start.")
    broker_mem: str = Field("-Xms256m -Xmx512m -XX:MaxDirectMemorySize=256m", description="Each broker's JVM memory.")
    local_auth: str = Field("none", description="`none`, or `token`: Pulsar's JWT authentication on the brokers.")
    local_load_manager: str = Field(
        "modular", description="`modular` (ModularLoadManagerImpl), or `extensible`: the extensible load manager."
    )


def reference_markdown() -> str:
    """The settings reference (docs/settings.md), generated from the models above."""
    lines = [
        "# Settings reference",
        "",
        "Generated by `python -m planner.settings` from `planner/settings.py`; a test keeps the two equal.",
        "",
        "Environment variables override the Airflow Variable `pulsar_rebalance_settings` (a JSON object with "
        "the field names below; `executor` as a nested object), which overrides the defaults. `cluster_names` and "
        "`plan_profile` shape the DAGs and come from the environment only: the DAG file's parse reads no Variable.",
    ]
    sections: list[tuple[str, type[BaseModel], str, str]] = [
        ("Planner", PlannerSettings, ENV_PREFIX, "Read by the CLI, the DAGs and the review pages."),
        (
            "Executor",
            ExecutorSettings,
            f"{ENV_PREFIX}EXECUTOR__",
            "Also set per cluster by the Pulsar connection's extras, and per run by the plan DAG's params or the "
            "CLI's `execute` options (same names), which win in that order.",
        ),
        (
            "Spark submission",
            SparkSubmitSettings,
            f"{ENV_PREFIX}SPARK__",
            "What the plan DAG's spark-submit is given, read when the task runs (the Variable's `spark` object). "
            "The master is the `spark_default` connection's.",
        ),
        (
            "Per cluster",
            ClusterExecution,
            "",
            "Keys of a cluster's entry in the CLI's clusters file, or extras of its `pulsar_<cluster>` connection in "
            "Airflow; no environment variable sets them.",
        ),
        (
            "Local cluster (dev tools)",
            DevClusterSettings,
            ENV_PREFIX,
            "Read by `pulsar-rebalance-dev local-cluster` and the demo.",
        ),
    ]
    for title, model, prefix, where in sections:
        lines += ["", f"## {title}", "", where, "", "| setting | environment variable | default | meaning |"]
        lines.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            if name in ("executor", "spark"):
                continue
            variable = f"`{prefix}{name.upper()}`" if prefix else "—"
            lines.append(f"| `{name}` | {variable} | {_default_text(field)} | {field.description or ''} |")
    return "\n".join(lines) + "\n"


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is dict:
        return "—"
    if field.default_factory is not None:
        return "see meaning"
    value = field.default
    if value is None or value == ():
        return "—"
    if isinstance(value, tuple):
        return f"`{','.join(map(str, value))}`"
    if isinstance(value, timedelta):
        return f"`{int(value.total_seconds())}` s"
    return f"`{value}`"


if __name__ == "__main__":
    print(reference_markdown(), end="")
