"""Typed errors raised by pyg-dist.

Every error the package raises on purpose derives from :class:`PygDistError`,
so ``except pyg_dist.errors.PygDistError`` catches all of them. Messages say
what was wrong and what to do about it.

The tree::

    PygDistError
    ├── PluginError
    │   ├── PluginNotFoundError          unknown name; lists what is installed
    │   ├── PluginLoadError              the entry point failed to import / load
    │   └── DuplicatePluginError         two distributions register one name
    ├── PartitionError
    │   ├── InvalidPartitionArgumentError bad num_parts, empty graph, bad options
    │   ├── PartitionFormatError         missing/unknown file, other format version
    │   ├── ChecksumMismatchError        a file's sha256 differs from meta.json
    │   ├── DatasetResolveError          "module:callable" did not resolve
    │   ├── PartitionMemoryError         partitioning would not fit the memory
    │   │                                limit; carries the bytes it needs
    │   └── UnknownTypeError             a node / edge type the graph lacks;
    │                                    (also InvalidPartitionArgumentError)
    ├── GraphKindMismatchError           a homogeneous call on a heterogeneous
    │                                    graph, or the reverse (also TypeError)
    ├── RpcError
    │   ├── TransportError               socket/connection level failure
    │   │   ├── ServerUnavailableError   server down; names the address
    │   │   └── SharedMemoryError        a same-host segment cannot be made,
    │   │                                mapped or used (replies fall back to TCP)
    │   ├── RpcTimeoutError (also TimeoutError)  deadline passed; names address, op
    │   ├── ProtocolError                malformed or unsupported message
    │   ├── ServerBusyError              a server's reply byte budget is spent
    │   │                                (sent as an error reply; retry later)
    │   ├── ReplyBudgetError             an answer bigger than a server's whole
    │   │                                reply budget: no retry can succeed
    │   └── RemoteError                  the server answered with an error;
    │       └── Remote<Name>             carries op, address, remote type/message;
    │                                    one twin per class here, also an
    │                                    instance of it (RemoteStoreError is a
    │                                    StoreError): see remote_error()
    ├── StoreError                       bad TensorAttr/EdgeAttr, unknown attribute
    │   ├── CacheError                   a feature cache cannot be built as asked
    │   ├── ServerListError              a server list (argument, PYG_DIST_SERVERS,
    │   │                                PYG_DIST_SERVERS_FILE) is missing or bad
    │   ├── ForwardingError              a server cannot sample a batch's hops
    │   │                                with its peers (sample_tree)
    │   └── EmbeddingError               a learnable embedding table cannot be
    │                                    created, read or updated as asked
    ├── SamplerError                     bad sampler configuration or input
    └── LoaderError                      bad loader configuration, pipeline failure

Error replies name their class (:data:`WIRE_TYPES`, :func:`wire_type`); the
client turns them back into local classes in one place, :func:`remote_error`.

Lower-level exceptions (``zmq.ZMQError``, ``OSError``, ``json`` and
``msgpack`` errors) are translated into these in exactly one place per layer,
always chained with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Optional


class PygDistError(Exception):
    """Root of every error raised on purpose by pyg-dist."""


# Plugins ###################################################################


class PluginError(PygDistError):
    """A plugin could not be found, loaded or registered."""


class PluginNotFoundError(PluginError, LookupError):
    """No plugin of that name is registered in the group.

    Args:
        group: The entry-point group that was searched.
        name: The name that was asked for.
        available: The names that are registered in ``group``.
    """

    def __init__(self, group: str, name: str, available: list[str]) -> None:
        self.group = group
        self.name = name
        self.available = sorted(available)
        listed = ", ".join(self.available) if self.available else "none"
        super().__init__(
            f"no plugin named {name!r} in group {group!r}; installed: "
            f"{listed}. Install the package that provides it, or run "
            f"'pyg-dist plugins' to see what is registered.")


class PluginLoadError(PluginError):
    """Importing or loading a plugin's entry point failed."""


class DuplicatePluginError(PluginError):
    """Two distributions register the same plugin name in one group."""


# Partitions ################################################################


class PartitionError(PygDistError):
    """Partitioning a graph or reading a partitioned dataset failed."""


class InvalidPartitionArgumentError(PartitionError, ValueError):
    """An argument to the partitioner is out of range or inconsistent."""


class PartitionFormatError(PartitionError):
    """A partition directory is missing files, malformed or of another
    format version."""


