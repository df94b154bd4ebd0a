"""Safe files and payloads on real processes.

* A tampered partition file stops ``pyg-dist serve`` with a non-zero exit and
  a message naming the file (``ChecksumMismatchError`` in process);
  ``--no-verify`` skips the check. Reader-level checksum and path-escape
  tests live in ``tests/partitioning/test_partition_errors.py``.
* A crafted ``meta.json`` (a feature shape that understates the rows, so
  replies would be sized too small) stops ``pyg-dist serve`` before it binds,
  with one line naming the tensor; the table of every other corruption lives
  in ``tests/partitioning/test_meta_validation.py``.
* A pickle sent as a request (as the header, as a tensor frame, inside the
  args) is refused and never unpickled: a pickle whose unpickling would
  create a file leaves no file behind.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import msgpack
import pytest
import torch
from support.rawzmq import RawDealer, header
from support.servers import serve_part

from pyg_dist.errors import ChecksumMismatchError
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.wire_format import PROTOCOL_VERSION
from pyg_dist.server import PartitionServer

TAMPERED = os.path.join("part-1", "nodes.safetensors")


@pytest.fixture
def tampered_root(cora2_root, tmp_path):
    root = tmp_path / "tampered"
    shutil.copytree(cora2_root, root)
    path = root / TAMPERED
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x10  # one bit of the last feature row
    path.write_bytes(bytes(raw))
    return root


def test_tampered_file_is_refused_in_process_naming_the_file(tampered_root):
    with pytest.raises(ChecksumMismatchError) as info:
        PartitionServer(tampered_root, 1)
    assert info.value.path.endswith(TAMPERED)
    assert TAMPERED in str(info.value)
    PartitionServer(tampered_root, 0).stop()  # the untouched part still loads


def test_serve_exits_with_an_error_naming_the_tampered_file(tampered_root):
    out = subprocess.run([sys.executable, "-m", "pyg_dist", "serve", str(tampered_root),
                          "--part", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "checksum mismatch" in out.stderr and TAMPERED in out.stderr
    assert "ready" not in out.stdout


def test_no_verify_serves_the_tampered_part(tampered_root):
    with serve_part(tampered_root, 1, serve_args=["--no-verify"]) as (proc, endpoint):
        with RpcClient([endpoint], RpcConfig(timeout=30)) as client:
            assert client.call(0, "meta").result["part"] == 1
        assert proc.poll() is None


def test_a_crafted_feature_shape_is_refused_before_serving(cora2_root, tmp_path):
    """Failed on the old code: meta.json saying ``x`` has shape ``[1]`` made
    the server size a ``get`` at 4 bytes a row, so 100 rows of 1,433 floats
    (573 KB) passed a 100 KB reply limit; the server started and served."""
    root = tmp_path / "crafted"
    shutil.copytree(cora2_root, root)
    meta = json.loads((root / "meta.json").read_text())
    meta["node_types"][0]["features"]["x"]["shape"] = [1]
    (root / "meta.json").write_text(json.dumps(meta))
    out = subprocess.run([sys.executable, "-m", "pyg_dist", "serve", str(root), "--part", "0",
                          "--max-reply-bytes", "100000"],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 1 and "ready" not in out.stdout
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("pyg-dist serve: error:") and "tensor 'x'" in lines[0]
    assert "partition it again" in lines[0]


class _CreatesFile:
    """Unpickling an instance calls ``open(path, "w")``: creates the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickled_payloads_are_refused_and_never_unpickled(part0_server, part0, tmp_path):
    marker = tmp_path / "unpickled-marker"
    payload = pickle.dumps(_CreatesFile(str(marker)), protocol=pickle.HIGHEST_PROTOCOL)
    pickle.loads(pickle.dumps(_CreatesFile(str(tmp_path / "probe"))))
    assert (tmp_path / "probe").exists()  # the payload really would create a file
    padded = payload + bytes(-len(payload) % 8)
    plain = pickle.dumps({"op": "get", "args": {"attrs": ["x"]}})
    requests = {
        "pickle as header": [payload],
        "pickled dict as header": [plain],
        "pickle after a valid header": [header(1, "get", {"groups": [{"attrs": ["x"]}]}), payload],
        "pickle as an int64 tensor frame": [
            header(2, "get", {"groups": [{"attrs": ["x"]}]},
                   [["int64", [len(padded) // 8]]]), padded],
        "pickle as a uint8 tensor frame": [
            header(3, "sample", {"edge_types": [None], "num_neighbors": 2},
                   [["uint8", [len(payload)]]]), payload],
        "pickle in the args": [header(4, "get", {"groups": [{"attrs": ["x"]}], "ids": payload})],
        "pickle as the op": [msgpack.packb({"version": PROTOCOL_VERSION, "id": 5,
                                            "op": payload[:60]})],
        "pickle as a dtype name": [header(6, "get", {"groups": [{"attrs": ["x"]}]},
                                          [["pickle", [len(payload)]]]), payload],
    }
    proc, endpoint = part0_server
    with RawDealer(endpoint, timeout=30) as dealer:
        for name, frames in requests.items():
            head, tensors = dealer.request(frames)
            assert head["status"] == "error", name
            assert head["error"]["type"] in {"ProtocolError", "StoreError"}, (name, head)
            assert tensors == [], name
        reply = dealer.call(99, "get", {"groups": [{"attrs": ["x"]}]}, [part0.node_ids[:3]])
        assert torch.equal(reply.tensors[0], part0.node_features["x"][:3])
    assert proc.poll() is None
    assert not marker.exists()
