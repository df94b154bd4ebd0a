"""``get`` into a client's shared memory segment, against a real server
process on this host: rows land where the reply says, every malformed or
foreign segment gets a ``SharedMemoryError`` reply, and the server keeps
serving."""

from __future__ import annotations

import glob
import os

import pytest
import torch
from support.rawzmq import RawDealer

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc import shm as shared_memory
from pyg_dist.rpc.protocol import ErrorReply
from pyg_dist.rpc.shm import SHM_DIR, Segment

pytestmark = pytest.mark.skipif(shared_memory.host_id() is None,
                                reason="this host has no usable /dev/shm")


@pytest.fixture(scope="module")
def part0(cora_reader):
    return cora_reader.load_part(0)


@pytest.fixture
def dealer(cora_cluster):
    with RawDealer(cora_cluster.endpoints[0]) as raw:
        yield raw


@pytest.fixture
def segment():
    seg = Segment(1 << 20)
    try:
        yield seg
    finally:
        seg.close()
    assert not os.path.exists(seg.path)


def _rows(segment, offsets, n):
    x = shared_memory.view(segment.payload, offsets[0], torch.float32, (n, 1433))
    y = shared_memory.view(segment.payload, offsets[1], torch.int64, (n,))
    return x, y


def test_meta_reports_this_host(dealer):
    reply = dealer.call(1, "meta")
    assert reply.result["host"] == shared_memory.host_id()


def test_get_writes_rows_into_the_segment(dealer, part0, segment):
    local = torch.tensor([7, 0, 7, 120, 33])
    ids = part0.node_ids[local]
    reply = dealer.call(2, "get", {"groups": [{"attrs": ["x", "y"]}]}, [ids], shm=segment.spec())
    assert not isinstance(reply, ErrorReply), reply
    assert reply.tensors == []  # nothing travelled over the socket
    assert not os.path.exists(segment.path)  # the server unlinked it once mapped
    offsets = [o for _, _, o in reply.shm]
    assert offsets == shared_memory.layout([5 * 1433 * 4, 5 * 8])[0]
    x, y = _rows(segment, offsets, 5)
    assert torch.equal(x, part0.node_features["x"][local])
    assert torch.equal(y, part0.node_features["y"][local])

    # Once mapped, the name alone is enough, and the mapping is live.
    segment.announce()
    segment.payload.zero_()
    reply = dealer.call(3, "get", {"groups": [{"attrs": ["x", "y"]}]}, [ids[:2]],
                        shm=segment.spec())
    assert "size" not in segment.spec()  # name and token only, once mapped
    x, y = _rows(segment, [o for _, _, o in reply.shm], 2)
    assert torch.equal(x, part0.node_features["x"][local[:2]])

    # release unmaps it; the next request naming it is refused, not served.
    assert dealer.call(4, "release", {"segments": [segment.key]}).result == {"released": 1}
    reply = dealer.call(5, "get", {"groups": [{"attrs": ["x"]}]}, [ids], shm=segment.spec())
    assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError"
    assert "not mapped here" in reply.message


def _bad_specs(segment):
    good = segment.spec()
    other = Segment(1 << 20)
    other.close()  # a well-formed name whose file is gone
    return {
        "not a map": ("x", "must be a map"),
        "no token": ({"name": segment.name, "size": segment.size}, "[name, token]"),
        "name with a path": ({**good, "name": "../etc/passwd"}, "does not match"),
        "name with a newline": ({**good, "name": segment.name + "\n"}, "does not match"),
        "missing file": ({**good, "name": other.name}, "cannot open"),
        "wrong size": ({**good, "size": segment.size * 2}, "is not a segment of"),
        "wrong token": ({**good, "token": "00" * 16}, "does not hold the token"),
        "token not hex": ({**good, "token": "zz" * 16}, "hex digits"),
        "size not an int": ({**good, "size": "big"}, "'shm.size'"),
        "drop not a list": ({**good, "drop": "all"}, "'shm.drop'"),
        "drop without tokens": ({**good, "drop": [segment.name]}, "'shm.drop'"),
    }


BAD_SPECS = ["not a map", "no token", "name with a path", "name with a newline", "missing file",
             "wrong size", "wrong token", "token not hex", "size not an int",
             "drop not a list", "drop without tokens"]


