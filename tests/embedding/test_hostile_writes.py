"""Writes to embedding tables are ops like any other: malformed ones (wrong
shapes and dtypes, NaN, ids out of range or not owned, repeated ids, pushes
over the message limit, bad optimiser settings) are refused with a typed
error before anything changes, and the server keeps serving; a read-only
server refuses every write; with CURVE only a trainer holding the keys
reaches the tables."""

from __future__ import annotations

import pytest
import torch
from embedding_support import serving

from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import RemoteError, RpcTimeoutError
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.auth import client_config, generate_keys, server_config
from pyg_dist.store.connect import connect

DIM = 4
SGD = {"kind": "sgd", "lr": 0.1}


@pytest.fixture(scope="module")
def one_part(cora_roots):
    """Part 0 of Cora in 2 parts, a client, its owned ids and a table."""
    root = cora_roots[2]
    with serving(root, 1, config=RpcConfig(max_message_bytes=1 << 20)) as servers, \
            RpcClient([servers[0].endpoint]) as client:
        owned = servers[0].ops._index(None).node_ids
        client.call(0, "emb_create", {"name": "t", "dim": DIM, "dtype": "float32",
                                      "init": "zeros"})
        yield servers[0], client, owned


def _rows(client, ids):
    return client.call(0, "emb_read", {"name": "t"}, [ids]).tensors[0]


@pytest.mark.parametrize("case", [
    "nan", "inf", "inf-and-minus-inf", "wrong-dim", "wrong-dtype", "out-of-range",
    "not-owned", "repeated", "one-dim-grads", "bad-kind", "negative-lr", "nan-lr",
    "extra-key", "no-table", "bad-name",
])
def test_a_malformed_push_is_refused_and_changes_nothing(one_part, case):
    server, client, owned = one_part
    ids = owned[:3].clone()
    grads = torch.ones(3, DIM)
    args = {"name": "t", "optimizer": dict(SGD)}
    if case == "nan":
        grads[1, 2] = float("nan")
    elif case == "inf":
        grads[0, 0] = float("inf")
    elif case == "inf-and-minus-inf":  # a sum of the values would not show them
        grads[0, 0], grads[2, 1] = float("inf"), float("-inf")
    elif case == "wrong-dim":
        grads = torch.ones(3, DIM + 1)
    elif case == "wrong-dtype":
        grads = torch.ones(3, DIM, dtype=torch.float64)
    elif case == "out-of-range":
        ids[0] = 1 << 40
    elif case == "not-owned":
        not_owned = torch.ones(2708, dtype=torch.bool)
        not_owned[owned] = False
        ids[0] = int(not_owned.nonzero()[0])
    elif case == "repeated":
        ids[1] = ids[0]
    elif case == "one-dim-grads":
        grads = torch.ones(3 * DIM)
    elif case == "bad-kind":
        args["optimizer"]["kind"] = "momentum"
    elif case == "negative-lr":
        args["optimizer"]["lr"] = -1.0
    elif case == "nan-lr":
        args["optimizer"]["lr"] = float("nan")
    elif case == "extra-key":
        args["optimizer"]["weight_decay"] = 0.1
    elif case == "no-table":
        args["name"] = "missing"
    elif case == "bad-name":
        args["name"] = "../etc/passwd"
    before = _rows(client, owned)
    with pytest.raises(RemoteError) as info:
        client.call(0, "emb_push", args, [ids, grads])
    assert info.value.remote_type in ("EmbeddingError", "ProtocolError", "StoreError")
    assert torch.equal(_rows(client, owned), before)
    # It goes on serving, and a good push applies.
    client.call(0, "emb_push", {"name": "t", "optimizer": SGD}, [owned[:1], torch.ones(1, DIM)])
    assert torch.equal(_rows(client, owned[:1]), before[:1] - 0.1)


@pytest.mark.parametrize("op, args, tensors, message", [
    ("emb_read", {"dtype": "float64"}, "ids", "argument 'dtype' must be one of"),
    ("emb_read", {"dim": True}, "ids", "argument 'dim' must be an int in [1, 65536], got True"),
    ("emb_read", {"dim": 1 << 20}, "ids", "argument 'dim' must be an int in [1, 65536]"),
    ("emb_push", {"optimizer": {"kind": "sgd"}}, "push", "argument 'optimizer' must be a map"),
    ("emb_push", {"optimizer": {**SGD, "betas": [0.9]}}, "push",
     "argument 'optimizer'.betas must be a list of 2 to 2 numbers"),
    ("emb_push", {"optimizer": {**SGD, "step": 0}}, "push",
     "argument 'optimizer'.step must be an int >= 1, got 0"),
    ("emb_push", {"optimizer": {**SGD, "eps": float("inf")}}, "push",
     "argument 'optimizer'.eps must be a finite number in (0, 1]"),
    ("emb_push", {"optimizer": [1, 2]}, "push", "argument 'optimizer' must be a map"),
    ("emb_push", {"optimizer": SGD}, "one-dim", "takes gradients as a 2-D tensor"),
    ("emb_write", {}, "one-dim", "takes rows as a 2-D tensor of one row per id (2)"),
    ("emb_write", {}, "int32-ids", "takes the ids as a 1-D int64 tensor"),
])
def test_ill_typed_arguments_are_refused_before_the_handler_runs(one_part, op, args, tensors,
                                                                 message):
    # The table does not exist: had the handler run, it would have answered
    # EmbeddingError ("no embedding table"), not the declaration's ProtocolError.
    server, client, owned = one_part
    ids = owned[:2].clone()
    sent = {"ids": [ids], "push": [ids, torch.ones(2, DIM)], "one-dim": [ids, torch.ones(2)],
            "int32-ids": [ids.int(), torch.ones(2, DIM)]}[tensors]
    with pytest.raises(RemoteError) as info:
        client.call(0, op, {"name": "missing", **args}, sent)
    assert info.value.remote_type == "ProtocolError"
    assert message in info.value.remote_message
    assert "missing" not in server.ops.embeddings.tables
    assert _rows(client, owned[:2]).shape == (2, DIM)  # and it goes on serving


