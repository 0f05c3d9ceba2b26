"""Notifications about a plan, through Airflow's notifier interface: the plan awaits approval, was approved,
rejected or timed out at the gate, executed, partly executed or not executed.

Two channels, each off until its setting names it (`planner.settings.PlannerSettings`):
- email: the SMTP provider's `SmtpNotifier` on the `notify_email_conn_id` connection, to `notify_email_to`;
  the sender is the connection's `from_email` extra (else its login);
- webhook: `PlanWebhookNotifier` posts JSON to the `notify_webhook_conn_id` connection (`WebhookHook`).

A notification that cannot be sent is logged and audited, never fails the task: the plan's own path (gate,
executor, report) must not depend on a mail server.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import requests
from airflow.sdk import BaseHook, BaseNotifier

from planner.errors import InputError
from planner.lifecycle import PlanStatus

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECONDS = 10.0


class PlanEvent(StrEnum):
    AWAITING_APPROVAL = "awaiting-approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    TIMED_OUT = "timed-out"
    WAITING_FOR_WINDOW = "waiting-for-window"
    EXECUTED = "executed"
    PARTIAL = "partial"
    NOT_EXECUTED = "not-executed"


_HEADLINES = {
    PlanEvent.AWAITING_APPROVAL: "awaits approval",
    PlanEvent.APPROVED: "was approved",
    PlanEvent.REJECTED: "was rejected",
    PlanEvent.TIMED_OUT: "timed out at the gate (rejected)",
    PlanEvent.WAITING_FOR_WINDOW: "waits for its execution window",
    PlanEvent.EXECUTED: "was executed",
    PlanEvent.PARTIAL: "was partly executed",
    PlanEvent.NOT_EXECUTED: "was not executed",
}


def execution_event(status: PlanStatus) -> PlanEvent:
    """What an execution that left its plan in `status` is told as. A stopped one (`pulsar-rebalance stop`) may
    have moved bundles before the stop, so it is partial, not "not executed"."""
    if status is PlanStatus.EXECUTED:
        return PlanEvent.EXECUTED
    if status in {PlanStatus.PARTIAL, PlanStatus.STOPPED}:
        return PlanEvent.PARTIAL
    return PlanEvent.NOT_EXECUTED


# PagerDuty's severities: what needs a person sooner.
_SEVERITIES = {PlanEvent.AWAITING_APPROVAL: "warning", PlanEvent.PARTIAL: "error", PlanEvent.NOT_EXECUTED: "error"}


@dataclass(frozen=True, slots=True)
class PlanMessage:
    """What every channel says about one event of one plan."""

    event: PlanEvent
    cluster: str
    plan_id: int
    summary: str  # the plan in one line (`planner.airflow.gate_text.plan_subject`)
    link: str  # the plan's review page
    details: tuple[str, ...] = ()  # e.g. who decided, how many actions ran

    @property
    def title(self) -> str:
        return f"[pulsar-rebalance] {self.cluster}: plan {self.plan_id} {_HEADLINES[self.event]}"

    @property
    def text(self) -> str:
        return "\n".join([f"{self.title}.", self.summary, *self.details, self.link])

    @property
    def html(self) -> str:
        lines = [f"<p><b>{html.escape(self.title)}</b></p>", f"<p>{html.escape(self.summary)}</p>"]
        lines += [f"<p>{html.escape(line)}</p>" for line in self.details]
        link = html.escape(self.link, quote=True)
        return "\n".join([*lines, f'<p><a href="{link}">{link}</a></p>'])

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
                "links": [{"href": self.link, "text": f"plan {self.plan_id}"}],
            }
        return body


class WebhookHook(BaseHook):
    """An HTTP endpoint that takes JSON, from an `http` connection.

    Host: the whole URL (`https://hooks.example.com/services/...`), or a host name with its path
    (`hooks.example.com/services/...`), then Schema is the URL scheme (default `https`) and Port the port.
    Password: a bearer token, sent as `Authorization`. Extras: `headers` (an object), `routing_key` (a PagerDuty
    Events API v2 key: the body then is a PagerDuty event too), `verify` (false, or a CA bundle path).
    """

    conn_name_attr = "webhook_conn_id"
    default_conn_name = "pulsar_rebalance_webhook"
    conn_type = "http"
    hook_name = "Webhook"

    def __init__(self, webhook_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.webhook_conn_id = webhook_conn_id

    def _endpoint(self) -> tuple[str, dict[str, str], Any, str | None]:
        connection = self.get_connection(self.webhook_conn_id)
        extra = connection.extra_dejson
        host = connection.host or ""
        if "://" in host:
            url = host
        elif host:
            url = f"{connection.schema or 'https'}://{host}{f':{connection.port}' if connection.port else ''}"
        else:
            raise InputError(f"connection {self.webhook_conn_id}: host (the webhook's URL) is empty")
        headers = {str(name): str(value) for name, value in (extra.get("headers") or {}).items()}
        if connection.password:
            headers["Authorization"] = f"Bearer {connection.password}"
        return url, headers, extra.get("verify", True), extra.get("routing_key")

    def post(self, message: PlanMessage) -> None:
        url, headers, verify, routing_key = self._endpoint()
        response = requests.post(
            url, json=message.webhook_body(routing_key), headers=headers, timeout=WEBHOOK_TIMEOUT_SECONDS, verify=verify
        )
        if response.status_code >= 400:
            # The URL can hold a secret (Slack's do): name the connection, not the URL.
            raise InputError(f"webhook {self.webhook_conn_id} answered HTTP {response.status_code}")


class PlanWebhookNotifier(BaseNotifier):
    """Posts a plan's message to a webhook (`WebhookHook`)."""

    template_fields = ()  # the message is rendered from the stored plan, not from templates

    def __init__(self, message: PlanMessage, webhook_conn_id: str = WebhookHook.default_conn_name) -> None:
        super().__init__()
        self.message = message
        self.webhook_conn_id = webhook_conn_id

    def notify(self, context: Any) -> None:
        WebhookHook(self.webhook_conn_id).post(self.message)


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


def notifiers(message: PlanMessage) -> list[tuple[str, BaseNotifier]]:
    """The configured channels' notifiers for the message, each with a name for the log."""
    from planner.settings import planner_settings

    settings = planner_settings(airflow=True)
    channels: list[tuple[str, BaseNotifier]] = []
    if settings.notify_email_to:
        conn_id = settings.notify_email_conn_id
        channels.append((f"email via {conn_id}", email_notifier(message, conn_id, settings.notify_email_to)))
    if settings.notify_webhook_conn_id:
        conn_id = settings.notify_webhook_conn_id
        channels.append((f"webhook {conn_id}", PlanWebhookNotifier(message, conn_id)))
    return channels


def send(message: PlanMessage, context: Any) -> list[str]:
    """Send the message on every configured channel; a channel that fails is logged, not raised. Returns the
    channels that failed (the caller audits them)."""
    failed = []
    try:
        channels = notifiers(message)
    except Exception as error:  # a notification never fails the plan's task
        logger.warning("notifications for plan %s not sent: %s", message.plan_id, _described(error))
        return ["configuration"]
    for name, notifier in channels:
        try:
            notifier.notify(context)
        except Exception as error:  # as above
            logger.warning(
                "notification %s of plan %s on %s failed: %s", message.event, message.plan_id, name, _described(error)
            )
            failed.append(name)
    return failed


def _described(error: Exception) -> str:
    """Our own errors in full; others by type only: a connection error's text holds the URL, which for Slack's
    webhooks is the secret."""
    return str(error) if isinstance(error, InputError) else type(error).__name__
