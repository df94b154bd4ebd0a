"""pyg-dist's benchmark harness: baselines and a link-delay proxy.

Installed on its own (``pip install -e benchmarks/`` in a pyg-dist checkout),
never with the library, because what it holds is harness code no user needs
to run pyg-dist:

* :mod:`pyg_dist_bench.pyg_distributed_baseline`: PyG's deprecated
  ``torch_geometric.distributed`` loader on one machine, one process per part
  (:mod:`~pyg_dist_bench.pyg_baseline_partition`,
  :mod:`~pyg_dist_bench.pyg_baseline_worker`), with pure-torch stand-ins for
  the pyg-lib operators it calls registered under ``torch.ops.pyg`` in those
  processes only (:mod:`~pyg_dist_bench.pyg_baseline_ops`);
* :mod:`pyg_dist_bench.link_proxy`: a ZeroMQ proxy that holds every message
  D ms each way;
* :mod:`pyg_dist_bench.rows`: the baseline rows of ``pyg-dist bench``.

The top level is what ``pyg-dist bench --baseline`` and ``--link-delay-ms``
use (:class:`pyg_dist.bench.harness.Harness`): :func:`baseline_rows` and
:func:`delayed_link`. The scripts beside this package (``benchmarks/bench_*.py``)
print further figures.

Nothing is imported here at import time: ``python -m pyg_dist_bench.link_proxy``
and the baseline's worker processes start without torch or each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from pyg_dist.bench.runner import BenchConfig
    from pyg_dist.bench.timing import Row

__all__ = ["baseline_rows", "delayed_link"]


def baseline_rows(cfg: BenchConfig, data: Any, seeds: torch.Tensor, workdir: str) -> list[Row]:
    """PyG's ``torch_geometric.distributed`` rows; see
    :func:`pyg_dist_bench.rows.baseline_rows`."""
    from pyg_dist_bench.rows import baseline_rows as run

    return run(cfg, data, seeds, workdir)


def delayed_link(endpoints: Sequence[str], delay_ms: float,
                 host: str = "127.0.0.1") -> AbstractContextManager[list[str]]:
    """A link-delay proxy process in front of ``endpoints``; see
    :func:`pyg_dist_bench.link_proxy.delayed_link`."""
    from pyg_dist_bench.link_proxy import delayed_link as proxy

    return proxy(endpoints, delay_ms, host)

