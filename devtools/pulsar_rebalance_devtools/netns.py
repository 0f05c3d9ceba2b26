"""Network namespaces that stand for separate machines: a cluster inside one does not share this host's loopback,
so an address that only works on loopback (a driver's, a broker's advertised one) fails as it would in production.
Root only (`ip netns`, veth pairs)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


def _ip(*arguments: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, "ip", *arguments], check=True, capture_output=True, text=True)


def _delete(name: str, outer: str) -> None:
    # Deleting the namespace deletes its end of the pair, and with it ours; the link too, if the namespace was gone.
    subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)
    subprocess.run(["ip", "link", "delete", outer], check=False, capture_output=True)


@contextlib.contextmanager
def network_namespace(name: str, subnet: int) -> Iterator[tuple[str, str]]:
    """Namespace `name` joined to this one by a veth pair: yields (this side's address, its address), 10.{subnet}.0.1
    and 10.{subnet}.0.2. Its loopback is up and its default route is this side, so it reaches this host's other
    addresses too, as a routed network would. Deleted at the end, with the pair; one left by a killed run first."""
    outer, inner = f"{name[:11]}-o", f"{name[:11]}-i"
    here, there = f"10.{subnet}.0.1", f"10.{subnet}.0.2"
    _delete(name, outer)
    _ip("netns", "add", name)
    try:
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", name)
        _ip("addr", "add", f"{here}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("addr", "add", f"{there}/30", "dev", inner, namespace=name)
        _ip("link", "set", inner, "up", namespace=name)
        _ip("link", "set", "lo", "up", namespace=name)
        _ip("route", "add", "default", "via", here, namespace=name)
        yield here, there
    finally:
        _delete(name, outer)
