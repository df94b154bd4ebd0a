"""pyg_dist.datasets: Cora and IMDB from the graphdatascience wheel,
FakeDataset and FakeHeteroDataset graphs, and the module:callable resolver."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets import cora, fake, fake_hetero, imdb, load_dataset
from pyg_dist.errors import DatasetResolveError


def test_cora_has_the_planetoid_shape(cora_data):
    d = cora_data
    assert d.num_nodes == 2708 and d.num_edges == 10556
    assert d.x.shape == (2708, 1433) and d.x.dtype == torch.float32
    assert d.y.dtype == torch.int64 and int(d.y.max()) + 1 == 7
    assert d.is_undirected() and not d.has_self_loops()
    assert set(d.x.unique().tolist()) == {0.0, 1.0}


def test_cora_masks_are_planetoid_style_and_deterministic(cora_data):
    d = cora_data
    assert int(d.train_mask.sum()) == 140 and int(d.val_mask.sum()) == 500
    assert int(d.test_mask.sum()) == 1000
    assert torch.bincount(d.y[d.train_mask]).tolist() == [20] * 7
    assert not bool((d.train_mask & d.val_mask).any() or (d.train_mask & d.test_mask).any()
                    or (d.val_mask & d.test_mask).any())
    again = cora()
    for key in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(again[key], d[key])
    assert not torch.equal(cora(seed=1).train_mask, d.train_mask)


def test_cora_does_not_import_graphdatascience():
    code = textwrap.dedent("""
        import sys
        from pyg_dist.datasets import cora
        cora()
        assert "graphdatascience" not in sys.modules, "graphdatascience was imported"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_fake_is_deterministic_with_masks():
    a, b = fake(num_nodes=200, seed=4), fake(num_nodes=200, seed=4)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    assert a.train_mask.dtype == torch.bool and int(a.train_mask.sum()) > 0
    assert int(a.val_mask.sum()) == a.num_nodes // 10
    assert not torch.equal(fake(num_nodes=200, seed=5).edge_index, a.edge_index)
    state = torch.get_rng_state()
    fake(num_nodes=50)
    assert torch.equal(state, torch.get_rng_state()), "the global RNG must be untouched"


def test_load_dataset_resolves_module_callable():
    data = load_dataset("pyg_dist.datasets:fake")
    assert isinstance(data, Data) and data.num_nodes > 0


@pytest.mark.parametrize("spec, match", [
    ("pyg_dist.datasets", "module:callable"),
    (":cora", "module:callable"),
    ("no_such_module_xyz:cora", "cannot import"),
    ("pyg_dist.datasets:no_such_thing", "no attribute"),
    ("pyg_dist.datasets:CORA_NUM_NODES", "int"),
    ("pyg_dist.datasets:planetoid_masks", "raised TypeError"),
])
def test_load_dataset_errors(spec, match):
    with pytest.raises(DatasetResolveError, match=match):
        load_dataset(spec)


@pytest.fixture(scope="module")
def imdb_data():
    return imdb()


def test_imdb_has_the_documented_counts(imdb_data):
    d = imdb_data
    assert {t: d[t].num_nodes for t in d.node_types} == {
        "movie": 4661, "director": 2270, "actor": 5841}
    assert {t: d[t].num_edges for t in d.edge_types} == {
        ("director", "directed_in", "movie"): 4661, ("actor", "acted_in", "movie"): 13983,
        ("movie", "rev_directed_in", "director"): 4661,
        ("movie", "rev_acted_in", "actor"): 13983}
    for node_type in d.node_types:
        assert d[node_type].x.shape == (d[node_type].num_nodes, 1256)
        assert d[node_type].x.dtype == torch.float32
    y = d["movie"].y
    assert int((y >= 0).sum()) == 2939 and sorted(y[y >= 0].unique().tolist()) == [0, 1, 2]
    masks = [d["movie"][m] for m in ("train_mask", "val_mask", "test_mask")]
    assert sum(int(m.sum()) for m in masks) == 2939
    assert not bool((masks[0] & masks[1]).any() | (masks[0] & masks[2]).any())
    assert bool((y[masks[0]] >= 0).all())
    # Every movie has exactly one director (one directed_in edge each).
    dst = d["director", "directed_in", "movie"].edge_index[1]
    assert torch.equal(torch.bincount(dst, minlength=4661), torch.ones(4661, dtype=torch.long))
    rev = d["movie", "rev_acted_in", "actor"].edge_index
    assert torch.equal(rev.flip(0), d["actor", "acted_in", "movie"].edge_index)


def test_fake_hetero_is_deterministic_and_resolvable():
    a, b = fake_hetero(num_nodes=100, seed=2), fake_hetero(num_nodes=100, seed=2)
    assert a.node_types == b.node_types and a.edge_types == b.edge_types
    for et in a.edge_types:
        assert torch.equal(a[et].edge_index, b[et].edge_index)
    assert int(a["v0"].train_mask.sum()) > 0
    state = torch.get_rng_state()
    data = load_dataset("pyg_dist.datasets:fake_hetero")
    assert isinstance(data, HeteroData) and data["v0"].num_nodes > 0
    assert torch.equal(state, torch.get_rng_state()), "the global RNG must be untouched"
def test_lastfm_is_a_temporal_graph_of_tag_events():
    from pyg_dist.datasets import lastfm, lastfm_events

    data = lastfm()
    assert data.num_nodes == 19914 and data.edge_index.size(1) == 2 * 186479
    assert int(data.x[:, 0].sum()) == 1892 and int(data.x[:, 1].sum()) == 18022
    user, artist, time = lastfm_events(data)
    assert user.numel() == 186479 and bool((user < 1892).all() and (artist >= 1892).all())
    assert bool((time[1:] >= time[:-1]).all())  # in time order
    half = user.numel()  # the second half: the same events reversed
    assert torch.equal(data.edge_index[:, half:], data.edge_index[:, :half].flip(0))
    assert data.edge_time.dtype == torch.int64 and data.edge_weight.min() >= 1.0
    # Tags on artists the user played weigh more than 1: 39% of the events.
    assert 0.35 < float((data.edge_weight[:half] > 1).float().mean()) < 0.45
    small = lastfm(max_events=100)
    assert small.edge_index.size(1) == 200 and torch.equal(lastfm_events(small)[2],
                                                           time[:100])
