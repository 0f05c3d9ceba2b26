"""Notifications about a plan, through Airflow's notifier interface: the plan awaits approval, was approved,
rejected or timed out at the gate, executed, partly executed or not executed.

The request for approval goes through the approval gate's own `notifiers` (Airflow's HITL operator calls them
once its Required Action exists), and links to that action's form; the plan's review page is the second link.
The other events are sent by the tasks that see them, through the same notifiers.

Channels, each off until its setting names it (`planner.settings.PlannerSettings`):
- email: the SMTP provider's `SmtpNotifier` on the `notify_email_conn_id` connection, to `notify_email_to`;
  the sender is the connection's `from_email` extra (else its login);
- webhook: `PlanWebhookNotifier` posts JSON to the `notify_webhook_conn_id` connection
  (`planner.airflow.hooks.WebhookHook`);
- the deployment's own notifiers for the request (`approval_notifiers`: Slack's, an email provider's), per DAG.

A notification that cannot be sent is logged and audited, never fails the task (`GuardedNotifier`): the plan's own
path (gate, executor, report) must not depend on a mail server, and a gate that failed would be retried into a
second request.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import BaseHook, BaseNotifier

from planner.airflow.hooks import WebhookHook
from planner.audit.accuracy import AlertState
from planner.errors import InputError
from planner.lifecycle import PlanStatus
from planner.settings import ApprovalNotifier, matches_any

logger = logging.getLogger(__name__)

# The context key under which a deployment's notifiers find the message (`{{ plan_notification.text }}`).
CONTEXT_KEY = "plan_notification"
# Where Airflow's own links point when `[api] base_url` is unset (`RuntimeTaskInstance.log_url`'s fallback).
DEFAULT_BASE_URL = "http://localhost:8080/"


class PlanEvent(StrEnum):
    AWAITING_APPROVAL = "awaiting-approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    TIMED_OUT = "timed-out"
    WAITING_FOR_WINDOW = "waiting-for-window"
    EXECUTED = "executed"
    PARTIAL = "partial"
    NOT_EXECUTED = "not-executed"
    ACCURACY_OUTSIDE = "accuracy-outside"  # its measurement took the cluster's p90 error over the bound
    ACCURACY_WITHIN = "accuracy-within"  # ... or back within it


_HEADLINES = {
    PlanEvent.AWAITING_APPROVAL: "awaits approval",
    PlanEvent.APPROVED: "was approved",
    PlanEvent.REJECTED: "was rejected",
    PlanEvent.TIMED_OUT: "timed out at the gate (rejected)",
    PlanEvent.WAITING_FOR_WINDOW: "waits for its execution window",
    PlanEvent.EXECUTED: "was executed",
    PlanEvent.PARTIAL: "was partly executed",
    PlanEvent.NOT_EXECUTED: "was not executed",
    PlanEvent.ACCURACY_OUTSIDE: "was measured: the p90 prediction error left its bound",
    PlanEvent.ACCURACY_WITHIN: "was measured: the p90 prediction error is back within its bound",
}


def execution_event(status: PlanStatus) -> PlanEvent:
    """What an execution that left its plan in `status` is told as. A stopped one (`pulsar-rebalance stop`) may
    have moved bundles before the stop, so it is partial, not "not executed"."""
    if status is PlanStatus.EXECUTED:
        return PlanEvent.EXECUTED
    if status in {PlanStatus.PARTIAL, PlanStatus.STOPPED}:
        return PlanEvent.PARTIAL
    return PlanEvent.NOT_EXECUTED


def accuracy_event(state: AlertState) -> PlanEvent:
    """What a crossing of the accuracy bound (`planner.audit.accuracy`) is told as."""
    return PlanEvent.ACCURACY_OUTSIDE if state is AlertState.OUTSIDE else PlanEvent.ACCURACY_WITHIN


# PagerDuty's severities: what needs a person sooner.
_SEVERITIES = {
    PlanEvent.AWAITING_APPROVAL: "warning",
    PlanEvent.PARTIAL: "error",
    PlanEvent.NOT_EXECUTED: "error",
    PlanEvent.ACCURACY_OUTSIDE: "warning",
}


@dataclass(frozen=True, slots=True)
class PlanMessage:
    """What every channel says about one event of one plan."""

    event: PlanEvent
    cluster: str
    plan_id: int
    summary: str  # the plan in one line (`planner.airflow.gate_text.plan_subject`)
    link: str  # where to act: the approval form while the plan awaits approval, else the plan's review page
    details: tuple[str, ...] = ()  # e.g. who decided, how many actions ran
    review_link: str | None = None  # the plan's review page, when `link` is the approval form

    @property
    def title(self) -> str:
        return f"[pulsar-rebalance] {self.cluster}: plan {self.plan_id} {_HEADLINES[self.event]}"

    @property
    def links(self) -> tuple[tuple[str, str], ...]:
        """Each link with what it is for."""
        if self.review_link is None:
            return (("The plan", self.link),)
        return (("Approve or reject", self.link), ("The plan", self.review_link))

    @property
    def text(self) -> str:
        return "\n".join([f"{self.title}.", self.summary, *self.details, *(f"{say}: {url}" for say, url in self.links)])

    @property
    def html(self) -> str:
        lines = [f"<p><b>{html.escape(self.title)}</b></p>", f"<p>{html.escape(self.summary)}</p>"]
        lines += [f"<p>{html.escape(line)}</p>" for line in self.details]
        for say, url in self.links:
            link = html.escape(url, quote=True)
            lines.append(f'<p>{html.escape(say)}: <a href="{link}">{link}</a></p>')
        return "\n".join(lines)

    def webhook_body(self, routing_key: str | None = None) -> dict[str, Any]:
        """JSON that Slack's and Teams' incoming webhooks show (`text`), with the fields spelled out for other
        receivers; with a PagerDuty routing key, an Events API v2 event as well."""
        body: dict[str, Any] = {
            "text": self.text,
            "event": self.event.value,
            "cluster": self.cluster,
            "plan": self.plan_id,
            "summary": self.summary,
            "details": list(self.details),
            "link": self.link,
            "review_link": self.review_link,
        }
        if routing_key:
            body |= {
                "routing_key": routing_key,
                "event_action": "trigger",
                "dedup_key": f"pulsar-rebalance-{self.cluster}-plan-{self.plan_id}-{self.event.value}",
                "payload": {
                    "summary": self.title,
                    "source": f"pulsar-rebalance/{self.cluster}",
                    "severity": _SEVERITIES.get(self.event, "info"),
                    "custom_details": {"plan": self.plan_id, "summary": self.summary, "link": self.link},
                },
                "links": [{"href": url, "text": f"{say} (plan {self.plan_id})"} for say, url in self.links],
            }
        return body


def ui_base_url() -> str:
    """Airflow's configured `[api] base_url`, where its UI (and the review pages) are reached."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL


