"""The clusters the store knows: registered by the first snapshot or plan of each, with their admin URL."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from planner.store.database import Store
from planner.store.models import Cluster


def cluster_row(session: Session, name: str, admin_url: str) -> Cluster:
    """The cluster's row, registered on first use; its admin URL follows the latest configuration."""
    cluster = session.scalar(select(Cluster).where(Cluster.name == name))
    if cluster is None:
        cluster = Cluster(name=name, admin_url=admin_url)
        session.add(cluster)
        session.flush()
    elif cluster.admin_url != admin_url:
        cluster.admin_url = admin_url
    return cluster


def cluster_names(store: Store, readable: Collection[str] | None = None) -> list[str]:
    """The clusters the store knows (only the `readable` ones, when given)."""
    query = select(Cluster.name).order_by(Cluster.name)
    if readable is not None:
        query = query.where(Cluster.name.in_(sorted(readable)))
    with store.session() as session:
        return list(session.scalars(query))


def cluster_admin_url(store: Store, name: str) -> str | None:
    """The cluster's admin URL as last configured; None for a cluster the store does not know."""
    with store.session() as session:
        return session.scalar(select(Cluster.admin_url).where(Cluster.name == name))
