"""Embedding tables survive their server: a ``pyg-dist serve`` process
killed with SIGKILL comes back with its last checkpoint (the test counts the
steps lost: exactly those after it), one stopped with SIGTERM loses nothing;
the trainer sees a typed error in between and goes on with the restarted
server. A damaged checkpoint is refused; ``save``/``load`` carry a table
through files."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from embedding_support import serving
from support.servers import serve_part, serve_parts
from support.waiting import wait_until

import pyg_dist
from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import EmbeddingError, RpcError
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.connect import connect

DIM = 4


def _step(emb: DistEmbedding, opt, ids: torch.Tensor) -> None:
    opt.zero_grad()
    emb(ids).sum().backward()  # gradient 1 per row: SGD subtracts lr from each value
    opt.step()
    opt.flush()


@pytest.mark.slow
def test_sigkill_loses_the_steps_since_the_checkpoint_and_sigterm_none(cora_roots, tmp_path):
    root, store = cora_roots[2], tmp_path / "emb"
    args = ["--embeddings-dir", str(store), "--checkpoint-every", "0"]
    config = RpcConfig(timeout=10.0, retries=0)
    with serve_parts(root, serve_args=args) as cluster:
        victim, address = cluster.processes[1], cluster.endpoints[1]
        fs, gs = connect(cluster.endpoints, config)
        try:
            owned = fs.router.book_of(None).owned(1)[:5]
            emb = DistEmbedding((fs, gs), "kept", DIM, init="zeros")
            opt = pyg_dist.optim.SGD([emb], lr=1.0)
            for _ in range(3):
                _step(emb, opt, owned)
            fs.router.client.call(1, "emb_checkpoint")  # 3 steps on disk
            for _ in range(2):
                _step(emb, opt, owned)
            assert torch.equal(emb.read(owned), torch.full((5, DIM), -5.0))
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=10) == -signal.SIGKILL
            with pytest.raises(RpcError):  # typed, naming the lost server
                _step(emb, opt, owned)
            with serve_part(root, 1, serve_args=[*args, "--bind", address]) as (proc, again):
                assert again == address
                # The two steps after the checkpoint (and the failed one) are lost.
                assert torch.equal(emb.read(owned), torch.full((5, DIM), -3.0))
                _step(emb, opt, owned)  # training goes on
                assert torch.equal(emb.read(owned), torch.full((5, DIM), -4.0))
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=60) == 0
            with serve_part(root, 1, serve_args=[*args, "--bind", address]):
                assert torch.equal(emb.read(owned), torch.full((5, DIM), -4.0))  # none lost
        finally:
            fs.close()


def test_periodic_checkpoints_and_a_damaged_one_is_refused(cora_roots, tmp_path):
    root = cora_roots[2]
    with serving(root, 2, embeddings_dir=tmp_path, checkpoint_every=0.2) as servers:
        fs, gs = connect([s.endpoint for s in servers])
        with fs:
            emb = DistEmbedding((fs, gs), "periodic", DIM, init="uniform")
            opt = pyg_dist.optim.SparseAdam([emb], lr=0.1)
            _step(emb, opt, torch.arange(50))
            expected = emb.read(torch.arange(fs.num_nodes))
            index = tmp_path / "part-0" / "embeddings.json"
            wait_until(lambda: index.exists() and json.loads(index.read_text())[
                "tables"].get("periodic", {}).get("updates") == 1, timeout=30,
                what="a periodic checkpoint of the pushed table")
            entry = json.loads(index.read_text())["tables"]["periodic"]
            assert entry["state"] == ["adam"] and entry["dim"] == DIM
    # Stopped cleanly: both parts come back with rows and Adam's moments.
    with serving(root, 2, embeddings_dir=tmp_path, read_only=True) as servers:
        fs, gs = connect([s.endpoint for s in servers])
        with fs:
            emb = DistEmbedding((fs, gs), "periodic", DIM, init="uniform")
            assert torch.equal(emb.read(torch.arange(fs.num_nodes)), expected)
        assert set(servers[0].ops.embeddings.tables["periodic"].state) == {"adam"}
    data = tmp_path / "part-0" / entry["file"]
    data.write_bytes(data.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(EmbeddingError, match="sha256 differs"):
        with serving(root, 1, embeddings_dir=tmp_path):
            pass


def test_save_and_load_carry_a_table_through_files(served, tmp_path):
    fs, gs = served[3]
    emb = DistEmbedding((fs, gs), "saved", DIM, init="uniform", seed=1)
    weight = emb.read(torch.arange(fs.num_nodes))
    path = emb.save(tmp_path)
    assert path == tmp_path / "saved.safetensors"
    other = DistEmbedding((fs, gs), "loaded", DIM, init="zeros")
    other.load(tmp_path, name="saved")
    assert torch.equal(other.read(torch.arange(fs.num_nodes)), weight)
    (tmp_path / "saved.json").write_text(
        (tmp_path / "saved.json").read_text().replace('"sha256": "', '"sha256": "0'))
    with pytest.raises(EmbeddingError, match="does not verify"):
        other.load(tmp_path, name="saved")
    with pytest.raises(EmbeddingError, match="cannot load"):
        other.load(tmp_path / "nowhere")