def approval_form_url(context: Any) -> str:
    """The approval form of the gate running in `context`: Airflow's link to the task's Required Action, under
    `[api] base_url`."""
    from airflow.providers.standard.operators.hitl import HITLOperator

    base = ui_base_url()
    link = urlsplit(HITLOperator.generate_link_to_ui_from_context(context=context, base_url=base))
    # The provider (1.21) keeps only the base URL's scheme and host; a UI served under a path (behind a proxy,
    # `https://host/airflow`) is there too, as Airflow's own log links say.
    prefix = urlsplit(base).path.rstrip("/")
    if prefix and not link.path.startswith(f"{prefix}/"):
        link = link._replace(path=prefix + link.path)
    return urlunsplit(link)


class PlanWebhookNotifier(BaseNotifier):
    """Posts a plan's message to a webhook (`planner.airflow.hooks.WebhookHook`)."""

    template_fields = ()  # the message is rendered from the stored plan, not from templates

    def __init__(self, message: PlanMessage, webhook_conn_id: str = WebhookHook.default_conn_name) -> None:
        super().__init__()
        self.message = message
        self.webhook_conn_id = webhook_conn_id

    def notify(self, context: Any) -> None:
        hook = WebhookHook(self.webhook_conn_id)
        endpoint = hook.get_conn()
        hook.post(endpoint, self.message.webhook_body(endpoint.routing_key))


def email_notifier(message: PlanMessage, conn_id: str, recipients: tuple[str, ...]) -> BaseNotifier:
    """The SMTP provider's notifier with the message; the sender is the connection's `from_email` (or login)."""
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    connection = BaseHook.get_connection(conn_id)
    sender = connection.extra_dejson.get("from_email") or connection.login
    if not sender:
        raise InputError(f"connection {conn_id}: set the from_email extra (or a login) to send notifications")
    return SmtpNotifier(
        to=list(recipients),
        from_email=sender,
        subject=message.title,
        html_content=message.html,
        smtp_conn_id=conn_id,
    )


