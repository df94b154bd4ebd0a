"""A peer's ``sample`` values are checked by whoever reads them (a trainer,
or a coordinator forwarding a batch's hops): negative or oversized counts,
negative ids and an edge twice for one seed are refused with a
``ProtocolError`` naming the peer, before anything is allocated from them or
reaches a batch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pyg_dist.errors import ProtocolError
from pyg_dist.protocol.ops import OPS, SAMPLE
from pyg_dist.rpc import RpcConfig, RpcServer
from pyg_dist.rpc.retrying import RetryingClient
from pyg_dist.rpc.wire_format import Reply

SEEDS = torch.tensor([3, 5])
ARGS = {"edge_types": [None], "num_neighbors": 2, "replace": False, "seed": 1}
HONEST = [torch.tensor([2, 1]), torch.tensor([7, 8, 9]), torch.tensor([70, 80, 90])]

LIES = [
    ([torch.tensor([-1, 4]), torch.tensor([7, 8, 9]), torch.tensor([70, 80, 90])],
     "neighbour counts"),
    ([torch.tensor([2, 4_000_000]), torch.tensor([7, 8]), torch.tensor([70, 80])],
     "neighbour counts"),
    ([torch.tensor([2, 1]), torch.tensor([7, -8, 9]), torch.tensor([70, 80, 90])],
     "negative neighbour id"),
    ([torch.tensor([2, 1]), torch.tensor([7, 8, 9]), torch.tensor([-1, 80, 90])],
     "negative edge id"),
    ([torch.tensor([2, 1]), torch.tensor([7, 7, 9]), torch.tensor([70, 70, 90])],
     "an edge twice"),
]


def _check(spec, args, reply_tensors, tensors=(SEEDS,)):
    return spec.check_reply(Reply({}, list(reply_tensors)), args, list(tensors), "tcp://peer:1")


def test_honest_replies_pass_and_repeats_across_seeds_or_with_replacement_are_fine():
    _check(SAMPLE, ARGS, HONEST)
    # The same edge for two seeds (a seed asked twice) is no lie.
    _check(SAMPLE, ARGS, [torch.tensor([1, 1]), torch.tensor([7, 7]), torch.tensor([70, 70])],
           [torch.tensor([3, 3])])
    _check(SAMPLE, {**ARGS, "replace": True},
           [torch.tensor([2, 2]), torch.tensor([7, 7, 8, 8]), torch.tensor([70, 70, 80, 80])])
    _check(SAMPLE, {**ARGS, "num_neighbors": -1},
           [torch.tensor([5, 0]), torch.arange(5), torch.arange(5)])


@pytest.mark.parametrize("reply, words", LIES, ids=[w for _, w in LIES])
def test_lies_are_refused_naming_the_peer(reply, words):
    with pytest.raises(ProtocolError, match=words) as info:
        _check(SAMPLE, ARGS, reply)
    assert info.value.address == "tcp://peer:1" and info.value.op == "sample"


def test_a_sample_of_several_edge_types_checks_each_types_fan_out():
    args = {"edge_types": [["a", "r", "b"], ["b", "s", "a"]], "sizes": [1, 1],
            "num_neighbors": [1, 3], "replace": False, "seed": 1}
    honest = [torch.tensor([1]), torch.tensor([4]), torch.tensor([40]),
              torch.tensor([3]), torch.tensor([1, 2, 3]), torch.tensor([10, 20, 30])]
    _check(SAMPLE, args, honest, [torch.tensor([0, 1])])
    over = [torch.tensor([2]), torch.tensor([4, 5]), torch.tensor([40, 50]), *honest[3:]]
    with pytest.raises(ProtocolError, match=r"lies in \[0, 1\]"):
        _check(SAMPLE, args, over, [torch.tensor([0, 1])])


def _lying_sample(args, tensors):
    # 4M neighbours for one seed asked for two.
    n = 4_000_000
    return {}, [torch.tensor([n]), torch.zeros(n, dtype=torch.long),
                torch.arange(n, dtype=torch.long)]


def test_a_lying_server_over_real_sockets_fails_the_call_naming_it():
    with RpcServer({"sample": _lying_sample}, config=RpcConfig(workers=1),
                   name="liar") as liar, \
            RetryingClient([liar.endpoint], RpcConfig(timeout=30), OPS) as client:
        with pytest.raises(ProtocolError, match="neighbour counts") as info:
            client.call(0, "sample", ARGS, [SEEDS[:1]])
    assert info.value.address == liar.endpoint


def test_neighbour_ids_past_the_graph_are_refused_naming_the_server(cora2_root):
    """A server answering a neighbour id past the graph's nodes: the store
    (which knows the graph's size) refuses it naming that server, before it
    reaches a batch (it failed later with an IndexError naming the reader)."""
    from support.servers import serve_parts

    from pyg_dist.hops.one_hop import _check_neighbours
    from pyg_dist.store.connect import connect

    with serve_parts(cora2_root) as cluster:
        _, gs = connect(cluster.endpoints)
        try:
            router = gs.router
            eids = torch.tensor([0, 1])
            _check_neighbours(router, 1, None, torch.tensor([0, router.num_nodes - 1]), eids, {})
            with pytest.raises(ProtocolError, match="past the 2708 nodes") as info:
                _check_neighbours(router, 1, None, torch.tensor([5, router.num_nodes]), eids,
                                  {})
            assert info.value.address == router.endpoints[1]
        finally:
            router.close()



def test_a_check_that_breaks_on_a_reply_still_fails_it_as_a_protocol_error():
    # A reply no check foresaw, or a check's own bug (one raised KeyError on
    # get_edges' replies): anything but an RpcError escaped the retry layer's
    # reply callback, the call's future never finished and the caller waited
    # its whole deadline ("the RPC client's I/O thread is stuck").
    def broken(args, tensors, result, reply_tensors):
        return reply_tensors[0].tolist()[99]

    spec = dataclasses.replace(SAMPLE, reply_check=broken)
    with pytest.raises(ProtocolError, match="could not read .*IndexError") as info:
        _check(spec, ARGS, HONEST)
    assert info.value.address == "tcp://peer:1" and info.value.op == "sample"
