"""What a declared op takes and answers, checked at both ends of a call.

The transport holds every call to the table of :class:`OpSpec` it is given:
:class:`~pyg_dist.rpc.server.RpcServer` refuses a request that does not fit
its op (:meth:`OpSpec.check_request`) before the handler runs,
:class:`~pyg_dist.rpc.client.RpcClient` bounds a reply's tensor count
(:meth:`OpSpec.reply_tensor_limit`), and
:class:`~pyg_dist.rpc.retrying.RetryingClient` re-sends only retry-safe ops
and checks every reply (:meth:`OpSpec.check_reply`) before a caller sees
it. The partition ops are declared in :mod:`pyg_dist.protocol.ops`; this
module declares the two every server answers itself (:data:`RPC_OPS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from string import hexdigits
from typing import Any, NamedTuple, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc.shm.files import NAME_PATTERN, SERVER_MAX_SEGMENTS, TOKEN_BYTES
from pyg_dist.rpc.wire_format import MAX_TENSORS, Reply
from pyg_dist.rpc.wire_values import describe, error_text

ReplyCheck = Callable[[dict[str, Any], list[Tensor], dict[str, Any], list[Tensor]],
                      Optional[str]]
"""``check(args, tensors, result, reply_tensors) -> None`` or what is wrong."""


class ArgProblem(NamedTuple):
    """What an argument's type check found wrong: where inside the argument
    (``""``, ``"[0].attrs"``), what it must be (``"an int in [0, 7]"``) and
    the value found there."""

    path: str
    wanted: str
    value: Any


ArgCheck = Callable[[Any], Optional[ArgProblem]]
"""``check(value) -> None``, or what is wrong with an argument's value
(:mod:`pyg_dist.protocol.schema` builds them)."""

TensorCheck = Callable[[dict[str, Any], list[Tensor]], Optional[str]]
"""``check(args, tensors) -> None`` or what is wrong with a request's tensors
(dtypes, dimensions, lengths), once their count is known to fit."""


class PartRequest(NamedTuple):
    """One call to the server of index ``part``: what :meth:`OpSpec.request`
    builds and :meth:`pyg_dist.routing.id_router.Router.call_all` sends."""

    part: int
    op: str
    args: dict[str, Any]
    tensors: list[Tensor]


@dataclass(frozen=True)
class OpSpec:
    """The declaration of one operation.

    Args:
        name: The op's name on the wire.
        required: Arguments every request names.
        optional: Arguments a request may name.
        tensors: Fewest and most request tensors.
        reply: Result keys every reply holds.
        reply_check: Checks the reply's tensors against the request (count,
            dimensions, lengths that must agree); ``None``: no tensors.
        retry_safe: Whether the op only reads, so that sending it again (to
            the same server or a replica) cannot change what anyone sees.
        worker: Served by a worker thread whatever the request's size (a
            few bytes may ask for a whole part).
        types: Argument name -> its type check, run on every request that
            names it (an argument without one may hold any wire value).
        tensor_check: Checks the request's tensors (dtypes, dimensions,
            lengths), after their count.
        reply_tensors: Most tensors a reply to ``args`` may carry, when an
            op answers a few per type asked for; ``None``:
            :data:`~pyg_dist.rpc.wire_format.MAX_TENSORS`.
    """

    name: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    tensors: tuple[int, int] = (0, 0)
    reply: tuple[str, ...] = ()
    reply_check: Optional[ReplyCheck] = field(default=None, compare=False)
    retry_safe: bool = True
    worker: bool = False
    types: Mapping[str, ArgCheck] = field(default_factory=dict, compare=False)
    tensor_check: Optional[TensorCheck] = field(default=None, compare=False)
    reply_tensors: Optional[Callable[[dict[str, Any]], int]] = field(default=None,
                                                                      compare=False)

    def request(self, part: int, args: Optional[dict[str, Any]] = None,
                tensors: Sequence[Tensor] = ()) -> PartRequest:
        """A call of this op on the server of ``part``, its arguments checked.

        Raises:
            ProtocolError: on an argument the op does not take, a missing
                one, or the wrong number of tensors (a bug of the caller).
        """
        args = {} if args is None else args
        tensors = list(tensors)
        problem = self._request_problem(args, tensors, typed=False)
        if problem is not None:
            raise ProtocolError(f"a {self.name!r} request {problem}", op=self.name)
        return PartRequest(part, self.name, args, tensors)

    def check_request(self, args: Any, tensors: Sequence[Tensor]) -> None:
        """Refuses a received request that does not fit the declaration.

        Raises:
            ProtocolError: naming the unknown, missing or ill-typed argument,
                or what is wrong with the tensors.
        """
        problem = self._request_problem(args, list(tensors), typed=True)
        if problem is not None:
            raise ProtocolError(f"{self.name!r} {problem}")

    def reply_tensor_limit(self, args: Any) -> int:
        """Most tensors a reply to this request may carry: at least
        :data:`~pyg_dist.rpc.wire_format.MAX_TENSORS`, more where the op
        answers per type asked for (refused over it before its tensors
        are built, and no earlier)."""
        if self.reply_tensors is None or not isinstance(args, dict):
            return MAX_TENSORS
        return max(MAX_TENSORS, self.reply_tensors(args))

    def _request_problem(self, args: Any, tensors: list[Tensor], typed: bool
                         ) -> Optional[str]:
        if not isinstance(args, dict):
            return f"takes a map of arguments, got {describe(args)}"
        unknown = [k for k in args if k not in self.required and k not in self.optional]
        if unknown:
            taken = sorted(self.required + self.optional)
            return (f"has unknown arguments {describe(sorted(map(str, unknown)))}; it takes "
                    f"{taken or 'none'}")
        missing = [k for k in self.required if k not in args]
        if missing:
            return f"lacks the required arguments {missing}"
        low, high = self.tensors
        if not low <= len(tensors) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            return f"takes {wanted} tensors, got {len(tensors)}"
        if not typed:  # the caller's own values: the server checks them
            return None
        types = self.types
        for name, value in args.items():
            check = types.get(name)
            if check is not None:
                wrong = check(value)
                if wrong is not None:
                    return (f"argument {name!r}{wrong.path} must be {wrong.wanted}, got "
                            f"{describe(wrong.value)}")
        return None if self.tensor_check is None else self.tensor_check(args, tensors)

    def check_reply(self, reply: Reply, args: dict[str, Any], tensors: Sequence[Tensor],
                    address: str) -> Reply:
        """``reply`` if it holds what the op answers to this request.

        Raises:
            ProtocolError: naming the op, the server and what was wrong.
        """
        result = reply.result
        problem: Optional[str] = None
        if not isinstance(result, dict):
            problem = f"a result that is not a map ({describe(result)})"
        else:
            missing = [k for k in self.reply if k not in result]
            if missing:
                problem = f"a result without {missing}"
            elif self.reply_check is None:
                if reply.tensors:
                    problem = f"{len(reply.tensors)} tensors, where it answers none"
            else:
                try:
                    problem = self.reply_check(args, list(tensors), result, reply.tensors)
                except Exception as exc:  # noqa: BLE001 (whatever a reply made a check raise)
                    # A reply no check foresaw, or a check's own bug (one
                    # raised KeyError on get_edges' replies), fails the call
                    # all the same: raised as anything but an RpcError it
                    # left the call's future unfinished until its deadline.
                    problem = (f"a reply its check could not read ({type(exc).__name__}: "
                               f"{error_text(exc)})")
        if problem is None:
            return reply
        reply.release()
        raise ProtocolError(f"server {address} answered {self.name!r} with {problem}",
                            address=address, op=self.name)


def _flag(value: Any) -> Optional[ArgProblem]:
    """``ping``'s ``usage``: a bool."""
    return None if isinstance(value, bool) else ArgProblem("", "a bool", value)