class ChecksumMismatchError(PartitionFormatError):
    """A partition file's sha256 does not match the one in ``meta.json``.

    Args:
        path: The file whose content changed.
        expected: The checksum recorded in ``meta.json``.
        actual: The checksum of the file on disk.
    """

    def __init__(self, path: str, expected: str, actual: str) -> None:
        self.path = path
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"checksum mismatch for {path}: meta.json records sha256 "
            f"{expected[:16]}..., the file has {actual[:16]}...; the file was "
            f"modified or corrupted: partition the dataset again")


class PartitionMemoryError(PartitionError):
    """Partitioning would not fit the memory limit (``--memory-limit``); the
    message names the memory it would need. ``need`` holds it in bytes
    (``None`` when unknown)."""

    need: Optional[int] = None


class DatasetResolveError(PartitionError, ValueError):
    """A ``module:callable`` dataset string could not be resolved or did not
    return a graph."""


class UnknownTypeError(InvalidPartitionArgumentError):
    """A node or edge type that the graph does not have was asked for.

    Args:
        kind: ``"node"`` or ``"edge"``.
        type_: The type that was asked for.
        available: The types the graph has.
    """

    def __init__(self, kind: str, type_: object, available: list) -> None:
        self.kind = kind
        self.type = type_
        self.available = list(available)
        shown = _short(type_)
        listed = ", ".join(_short(t) for t in self.available[:32])
        more = f" and {len(self.available) - 32} more" if len(self.available) > 32 else ""
        super().__init__(f"the graph has no {kind} type {shown}; its {kind} types are "
                         f"{listed or 'none'}{more}")


class GraphKindMismatchError(PygDistError, TypeError):
    """A homogeneous API was used on a heterogeneous graph, or the reverse.

    Args:
        message: What was called, on what kind of graph, and what to use instead.
    """


def _short(value: object) -> str:
    """A bounded description of a type key for an error message."""
    if isinstance(value, str):
        return repr(value if len(value) <= 64 else value[:64] + "...")
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return "(" + ", ".join(_short(v) for v in value[:3]) + ")"
    return "null" if value is None else f"a {type(value).__name__}"


# RPC #######################################################################


class RpcError(PygDistError):
    """A remote call failed.

    Args:
        message: What went wrong.
        address: The server's endpoint, e.g. ``tcp://10.0.0.5:5555``.
        op: The operation that was called, if known.
    """

    def __init__(self, message: str, *, address: Optional[str] = None,
                 op: Optional[str] = None) -> None:
        self.address = address
        self.op = op
        super().__init__(message)


class TransportError(RpcError):
    """The transport (socket, connection) failed."""


class ServerUnavailableError(TransportError):
    """The server is down or unreachable."""


class SharedMemoryError(TransportError):
    """A same-host shared memory segment could not be created, mapped or used.

    The client then lets the reply travel over the socket; a server raising
    it answers the request with an error reply of this type.
    """


class RpcTimeoutError(RpcError, TimeoutError):
    """No reply arrived before the call's deadline."""


class ProtocolError(RpcError):
    """A message is malformed, or speaks another protocol version."""


class ServerBusyError(RpcError):
    """A server refused a request whose answer would take the bytes it holds
    for unsent replies (of this client, or of all) over its budget.

    Servers send it as an error reply of this type; the client raises it as
    ``RemoteServerBusyError`` (a :class:`RemoteError` with ``remote_type ==
    "ServerBusyError"``).
    """


class ReplyBudgetError(RpcError):
    """A server refused a request whose answer (with its working memory)
    needs more bytes than its whole reply budget: unlike
    :class:`ServerBusyError`, asking again cannot succeed. The message names
    the op, the bytes needed, the budget and the setting to raise.
    """


class RemoteError(RpcError):
    """The server received the request and answered with an error.

    A reply naming one of pyg-dist's error classes is raised as that class's
    ``Remote<Name>`` twin (see :func:`remote_error`), which is both a
    ``RemoteError`` and the class the server raised: ``except StoreError``
    catches a store error of the server too.

    Args:
        message: The server's error message, intact.
        address: The server's endpoint.
        op: The operation that was called.
        remote_type: The error class name reported by the server.
    """

    def __init__(self, message: str, *, address: Optional[str] = None,
                 op: Optional[str] = None,
                 remote_type: str = "RemoteError") -> None:
        self.address = address
        self.op = op
        self.remote_type = remote_type
        self.remote_message = message
        where = f" from {address}" if address else ""
        what = f" to {op!r}" if op else ""
        # Not super().__init__: the twin's other base may take other
        # arguments (PluginNotFoundError, ChecksumMismatchError).
        Exception.__init__(self, f"{remote_type}{where} in reply{what}: {message}")

    def __reduce__(self) -> tuple:
        # Pickled whole (DataLoader workers hand exceptions to their parent),
        # not from the formatted text in ``args``.
        return _unpickle_remote, (type(self), self.remote_message, self.address, self.op,
                                  self.remote_type)


