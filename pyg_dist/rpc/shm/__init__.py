"""Same-host shared memory for big replies, a transport of the RPC layer.

A caller of :meth:`RpcClient.call_async <pyg_dist.rpc.RpcClient.call_async>`
says how many bytes its reply's tensors take (``reply_bytes``); a handler
takes its outputs from its call context (:mod:`pyg_dist.rpc.context`).
Neither sees a segment: lending, mapping, views and releases happen here.

Modules: :mod:`~pyg_dist.rpc.shm.files` (segment files, layout, views),
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
  files under ``/dev/shm`` with mode 0600, reserves their pages up front
  (``posix_fallocate``: a full ``/dev/shm`` is a clean error now, not a
  ``SIGBUS`` in the server later), and writes a random token into a header
  page. The first request that uses a segment names it, with its size and
  token; the server unlinks the file as soon as it has mapped it (and the
  trainer once it sees the answer), so only a client killed within that one
  round trip can leave a file, which the next client on the host removes
  after an hour (:func:`remove_stale_segments`). Segments are reused for later
  requests; at most ``limit_bytes`` of them exist per server.
* :class:`AttachedSegments` (one per server) opens a named segment, checks
  that its size and token are what the client said (it really is the same
  memory, on the same host), and keeps it mapped, least recently used first
  out beyond a bound. A client that discards a segment tells the server with
  the ``drop`` list of its next request, or the ``release`` op (every
  :class:`~pyg_dist.rpc.RpcServer` serves it) when the client closes; the
  segments of a client process that exited without either are unmapped the
  next time the server maps a segment.

Nothing here is ever trusted from the wire without a check: names must match
:data:`NAME_PATTERN`, sizes and offsets must lie inside the mapping, and
every request (and every ``drop`` or ``release``) must carry the segment's
token, so knowing a name (``/dev/shm`` can be listed by anyone) is not
enough to make the server write into, or unmap, another client's memory.
The server maps only files of its own user, private to it (mode ``0600``),
with one link: no other user can hand it a file to truncate under it.
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
