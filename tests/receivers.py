"""Real receivers on loopback for the notification tests: an SMTP server (aiosmtpd) and an HTTP server that
keeps each JSON body it is posted, with its path and headers."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller

from tests.integration.conftest import _free_port


class Mailbox:
    """The messages an SMTP server received, with their envelope recipients."""

    def __init__(self) -> None:
        self.port = 0
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's handler protocol
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK"

    @staticmethod
    def html(message: Message) -> str:
        [part] = [p for p in message.walk() if p.get_content_type() == "text/html"]
        return part.get_payload(decode=True).decode()


@contextlib.contextmanager
def smtp_server() -> Iterator[Mailbox]:
    box = Mailbox()
    box.port = _free_port()
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


class WebhookReceiver(ThreadingHTTPServer):
    status = 200  # what it answers
    received: list[tuple[str, dict[str, str], dict]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.received.append((self.path, dict(self.headers), body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver(("127.0.0.1", 0), _Handler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def notification_env(mailbox: Mailbox | None, receiver: WebhookReceiver | None) -> dict[str, str]:
    """The settings and Airflow connections that send the planner's notifications to the receivers."""
    env: dict[str, str] = {}
    if mailbox is not None:
        smtp = {
            "conn_type": "smtp",
            "host": "127.0.0.1",
            "port": mailbox.port,
            "extra": {"from_email": "planner@example.test", "disable_tls": True, "disable_ssl": True, "timeout": 5},
        }
        env |= {
            "AIRFLOW_CONN_SMTP_TEST": json.dumps(smtp),
            "PULSAR_REBALANCE_NOTIFY_EMAIL_TO": "oncall@example.test, lead@example.test",
            "PULSAR_REBALANCE_NOTIFY_EMAIL_CONN_ID": "smtp_test",
        }
    if receiver is not None:
        hook = {
            "conn_type": "pulsar_rebalance_webhook",
            "host": f"{receiver.url}/services/T000/B000/secret-path",
            "password": "s3cret-token",
            "extra": {"headers": {"X-Team": "platform"}},
        }
        env |= {"AIRFLOW_CONN_HOOK_TEST": json.dumps(hook), "PULSAR_REBALANCE_NOTIFY_WEBHOOK_CONN_ID": "hook_test"}
    return env
