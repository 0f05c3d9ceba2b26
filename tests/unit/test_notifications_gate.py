"""The approval gate's request for approval: sent through the operator's own `notifiers` (Airflow's HITL operator
calls them once it stored the Required Action), linking to that action's form under `[api] base_url`, with the
deployment's notifiers from the settings; a notifier that fails never fails the gate. And the webhook's connection
type of its own, with `http` connections still read. A real HTTP receiver on loopback."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import ClassVar

import pytest
from airflow.providers.standard.operators import hitl
from airflow.sdk import DAG, BaseNotifier
from airflow.sdk.exceptions import TaskAwaitingInput

from planner.airflow import notifications
from planner.airflow import tasks as airflow_tasks
from planner.airflow.hooks import WebhookHook
from planner.airflow.notifications import GuardedNotifier, PlanEvent, PlanMessage, PlanWebhookNotifier
from planner.airflow.operators import PlanApprovalOperator
from planner.errors import InputError
from tests.receivers import WebhookReceiver, notification_env, webhook_receiver

DAG_ID = "pulsar_rebalance_plan_c1"
RUN_ID = "manual__2026-11-27T07:00:00+00:00"
FORM = f"/dags/{DAG_ID}/runs/{RUN_ID}/tasks/approve/required_actions?map_index=-1"


class RecordingNotifier(BaseNotifier):
    """A deployment's notifier: renders its template from the gate's context, as Slack's does."""

    template_fields = ("text",)
    sent: ClassVar[list[str]] = []

    def __init__(self, text: str, fail: bool = False) -> None:
        super().__init__()
        self.text = text
        self.fail = fail

    def notify(self, context) -> None:
        if self.fail:
            raise RuntimeError("https://hooks.example.test/secret-path refused")
        RecordingNotifier.sent.append(self.text)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as server:
        yield server


@pytest.fixture
def gate_env(monkeypatch, receiver):
    """A gate of cluster c1 whose run's plan 42 awaits approval; Airflow's request store stubbed, recording when
    it was written; the audit of failed channels recorded."""
    for name, value in notification_env(None, receiver).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.test/")
    RecordingNotifier.sent = []
    pending = SimpleNamespace(approved_by=None, policy_checks=(), subject="Rebalance c1 (plan 42)", markdown="plan")
    monkeypatch.setattr(airflow_tasks, "request_approval", lambda cluster, run_id: pending)

    def plan_message(cluster, run_id, event, details=(), action_link=None):  # as the store's plan 42 gives it
        review = "https://airflow.example.test/pulsar-planner/plans/42"
        if action_link is None:
            return PlanMessage(event, cluster, 42, "AvgShedder on c1", review, tuple(details))
        return PlanMessage(event, cluster, 42, "AvgShedder on c1", action_link, tuple(details), review_link=review)

    monkeypatch.setattr(airflow_tasks, "plan_message", plan_message)
    audited: list[list[str]] = []
    monkeypatch.setattr(airflow_tasks, "notification_failed", lambda message, channels: audited.append(channels))
    stored: list[int] = []  # how many messages the receiver had when Airflow stored the request
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: stored.append(len(receiver.received)))
    return SimpleNamespace(stored=stored, audited=audited)


def gate(**kwargs) -> PlanApprovalOperator:
    with DAG(DAG_ID, schedule=None):
        return PlanApprovalOperator(task_id="approve", cluster="c1", defaults=["Reject"], **kwargs)


def ask(operator: PlanApprovalOperator) -> dict:
    """Run the gate's `execute` as Airflow's task runner does, up to where the task parks awaiting input."""
    task_instance = SimpleNamespace(id=uuid.uuid4(), dag_id=DAG_ID, run_id=RUN_ID, task_id="approve", map_index=-1)
    context = {"run_id": RUN_ID, "task": operator, "task_instance": task_instance, "ti": task_instance}
    with pytest.raises(TaskAwaitingInput):
        operator.execute(context)
    return context


def test_the_request_goes_through_the_gates_notifiers_after_airflow_stored_it(gate_env, receiver, monkeypatch):
    deployment = {"notifier": f"{__name__}.RecordingNotifier", "kwargs": {"text": "{{ plan_notification.link }}"}}
    elsewhere = {**deployment, "dags": ["pulsar_rebalance_plan_other"]}
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_NOTIFIERS", json.dumps([deployment, elsewhere]))
    operator = gate(notifiers=[RecordingNotifier("declared by the DAG for {{ task.task_id }}")])
    ask(operator)

    # Nothing was told before Airflow stored the request; then the webhook once, from the operator's notifiers.
    assert gate_env.stored == [0]
    [(_, _, body)] = receiver.received
    link = f"https://airflow.example.test{FORM}"
    assert body["event"] == "awaiting-approval" and body["link"] == link
    assert body["review_link"] == "https://airflow.example.test/pulsar-planner/plans/42"
    assert f"Approve or reject: {link}" in body["text"]
    inner = [notifier.notifier for notifier in operator.notifiers if isinstance(notifier, GuardedNotifier)]
    assert len(inner) == len(operator.notifiers) == 3
    assert isinstance(inner[0], PlanWebhookNotifier)
    # The deployment's notifier for this DAG and the DAG's own, rendered from the gate's context.
    assert RecordingNotifier.sent == [link, "declared by the DAG for approve"]
    assert gate_env.audited == []


