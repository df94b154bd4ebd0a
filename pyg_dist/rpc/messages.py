"""The messages of the wire protocol as the code sees them: a decoded
request, a reply, an error reply (see :mod:`pyg_dist.rpc.protocol`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor


@dataclass
class Request:
    """A decoded request.

    Args:
        id: The request id chosen by the client; echoed in the reply.
        op: The operation's name.
        args: The operation's msgpack-native arguments.
        tensors: The tensors sent with the request.
    """

    id: int
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)
    shm: Any = None  # the lent segment, checked where it is used


@dataclass
class Reply:
    """The answer to a successful call.

    Args:
        result: The operation's msgpack-native result.
        tensors: The tensors sent with the reply, or views into memory the
            client lent for them (valid until :meth:`release`).
        shm: Where a reply written into lent memory put its tensors:
            ``(dtype, shape, offset)`` each (the client turns them into
            ``tensors``).
    """

    result: dict[str, Any] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)
    shm: Optional[list[tuple[torch.dtype, list[int], int]]] = None
    on_release: Optional[Any] = field(default=None, repr=False, compare=False)

    def release(self) -> None:
        """Hands the memory the reply's tensors lie in back to the client for
        reuse (a no-op for tensors that came as frames). Call it once they
        are read; the tensors must not be used after."""
        hook, self.on_release = self.on_release, None
        if hook is not None:
            hook()


@dataclass
class ErrorReply:
    """A server-side failure as carried on the wire.

    Args:
        type: The error class name on the server.
        message: The error message, intact.
    """

    type: str
    message: str
