"""``pyg-dist bench``: measure pyg-dist against PyG's loaders on this machine.

A sub-command of the ``pyg-dist`` console script, added through the
``pyg_dist.commands`` entry-point group by this package (never installed with
the library: without it, ``pyg-dist bench`` names ``pip install -e
benchmarks/``).
"""

from __future__ import annotations

import argparse

from pyg_dist.errors import PygDistError


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from exc


def _float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist bench``."""
    p = sub.add_parser(
        "bench",
        help="benchmark pyg-dist against PyG's loaders on a synthetic graph",
        description=(
            "Builds a synthetic graph, partitions it, starts one server per part on "
            "loopback and measures, in one run: PyG's NeighborLoader in one process "
            "(the no-network ceiling), DistNeighborLoader with prefetch 0 and K (hop by "
            "hop, with the servers sampling the hops, and with the parts read in the "
            "trainer's process: connect(colocate=True)), and one "
            "GraphSAGE epoch (compute only, loader only, both); with --baseline also "
            "PyG's deprecated torch_geometric.distributed loader. Prints a table and, "
            "with --json, writes the figures to a file."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--num-nodes", type=int, default=100_000, help="nodes of the graph")
    p.add_argument("--avg-degree", type=float, default=10.0,
                   help="edges drawn per node before symmetrising (10: ~2M edges for 100k nodes)")
    p.add_argument("--num-features", type=int, default=128, help="float32 feature columns")
    p.add_argument("--num-parts", type=int, default=2, help="partitions (one server each)")
    p.add_argument("--partitioner", default="metis", help="partitioner plugin")
    p.add_argument("--num-neighbors", type=_int_list, default=[15, 10],
                   help="fan-out per hop, comma-separated")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch")
    p.add_argument("--num-batches", type=int, default=20, help="batches per measured epoch")
    p.add_argument("--prefetch", type=int, default=4, help="prefetch depth K")
    p.add_argument("--link-delay-ms", type=_float_list, default=[],
                   help="repeat the epoch behind a proxy adding D ms each way, e.g. 1,5 "
                        "(benchmarks package)")
    p.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=False,
                   help="also run PyG's torch_geometric.distributed rows (benchmarks package)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--trainers", type=int, default=None,
                   help="trainer processes of the multi-trainer row, each on its share of "
                        "the seeds (default: --num-parts, the layout of PyG's baseline; "
                        "1 skips the row)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of the trainer in the pyg-dist rows (default: the "
                        "cores divided by parts + 1, as the servers share the machine)")
    p.add_argument("--device", default=None,
                   help="put batches on this device and train there, e.g. cuda (with "
                        "prefetch: pinned memory, side-stream copies); default: CPU")
    p.add_argument("--hetero", action="store_true",
                   help="measure the heterogeneous loader instead: a FakeHeteroDataset graph "
                        "(3 node types of --num-nodes/3 nodes, 6 edge types) against PyG's "
                        "NeighborLoader on the same HeteroData, and against the homogeneous "
                        "loader on a graph of the same size")
    p.add_argument("--embedding", action="store_true",
                   help="also train the prefetching epoch with a DistEmbedding of "
                        "--num-features columns as its input (SparseAdam on the servers), "
                        "on the graph without x, against the fixed-feature epoch; and, as "
                        "what learning any input costs, the fixed-feature epoch with the "
                        "gradient to x and with a local nn.Embedding")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark and prints the table.

    Args:
        args: The parsed ``pyg-dist bench`` arguments.

    Returns:
        The exit code (0).

    Raises:
        PygDistError: for a device this machine lacks.
    """
    if args.hetero and (args.baseline or args.link_delay_ms or args.device or args.embedding):
        raise PygDistError("--hetero measures the loaders only; run --baseline, "
                           "--link-delay-ms, --device and --embedding without it")
    from pyg_dist.malloc_tuning import tune_malloc
    from pyg_dist_bench.bench_config import BenchConfig
    from pyg_dist_bench.report import format_table, write_json
    from pyg_dist_bench.runner import run_bench

    _check_device(args.device)
    tune_malloc()  # here and in every server: the same for every row
    cfg = BenchConfig(
        num_nodes=args.num_nodes, avg_degree=args.avg_degree, num_features=args.num_features,
        num_parts=args.num_parts, partitioner=args.partitioner,
        num_neighbors=args.num_neighbors, batch_size=args.batch_size,
        num_batches=args.num_batches, prefetch=args.prefetch,
        link_delays_ms=args.link_delay_ms, baseline=args.baseline, seed=args.seed,
        device=args.device, threads=args.threads, trainers=args.trainers,
        embedding=args.embedding)
    if args.hetero:
        from pyg_dist_bench.hetero import run_hetero_bench

        result = run_hetero_bench(cfg)
    else:
        result = run_bench(cfg)
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"\nwrote {args.json}")
    return 0


def _check_device(name: str | None) -> None:
    """Refuses a device this machine does not have before any work starts."""
    import torch

    if name is None:
        return
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise PygDistError(f"--device {name!r} is not a torch device ({exc}); "
                           f"use e.g. cpu, cuda or cuda:1") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PygDistError(f"--device {name}: torch {torch.__version__} sees no CUDA GPU "
                           f"here; leave --device out to benchmark on the CPU")
