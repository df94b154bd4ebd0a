"""``connect_replicas``: :func:`pyg_dist.connect` with several servers per part
(prototype).

``fs, gs = connect_replicas([["tcp://a:5555", "tcp://a2:5555"], "tcp://b:5555"])``
checks that every replica of a group serves the same part of the same graph
(the graph identity includes the partition files' checksums), then builds
the usual remote stores over a :class:`~pyg_dist.rpc.replicas.FailoverClient`:
when a replica dies, reads fail over to another replica of its part and the
epoch goes on.

Limitation of the prototype: the stores' router builds a plain
:class:`~pyg_dist.rpc.client.RpcClient` (no failover) in ``DataLoader``
worker processes (``num_workers > 0``); use ``num_workers=0`` (with
``prefetch``) for failover. Folding this into :func:`pyg_dist.connect` and
``Router`` is described in ``docs/reliability.md``.
"""

from __future__ import annotations

from typing import Any, Optional

from pyg_dist.errors import StoreError
from pyg_dist.rpc.client import RpcClient
from pyg_dist.rpc.replicas import FailoverClient, Replicas, replica_groups
from pyg_dist.store.connect import ServerMeta, _check_cluster, _parse_meta, build_stores
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore


def _same_graph(a: ServerMeta, b: ServerMeta) -> bool:
    return (a.part, a.num_parts, a.num_nodes, a.num_edges, a.graph, a.features) == \
        (b.part, b.num_parts, b.num_nodes, b.num_edges, b.graph, b.features)


def _metas(groups: list[list[str]], config: Any, timeout: Optional[float]
           ) -> list[list[ServerMeta]]:
    """Asks every replica for ``meta`` at once; returns them grouped."""
    flat = [e for g in groups for e in g]
    with RpcClient(flat, config) as client:
        deadline = client.config.connect_timeout if timeout is None else timeout
        calls = [client.call_async(i, "meta", {}, [], timeout=deadline)
                 for i in range(len(flat))]
        metas = iter([_parse_meta(flat[i], f.result(timeout=deadline + 5.0))
                      for i, f in enumerate(calls)])
    return [[next(metas) for _ in g] for g in groups]


def connect_replicas(replicas: Replicas, config: Any = None, *,
                     timeout: Optional[float] = None
                     ) -> tuple[RemoteFeatureStore, RemoteGraphStore]:
    """Connects to the servers of one graph, with replicas for some parts.

    Args:
        replicas: One entry per part (any order): an endpoint, or a list of
            endpoints all serving that part.
        config: An :class:`~pyg_dist.rpc.config.RpcConfig`; ``None`` uses
            the defaults and the environment.
        timeout: Deadline of the ``meta`` calls; ``None`` uses the config's
            ``connect_timeout``. Every replica must answer.

    Returns:
        ``(feature_store, graph_store)`` as from :func:`pyg_dist.connect`.

    Raises:
        StoreError: if replicas of one group serve different parts or graphs,
            or the groups do not cover every part exactly once.
        RpcError: if a replica cannot be reached within the deadline.
    """
    groups = replica_groups(replicas)
    metas = _metas(groups, config, timeout)
    for group, group_metas in zip(groups, metas):
        for endpoint, meta in zip(group[1:], group_metas[1:]):
            if not _same_graph(group_metas[0], meta):
                raise StoreError(
                    f"{endpoint} is listed as a replica of {group[0]} but serves part "
                    f"{meta.part} of another or different graph (part {group_metas[0].part} "
                    f"expected); list only servers of the same part and dataset together")
    primaries = [m[0] for m in metas]
    order = _check_cluster(primaries)
    ordered = [groups[i] for i in order]
    client = FailoverClient(ordered, config)
    return build_stores([primaries[i] for i in order], [g[0] for g in ordered], config, client)
