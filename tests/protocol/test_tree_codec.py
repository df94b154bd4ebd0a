"""``sample_tree``'s reply layout is written once (pyg_dist/protocol/tree_codec.py):
what the coordinator encodes, the retry layer's check passes and the trainer
decodes back into the same batch, homogeneous and heterogeneous, disjoint and
induced; a reply the layout does not fit is refused by the same check."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import HeteroSamplerOutput

from pyg_dist.errors import ProtocolError
from pyg_dist.protocol import tree_codec
from pyg_dist.protocol.ops import SAMPLE_TREE
from pyg_dist.rpc.wire_format import Reply

V0V1 = ("v0", "e0", "v1")
V1V1 = ("v1", "e1", "v1")


def _hetero(disjoint: bool, induced: bool) -> tuple[HeteroSamplerOutput, dict, list]:
    """A two-hop typed batch around seeds 4, 9 of v1 and its request."""
    out = HeteroSamplerOutput(
        node={"v0": torch.tensor([7, 3]), "v1": torch.tensor([4, 9, 11])},
        row={V0V1: torch.tensor([0, 1]), V1V1: torch.tensor([2])},
        col={V0V1: torch.tensor([0, 1]), V1V1: torch.tensor([0])},
        edge={V0V1: torch.tensor([70, 30]), V1V1: torch.tensor([111])},
        batch={"v0": torch.tensor([0, 1]), "v1": torch.tensor([0, 1, 0])} if disjoint
        else None,
        num_sampled_nodes=None if induced else {"v0": [0, 2, 0], "v1": [2, 1, 0]},
        num_sampled_edges=None if induced else {V0V1: [2, 0], V1V1: [1, 0]})
    args = {"edge_types": [list(V0V1), list(V1V1)], "num_neighbors": [[2, 1], [2, 1]],
            "seed_types": ["v1"], "seed": 1}
    if disjoint:
        args["disjoint"] = True
    if induced:
        args["subgraph"] = "induced"
    return out, args, [torch.tensor([4, 9])]


def _assert_same(a: HeteroSamplerOutput, b: HeteroSamplerOutput) -> None:
    for name in ("node", "row", "col", "edge", "batch"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        assert list(x or {}) == list(y or {}), name
        for key in x or {}:
            assert torch.equal(x[key].long(), y[key].long()), (name, key)
    assert a.num_sampled_nodes == b.num_sampled_nodes
    assert a.num_sampled_edges == b.num_sampled_edges


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("induced", [False, True])
def test_a_typed_batch_goes_through_encode_check_decode_unchanged(disjoint, induced):
    out, args, seeds = _hetero(disjoint, induced)
    result, tensors = tree_codec.encode(out, [V0V1, V1V1])
    assert [t.dtype for t in tensors] == tree_codec.TreeLayout(
        ["v0", "v1"], [V0V1, V1V1], disjoint).dtypes()
    reply = SAMPLE_TREE.check_reply(Reply(result, tensors), args, seeds, "tcp://c:1")
    _assert_same(tree_codec.decode(args, reply.result, reply.tensors), out)


def test_a_homogeneous_batch_is_the_one_type_case_in_version_2s_order():
    out = HeteroSamplerOutput(
        node={None: torch.tensor([4, 9, 11])}, row={None: torch.tensor([2])},
        col={None: torch.tensor([0])}, edge={None: torch.tensor([77])}, batch=None,
        num_sampled_nodes={None: [2, 1]}, num_sampled_edges={None: [1]})
    args = {"edge_types": [None], "num_neighbors": [[2]], "seed_types": [None], "seed": 1}
    result, tensors = tree_codec.encode(out, [None])
    # node, row, col, edge, num_sampled_nodes, num_sampled_edges (wire-protocol.md)
    assert result == {"node_types": [None]}
    assert [t.tolist() for t in tensors] == [[4, 9, 11], [2], [0], [77], [2, 1], [1]]
    assert [t.dtype for t in tensors][1:3] == [torch.int32, torch.int32]
    SAMPLE_TREE.check_reply(Reply(result, tensors), args, [torch.tensor([4, 9])], "x")
    _assert_same(tree_codec.decode(args, result, tensors), out)


def test_the_check_refuses_what_the_layout_does_not_fit():
    out, args, seeds = _hetero(disjoint=True, induced=False)
    result, tensors = tree_codec.encode(out, [V0V1, V1V1])
    for lie, words in [(tensors[:-1], "tensors, where"),  # a batch tensor missing
                       ([t.long() for t in tensors], "were due"),  # row, col not int32
                       (tensors[:2] + [tensors[2] + 5] + tensors[3:], "outside"),
                       (tensors[:-1] + [torch.tensor([0])], "batch entries")]:
        with pytest.raises(ProtocolError, match=words):
            SAMPLE_TREE.check_reply(Reply(result, list(lie)), args, seeds, "tcp://c:1")


def test_the_homogeneous_answer_bound_counts_k_per_node_and_hop():
    # 2 seeds, fan-outs [3, 2]: at most 6 + 12 new nodes and as many edges.
    nodes, edges = 2 + 6 + 12, 6 + 12
    assert tree_codec.tree_answer_bytes(2, [3, 2], False) == \
        8 * (nodes + 2 * 2 + 1) + 16 * edges
    assert tree_codec.tree_answer_bytes(2, [3, 2], True) == \
        8 * (2 * nodes + 2 * 2 + 1) + 16 * edges
    assert tree_codec.tree_answer_bytes(2, [3, -1], False) is None
    assert tree_codec.tree_answer_bytes(2, [3], False, induced=True) is None


def test_the_coordinators_bound_is_capped_by_the_graph():
    # A graph of 10 nodes and 7 edges: without replacement a hop takes at
    # most every edge, -1 takes them all, and a hop reaches at most every node.
    graph = (10, 7)
    assert tree_codec.tree_answer_bytes(2, [3, -1], False, graph=graph) == \
        tree_codec.tree_bytes(2 + 6 + 7, 6 + 7, 2, False)
    assert tree_codec.tree_answer_bytes(2, [3, 4], False, graph=graph, replace=True) == \
        tree_codec.tree_bytes(2 + 6 + 10, 6 + 24, 2, False)
    # A disjoint tree may repeat the graph once per seed.
    assert tree_codec.tree_answer_bytes(2, [-1], True, graph=graph) == \
        tree_codec.tree_bytes(2 + 14, 14, 1, True)
    # Induced: every edge among the sampled nodes, at most the graph's.
    assert tree_codec.tree_answer_bytes(2, [1], False, graph=graph, induced=True) == \
        tree_codec.tree_bytes(2 + 2, 7, 1, False)
    # Without the graph the bound is the fan-outs' alone.
    assert tree_codec.tree_answer_bytes(2, [3, 4], False, replace=True) == \
        tree_codec.tree_bytes(2 + 6 + 24, 6 + 24, 2, False)