def _unpickle_remote(cls: type[RemoteError], message: str, address: Optional[str],
                     op: Optional[str], remote_type: str) -> RemoteError:
    return cls(message, address=address, op=op, remote_type=remote_type)


# Stores, sampler, loader ###################################################


class StoreError(PygDistError):
    """A feature or graph store was asked for something it does not hold."""


class CacheError(StoreError):
    """A feature cache cannot be built as asked: a capacity over the memory
    available, an unknown policy or one that answered wrongly, stores of two
    different graphs. Nothing is half-filled: the cache is not created."""
class ServerListError(StoreError, ValueError):
    """The list of server addresses a trainer was given is missing, empty,
    unreadable or has a bad entry; the message names where it came from
    (argument, variable, file and line)."""


class ForwardingError(StoreError):
    """A server cannot carry a batch's hops among its peers (``sample_tree``):
    it has no peer list, a peer cannot be reached at start, or the peers
    serve another graph. The sampler then samples hop by hop from the
    trainer (and says so once in the log)."""


class EmbeddingError(StoreError):
    """A learnable embedding table (:class:`pyg_dist.DistEmbedding`) cannot be
    created, read or updated as asked: a table of that name with another
    shape, a read-only server, replicas of a part, a push with non-finite or
    misshapen gradients, a checkpoint that does not verify."""


class SamplerError(PygDistError, ValueError):
    """The sampler was configured or called with invalid arguments."""


class LoaderError(PygDistError):
    """The loader was configured wrongly, or its pipeline failed."""


# Errors on the wire ########################################################

# Every public error class, by the name an error reply carries for it (its
# class name). The one place remote error types meet local classes.
WIRE_TYPES: dict[str, type[PygDistError]] = {
    cls.__name__: cls for cls in (
        PygDistError, PluginError, PluginNotFoundError, PluginLoadError,
        DuplicatePluginError, PartitionError, InvalidPartitionArgumentError,
        PartitionFormatError, ChecksumMismatchError, PartitionMemoryError, DatasetResolveError,
        UnknownTypeError,
        GraphKindMismatchError, RpcError, TransportError, ServerUnavailableError,
        SharedMemoryError, RpcTimeoutError, ProtocolError, ServerBusyError, ReplyBudgetError,
        RemoteError, StoreError, CacheError, ServerListError, ForwardingError, EmbeddingError,
        SamplerError, LoaderError)
}

# The ``Remote<Name>`` twin of each class: a RemoteError that is also an
# instance of the class the server raised. Module attributes, so that they
# pickle (DataLoader workers send exceptions to their parent).
_REMOTE: dict[str, type[RemoteError]] = {"RemoteError": RemoteError}
for _name, _cls in WIRE_TYPES.items():
    if _cls is not RemoteError and _cls is not RpcError and _cls is not PygDistError:
        _twin = type(f"Remote{_name}", (RemoteError, _cls),
                     {"__module__": __name__,
                      "__doc__": f"A :class:`{_name}` raised by the server, as a "
                                 f":class:`RemoteError`."})
        _REMOTE[_name] = globals()[_twin.__name__] = _twin
# A server's RpcError or PygDistError is a plain RemoteError (one already).
_REMOTE["RpcError"] = _REMOTE["PygDistError"] = RemoteError


def wire_type(exc: BaseException) -> str:
    """The type name an error reply carries for ``exc``: its class's name,
    or for a :class:`RemoteError` (a server relaying another's error) the
    name that one carried."""
    if isinstance(exc, RemoteError):
        return exc.remote_type
    return type(exc).__name__


def remote_error(remote_type: str, message: str, *, address: Optional[str] = None,
                 op: Optional[str] = None) -> RemoteError:
    """The exception for an error reply: the ``Remote<Name>`` twin of the
    pyg-dist class ``remote_type`` names, or a plain :class:`RemoteError`
    for any other name (``ValueError``, a handler's own class).

    Args:
        remote_type: The type name the reply carries (already validated as
            a bounded string by the protocol decoder).
        message: The server's message.
        address: The server's endpoint.
        op: The operation that was called.
    """
    cls = _REMOTE.get(remote_type, RemoteError)
    return cls(message, address=address, op=op, remote_type=remote_type)
