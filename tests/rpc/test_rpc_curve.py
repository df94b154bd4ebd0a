"""CURVE: encrypted, authenticated connections between RpcClient and RpcServer."""

from __future__ import annotations

import pytest
import zmq
import zmq.auth
from support.handlers import HANDLERS

from pyg_dist.errors import RpcTimeoutError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


def _z85(pair):
    public, secret = pair
    return public.decode(), secret.decode()


@pytest.fixture
def server_keys():
    return _z85(zmq.curve_keypair())


def _server(public, secret, **extra):
    config = RpcConfig(server_public_key=public, server_secret_key=secret, workers=1, **extra)
    return RpcServer(HANDLERS, config=config)


def test_client_with_the_server_key_is_served(server_keys):
    public, secret = server_keys
    with _server(public, secret) as srv:
        with RpcClient([srv.endpoint], RpcConfig(server_public_key=public)) as client:
            assert client.call(0, "echo", {"a": 1}).result == {"args": {"a": 1}}


def test_client_without_the_right_key_gets_nothing(server_keys):
    public, secret = server_keys
    wrong, _ = _z85(zmq.curve_keypair())
    with _server(public, secret) as srv:
        for config in (RpcConfig(timeout=0.5), RpcConfig(timeout=0.5, server_public_key=wrong)):
            with RpcClient([srv.endpoint], config) as client:
                with pytest.raises(RpcTimeoutError):
                    client.call_async(0, "echo").result(timeout=10)


def test_authorized_keys_directory_admits_only_listed_clients(server_keys, tmp_path):
    public, secret = server_keys
    allowed_dir = tmp_path / "authorized"
    allowed_dir.mkdir()
    pub_file, secret_file = zmq.auth.create_certificates(str(tmp_path), "trainer")
    (allowed_dir / "trainer.key").write_bytes(open(pub_file, "rb").read())
    c_public, c_secret = (k.decode() for k in zmq.auth.load_certificate(secret_file))
    with _server(public, secret, authorized_keys_dir=str(allowed_dir)) as srv:
        listed = RpcConfig(server_public_key=public, client_public_key=c_public,
                           client_secret_key=c_secret)
        with RpcClient([srv.endpoint], listed) as client:
            assert client.call(0, "echo", {"ok": True}).result == {"args": {"ok": True}}
        stranger = RpcConfig(server_public_key=public, timeout=0.5)  # ephemeral keys
        with RpcClient([srv.endpoint], stranger) as client:
            with pytest.raises(RpcTimeoutError):
                client.call_async(0, "echo").result(timeout=10)
