"""Helpers shared by the test suite (importable as ``support``).

* :mod:`support.servers`: start real ``pyg-dist serve`` processes and stop them.
* :mod:`support.rawzmq`: a bare DEALER socket that speaks the wire protocol by
  hand, for sending malformed frames a real client never would.
* :mod:`support.threads`: run a worker in several threads, re-raise its
  first failure and fail on a hang.
* :mod:`support.one_hop`: one hop of one edge type through the trainer's
  public per-hop function (``RemoteGraphStore.sample_hop``).
* :mod:`support.forwarding_servers`: partition servers in this process, each
  the others' peer (``sample_tree``).
* :mod:`support.waiting`: wait for a condition with a bound, failing with a
  message that names what never happened (instead of a ``time.sleep``).
"""