@pytest.mark.parametrize("case", BAD_SPECS)
def test_bad_segments_get_error_replies(dealer, part0, segment, case):
    spec, fragment = _bad_specs(segment)[case]
    reply = dealer.call(6, "get", {"groups": [{"attrs": ["x"]}]}, [part0.node_ids[:3]], shm=spec)
    assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError", reply
    assert fragment in reply.message
    good = dealer.call(7, "get", {"groups": [{"attrs": ["x"]}]}, [part0.node_ids[:3]])
    assert torch.equal(good.tensors[0], part0.node_features["x"][:3])


def test_a_segment_is_used_only_with_its_own_token(dealer, part0, segment):
    ids = part0.node_ids[:4]
    assert not isinstance(dealer.call(20, "get", {"groups": [{"attrs": ["y"]}]}, [ids],
                                      shm=segment.spec()),
                          ErrorReply)
    segment.announce()
    segment.payload[:64].fill_(7)
    # Its name is no secret (/dev/shm can be listed); without the token
    # nobody can make the server write into it, or unmap it.
    forged = {"name": segment.name, "token": "ab" * 16}
    reply = dealer.call(21, "get", {"groups": [{"attrs": ["y"]}]}, [ids], shm=forged)
    assert isinstance(reply, ErrorReply) and "is not its own" in reply.message
    assert bool((segment.payload[:64] == 7).all())
    assert dealer.call(22, "release", {"segments": [[segment.name, "ab" * 16]]}
                       ).result == {"released": 0}
    other = Segment(1 << 20)
    try:
        spec = {**other.spec(), "drop": [[segment.name, "ab" * 16]]}
        assert not isinstance(dealer.call(23, "get", {"groups": [{"attrs": ["y"]}]}, [ids],
                                          shm=spec),
                              ErrorReply)
    finally:
        other.close()
    reply = dealer.call(24, "get", {"groups": [{"attrs": ["y"]}]}, [ids], shm=segment.spec())
    assert not isinstance(reply, ErrorReply), reply  # still mapped, still served


@pytest.mark.parametrize("change", ["group-readable", "second link"])
def test_only_private_files_with_one_link_are_mapped(dealer, part0, segment, change):
    link = segment.path + "-link"
    if change == "group-readable":
        os.chmod(segment.path, 0o640)
    else:
        os.link(segment.path, link)
    try:
        reply = dealer.call(25, "get", {"groups": [{"attrs": ["y"]}]},
                            [part0.node_ids[:2]], shm=segment.spec())
        assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError"
        assert "mode 0600 and one link" in reply.message
    finally:
        if os.path.exists(link):
            os.unlink(link)


def test_a_client_sending_an_absurd_pid_breaks_nobody(dealer, part0, segment):
    spec = {**segment.spec(), "pid": 1 << 40}
    assert not isinstance(dealer.call(26, "get", {"groups": [{"attrs": ["y"]}]},
                                      [part0.node_ids[:2]], shm=spec), ErrorReply)
    other = Segment(1 << 20)  # the next mapping looks for dead owners first
    try:
        reply = dealer.call(27, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]],
                            shm=other.spec())
        assert not isinstance(reply, ErrorReply), reply
    finally:
        other.close()


def _server_maps(cluster, name: str) -> bool:
    with open(f"/proc/{cluster.processes[0].pid}/maps") as maps:
        return name in maps.read()


def test_a_client_naming_another_live_process_as_owner_is_refused(cora_cluster, dealer,
                                                                  part0):
    """Segments are unmapped when their owner exits; a client that named a
    live process which does not map them (here this test's parent) would pin
    them for as long as that one lives (issue 31: /dev/shm +1.1 GiB)."""
    pinned = []
    try:
        for req_id in range(3):
            seg = Segment(1 << 20)
            pinned.append(seg)
            spec = {**seg.spec(), "pid": os.getppid()}
            reply = dealer.call(40 + req_id, "get", {"groups": [{"attrs": ["y"]}]},
                                [part0.node_ids[:2]],
                                shm=spec)
            assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError"
            assert "does not map it" in reply.message, reply.message
            assert not _server_maps(cora_cluster, seg.name)  # nothing pinned
            assert not os.path.exists(seg.path)  # nor left in /dev/shm
        honest = Segment(1 << 20)
        pinned.append(honest)
        reply = dealer.call(50, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]],
                            shm=honest.spec())
        assert not isinstance(reply, ErrorReply), reply
        assert _server_maps(cora_cluster, honest.name)
        assert dealer.call(51, "release", {"segments": [honest.key]}).result["released"] == 1
    finally:
        for seg in pinned:
            seg.close()


