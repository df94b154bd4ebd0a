"""ZeroMQ CURVE on a real ``pyg-dist serve`` process: a client without the
right keys gets nothing (its calls time out, typed, naming the server) and
the server keeps serving; with the right keys the data is correct."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
import zmq
from reliability_checks import assert_batch_matches_graph
from support.rawzmq import RawDealer
from support.servers import serve_part

from pyg_dist.errors import RpcTimeoutError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.auth import client_config, client_env, generate_keys
from pyg_dist.rpc.wire_format import encode_request
from pyg_dist.store.connect import connect

REFUSED_WAIT = 1.5  # seconds a refused client waits for an answer that never comes


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Server, trainer and stranger key pairs; ``authorized`` admits the trainer."""
    root = tmp_path_factory.mktemp("curve")
    made = subprocess.run([sys.executable, "-m", "pyg_dist", "keys", str(root / "server"),
                           "--name", "server"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    generate_keys(root / "trainer", "trainer")
    generate_keys(root / "stranger", "stranger")
    generate_keys(root / "impostor", "server")  # a different key pair named 'server'
    (root / "authorized").mkdir()
    shutil.copy(root / "trainer" / "trainer.key", root / "authorized")
    return root


@pytest.fixture(scope="module")
def curve_server(cora1_root, keys):
    args = ["--curve-secret-key", str(keys / "server" / "server.key_secret"),
            "--curve-authorized-keys", str(keys / "authorized"), "--workers", "2"]
    with serve_part(cora1_root, 0, serve_args=args) as (proc, endpoint):
        yield proc, endpoint


@pytest.fixture(scope="module")
def owned():
    return torch.tensor([0, 5, 2707, 5, 1000, 31])


def _refused(endpoint: str, config: RpcConfig) -> RpcTimeoutError:
    with RpcClient([endpoint], config) as client:
        with pytest.raises(RpcTimeoutError) as info:
            client.call(0, "meta", timeout=REFUSED_WAIT)
    assert info.value.address == endpoint
    return info.value


def test_client_without_a_key_gets_nothing(curve_server, owned):
    proc, endpoint = curve_server
    _refused(endpoint, RpcConfig())
    # Not even a bare socket sending a valid request gets a byte back.
    with RawDealer(endpoint, timeout=REFUSED_WAIT) as dealer:
        dealer.send(encode_request(1, "get", {"groups": [{"attrs": ["x"]}]}, [owned]))
        with pytest.raises(zmq.Again):
            dealer.recv()
    assert proc.poll() is None


def test_client_with_a_wrong_server_key_gets_nothing(curve_server, keys):
    _refused(curve_server[1], client_config(keys / "impostor" / "server.key",
                                            keys / "trainer" / "trainer.key_secret"))


@pytest.mark.parametrize("client_key", ["stranger", None], ids=["unauthorised", "ephemeral"])
def test_client_not_in_the_authorised_keys_gets_nothing(curve_server, keys, client_key):
    secret = keys / client_key / f"{client_key}.key_secret" if client_key else None
    _refused(curve_server[1], client_config(keys / "server" / "server.key", secret))


def test_authorised_client_gets_correct_data(curve_server, keys, cora_data, owned):
    proc, endpoint = curve_server
    # A refused client first: the server must still serve the right one.
    _refused(endpoint, RpcConfig())
    config = client_config(keys / "server" / "server.key",
                           keys / "trainer" / "trainer.key_secret", base=RpcConfig(timeout=30))
    with RpcClient([endpoint], config) as client:
        assert client.call(0, "meta").result["part"] == 0
        reply = client.call(0, "get", {"groups": [{"attrs": ["x", "y"]}]}, [owned])
        assert torch.equal(reply.tensors[0], cora_data.x[owned])
        assert torch.equal(reply.tensors[1], cora_data.y[owned])
    assert proc.poll() is None


def test_environment_turns_curve_on_for_default_configs(curve_server, keys, cora_data,
                                                        owned):
    env = client_env(keys / "server" / "server.key", keys / "trainer" / "trainer.key_secret")
    config = RpcConfig.from_env(env, timeout=30.0)
    assert config.curve_client
    with RpcClient([curve_server[1]], config) as client:
        reply = client.call(0, "get", {"groups": [{"attrs": ["y"]}]}, [owned])
        assert torch.equal(reply.tensors[0], cora_data.y[owned])


def test_connect_and_loader_with_key_files_get_correct_batches(curve_server, keys, cora_data,
                                                               edge_keys):
    config = client_config(keys / "server" / "server.key",
                           keys / "trainer" / "trainer.key_secret", base=RpcConfig(timeout=30))
    fs, gs = connect([curve_server[1]], config)
    try:
        loader = DistNeighborLoader((fs, gs), num_neighbors=[3, 3], batch_size=128,
                                    input_nodes=torch.arange(256), seed=1)
        batches = list(loader)
        assert len(batches) == 2
        for batch in batches:
            assert_batch_matches_graph(batch, cora_data, edge_keys)
    finally:
        fs.close()
