"""The op table (``pyg_dist/protocol/ops.py``) is the one declaration both ends
follow: the server answers exactly the declared ops and refuses requests
that do not fit them, the trainer cannot build a call that does not, and
the docs list every op."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from pyg_dist.errors import ProtocolError, RemoteError
from pyg_dist.protocol.ops import GET, OPS, PARTITION_OPS, RPC_OPS, SAMPLE, declared
from pyg_dist.rpc import RpcClient
from pyg_dist.server import PartitionServer

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def served(cora2_root):
    with PartitionServer(cora2_root, 0) as server, RpcClient([server.endpoint]) as client:
        yield server, client


def test_the_server_answers_exactly_the_declared_ops(served):
    server, client = served
    assert set(server.ops.handlers()) == set(PARTITION_OPS)
    assert set(server.ops.estimators()) <= set(PARTITION_OPS)
    assert set(client.ping(0)["ops"]) == set(OPS)


@pytest.mark.parametrize("op, args, tensors, message", [
    ("get", {"groups": [{"attrs": ["x"]}], "row": 1}, 1, "'get' has unknown arguments ['row']"),
    ("sample", {"edge_types": [None], "sizes": [1]}, 1,
     "'sample' lacks the required arguments ['num_neighbors']"),
    ("edge_ids", {}, 1, "'edge_ids' takes 0 tensors, got 1"),
    ("sample", {"edge_types": [None], "num_neighbors": 2}, 3,
     "'sample' takes 1 to 2 tensors, got 3"),
])
def test_requests_that_do_not_fit_their_op_are_refused_before_the_handler(
        served, op, args, tensors, message):
    server, client = served
    ids = server.ops._index(None).node_ids[:4]
    before = client.call(0, "stats").result["get_calls"]
    with pytest.raises(RemoteError, match=re.escape(message)) as info:
        client.call(0, op, args, [ids] * tensors)
    assert info.value.remote_type == "ProtocolError"
    assert client.call(0, "stats").result["get_calls"] == before  # no handler ran
    # The same server goes on answering a request that fits.
    assert client.call(0, "get", {"groups": [{"attrs": ["x"]}]}, [ids]).tensors[0].shape[0] == 4


def test_the_trainer_cannot_build_a_call_its_op_does_not_declare():
    ids = torch.arange(3)
    assert SAMPLE.request(1, {"edge_types": [None], "num_neighbors": 5, "seed": 3}, [ids]) == \
        (1, "sample", {"edge_types": [None], "num_neighbors": 5, "seed": 3}, [ids])
    with pytest.raises(ProtocolError, match="unknown arguments \\['fanout'\\]"):
        SAMPLE.request(0, {"edge_types": [None], "num_neighbors": 5, "fanout": 3}, [ids])
    with pytest.raises(ProtocolError, match="lacks the required arguments \\['edge_types'\\]"):
        SAMPLE.request(0, {"num_neighbors": 1}, [ids])
    with pytest.raises(ProtocolError, match="takes 0 to 2 tensors, got 3"):
        GET.request(0, {"groups": [{"attrs": ["x"]}]}, [ids, ids, ids])
    with pytest.raises(ProtocolError, match="no op 'drop' is declared"):
        declared(0, "drop")


def test_only_reads_are_retry_safe_and_the_embedding_writes_are_not():
    # Every op but the embedding writes only reads: sending one again (to
    # the same server or a replica) cannot change what anyone sees. A write
    # sent again after a lost answer could apply twice, so it never is.
    writes = {"emb_create", "emb_write", "emb_push", "emb_checkpoint"}
    assert {name for name, spec in OPS.items() if not spec.retry_safe} == writes
    # Served by a worker whatever their size: a whole part's edges, a tree
    # that waits on the peers (never on the I/O thread), and the writes.
    assert [s.name for s in OPS.values() if s.worker] == \
        ["sample_tree", "edge_index", "emb_write", "emb_push",
         "emb_checkpoint"]


def test_the_docs_list_every_declared_op():
    text = (DOCS / "wire-protocol.md").read_text() + (DOCS / "architecture.md").read_text()
    for name in [*PARTITION_OPS, *RPC_OPS]:
        assert f"| `{name}` |" in text, name