def _segment_key(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, str) for v in value) and NAME_PATTERN.fullmatch(value[0]) is not None \
        and len(value[1]) == 2 * TOKEN_BYTES and all(c in hexdigits for c in value[1])


def _segment_keys(value: Any) -> Optional[ArgProblem]:
    """``release``'s ``segments``: the ``[name, token]`` of each segment
    handed back (:mod:`pyg_dist.rpc.shm`), a server's most at once."""
    if isinstance(value, list) and len(value) <= SERVER_MAX_SEGMENTS:
        for i, key in enumerate(value):
            if not _segment_key(key):
                return ArgProblem(f"[{i}]", f"[name, token]: a segment name matching "
                                  f"{NAME_PATTERN.pattern} and {2 * TOKEN_BYTES} hex digits",
                                  key)
        return None
    return ArgProblem("", f"a list of at most {SERVER_MAX_SEGMENTS} [name, token] pairs",
                      value)


PING = OpSpec("ping", optional=("usage",), types={"usage": _flag}, reply=("version", "ops"))
RELEASE = OpSpec("release", required=("segments",), types={"segments": _segment_keys},
                 reply=("released",))

RPC_OPS: Mapping[str, OpSpec] = {s.name: s for s in (PING, RELEASE)}
"""The ops every :class:`~pyg_dist.rpc.server.RpcServer` answers itself."""
