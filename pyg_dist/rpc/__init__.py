"""ZeroMQ RPC: wire protocol, configuration, generic server and client.

* :mod:`pyg_dist.rpc.wire_format`: msgpack header + raw tensor frames, no pickle.
* :mod:`pyg_dist.rpc.config`: :class:`RpcConfig`, every deadline and limit.
* :mod:`pyg_dist.rpc.server`: :class:`RpcServer`, ROUTER + worker threads.
* :mod:`pyg_dist.rpc.client`: :class:`RpcClient`, futures; callers send,
  an I/O thread reads replies and keeps deadlines; one attempt a call.
* :mod:`pyg_dist.rpc.op_spec`: :class:`~pyg_dist.rpc.op_spec.OpSpec`, what a
  declared op takes and answers; the server, the client and the retries are
  given a table of them (the partition ops: :mod:`pyg_dist.protocol.ops`).
* :mod:`pyg_dist.rpc.retrying`: :class:`~pyg_dist.rpc.retrying.RetryingClient`,
  the one retry, failover and back-off layer the trainer calls through.
* :mod:`pyg_dist.rpc.dispatch`: a request's frames to its reply's, on the
  server (checks, handler, error replies).
"""

from pyg_dist.rpc.client import RpcClient
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.server import RpcServer
from pyg_dist.rpc.wire_format import PROTOCOL_VERSION, Reply

__all__ = ["PROTOCOL_VERSION", "Reply", "RpcClient", "RpcConfig", "RpcServer",
           "default_config"]
