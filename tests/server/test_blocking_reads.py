"""A store whose reads may wait on a disk (``reads_may_block``, as the
``mmap`` stores say) has every read served on a worker thread: the server's
I/O thread keeps answering other requests meanwhile. On a
part bigger than its host's memory, a peer's ``sample`` answered inline
held the I/O thread for the seconds its page faults took."""

from __future__ import annotations

import threading
from importlib.metadata import EntryPoint

import pytest
from support import stalling_store

from pyg_dist.errors import RpcTimeoutError
from pyg_dist.plugins import PluginRegistry
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.server import PartitionServer


def _registry() -> PluginRegistry:
    return PluginRegistry([
        EntryPoint("stalling", "support.stalling_store:stalling_feature_store",
                   "pyg_dist.feature_stores"),
        EntryPoint("stalling-unsaid", "support.stalling_store:unsaid_stalling_feature_store",
                   "pyg_dist.feature_stores"),
        EntryPoint("memory", "pyg_dist_plugins.stores.memory:memory_graph_store",
                   "pyg_dist.graph_stores"),
    ])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", ["stalling", "stalling-unsaid"])
def test_a_read_that_may_block_leaves_the_io_thread_free(cora2_root, cora_reader, store):
    stalling_store.RELEASE.clear()
    stalling_store.STARTED.clear()
    server = PartitionServer(cora2_root, 0, feature_store=store, registry=_registry(),
                             config=RpcConfig(workers=2))
    ready = threading.Event()
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"on_ready": lambda endpoint: ready.set()}, daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        ids = cora_reader.load_part(0, topology=False).node_ids[:3]  # a few bytes: inline-sized
        with RpcClient([server.endpoint], RpcConfig(timeout=30)) as client:
            pending = client.call_async(0, "get", {"groups": [{"attrs": ["x"]}]}, [ids])
            assert stalling_store.STARTED.wait(30)
            try:
                sizes = client.call(0, "sizes", {}, timeout=2)
                answered = True
            except RpcTimeoutError:
                answered = False
            finally:
                stalling_store.RELEASE.set()
            (x,) = pending.result(30).tensors
        assert x.shape[0] == 3
        # Said: the read waited on a worker and the next request was answered.
        # Unsaid: the read waited on the I/O thread, and so did everyone else.
        assert answered == (store == "stalling"), (store, answered)
        if answered:
            assert sizes.result["sizes"]
    finally:
        stalling_store.RELEASE.set()
        server.stop()
        thread.join(10)


def test_the_mmap_stores_say_their_reads_may_block(cora2_root, cora_reader):
    from pyg_dist_plugins.stores.memory import memory_feature_store, memory_graph_store
    from pyg_dist_plugins.stores.mmap import mmap_feature_store, mmap_graph_store

    assert mmap_feature_store(cora_reader, 0).reads_may_block
    assert mmap_graph_store(cora_reader, 0).reads_may_block
    assert not memory_feature_store(cora_reader, 0).reads_may_block
    assert not memory_graph_store(cora_reader, 0).reads_may_block
