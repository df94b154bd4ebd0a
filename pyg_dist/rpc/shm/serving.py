"""The RPC server's side of shared memory: serving a call into the memory its
client lent, and the ``release`` op by which a client hands segments back.

See :mod:`pyg_dist.rpc.shm` for the whole scheme.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from pyg_dist.rpc import wire_format
from pyg_dist.rpc.context import CallContext, wants_context
from pyg_dist.rpc.shm.attached import AttachedSegments, release_keys
from pyg_dist.rpc.shm.files import host_id


class SegmentService:
    """One server's mappings of its clients' segments, and what it reports
    and serves about them.

    Args:
        segments: The mappings; a fresh :class:`AttachedSegments` by default.
    """

    def __init__(self, segments: AttachedSegments | None = None) -> None:
        self.segments = segments if segments is not None else AttachedSegments()
        self.host = host_id()  # reported by ping: clients on this host lend memory

    def serve(self, handler: Callable[..., Any], request: wire_format.Request) -> list[Any]:
        """Runs ``handler`` on ``request`` and encodes its reply: into the
        memory the client lent when the handler allocated its outputs there
        (:meth:`CallContext.alloc`), as frames otherwise.

        Raises:
            Whatever the handler raises (the server turns it into an error
            reply).
        """
        if not wants_context(handler):
            result, tensors = handler(request.args, request.tensors)
            return wire_format.encode_reply(request.id, result, tensors)
        ctx = CallContext(self.segments, request.shm)
        result, tensors = handler(request.args, request.tensors, ctx)
        return wire_format.encode_reply(request.id, result, tensors, ctx.reply_offsets(tensors))

    def release(self, args: dict[str, Any], tensors: list[Tensor]
                ) -> tuple[dict[str, Any], list[Tensor]]:
        """The ``release`` op: unmaps the segments ``segments`` (``[name,
        token]`` pairs; a client closing) and answers ``released``, how many
        were mapped."""
        keys = release_keys(args.get("segments"))
        return {"released": self.segments.release(keys)}, []

    def close(self) -> None:
        """Unmaps every segment still mapped."""
        self.segments.close()
