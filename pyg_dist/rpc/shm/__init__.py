"""Same-host shared memory for big replies, a transport of the RPC layer.

A caller of :meth:`RpcClient.call_async <pyg_dist.rpc.RpcClient.call_async>`
says how many bytes its reply's tensors take (``reply_bytes``); a handler
takes its outputs from its call context (:mod:`pyg_dist.rpc.context`).
Neither sees a segment: lending, mapping, views and releases happen here.

Modules: :mod:`~pyg_dist.rpc.shm.files` (segments (memfd), layout, views),
:mod:`~pyg_dist.rpc.shm.lending` (the client's pool per server),
:mod:`~pyg_dist.rpc.shm.lender` (the client's calls into lent memory),
:mod:`~pyg_dist.rpc.shm.attached` (the server's mappings),
:mod:`~pyg_dist.rpc.shm.serving` (serving a call into them, ``release``),
:mod:`~pyg_dist.rpc.shm.outputs` (a trainer's batch outputs lent to every
same-host server at once, written in place).

When a trainer and a partition server run on one machine, a ``get`` reply of
tens of MB crossing loopback TCP costs more CPU than gathering the rows did:
the server's kernel copies it into the socket, the trainer's kernel copies it
out again, and libzmq's I/O threads on both sides move it (about 20 core-ms
per 40 MB batch on two cores). Instead the trainer lends the server a segment
of shared memory and the server gathers the rows straight into it; the reply
carries only a header.

The trainer (client) owns every segment:

* :class:`SegmentPool` (one per server, per client) creates segments as
  anonymous shared memory (``memfd``, no file anywhere), reserves their
  pages up front (``posix_fallocate``: a full machine is a clean error now,
  not a ``SIGBUS`` in the server later), seals their size
  (``F_SEAL_SHRINK | F_SEAL_GROW``) and writes a random token into a header
  page. The first request that uses a segment names it, with its size, its
  token, the client's pid and the segment's descriptor; the server opens it
  through ``/proc/PID/fd/FD`` and the client closes the descriptor once it
  sees the answer. Nothing is left behind however a client ends: the memory
  goes when the client and every server mapping it let go. Segments are
  reused for later requests; at most ``limit_bytes`` of them exist per
  server.
* :class:`AttachedSegments` (one per server) opens a named segment, checks
  that it is a sealed memfd of the named process, that its size and token
  are what the client said (it really is the same memory, on the same
  host), and keeps it mapped, least recently used first out beyond a bound.
  A client that discards a segment tells the server with the ``drop`` list
  of its next request, or the ``release`` op (every
  :class:`~pyg_dist.rpc.RpcServer` serves it) when the client closes; the
  segments of a client process that exited without either are unmapped the
  next time the server maps a segment.

Nothing here is ever trusted from the wire without a check: names must match
:data:`NAME_PATTERN`, sizes and offsets must lie inside the mapping, and
every request (and every ``drop`` or ``release``) must carry the segment's
token, so knowing a name is not enough to make the server write into, or
unmap, another client's memory. The server maps only memory of its own
user's processes (``/proc/PID/fd`` opens for them alone) whose size is
sealed: no process can truncate it under the server.
"""

from pyg_dist.rpc.shm.attached import AttachedSegments, release_keys
from pyg_dist.rpc.shm.files import (
    HEADER_BYTES,
    MIN_BYTES,
    NAME_PATTERN,
    SHM_DIR,
    Segment,
    host_id,
    layout,
    remove_stale_segments,
    view,
)
from pyg_dist.rpc.shm.lender import Lease, Lender
from pyg_dist.rpc.shm.lending import SegmentPool

__all__ = ["HEADER_BYTES", "MIN_BYTES", "NAME_PATTERN", "SHM_DIR", "AttachedSegments",
           "Lease", "Lender", "Segment", "SegmentPool", "host_id", "layout", "release_keys",
           "remove_stale_segments", "view"]
