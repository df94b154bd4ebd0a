"""``parse_tree``: a ``sample_tree`` request's arguments as one typed request."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import ProtocolError
from pyg_dist.hops.settings import HopSettings
from pyg_dist.server.tree_requests import parse_tree

AB, BA = ("a", "to", "b"), ("b", "to", "a")


def _args(**changes):
    args = {"edge_types": [list(AB), list(BA)], "num_neighbors": [[3, 2], [1, -1]],
            "seed_types": ["b", "a"], "sizes": [2, 1], "seed": 7}
    return {**args, **changes}


def test_a_heterogeneous_request_becomes_typed_settings_fan_outs_and_seeds():
    seeds, times = torch.tensor([4, 5, 6]), torch.tensor([10, 11, 12])
    request = parse_tree(_args(time_attr="t", timeout=2.5, replace=False), [seeds, times])
    assert request.settings == HopSettings(disjoint=True, time_attr="t")  # temporal: disjoint
    assert request.fanouts == {AB: [3, 2], BA: [1, -1]} and not request.homogeneous
    # Per hop, what a node may take over every edge type; -1 anywhere: all.
    assert request.per_hop == [4, -1]
    assert request.seed == 7 and request.deadline == 2.5
    assert {t: s.tolist() for t, s in request.seeds.items()} == {"b": [4, 5], "a": [6]}
    assert {t: s.tolist() for t, s in request.seed_time.items()} == {"b": [10, 11], "a": [12]}


def test_a_homogeneous_request_is_the_one_type_case():
    request = parse_tree({"edge_types": [None], "num_neighbors": [[5, 0]],
                          "seed_types": [None], "seed": 1, "subgraph": "induced"},
                         [torch.arange(3)])
    assert request.homogeneous and request.fanouts == {None: [5, 0]}
    assert request.per_hop == [5, 0] and request.deadline is None
    assert request.settings.subgraph_type == SubgraphType.induced
    assert request.seeds[None].tolist() == [0, 1, 2] and request.seed_time is None


@pytest.mark.parametrize("changes, words", [
    ({"edge_types": [list(AB)] * 2}, "distinct edge types"),
    ({"num_neighbors": [[3, 2], [1]]}, "same number of hops"),
    ({"sizes": [2, 2]}, "add up to 4 seeds"),
    ({"temporal_strategy": "last", "replace": True, "time_attr": "t"}, "tree settings refused"),
    ({"disjoint": True, "subgraph": "induced"}, "tree settings refused"),
])
def test_requests_that_do_not_fit_together_are_refused(changes, words):
    tensors = [torch.arange(3)] + ([torch.zeros(3, dtype=torch.long)]
                                   if "time_attr" in changes else [])
    with pytest.raises(ProtocolError, match=words):
        parse_tree(_args(**changes), tensors)
