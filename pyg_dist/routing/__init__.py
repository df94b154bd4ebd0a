"""Global ids to the servers that own them (``store``, ``hops``, ``server``
-> ``routing`` -> ``rpc``).

:class:`~pyg_dist.routing.id_router.Router` splits ids by the partition
book of their node type and sends one request per owning server, all at
once; :func:`~pyg_dist.routing.servers.connect_router` builds one over a
server list, checked. Both the trainer's stores and a server coordinating
``sample_tree`` route through it.
"""
