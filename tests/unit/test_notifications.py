"""Plan notifications through Airflow's notifier interface, to a real SMTP server (aiosmtpd) and a real HTTP
receiver on loopback, configured as a deployment would: Airflow connections and the planner's settings.
`tests/integration/test_airflow_cycle.py` receives them from a real DAG run."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from planner.airflow import notifications
from planner.airflow.notifications import PlanEvent, PlanMessage, execution_event
from planner.lifecycle import PlanStatus
from tests.receivers import Mailbox, WebhookReceiver, notification_env, smtp_server, webhook_receiver

MESSAGE = PlanMessage(
    PlanEvent.AWAITING_APPROVAL,
    "c1",
    42,
    "AvgShedder on c1: unload 2 bundles (plan 42)",
    "http://127.0.0.1:8080/dags/pulsar_rebalance_plan_c1/runs/manual__1/tasks/approve/required_actions?map_index=-1",
    ("Without an answer within 4:00:00 it is rejected.",),
    review_link="http://127.0.0.1:8080/pulsar-planner/plans/42",
)


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with smtp_server() as box:
        yield box


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as server:
        yield server


def configure(monkeypatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_both_channels_carry_the_plan_summary_and_its_link(monkeypatch, mailbox, receiver):
    configure(monkeypatch, notification_env(mailbox, receiver))
    assert notifications.send(MESSAGE, {}) == []

    [(recipients, mail)] = mailbox.messages
    assert recipients == ["oncall@example.test", "lead@example.test"]
    assert mail["Subject"] == "[pulsar-rebalance] c1: plan 42 awaits approval"
    assert mail["From"] == "planner@example.test"
    body = Mailbox.html(mail)
    assert MESSAGE.summary in body and "4:00:00" in body
    assert f'Approve or reject: <a href="{MESSAGE.link}"' in body and f'href="{MESSAGE.review_link}"' in body

    [(path, headers, document)] = receiver.received
    assert path == "/services/T000/B000/secret-path"
    assert headers["Authorization"] == "Bearer s3cret-token" and headers["X-Team"] == "platform"
    assert document["event"] == "awaiting-approval" and document["plan"] == 42 and document["cluster"] == "c1"
    assert MESSAGE.summary in document["text"]  # what Slack and Teams show
    assert f"Approve or reject: {MESSAGE.link}" in document["text"] and MESSAGE.review_link in document["text"]
    assert document["link"] == MESSAGE.link and document["review_link"] == MESSAGE.review_link
    assert "routing_key" not in document


def test_a_routing_key_makes_the_body_a_pagerduty_event(monkeypatch, receiver):
    hook = {
        "conn_type": "pulsar_rebalance_webhook",
        "host": f"{receiver.url}/v2/enqueue",
        "extra": {"routing_key": "R0UT1NG"},
    }
    configure(monkeypatch, {"AIRFLOW_CONN_PD": json.dumps(hook), "PULSAR_REBALANCE_NOTIFY_WEBHOOK_CONN_ID": "pd"})
    partial = PlanMessage(PlanEvent.PARTIAL, "c1", 43, "drain of b:8080", "http://x/plans/43")
    assert notifications.send(partial, {}) == []
    [(_, headers, event)] = receiver.received
    assert "Authorization" not in headers
    assert event["routing_key"] == "R0UT1NG" and event["event_action"] == "trigger"
    assert event["payload"]["severity"] == "error" and event["payload"]["source"] == "pulsar-rebalance/c1"
    assert event["dedup_key"] == "pulsar-rebalance-c1-plan-43-partial"


def test_a_failing_channel_is_reported_not_raised_and_the_others_still_send(monkeypatch, mailbox, receiver, caplog):
    receiver.status = 500
    configure(monkeypatch, notification_env(mailbox, receiver))
    with caplog.at_level(logging.WARNING):
        assert notifications.send(MESSAGE, {}) == ["webhook hook_test"]
    assert len(mailbox.messages) == 1
    assert "HTTP 500" in caplog.text and "secret-path" not in caplog.text and "s3cret-token" not in caplog.text

    # A webhook nobody listens on: the error's text holds the URL, which is not logged.
    hook = {"conn_type": "http", "host": "http://127.0.0.1:9/services/secret-path"}
    configure(monkeypatch, {"AIRFLOW_CONN_HOOK_TEST": json.dumps(hook)})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert notifications.send(MESSAGE, {}) == ["webhook hook_test"]
    assert "ConnectionError" in caplog.text and "secret-path" not in caplog.text


def test_an_unreachable_mail_server_fails_only_its_channel(monkeypatch, receiver):
    closed = Mailbox()
    closed.port = 9  # nothing listens on the discard port here
    configure(monkeypatch, notification_env(closed, receiver))
    assert notifications.send(MESSAGE, {}) == ["email via smtp_test"]
    assert len(receiver.received) == 1


def test_nothing_is_sent_until_a_channel_is_configured(monkeypatch, receiver):
    monkeypatch.delenv("PULSAR_REBALANCE_NOTIFY_EMAIL_TO", raising=False)
    monkeypatch.delenv("PULSAR_REBALANCE_NOTIFY_WEBHOOK_CONN_ID", raising=False)
    assert notifications.channel_notifiers(MESSAGE, pytest.fail) == []
    assert notifications.send(MESSAGE, {}) == []
    assert receiver.received == []


def test_every_event_has_a_headline_and_the_html_is_escaped():
    for event in PlanEvent:
        assert PlanMessage(event, "c", 1, "s", "l").title.startswith("[pulsar-rebalance] c: plan 1 ")
    hostile = PlanMessage(PlanEvent.REJECTED, "c", 1, "<script>x</script>", 'http://x/"><b>')
    assert "<script>" not in hostile.html and '"><b>' not in hostile.html


def test_a_stopped_execution_is_told_as_partial_not_as_not_executed():
    assert execution_event(PlanStatus.EXECUTED) is PlanEvent.EXECUTED
    assert execution_event(PlanStatus.PARTIAL) is PlanEvent.PARTIAL
    assert execution_event(PlanStatus.STOPPED) is PlanEvent.PARTIAL
    assert execution_event(PlanStatus.EXPIRED) is PlanEvent.NOT_EXECUTED
