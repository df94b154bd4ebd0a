"""Every operation of real server processes returns exactly what the
partition on disk holds (compared with the reader and with Cora itself)."""

from __future__ import annotations

import pytest
import torch
from support.threads import run_in_threads

from pyg_dist.rpc import PROTOCOL_VERSION, RpcClient


@pytest.fixture(scope="module")
def client(cora_cluster):
    with RpcClient(cora_cluster.endpoints) as c:
        yield c


@pytest.fixture(scope="module")
def parts(cora_reader):
    return [cora_reader.load_part(k) for k in range(cora_reader.num_parts)]


def _segment(part, global_id):
    local = int(torch.searchsorted(part.node_ids, torch.tensor(global_id)))
    lo, hi = int(part.indptr[local]), int(part.indptr[local + 1])
    return part.indices[lo:hi], part.edge_ids[lo:hi]


def test_meta_matches_meta_json_and_book(client, cora_reader, parts):
    for k in range(2):
        reply = client.call(k, "meta")
        r = reply.result
        assert (r["version"], r["part"], r["num_parts"]) == (PROTOCOL_VERSION, k, 2)
        assert (r["num_nodes"], r["num_edges"]) == (cora_reader.num_nodes,
                                                   cora_reader.num_edges)
        assert r["num_local_nodes"] == parts[k].node_ids.numel()
        assert r["num_local_edges"] == parts[k].indices.numel()
        specs = cora_reader.node_feature_specs(None)
        assert {n: {"dtype": s["dtype"], "shape": s["shape"]} for n, s in r["features"].items()} \
            == specs
        assert r["features"]["x"]["size"] == [2708, 1433]
        assert torch.equal(reply.tensors[0], cora_reader.book.to_tensor())
    assert client.call(0, "meta").result["graph"] == client.call(1, "meta").result["graph"]


def test_get_returns_the_rows_on_disk_in_request_order(client, parts):
    gen = torch.Generator().manual_seed(0)
    for k, part in enumerate(parts):
        pick = torch.randint(0, part.node_ids.numel(), (300,), generator=gen)  # with repeats
        ids = part.node_ids[pick]
        reply = client.call(k, "get",
                            {"groups": [{"group": None, "attrs": ["x", "y", "train_mask"]}]}, [ids])
        assert reply.result == {"groups": 1}
        for name, got in zip(["x", "y", "train_mask"], reply.tensors):
            want = part.node_features[name][pick]
            assert got.dtype == want.dtype and torch.equal(got, want)


def test_get_matches_the_original_graph(client, cora_data, cora_reader):
    ids = torch.arange(cora_data.num_nodes)
    for k, part_ids, _ in cora_reader.book.split(ids):
        reply = client.call(k, "get", {"groups": [{"attrs": ["x", "y"]}]}, [part_ids])
        assert torch.equal(reply.tensors[0], cora_data.x[part_ids])
        assert torch.equal(reply.tensors[1], cora_data.y[part_ids])


def test_full_fanout_sample_returns_every_in_edge_in_csc_order(client, parts):
    for k, part in enumerate(parts):
        seeds = part.node_ids[::7]
        counts, nbrs, eids = client.call(k, "sample", {"edge_types": [None], "num_neighbors": -1},
                                         [seeds]).tensors
        at = 0
        for seed, count in zip(seeds.tolist(), counts.tolist()):
            want_nbrs, want_eids = _segment(part, seed)
            assert torch.equal(nbrs[at:at + count], want_nbrs)
            assert torch.equal(eids[at:at + count], want_eids)
            at += count
        assert at == nbrs.numel() == eids.numel()


@pytest.mark.parametrize("replace", [False, True])
def test_finite_fanout_samples_real_edges_reproducibly(client, parts, cora_data, replace):
    part = parts[1]
    seeds = part.node_ids[:400]
    args = {"edge_types": [None], "num_neighbors": 3, "replace": replace, "seed": 1234}
    counts, nbrs, eids = client.call(1, "sample", args, [seeds]).tensors
    # Every sampled (neighbour, edge id) is a real edge into its seed.
    dst = torch.repeat_interleave(seeds, counts)
    assert torch.equal(cora_data.edge_index[0, eids], nbrs)
    assert torch.equal(cora_data.edge_index[1, eids], dst)
    degrees = torch.tensor([_segment(part, s)[0].numel() for s in seeds.tolist()])
    if replace:
        assert torch.equal(counts, torch.where(degrees > 0, 3, 0))
    else:
        assert torch.equal(counts, degrees.clamp(max=3))
        pairs = dst * cora_data.edge_index.size(1) + eids
        assert pairs.unique().numel() == pairs.numel()
    again = client.call(1, "sample", args, [seeds]).tensors
    assert all(torch.equal(a, b) for a, b in zip(again, (counts, nbrs, eids)))
    other = client.call(1, "sample", {**args, "seed": 99}, [seeds]).tensors
    assert not torch.equal(other[2], eids)


def test_sizes_report_whole_graph_shapes(client, cora_data):
    result = client.call(0, "sizes").result
    assert result["sizes"]["x"] == list(cora_data.x.shape)
    assert result["sizes"]["y"] == [cora_data.num_nodes]
    assert result["dtypes"]["x"] == "float32"


def test_edge_index_of_both_parts_is_exactly_the_original_graph(client, cora_data):
    num_edges = cora_data.edge_index.size(1)
    seen = torch.zeros(num_edges, dtype=torch.long)
    for k in range(2):
        row, col, eids = client.call(k, "edge_index", {"edge_type": None}).tensors
        assert torch.equal(cora_data.edge_index[0, eids], row)
        assert torch.equal(cora_data.edge_index[1, eids], col)
        seen[eids] += 1
    assert bool((seen == 1).all())


def test_eight_threads_with_64_requests_in_flight_get_correct_answers(client, parts):
    def worker(t):
        gen = torch.Generator().manual_seed(t)
        calls = []
        for i in range(64):
            k = (t + i) % 2
            pick = torch.randint(0, parts[k].node_ids.numel(), (1 + i,), generator=gen)
            ids = parts[k].node_ids[pick]
            if i % 2:
                fut = client.call_async(k, "get", {"groups": [{"attrs": ["x", "y"]}]}, [ids])
            else:
                fut = client.call_async(k, "sample", {"edge_types": [None], "num_neighbors": -1},
                                        [ids])
            calls.append((k, pick, ids, i % 2, fut))
        for k, pick, ids, is_get, fut in calls:
            reply = fut.result(timeout=60)
            if is_get:
                assert torch.equal(reply.tensors[0], parts[k].node_features["x"][pick])
                assert torch.equal(reply.tensors[1], parts[k].node_features["y"][pick])
            else:
                want = [_segment(parts[k], s)[1] for s in ids.tolist()]
                assert torch.equal(reply.tensors[2], torch.cat(want))

    run_in_threads(worker, 8)
