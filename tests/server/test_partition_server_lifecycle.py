"""Start-up and shutdown: signals stop a server process cleanly, a stopped
server turns calls into typed timeouts, bad arguments fail early."""

from __future__ import annotations

import signal

import pytest
from support.servers import serve_part

from pyg_dist.cli import main
from pyg_dist.errors import (
    InvalidPartitionArgumentError,
    PartitionFormatError,
    PluginNotFoundError,
    RemoteError,
    RpcTimeoutError,
)
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.server import PartitionServer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_server_process_and_later_calls_time_out(cora2_root, sig):
    with serve_part(cora2_root, 1) as (proc, endpoint):
        with RpcClient([endpoint], RpcConfig(timeout=30)) as client:
            assert client.call(0, "meta").result["part"] == 1
            proc.send_signal(sig)
            # Generous bound: only that it exits, cleanly, by itself.
            assert proc.wait(timeout=30) == 0
            future = client.call_async(0, "meta", timeout=0.5)
            with pytest.raises(RpcTimeoutError) as info:
                future.result(timeout=30)
    assert info.value.address == endpoint and info.value.op == "meta"


def test_in_process_server_binds_a_real_port_and_stops(cora2_root):
    with PartitionServer(cora2_root, 0, config=RpcConfig(workers=1)) as server:
        assert not server.endpoint.endswith(":0")
        with RpcClient([server.endpoint]) as client:
            assert client.call(0, "meta").result["part"] == 0
    server.stop()  # idempotent


def test_mmap_stores_serve_the_same_rows(cora2_root, cora_reader):
    part = cora_reader.load_part(1)
    with PartitionServer(cora2_root, 1, feature_store="mmap", graph_store="mmap") as server:
        with RpcClient([server.endpoint]) as client:
            reply = client.call(0, "get", {"groups": [{"attrs": ["x"]}]}, [part.node_ids[:50]])
            edges = client.call(0, "edge_index").tensors
    assert reply.tensors[0].equal(part.node_features["x"][:50])
    assert edges[2].equal(part.edge_ids)


def test_bad_part_store_or_root_fail_before_serving(cora2_root, tmp_path):
    with pytest.raises(InvalidPartitionArgumentError, match=r"\[0, 2\)"):
        PartitionServer(cora2_root, 2)
    with pytest.raises(PluginNotFoundError, match="no-such-store"):
        PartitionServer(cora2_root, 0, feature_store="no-such-store")
    with pytest.raises(PartitionFormatError):
        PartitionServer(tmp_path, 0)


def test_cli_with_a_missing_dataset_exits_with_an_error(tmp_path, capsys):
    # Fails while loading, before serving: safe to run in-process.
    assert main(["serve", str(tmp_path), "--part", "0"]) == 1
    captured = capsys.readouterr()
    assert "ready" not in captured.out
    assert "meta.json" in captured.err


def test_get_over_the_reply_limit_is_refused_and_smaller_ones_served(cora2_root, cora_reader):
    part = cora_reader.load_part(0)
    row_bytes = 1433 * 4
    config = RpcConfig(workers=1, max_reply_bytes=100 * row_bytes)
    with PartitionServer(cora2_root, 0, config=config) as server:
        with RpcClient([server.endpoint]) as client:
            with pytest.raises(RemoteError, match="reply limit") as info:
                client.call(0, "get", {"groups": [{"attrs": ["x"]}]}, [part.node_ids[:101]])
            reply = client.call(0, "get", {"groups": [{"attrs": ["x"]}]}, [part.node_ids[:100]])
    assert info.value.remote_type == "ProtocolError"
    assert reply.tensors[0].equal(part.node_features["x"][:100])