def test_a_failing_notifier_never_fails_the_gate_and_is_audited(gate_env, receiver, monkeypatch, caplog):
    receiver.status = 500
    broken = {"notifier": f"{__name__}.RecordingNotifier", "kwargs": {"text": "x", "fail": True}}
    missing = {"notifier": "airflow.providers.nowhere.NoNotifier"}
    working = {"notifier": f"{__name__}.RecordingNotifier", "kwargs": {"text": "told"}}
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_NOTIFIERS", json.dumps([broken, missing, working]))
    with caplog.at_level(logging.WARNING):
        ask(gate())  # the gate parks awaiting input: nothing raised, so nothing retries it into a second request
    assert len(receiver.received) == 1  # sent once, not retried
    assert RecordingNotifier.sent == ["told"]
    # The one that cannot be built when the gate sets its notifiers up, then those that fail when called.
    assert gate_env.audited == [[missing["notifier"]], ["webhook hook_test"], [broken["notifier"]]]
    assert "HTTP 500" in caplog.text and "secret-path" not in caplog.text and "s3cret-token" not in caplog.text


def test_the_link_is_airflows_required_action_form_under_the_configured_base_url(monkeypatch):
    task_instance = SimpleNamespace(dag_id=DAG_ID, run_id=RUN_ID, task_id="approve", map_index=-1)
    context = {"task": gate(), "task_instance": task_instance}
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.test")
    assert notifications.approval_form_url(context) == f"https://airflow.example.test{FORM}"
    # Behind a proxy under a path, the UI is under it too (Airflow's HITL link keeps only scheme and host).
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://ops.example.test/airflow/")
    assert notifications.approval_form_url(context) == f"https://ops.example.test/airflow{FORM}"
    monkeypatch.delenv("AIRFLOW__API__BASE_URL")
    assert notifications.approval_form_url(context) == f"http://localhost:8080{FORM}"


def connection(monkeypatch, name: str, **fields) -> WebhookHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(fields))
    return WebhookHook(name)


def test_the_webhook_reads_its_own_type_and_http_connections_alike(monkeypatch):
    extra = {"headers": {"X-Team": "platform"}, "routing_key": "R0UT1NG"}
    ours = connection(monkeypatch, "ours", conn_type="pulsar_rebalance_webhook", host="https://h.test/p", extra=extra)
    older = connection(monkeypatch, "older", conn_type="http", host="h.test/p", schema="https", extra=extra)
    for hook in (ours, older):
        endpoint = hook.get_conn()
        assert endpoint.url == "https://h.test/p" and endpoint.headers == {"X-Team": "platform"}
        assert endpoint.routing_key == "R0UT1NG" and endpoint.verify is True
    assert "h.test" not in repr(endpoint)
    # The form's fields (prefixed as Airflow's form names them), TLS as the pulsar connection spells it.
    form = {"extra__pulsar_rebalance_webhook__ca_file": "/etc/ca.pem", "extra__pulsar_rebalance_webhook__headers": ""}
    hook = connection(monkeypatch, "form", conn_type="pulsar_rebalance_webhook", host="https://h.test", extra=form)
    assert hook.get_conn().verify == "/etc/ca.pem"
    # http connections' own `verify` still counts.
    hook = connection(monkeypatch, "legacy", conn_type="http", host="https://h.test", extra={"verify": False})
    assert hook.get_conn().verify is False


def test_a_secret_path_stays_in_the_masked_password_and_is_appended_to_the_url(monkeypatch):
    extra = {"password_in_path": True}
    hook = connection(
        monkeypatch,
        "slack",
        conn_type="pulsar_rebalance_webhook",
        host="https://h.test/services/",
        password="/T1/B2/X3",
        extra=extra,
    )
    endpoint = hook.get_conn()
    assert endpoint.url == "https://h.test/services/T1/B2/X3" and "Authorization" not in endpoint.headers
    bearer = connection(monkeypatch, "api", conn_type="pulsar_rebalance_webhook", host="https://h.test", password="t0k")
    assert bearer.get_conn().url == "https://h.test" and bearer.get_conn().headers["Authorization"] == "Bearer t0k"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"conn_type": "smtp", "host": "h"}, "connection bad: conn_type must be pulsar_rebalance_webhook"),
        (
            {"conn_type": "pulsar_rebalance_webhook", "host": "https://h", "extra": {"password_in_path": True}},
            "connection bad: password .* is empty",
        ),
        (
            {"conn_type": "pulsar_rebalance_webhook", "host": "h", "password": "p", "extra": {"password_in_path": 1}},
            "connection bad: extra password_in_path must be true or false",
        ),
        ({"conn_type": "pulsar_rebalance_webhook"}, "connection bad: host"),
        ({"conn_type": "pulsar_rebalance_webhook", "host": "h", "extra": {"verfy": 1}}, r"unknown extra.*verfy"),
        ({"conn_type": "pulsar_rebalance_webhook", "host": "h", "extra": {"headers": "X: 1"}}, "headers must be"),
    ],
)
def test_a_wrong_webhook_connection_names_the_connection_and_the_field(monkeypatch, fields, error):
    with pytest.raises(InputError, match=error):
        connection(monkeypatch, "bad", **fields).get_conn()


def test_every_event_but_the_request_links_to_the_review_page_alone():
    told = PlanMessage(PlanEvent.EXECUTED, "c1", 42, "s", "https://a.test/pulsar-planner/plans/42")
    assert told.links == (("The plan", told.link),) and told.webhook_body()["review_link"] is None
