"""The review's capacity page (`planner.audit.review.capacity_view`): the last week's advice of a cluster, computed
once and kept, behind the app's authentication and the caller's clusters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.testclient import TestClient

from planner import storage
from planner.audit.review.app import URL_PREFIX, create_app
from planner.samples.dataset import BROKER_SCHEMA, BUNDLE_SCHEMA, sample_path
from planner.store.database import Store
from tests.unit.test_capacity import recorded, same

TOKEN = "page-token"


def require_token(authorization: str | None = Header(default=None)) -> None:
    if authorization != f"Bearer {TOKEN}":
        raise HTTPException(status_code=401)


def only(x_clusters: str | None = Header(default=None)) -> frozenset[str] | None:
    return None if x_clusters is None else frozenset(filter(None, x_clusters.split(",")))


def write_window(root: Path, cluster: str, start: datetime) -> None:
    """A day of four brokers' samples (`test_capacity.recorded`), one file per snapshot and table."""
    brokers, bundles = recorded(same(4), start=start, per_day=24)
    for table, columns, schema in (("brokers", brokers, BROKER_SCHEMA), ("bundles", bundles, BUNDLE_SCHEMA)):
        rows = pa.Table.from_pydict({name: columns[name] for name in schema.names if name in columns})
        rows = pa.Table.from_pylist(rows.to_pylist(), schema=schema)
        for snapshot in sorted(set(columns["snapshot_id"])):
            part = rows.filter(pa.compute.equal(rows["snapshot_id"], snapshot))
            taken_at = part["taken_at"][0].as_py()
            storage.write_parquet(part, sample_path(root, table, cluster, snapshot, taken_at))


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    write_window(tmp_path, "west", datetime.now(UTC) - timedelta(days=1, hours=1))
    monkeypatch.setenv("PULSAR_REBALANCE_CAPACITY_TARGET", "90")
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: tmp_path, [Depends(require_token)], only))
    return TestClient(parent, headers={"Authorization": f"Bearer {TOKEN}"})


def test_the_page_shows_the_counts_the_removal_and_how_they_are_made(client: TestClient) -> None:
    page = client.get(f"{URL_PREFIX}/clusters/west/capacity")
    assert page.status_code == 200
    text = page.text
    assert 'id="capacity-kinds"' in text and "b1, b2, b3, b4" in text
    assert "Target: p95 score <strong>90.0</strong>" in text  # the capacity_target setting
    assert "Drain it with <code>pulsar-rebalance plan run --cluster west --mode drain --brokers" in text
    assert "How these numbers are made" in text
    document = client.get(f"{URL_PREFIX}/api/clusters/west/capacity", params={"target": 60}).json()
    assert document["target"] == 60.0 and document["counts"][0]["needed"] == 4
    assert document["moments"] <= 96


def test_the_advice_is_computed_once_and_kept(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import planner.audit.capacity as capacity

    first = client.get(f"{URL_PREFIX}/api/clusters/west/capacity").json()
    calls = []
    monkeypatch.setattr(capacity, "read_capacity_advice", lambda *args, **kwargs: calls.append(args))
    again = client.get(f"{URL_PREFIX}/api/clusters/west/capacity").json()
    assert again == first and not calls


def test_a_cluster_without_samples_says_so_and_others_clusters_are_hidden(client: TestClient) -> None:
    page = client.get(f"{URL_PREFIX}/clusters/east/capacity")
    assert (
        page.status_code == 200 and "No advice: capacity of cluster &#39;east&#39;: no snapshot recorded" in page.text
    )
    assert client.get(f"{URL_PREFIX}/api/clusters/east/capacity").status_code == 404
    hidden = client.get(f"{URL_PREFIX}/clusters/west/capacity", headers={"X-Clusters": "east"})
    assert hidden.status_code == 404
    anonymous = TestClient(client.app).get(f"{URL_PREFIX}/api/clusters/west/capacity")
    assert anonymous.status_code == 401


def test_the_cache_keys_targets_by_tenths_and_keeps_only_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import planner.audit.capacity as capacity

    computed: list[float] = []

    class Advice:
        def __init__(self, target: float) -> None:
            self.target = target

        def to_json(self) -> dict[str, float]:
            return {"target": self.target}

    def read(store: object, root: object, query: capacity.CapacityQuery) -> Advice:
        computed.append(query.target)
        return Advice(query.target)

    monkeypatch.setattr(capacity, "read_capacity_advice", read)
    cache = capacity.AdviceCache(size=1)
    store = object()
    assert cache.advice_json(store, "/root", "west", 60.04)["target"] == 60.0  # type: ignore[arg-type]
    cache.advice_json(store, "/root", "west", 60.0)  # type: ignore[arg-type]
    assert computed == [60.0]
    cache.advice_json(store, "/root", "west", 70.0)  # type: ignore[arg-type]
    cache.advice_json(store, "/root", "west", 60.0)  # type: ignore[arg-type]
    assert computed == [60.0, 70.0, 60.0]  # the 60 entry was evicted by the 70 one
    assert len(cache._entries) == 1 and len(cache._computing) == 1
