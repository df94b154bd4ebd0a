"""``RemoteData``: the served graph seen like a PyG Data, accepted by the loader."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import pyg_dist
from pyg_dist.errors import StoreError


@pytest.fixture(scope="module")
def remote(served_cora):
    fs, gs = served_cora.get(2)
    return pyg_dist.RemoteData(stores=(fs, gs))


def test_sizes_and_attributes_match_the_local_graph(remote, cora_data):
    assert remote.num_nodes == cora_data.num_nodes
    assert remote.num_edges == cora_data.num_edges
    assert remote.num_features == remote.num_node_features == cora_data.num_features
    assert remote.num_classes == int(cora_data.y.max()) + 1
    for name in ("train_mask", "val_mask", "test_mask", "y", "x"):
        assert name in remote
        assert torch.equal(getattr(remote, name), getattr(cora_data, name)), name
    assert "x" in remote.keys() and "nope" not in remote
    local = {tuple(e) for e in cora_data.edge_index.t().tolist()}
    assert {tuple(e) for e in remote.edge_index.t().tolist()} == local


def test_masks_are_kept_wide_features_are_not(remote):
    assert remote.train_mask is remote.train_mask
    assert remote.x is not remote.x


def test_read_only_and_unknown_names(remote):
    with pytest.raises(AttributeError, match="no node attribute 'nope'"):
        remote.nope  # noqa: B018
    with pytest.raises(AttributeError, match="read-only"):
        remote.x = torch.zeros(1)
    with pytest.raises(StoreError):
        pyg_dist.RemoteData(stores=(object(), object()))


def test_loader_takes_remote_data_and_its_masks(remote, cora_data):
    loader = pyg_dist.DistNeighborLoader(remote, num_neighbors=[-1],
                                         input_nodes=remote.test_mask, batch_size=200)
    seen = torch.cat([batch.n_id[:batch.batch_size] for batch in loader])
    assert torch.equal(seen.sort().values, cora_data.test_mask.nonzero().view(-1))


def test_warns_when_world_size_has_no_process_group(remote, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.warns(RuntimeWarning, match="WORLD_SIZE=2 but torch.distributed"):
        pyg_dist.DistNeighborLoader(remote, num_neighbors=[2], batch_size=8)
    monkeypatch.setenv("WORLD_SIZE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pyg_dist.DistNeighborLoader(remote, num_neighbors=[2], batch_size=8)


def test_partition_cli_finds_a_module_in_the_current_directory(tmp_path):
    (tmp_path / "mygraph.py").write_text(textwrap.dedent("""
        import torch
        from torch_geometric.data import Data

        def load():
            edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
            return Data(x=torch.randn(4, 3), edge_index=edge_index, num_nodes=4)
        """))
    # The console script's sys.path starts at its bin directory, not the
    # current one: run the CLI's main from a script placed elsewhere.
    launcher = tmp_path / "bin" / "pyg-dist-test"
    launcher.parent.mkdir()
    launcher.write_text("import sys\nfrom pyg_dist.cli import main\nsys.exit(main())\n")
    out = subprocess.run([sys.executable, str(launcher), "partition", "mygraph:load",
                          str(tmp_path / "parts"), "-n", "2", "-p", "random", "--no-progress"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "parts" / "meta.json").exists()
