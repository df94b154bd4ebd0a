"""Every public error class crosses a real server and comes back as itself:
a handler raises it, the client raises its ``Remote<Name>`` twin, which is
both a :class:`RemoteError` and the class raised (message and type intact)."""

from __future__ import annotations

import inspect
import pickle

import pytest

from pyg_dist import errors
from pyg_dist.errors import WIRE_TYPES, PygDistError, RemoteError, StoreError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer

# Constructors that take more than a message.
_ARGS = {
    errors.PluginNotFoundError: ("pyg_dist.partitioners", "nope", ["metis"]),
    errors.ChecksumMismatchError: ("part-0/x.safetensors", "ab" * 32, "cd" * 32),
    errors.UnknownTypeError: ("node", "venue", ["paper", "author"]),
}


def _public_classes() -> list[type]:
    return sorted((cls for _, cls in inspect.getmembers(errors, inspect.isclass)
                   if issubclass(cls, PygDistError) and cls.__module__ == errors.__name__
                   and (cls is RemoteError or not cls.__name__.startswith("Remote"))),
                  key=lambda c: c.__name__)


def _make(cls: type) -> BaseException:
    return cls(*_ARGS[cls]) if cls in _ARGS else cls(f"a {cls.__name__} on the server")


def _raise(args, tensors):
    kind = args["type"]
    if kind in WIRE_TYPES:
        raise _make(WIRE_TYPES[kind])
    raise {"ValueError": ValueError, "RuntimeError": RuntimeError}[kind]("builtin")


@pytest.fixture(scope="module")
def client():
    config = RpcConfig(workers=1, timeout=10.0)
    with RpcServer({"raise": _raise}, config=config, name="errors") as srv:
        with RpcClient([srv.endpoint], config) as cli:
            yield cli


def test_every_public_error_class_has_a_wire_name():
    assert {cls.__name__ for cls in _public_classes()} == set(WIRE_TYPES)


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_error_class_round_trips(client, cls):
    with pytest.raises(RemoteError) as info:
        client.call(0, "raise", {"type": cls.__name__})
    exc = info.value
    assert isinstance(exc, cls), type(exc).__mro__
    assert exc.remote_type == cls.__name__
    assert exc.remote_message == str(_make(cls))
    assert exc.op == "raise" and exc.address == client.endpoints[0]
    # A server relaying it sends the same type again, and it pickles
    # (DataLoader workers hand exceptions to their parent).
    assert errors.wire_type(exc) == cls.__name__
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is type(exc) and str(again) == str(exc)


def test_other_types_stay_plain_remote_errors(client):
    with pytest.raises(RemoteError) as info:
        client.call(0, "raise", {"type": "ValueError"})
    assert type(info.value) is RemoteError and info.value.remote_type == "ValueError"
    assert info.value.remote_message == "builtin"
    # A name the client does not know (a hostile or newer server) too.
    unknown = errors.remote_error("NoSuchError", "x", op="get")
    assert type(unknown) is RemoteError and unknown.remote_type == "NoSuchError"


def test_a_remote_store_error_is_caught_as_a_store_error(client):
    with pytest.raises(StoreError):
        client.call(0, "raise", {"type": "StoreError"})
