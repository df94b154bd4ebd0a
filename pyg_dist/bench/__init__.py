"""Benchmarks of pyg-dist against the systems users would otherwise run.

``pyg-dist bench`` measures seeds/s and sampled edges/s of pyg-dist and of the
baselines on the same graph and partitions. Baselines live in their own
modules (for example :mod:`pyg_dist.bench.pyg_distributed_baseline`, PyG's
deprecated ``torch_geometric.distributed``) and are never imported by the core
package.
"""
