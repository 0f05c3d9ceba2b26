"""Where the planner reaches each broker's own web service: its id as Pulsar advertises it (`host:webPort`) with the
admin URL's scheme, unless the cluster's settings map it elsewhere (`broker_urls`, `broker_url_template`).

Only the reads that one broker alone can answer go there (its load report, metrics, topic stats, own configuration
and release); every other call goes to the admin URL, which may be a proxy. The mapping exists because a broker's
advertised address is often not reachable from where the planner runs: behind Pulsar's proxy or an ingress, on
Kubernetes from outside the cluster, or with TLS on 8443 while the ids name 8080. Pure: no I/O.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from planner.errors import InputError
from planner.names import check_broker_id

# The placeholders a `broker_url_template` may use.
PLACEHOLDERS = ("id", "host", "port", "scheme")
# What an error on an unreachable broker tells the operator to set.
MAPPING_HINT = (
    "the planner reads each broker's own web service: if its id is not reachable from here, set broker_url_template "
    'or broker_urls for this cluster (README, "Reaching the brokers")'
)
# A broker id to render a template with when it is checked at load.
_SAMPLE_ID = "broker-0.pulsar.example:8080"


def check_base_url(url: str) -> str:
    """`url` without its trailing slash when it is an http(s) base URL (`https://host[:port][/path]`), else
    ValueError. A path is allowed: a proxy's reverse-proxy path per broker (`https://proxy/brokers/b-1`)."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        raise ValueError(f"{url!r}: expected an http or https URL")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number") from None
    if not parts.hostname or parts.query or parts.fragment or "@" in parts.netloc or any(c.isspace() for c in url):
        raise ValueError(f"{url!r}: expected scheme://host[:port][/path], without user, query or fragment")
    return url.rstrip("/")


def check_template(template: str) -> str:
    """`template` when it names only `PLACEHOLDERS` and renders an http(s) base URL, else ValueError."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)]
    except ValueError as error:
        raise ValueError(f"{template!r}: {error}") from None
    for name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise ValueError(
                f"{template!r}: unknown placeholder {{{name}}}; use {', '.join(f'{{{p}}}' for p in PLACEHOLDERS)}"
            )
        if spec or conversion:
            raise ValueError(f"{template!r}: placeholder {{{name}}} takes no format or conversion")
    try:
        check_base_url(_render(template, _SAMPLE_ID, "https"))
    except ValueError as error:
        raise ValueError(f"{template!r} does not render a base URL: {str(error).partition(': ')[2]}") from None
    return template


def check_broker_urls(urls: Mapping[str, str]) -> dict[str, str]:
    """`urls` (broker id → base URL) with each id and URL checked, else ValueError naming the broker."""
    checked = {}
    for broker, url in urls.items():
        try:
            check_broker_id(broker, "broker id")
        except InputError as error:
            raise ValueError(str(error)) from None
        try:
            checked[broker] = check_base_url(url)
        except ValueError as error:
            raise ValueError(f"broker {broker}: {error}") from None
    return checked


def _render(template: str, broker_id: str, scheme: str) -> str:
    host, _, port = broker_id.rpartition(":")
    return template.format(id=broker_id, host=host, port=port, scheme=scheme)


@dataclass(frozen=True, slots=True)
class BrokerAddresses:
    """A cluster's broker addresses: `urls` (explicit, per broker id) over `template` over `{scheme}://{id}`."""

    scheme: str
    template: str | None = None
    urls: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, scheme: str, template: str | None, urls: Mapping[str, str] | None) -> BrokerAddresses:
        """Checked; a bad template or URL is an InputError naming the field."""
        try:
            checked_template = check_template(template) if template is not None else None
        except ValueError as error:
            raise InputError(f"invalid broker_url_template: {error}") from None
        try:
            checked_urls = check_broker_urls(urls or {})
        except ValueError as error:
            raise InputError(f"invalid broker_urls: {error}") from None
        return cls(scheme, checked_template, tuple(sorted(checked_urls.items())))

    def url(self, broker_id: str) -> str:
        """The base URL of `broker_id`'s web service (no trailing slash): admin paths are appended to it."""
        for broker, url in self.urls:
            if broker == broker_id:
                return url
        return _render(self.template or "{scheme}://{id}", broker_id, self.scheme).rstrip("/")

    def source(self, broker_id: str) -> str | None:
        """The setting `url(broker_id)` comes from (`broker_urls`, `broker_url_template`), None for the broker's id."""
        if any(broker == broker_id for broker, _ in self.urls):
            return "broker_urls"
        return "broker_url_template" if self.template is not None else None

    def hosts(self) -> set[str]:
        """The hosts the explicit URLs name: the operator configured them, so they may receive the credentials."""
        return {urlsplit(url).hostname or "" for _, url in self.urls} - {""}
