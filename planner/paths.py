"""Where the planner keeps its files: state under `PULSAR_REBALANCE_HOME`, downloads under the cache."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def planner_home(env: Mapping[str, str] | None = None) -> Path:
    """Database, samples, archives and the local cluster's state (`PULSAR_REBALANCE_HOME`)."""
    env = os.environ if env is None else env
    configured = env.get("PULSAR_REBALANCE_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".local" / "share" / "pulsar-rebalance"


def cache_home(env: Mapping[str, str] | None = None) -> Path:
    """Downloads that can be fetched again (the Pulsar distribution), outside any repository."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pulsar-rebalance"