def test_reply_bigger_than_the_segment_is_refused(dealer, part0, segment):
    ids = part0.node_ids[:200]  # 200 rows of 1433 float32: more than 1 MiB
    reply = dealer.call(8, "get", {"groups": [{"attrs": ["x"]}]}, [ids], shm=segment.spec())
    assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError"
    assert "segment" in reply.message and str(segment.size) in reply.message


def test_no_segment_file_is_left_behind(dealer, part0):
    before = set(glob.glob(os.path.join(SHM_DIR, "pyg-dist-shm-*")))
    seg = Segment(1 << 20)
    dealer.call(9, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:3]], shm=seg.spec())
    seg.announce()
    seg.close()
    unmapped = Segment(1 << 20)  # never sent: its file goes on close
    unmapped.close()
    assert set(glob.glob(os.path.join(SHM_DIR, "pyg-dist-shm-*"))) == before


_DYING_CLIENT = """
import os, sys, torch
import zmq
from pyg_dist.rpc import protocol
from pyg_dist.rpc.shm import Segment
endpoint, node = sys.argv[1], int(sys.argv[2])
sock = zmq.Context().socket(zmq.DEALER)
sock.connect(endpoint)
seg = Segment(1 << 20)
sock.send_multipart(protocol.encode_request(0, "get", {"groups": [{"attrs": ["y"]}]},
                                            [torch.tensor([node])],
                                            shm=seg.spec()))
sock.recv_multipart()
seg.announce()
print(seg.name, seg.token.hex(), flush=True)
os._exit(0)  # no release, no close: the server is left holding the mapping
"""


def test_segments_of_a_client_that_exited_are_unmapped(cora_cluster, dealer, part0, segment):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _DYING_CLIENT, cora_cluster.endpoints[0],
                           str(int(part0.node_ids[0]))], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    name, token = proc.stdout.split()[-2:]
    orphan = {"name": name, "token": token}
    # Still mapped: its key alone is served.
    reply = dealer.call(10, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:1]], shm=orphan)
    assert not isinstance(reply, ErrorReply), reply
    # The next segment the server maps makes it look for dead owners first.
    reply = dealer.call(11, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:1]],
                        shm=segment.spec())
    assert not isinstance(reply, ErrorReply), reply
    reply = dealer.call(12, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:1]], shm=orphan)
    assert isinstance(reply, ErrorReply) and "not mapped here" in reply.message
    # Ours (a live process) is still mapped.
    reply = dealer.call(13, "get", {"groups": [{"attrs": ["y"]}]},
                        [part0.node_ids[:1]], shm=segment.spec())
    assert not isinstance(reply, ErrorReply), reply


def test_segments_without_a_known_owner_have_a_bound_of_their_own():
    """A client that names no pid (or one in another pid namespace) cannot
    be seen to exit: its segments are pushed out past their own bound, and
    those of clients that named their pid are not."""
    from pyg_dist.rpc.shm import AttachedSegments

    attached = AttachedSegments(max_ownerless_bytes=2 << 20)
    segments = [Segment(1 << 20) for _ in range(4)]
    try:
        owned = segments[0].spec()
        attached.payload(owned, 8)  # names this process, which maps it
        for seg in segments[1:]:
            spec = {k: v for k, v in seg.spec().items() if k not in ("pid", "pid_ns")}
            attached.payload(spec, 8)
        assert len(attached) == 3  # the owned one and the 2 newest without an owner
        keys = {"name": segments[1].name, "token": segments[1].token.hex()}
        with pytest.raises(SharedMemoryError, match="not mapped here"):
            attached.payload(keys, 8)
        attached.payload({"name": segments[0].name, "token": segments[0].token.hex()}, 8)
    finally:
        attached.close()
        for seg in segments:
            seg.close()
