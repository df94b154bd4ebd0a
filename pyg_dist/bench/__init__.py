"""``pyg-dist bench``: pyg-dist's own rows, measured with the library alone.

:mod:`~pyg_dist.bench.runner` builds the graph, starts the servers and
measures; :mod:`~pyg_dist.bench.timing` times one loader pass or epoch as a
row; :mod:`~pyg_dist.bench.report` prints the table and ratios;
:mod:`~pyg_dist.bench.trainer_worker` is one process of the multi-trainer
row. Baselines (PyG's ``torch_geometric.distributed``) and the link-delay
proxy are harness code: they live in the separately installable benchmarks
package, which :mod:`~pyg_dist.bench.harness` imports when asked for.
"""