def test_huge_but_finite_gradients_are_applied(one_part):
    # Their float32 sum overflows; each value is finite, so the push is taken.
    server, client, owned = one_part
    before = _rows(client, owned[:2])
    huge = torch.full((2, DIM), 3e38)
    client.call(0, "emb_push", {"name": "t", "optimizer": SGD}, [owned[:2], huge])
    assert torch.equal(_rows(client, owned[:2]), before - 0.1 * huge)


def test_a_push_over_the_message_limit_is_refused_and_the_server_serves(one_part):
    server, client, owned = one_part
    huge = torch.ones(owned.numel(), 128)  # > 1 MiB of gradients
    with pytest.raises(RemoteError):
        client.call(0, "emb_push", {"name": "t", "optimizer": SGD}, [owned, huge])
    assert _rows(client, owned[:2]).shape == (2, DIM)


def test_creation_is_bounded_and_checked(one_part):
    server, client, owned = one_part
    for args, message in [
        ({"dim": 0}, "'dim' must be an int"),
        ({"dim": 1 << 20}, "'dim' must be an int"),
        ({"dtype": "float64"}, "'dtype' must be one of"),
        ({"init": "normal"}, "'init' must be one of"),
        ({"group": "user"}, "no node type"),
        ({"dim": 1 << 16}, "cannot hold embedding table"),  # over the memory bound
    ]:
        request = {"name": "new", "dim": DIM, "dtype": "float32", "init": "zeros", **args}
        server.ops.embeddings.max_bytes = 64 << 20
        with pytest.raises(RemoteError, match=message):
            client.call(0, "emb_create", request)
    assert "new" not in server.ops.embeddings.tables
    with pytest.raises(RemoteError, match="exists on part 0"):
        client.call(0, "emb_create", {"name": "t", "dim": DIM, "dtype": "bfloat16",
                                      "init": "zeros"})


def test_rows_written_must_fit_the_table(one_part):
    server, client, owned = one_part
    for rows, message in [(torch.ones(2, DIM + 1), "of shape \\[2, 4\\]"),
                          (torch.full((2, DIM), float("nan")), "NaN or infinite")]:
        with pytest.raises(RemoteError, match=message):
            client.call(0, "emb_write", {"name": "t"}, [owned[:2], rows])


def test_a_read_only_server_refuses_every_write(cora_roots):
    with serving(cora_roots[2], 1, read_only=True) as servers, \
            RpcClient([servers[0].endpoint]) as client:
        owned = servers[0].ops._index(None).node_ids[:2]
        for op, args, tensors in [
            ("emb_create", {"name": "r", "dim": 2, "dtype": "float32", "init": "zeros"}, []),
            ("emb_write", {"name": "r"}, [owned, torch.ones(2, 2)]),
            ("emb_push", {"name": "r", "optimizer": SGD}, [owned, torch.ones(2, 2)]),
            ("emb_checkpoint", {}, []),
        ]:
            with pytest.raises(RemoteError, match="read-only") as info:
                client.call(0, op, args, tensors)
            assert info.value.remote_type == "EmbeddingError"
        assert client.call(0, "get", {"groups": [{"attrs": ["x"]}]},
                           [owned]).tensors[0].shape[0] == 2


def test_with_curve_only_the_keyed_trainer_reaches_the_tables(cora_roots, tmp_path):
    generate_keys(tmp_path / "server", "server")
    generate_keys(tmp_path / "trainer", "trainer")
    generate_keys(tmp_path / "stranger", "stranger")
    (tmp_path / "authorized").mkdir()
    (tmp_path / "authorized" / "trainer.key").write_bytes(
        (tmp_path / "trainer" / "trainer.key").read_bytes())
    config = server_config(tmp_path / "server" / "server.key_secret", tmp_path / "authorized")
    with serving(cora_roots[2], 2, config=config) as servers:
        endpoints = [s.endpoint for s in servers]
        fs, gs = connect(endpoints, client_config(tmp_path / "server" / "server.key",
                                                  tmp_path / "trainer" / "trainer.key_secret"))
        with fs:
            emb = DistEmbedding((fs, gs), "keyed", DIM, init="zeros")
            assert emb.read(torch.arange(4)).shape == (4, DIM)
        stranger = client_config(tmp_path / "server" / "server.key",
                                 tmp_path / "stranger" / "stranger.key_secret")
        with RpcClient(endpoints[:1], stranger) as client:
            with pytest.raises(RpcTimeoutError):
                client.call(0, "emb_push", {"name": "keyed", "optimizer": SGD},
                            [torch.tensor([0]), torch.ones(1, DIM)], timeout=1.5)
