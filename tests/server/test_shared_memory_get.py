"""``get`` into a client's shared memory segment, against a real server
process on this host: rows land where the reply says, every malformed or
foreign segment gets a ``SharedMemoryError`` reply, and the server keeps
serving."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch
from support.rawzmq import RawDealer
from support.shm_files import segment_files

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc import shm as shared_memory
from pyg_dist.rpc.shm import HEADER_BYTES, SHM_DIR, Segment
from pyg_dist.rpc.wire_format import ErrorReply

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
    assert seg.path is None  # its descriptor is closed; it never had a file


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
    assert _has_no_file(segment)  # memfd: nothing in /dev/shm, ever
    offsets = [o for _, _, o in reply.shm]
    assert offsets == shared_memory.layout([5 * 1433 * 4, 5 * 8])[0]
    x, y = _rows(segment, offsets, 5)
    assert torch.equal(x, part0.node_features["x"][local])
    assert torch.equal(y, part0.node_features["y"][local])

    # Once mapped, the name alone is enough, and the mapping is live.
    segment.announce()
    assert segment.path is None  # the client let go of its descriptor
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
        "closed descriptor": ({**good, "fd": 1 << 20}, "cannot open"),
        "another descriptor": ({**good, "fd": 0}, "does not hold it"),
        "fd not an int": ({**good, "fd": "3"}, "'shm.fd'"),
        "no pid": ({k: v for k, v in good.items() if k != "pid"}, "names no process"),
        "wrong size": ({**good, "size": segment.size * 2}, "is not a segment of"),
        "wrong token": ({**good, "token": "00" * 16}, "does not hold the token"),
        "token not hex": ({**good, "token": "zz" * 16}, "hex digits"),
        "size not an int": ({**good, "size": "big"}, "'shm.size'"),
        "drop not a list": ({**good, "drop": "all"}, "'shm.drop'"),
        "drop without tokens": ({**good, "drop": [segment.name]}, "'shm.drop'"),
    }


BAD_SPECS = ["not a map", "no token", "name with a path", "name with a newline", "missing file",
             "closed descriptor", "another descriptor", "fd not an int", "no pid",
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


def _has_no_file(segment) -> bool:
    return os.path.join(SHM_DIR, segment.name) not in segment_files()


def _unsealed(sealable: bool, seals: int = 0):
    """A segment-shaped memfd holding a token, sealed only with ``seals``."""
    seg = Segment(1 << 20)  # for a valid name and token; its own memory unused
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealable else 0)
    fd = os.memfd_create(seg.name, flags)
    os.ftruncate(fd, HEADER_BYTES + seg.size)
    os.pwrite(fd, seg.token, 0)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return seg, fd


@pytest.mark.parametrize("seals", ["never sealable", "sealable, not sealed", "grow sealed"])
def test_only_memory_sealed_against_shrinking_is_mapped(dealer, part0, seals):
    """Memory its client (or anyone holding it) could truncate under a
    worker writing into it would kill the server with SIGBUS."""
    seg, fd = _unsealed(seals != "never sealable",
                        fcntl.F_SEAL_GROW if seals == "grow sealed" else 0)
    try:
        spec = {**seg.spec(), "fd": fd}
        reply = dealer.call(25, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]],
                            shm=spec)
        assert isinstance(reply, ErrorReply) and reply.type == "SharedMemoryError"
        assert "not sealed against shrinking" in reply.message, reply.message
        os.ftruncate(fd, 0)  # what the seal forbids, done to memory never mapped
        good = dealer.call(26, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]])
        assert torch.equal(good.tensors[0], part0.node_features["y"][:2])
    finally:
        os.close(fd)
        seg.close()


def test_a_file_in_dev_shm_is_not_mapped(dealer, part0, segment):
    """The segments of earlier versions (files in /dev/shm, which cannot be
    sealed) are refused: a descriptor must be a memfd of the named segment."""
    path = os.path.join(SHM_DIR, segment.name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, HEADER_BYTES + segment.size)
        os.pwrite(fd, segment.token, 0)
        spec = {**segment.spec(), "fd": fd}
        reply = dealer.call(27, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]],
                            shm=spec)
        assert isinstance(reply, ErrorReply) and "does not hold it" in reply.message
    finally:
        os.close(fd)
        os.unlink(path)


def test_a_client_sending_an_absurd_pid_breaks_nobody(dealer, part0, segment):
    spec = {**segment.spec(), "pid": 1 << 40}
    reply = dealer.call(26, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:2]], shm=spec)
    assert isinstance(reply, ErrorReply) and "names no process" in reply.message
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
            assert "cannot open segment" in reply.message, reply.message
            assert not _server_maps(cora_cluster, seg.name)  # nothing pinned
            assert _has_no_file(seg)  # nor anything left in /dev/shm
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
    """Segments are memfd: none of this test's ever has a file in /dev/shm
    (only its own are checked: another run on the machine may have some)."""
    seg = Segment(1 << 20)
    unmapped = Segment(1 << 20)  # never sent
    try:
        assert _has_no_file(seg) and _has_no_file(unmapped)
        dealer.call(9, "get", {"groups": [{"attrs": ["y"]}]}, [part0.node_ids[:3]], shm=seg.spec())
        seg.announce()
        assert _has_no_file(seg) and seg.path is None
    finally:
        seg.close()
        unmapped.close()
    assert _has_no_file(seg) and _has_no_file(unmapped) and unmapped.path is None


_DYING_CLIENT = """
import os, sys, torch
import zmq
from pyg_dist.rpc import wire_format
from pyg_dist.rpc.shm import Segment
endpoint, node = sys.argv[1], int(sys.argv[2])
sock = zmq.Context().socket(zmq.DEALER)
sock.connect(endpoint)
seg = Segment(1 << 20)
sock.send_multipart(wire_format.encode_request(0, "get", {"groups": [{"attrs": ["y"]}]},
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


def test_segments_that_name_no_owner_here_are_refused():
    """A client that names no pid, or one of another pid namespace, cannot
    be opened through /proc/PID/fd (nor seen to exit): refused, not mapped."""
    from pyg_dist.rpc.shm import AttachedSegments

    attached = AttachedSegments()
    seg = Segment(1 << 20)
    try:
        for spec in ({k: v for k, v in seg.spec().items() if k not in ("pid", "pid_ns")},
                     {**seg.spec(), "pid_ns": "pid:[1]"}):
            with pytest.raises(SharedMemoryError, match="names no process"):
                attached.payload(spec, 8)
        assert len(attached) == 0
        attached.payload(seg.spec(), 8)  # its own pid: mapped
        assert len(attached) == 1
    finally:
        attached.close()
        seg.close()
