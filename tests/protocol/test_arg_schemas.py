"""Each op declares its arguments' types once (pyg_dist/protocol/schema.py,
pyg_dist/protocol/ops.py); a request that does not fit is refused before any
handler runs, with a ProtocolError naming the op, the argument, the place
inside it, what it must be and what it was (described, never repr-ed whole)."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import ProtocolError
from pyg_dist.protocol.ops import (
    EMB_CREATE,
    EMB_PUSH,
    EMB_READ,
    EMB_WRITE,
    GET,
    SAMPLE,
    SAMPLE_TREE,
)
from pyg_dist.protocol.schema import EDGE_TYPE, ListOf, MapOf, integer
from pyg_dist.rpc.op_spec import PING, RELEASE

IDS = [torch.arange(4)]
SAMPLE_ARGS = {"edge_types": [None], "num_neighbors": 2}
TREE_ARGS = {"edge_types": [["a", "r", "b"]], "num_neighbors": [[2, 1]], "seed_types": ["b"],
             "seed": 1}


@pytest.mark.parametrize("spec, args, tensors, message", [
    (SAMPLE, {**SAMPLE_ARGS, "num_neighbors": -2}, IDS,
     "'sample' argument 'num_neighbors' must be an int in [-1, 2147483648] or a list"),
    (SAMPLE, {**SAMPLE_ARGS, "sizes": [4, -1], "edge_types": [None, None]}, IDS,
     "'sample' argument 'sizes'[1] must be an int >= 0, got -1"),
    (SAMPLE, {**SAMPLE_ARGS, "replace": 1}, IDS, "argument 'replace' must be a bool, got 1"),
    (SAMPLE, {**SAMPLE_ARGS, "edge_types": [["a", "r"]]}, IDS,
     "argument 'edge_types'[0] must be nil or [src, rel, dst] names"),
    (SAMPLE, {**SAMPLE_ARGS, "temporal_strategy": "first"}, IDS,
     "argument 'temporal_strategy' must be one of ['uniform', 'last']"),
    (SAMPLE, {**SAMPLE_ARGS, "weight_attr": "w" * 300}, IDS,
     "argument 'weight_attr' must be nil or a string of 1 to 256 characters"),
    (GET, {"groups": [{"group": None, "attrs": ["x", 3]}]}, IDS,
     "'get' argument 'groups'[0].attrs[1] must be a string of 1 to 256 characters, got 3"),
    (GET, {"groups": [{"attrs": ["x"], "rows": [1]}]}, IDS,
     "argument 'groups'[0] must be a map of ['attrs', 'group'] (no other key"),
    (GET, {"groups": [{"group": None}]}, IDS,
     "argument 'groups'[0] must be a map of ['attrs', 'group'] (no other key, ['attrs'] "
     "required)"),
    (SAMPLE_TREE, {**TREE_ARGS, "num_neighbors": [[2] * 17]}, IDS,
     "argument 'num_neighbors'[0] must be a list of 1 to 16 fan-outs"),
    (SAMPLE_TREE, {**TREE_ARGS, "timeout": float("inf")}, IDS,
     "argument 'timeout' must be nil or seconds in (0, 86400]"),
    (SAMPLE_TREE, {**TREE_ARGS, "seed": -1}, IDS, "argument 'seed' must be an int >= 0, got -1"),
    (EMB_CREATE, {"name": "../t", "dim": 4, "dtype": "float32", "init": "zeros"}, [],
     "argument 'name' must be 1 to 64 letters, digits"),
    (EMB_CREATE, {"name": "t", "dim": 4, "dtype": "float64", "init": "zeros"}, [],
     "argument 'dtype' must be one of ['float32', 'bfloat16']"),
    (EMB_READ, {"name": "t", "dim": 0}, IDS, "argument 'dim' must be an int in [1, 65536]"),
    (EMB_PUSH, {"name": "t", "optimizer": {"kind": "sgd", "lr": 0}}, IDS + [torch.ones(4, 2)],
     "argument 'optimizer'.lr must be a finite number in (0, 1e+06]"),
    (EMB_PUSH, {"name": "t", "optimizer": {"kind": "sgd", "lr": 1, "betas": [0.9, True]}},
     IDS + [torch.ones(4, 2)], "argument 'optimizer'.betas[1] must be a finite number"),
    (EMB_WRITE, {"name": "t"}, IDS + [torch.ones(3, 2)],
     "takes rows as a 2-D tensor of one row per id (4), got shape [3, 2]"),
    (PING, {"usage": "yes"}, [], "'ping' argument 'usage' must be a bool"),
    (RELEASE, {"segments": [["pyg-dist-shm-" + "a" * 32]]}, [],
     "'release' argument 'segments'[0] must be [name, token]"),
    # The id tensors: 1-D int64, and one seed time (or output row) per id.
    (SAMPLE, SAMPLE_ARGS, [torch.arange(4).int()], "takes the ids as a 1-D int64 tensor"),
    (SAMPLE, {**SAMPLE_ARGS, "time_attr": "t"}, IDS, "takes 2 tensor(s) here"),
    (SAMPLE, {**SAMPLE_ARGS, "time_attr": "t"}, IDS + [torch.zeros(3, dtype=torch.long)],
     "got 3 seed times for 4 ids"),
    (GET, {"groups": [{"attrs": ["x"]}], "place": {}}, IDS + [torch.ones(4)],
     "takes output rows as a 1-D int64 tensor, got torch.float32"),
])
def test_a_request_that_does_not_fit_its_declaration_is_refused_naming_it(
        spec, args, tensors, message):
    with pytest.raises(ProtocolError) as info:
        spec.check_request(args, tensors)
    assert message in str(info.value)


def test_requests_that_fit_pass_and_the_callers_own_calls_are_not_typed_twice():
    SAMPLE.check_request({**SAMPLE_ARGS, "seed": None, "weight_attr": None}, IDS)
    SAMPLE_TREE.check_request({**TREE_ARGS, "sizes": [4], "timeout": 30.0}, IDS)
    GET.check_request({"groups": [{"group": "b", "attrs": ["x"]}]}, IDS)
    # request() on the trainer checks names and counts only: the server types them.
    assert SAMPLE.request(0, {**SAMPLE_ARGS, "replace": 1}, IDS).args["replace"] == 1


def test_a_deep_or_huge_value_is_described_not_repr_ed():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ProtocolError) as info:
        SAMPLE.check_request({**SAMPLE_ARGS, "edge_types": [deep]}, IDS)
    assert len(str(info.value)) < 400
    with pytest.raises(ProtocolError) as info:
        SAMPLE.check_request({**SAMPLE_ARGS, "weight_attr": "w" * 10**6}, IDS)
    assert len(str(info.value)) < 400


def test_forms_compose_and_report_where_inside():
    form = ListOf(MapOf({"n": integer(0, 3), "t": EDGE_TYPE}, required=("n",)), 1, 2, "items")
    assert form([{"n": 1}, {"n": 3, "t": None}]) is None
    assert form([{"n": 1}, {"n": 4}]).path == "[1].n"
    assert form([{"t": None}]).path == "[0]"  # "n" is required
    assert form([]).wanted.startswith("a list of 1 to 2 items")
    assert form([{"n": True}]).wanted == "an int in [0, 3]"  # a bool is no int here
