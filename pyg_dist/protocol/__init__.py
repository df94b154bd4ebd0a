"""The partition ops as the trainer and the servers speak them, above the
generic transport (:mod:`pyg_dist.rpc`) and below the stores, the sampler,
the server and the embeddings.

* :mod:`pyg_dist.protocol.ops`: every op declared once (arguments, tensors,
  reply, reply tensor bound, retry safety), how a request writes an edge
  type, the answer-size bounds.
* :mod:`pyg_dist.protocol.schema`: the forms of the ops' arguments and id
  tensors, checked on the server before a handler runs.
* :mod:`pyg_dist.protocol.reply_checks`: each op's reply checked against its
  request.
* :mod:`pyg_dist.protocol.tree_codec`: ``sample_tree``'s reply, its layout
  written once (encoded by the coordinator, checked, decoded by the
  trainer) and its size bound.
"""