class GuardedNotifier(BaseNotifier):
    """One channel of a plan's message, named for the log. What it cannot send is logged and handed to `failed`,
    never raised: the task goes on (a gate that failed would be retried into a second request)."""

    template_fields = ()

    def __init__(
        self, name: str, notifier: BaseNotifier, failed: Callable[[str], None], *, templated: bool = False
    ) -> None:
        super().__init__()
        self.name = name
        self.notifier = notifier
        self.failed = failed
        self.templated = templated  # a deployment's notifier: rendered with the context, as Airflow renders it

    def notify(self, context: Any) -> None:
        try:
            if self.templated:
                # BaseNotifier.__call__'s steps without its log line, which holds the error's text.
                self.notifier._update_context(context)
                self.notifier.render_template_fields(context)
            self.notifier.notify(context)
        except Exception as error:  # a notification never fails the plan's task
            logger.warning("notification on %s failed: %s", self.name, _described(error))
            self.failed(self.name)


def _built(
    name: str, build: Callable[[], BaseNotifier], failed: Callable[[str], None], templated: bool = False
) -> list[BaseNotifier]:
    try:
        return [GuardedNotifier(name, build(), failed, templated=templated)]
    except Exception as error:  # as above: a channel that cannot be set up fails alone
        logger.warning("notification channel %s not set up: %s", name, _described(error))
        failed(name)
        return []


def channel_notifiers(message: PlanMessage, failed: Callable[[str], None]) -> list[BaseNotifier]:
    """The configured channels' notifiers for the message (email, webhook), guarded."""
    from planner.settings import planner_settings

    try:
        settings = planner_settings(airflow=True)
    except InputError as error:
        logger.warning("notifications for plan %s not sent: %s", message.plan_id, error)
        failed("configuration")
        return []
    channels: list[BaseNotifier] = []
    if settings.notify_email_to:
        conn_id, to = settings.notify_email_conn_id, settings.notify_email_to
        channels += _built(f"email via {conn_id}", lambda: email_notifier(message, conn_id, to), failed)
    if settings.notify_webhook_conn_id:
        webhook = settings.notify_webhook_conn_id
        channels += _built(f"webhook {webhook}", lambda: PlanWebhookNotifier(message, webhook), failed)
    return channels


def deployment_notifiers(
    configured: Iterable[ApprovalNotifier], dag_id: str, failed: Callable[[str], None]
) -> list[BaseNotifier]:
    """The deployment's own notifiers (setting `approval_notifiers`) that apply to `dag_id`, built and guarded;
    their templates see the gate's context and the message as `plan_notification`."""
    from airflow.sdk.module_loading import import_string

    def build(entry: ApprovalNotifier) -> BaseNotifier:
        notifier_class = import_string(entry.notifier)
        if not (isinstance(notifier_class, type) and issubclass(notifier_class, BaseNotifier)):
            raise InputError(f"setting approval_notifiers: {entry.notifier} is not a BaseNotifier class")
        return notifier_class(**entry.kwargs)

    notifiers: list[BaseNotifier] = []
    for entry in configured:
        if matches_any(entry.dags, dag_id):
            notifiers += _built(entry.notifier, lambda entry=entry: build(entry), failed, templated=True)
    return notifiers


def gate_notifiers(
    message: PlanMessage, dag_id: str, declared: Sequence[BaseNotifier], failed: Callable[[str], None]
) -> list[BaseNotifier]:
    """The approval gate's `notifiers` for its request: the planner's channels, the deployment's notifiers for
    this DAG (`approval_notifiers`), then those the DAG's code gave the gate; each guarded."""
    from planner.settings import planner_settings

    notifiers = channel_notifiers(message, failed)
    try:
        configured = planner_settings(airflow=True).approval_notifiers
    except InputError:  # told once, by channel_notifiers
        configured = ()
    notifiers += deployment_notifiers(configured, dag_id, failed)
    for notifier in declared:
        notifiers.append(GuardedNotifier(type(notifier).__name__, notifier, failed, templated=True))
    return notifiers


def send(message: PlanMessage, context: Any) -> list[str]:
    """Send the message on every configured channel, as Airflow calls a notifier; a channel that fails is logged,
    not raised. Returns the channels that failed (the caller audits them)."""
    failed: list[str] = []
    context = {**context, CONTEXT_KEY: message}
    for notifier in channel_notifiers(message, failed.append):
        notifier(context)
    return failed


def _described(error: Exception) -> str:
    """Our own errors in full; others by type only: a connection error's text holds the URL, which for Slack's
    webhooks is the secret."""
    return str(error) if isinstance(error, InputError) else type(error).__name__
