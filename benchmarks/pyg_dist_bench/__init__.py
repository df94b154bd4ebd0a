"""pyg-dist's benchmark harness: ``pyg-dist bench``, baselines, a link-delay proxy.

Installed on its own (``pip install -e benchmarks/`` in a pyg-dist checkout),
never with the library, because what it holds is harness code no user needs
to run pyg-dist. Imports point one way: this package imports ``pyg_dist``,
never the reverse (the library finds ``bench`` through its plugin registry,
entry-point group ``pyg_dist.commands``).

* :mod:`pyg_dist_bench.cli`: the ``pyg-dist bench`` sub-command;
  :mod:`~pyg_dist_bench.runner` builds the graph, starts the servers and
  measures; :mod:`~pyg_dist_bench.timing` times one loader pass or epoch as a
  row; :mod:`~pyg_dist_bench.report` prints the table and ratios;
  :mod:`~pyg_dist_bench.hetero` the heterogeneous rows;
  :mod:`~pyg_dist_bench.trainer_worker` one process of the multi-trainer row;
* :mod:`pyg_dist_bench.pyg_distributed_baseline`: PyG's deprecated
  ``torch_geometric.distributed`` loader on one machine, one process per part
  (:mod:`~pyg_dist_bench.pyg_baseline_partition`,
  :mod:`~pyg_dist_bench.pyg_baseline_worker`), with pure-torch stand-ins for
  the pyg-lib operators it calls registered under ``torch.ops.pyg`` in those
  processes only (:mod:`~pyg_dist_bench.pyg_baseline_ops`);
  :mod:`pyg_dist_bench.rows`: its rows in ``pyg-dist bench --baseline``;
* :mod:`pyg_dist_bench.link_proxy`: a ZeroMQ proxy that holds every message
  D ms each way (``--link-delay-ms``).

The scripts beside this package (``benchmarks/bench_*.py``) print further
figures. Nothing is imported here at import time: ``python -m
pyg_dist_bench.link_proxy`` and the baseline's worker processes start without
torch or each other.
"""
