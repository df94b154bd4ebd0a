"""The baseline rows ``pyg-dist bench --baseline`` adds to pyg-dist's own.

PyG's deprecated ``torch_geometric.distributed`` loader, run by
:func:`~pyg_dist_bench.pyg_distributed_baseline.run_pyg_distributed_baseline`
on the same graph, seeds, fan-out and batch size as pyg-dist's rows: once as
PyG ships, once with the allocator tuning every pyg-dist process gets (the
comparison of designs alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyg_dist_bench.timing import Row

if TYPE_CHECKING:
    import torch

    from pyg_dist_bench.bench_config import BenchConfig

BASELINE = "pyg-distributed"
BASELINE_TUNED = "pyg-distributed +malloc tuning"


def baseline_rows(cfg: BenchConfig, data: Any, seeds: torch.Tensor, workdir: str) -> list[Row]:
    """Measures PyG's ``torch_geometric.distributed`` as it ships and tuned.

    Args:
        cfg: The bench configuration (parts, fan-out, batch size, batches, seed).
        data: The unpartitioned graph pyg-dist's rows were measured on.
        seeds: The same seeds.
        workdir: A directory for PyG's partitions, configs and logs.

    Returns:
        Two rows, named :data:`BASELINE` and :data:`BASELINE_TUNED`; a row
        that could not be measured has zero figures and says why in its note.
    """
    return [_baseline_row(cfg, data, seeds, workdir, malloc_tuning=tuned)
            for tuned in (False, True)]


def _baseline_row(cfg: BenchConfig, data: Any, seeds: torch.Tensor, workdir: str,
                  malloc_tuning: bool) -> Row:
    from pyg_dist_bench.pyg_distributed_baseline import run_pyg_distributed_baseline

    name = BASELINE_TUNED if malloc_tuning else BASELINE
    # Same work as the other rows: the same seeds, and as many batches in
    # all (each of its processes trains on its own share, as PyG does it).
    per_process = -(-cfg.num_batches // cfg.num_parts)
    out = run_pyg_distributed_baseline(
        data, num_parts=cfg.num_parts, num_neighbors=cfg.num_neighbors,
        batch_size=cfg.batch_size, num_batches=per_process,
        workdir=f"{workdir}/pyg{'-tuned' if malloc_tuning else ''}", timeout_s=300.0,
        input_nodes=seeds, seed=cfg.seed, malloc_tuning=malloc_tuning)
    if "seeds_per_s" not in out:
        return Row(name, 0.0, 0, 0, 0, 0, note=str(out.get("note", out)))
    return Row(name, float(out["seconds"]), int(out["batches"]),
               int(out["seeds"]), int(out["edges"]), 0, note=str(out.get("note", "")))
