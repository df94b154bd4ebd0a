"""``pyg-dist partition DATASET ROOT``: partition a graph once, offline."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from pyg_dist.errors import InvalidPartitionArgumentError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist partition``."""
    p = sub.add_parser(
        "partition", help="split a graph into parts and write the dataset directory",
        description=(
            "Loads DATASET, a 'module:callable' string returning a torch_geometric Data or "
            "HeteroData (like uvicorn's app string, e.g. pyg_dist.datasets:cora or "
            "pyg_dist.datasets:imdb; the current directory is searched first, so "
            "mygraph:load finds ./mygraph.py), assigns every node "
            "to a part with a partitioner plugin, and writes ROOT atomically: on any error "
            "nothing is left behind. 'pyg-dist plugins' lists the partitioners. With --from "
            "DIR (and no DATASET) the graph is read from files instead (DIR/edges/*.parquet "
            "with int columns src, dst, DIR/edges/NAME.npy per edge attribute, "
            "DIR/nodes/NAME.npy per node attribute; by type DIR/edges/SRC__REL__DST/ and "
            "DIR/nodes/TYPE/) in passes over chunks, so that the process stays under "
            "--memory-limit whatever the graph's size; the same dataset format comes out."))
    p.add_argument("dataset", metavar="DATASET", nargs="?",
                   help="module:callable returning a Data or HeteroData (not with --from)")
    p.add_argument("root", metavar="ROOT", nargs="?",
                   help="the dataset directory to create")
    p.add_argument("-n", "--num-parts", type=int, required=True, help="number of parts")
    p.add_argument("-p", "--partitioner",
                   help="partitioner plugin name (default: metis; streaming with --from)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="partitioner option, repeatable; VALUE is read as JSON when it "
                        "parses (true, 3, \"x\") and as a string otherwise, e.g. "
                        "-o balance_train=true")
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="read the graph from files in DIR instead of DATASET")
    p.add_argument("--memory-limit", metavar="SIZE",
                   help="with --from: peak memory of the process, e.g. 1536M or 4G "
                        "(default: half the available memory)")
    p.add_argument("--num-nodes", type=int, metavar="N",
                   help="with --from: the node count when DIR/nodes holds no array")
    p.add_argument("--feature-dtype", choices=("float16", "bfloat16"),
                   help="store the node feature matrices (floating point, 2-D such as x) in "
                        "this precision: half the bytes to serve; the model casts on the "
                        "GPU (not with --from)")
    p.add_argument("--distributed", action="store_true",
                   help="with --from, under torchrun: every rank reads a share of DIR and "
                        "writes the parts k with k %% WORLD_SIZE == RANK (gloo)")
    p.add_argument("--peer-timeout", type=float, metavar="SECONDS",
                   help="with --distributed: a rank that hears nothing from another rank (or "
                        "the job's store) for this long removes what it staged and exits "
                        "with status 75 (default: 60; a lost host otherwise holds every rank "
                        "for gloo's 30-minute timeout)")
    p.add_argument("--name", help="graph name recorded in meta.json (default: DATASET or DIR)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty ROOT")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """Turns ``["a=1", "b=true", "c=x"]`` into ``{"a": 1, "b": True, "c": "x"}``.

    Raises:
        InvalidPartitionArgumentError: if an item has no ``=`` or an empty key.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidPartitionArgumentError(
                f"option {pair!r} is not KEY=VALUE, e.g. -o balance_train=true")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        options[key.strip()] = value
    return options


def run(args: argparse.Namespace) -> int:
    """Loads the dataset (or opens the files), partitions it and prints the summary."""
    options = parse_options(args.option)
    from pyg_dist.cli.info import format_summary

    if args.from_dir is not None:
        if args.feature_dtype is not None:
            raise InvalidPartitionArgumentError(
                "--feature-dtype applies to DATASET only, not yet to --from DIR: store the "
                "node arrays in DIR/nodes as float16 .npy instead (served as they are)")
        return _run_from_files(args, options)
    if args.dataset is None or args.root is None:
        raise InvalidPartitionArgumentError(
            "give DATASET and ROOT, or --from DIR and ROOT")
    if args.memory_limit is not None or args.num_nodes is not None or args.distributed \
            or args.peer_timeout is not None:
        raise InvalidPartitionArgumentError(
            "--memory-limit, --num-nodes, --distributed and --peer-timeout apply to --from "
            "DIR only")
    from pyg_dist.datasets import load_dataset
    from pyg_dist.partitioning import partition

    data = load_dataset(args.dataset, search_cwd=True)
    reader = partition(data, args.num_parts, args.root, args.partitioner or "metis",
                       overwrite=args.overwrite, progress=not args.no_progress,
                       graph_name=args.name or args.dataset,
                       feature_dtype=args.feature_dtype, **options)
    print(f"wrote {args.root}")
    print(format_summary(reader.meta))
    return 0


def _run_from_files(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """``--from DIR ROOT``: the out-of-core path (imports no torch unless the
    partitioner needs it)."""
    from pyg_dist.cli.info import format_summary
    from pyg_dist.partitioning.file_source import FileGraph
    from pyg_dist.partitioning.memory_limit import parse_size
    from pyg_dist.partitioning.out_of_core import partition_files

    if args.root is not None or args.dataset is None:
        raise InvalidPartitionArgumentError(
            "with --from DIR give ROOT only (no DATASET): pyg-dist partition --from DIR ROOT")
    root = args.dataset
    limit = parse_size(args.memory_limit) if args.memory_limit is not None else None
    if args.distributed:
        return _run_across_ranks(args, root, limit, options)
    if args.peer_timeout is not None:
        raise InvalidPartitionArgumentError("--peer-timeout applies with --distributed only")
    graph = FileGraph.open(args.from_dir, num_nodes=args.num_nodes)
    meta = partition_files(graph, args.num_parts, root, args.partitioner or "streaming",
                           memory_limit=limit, overwrite=args.overwrite,
                           progress=not args.no_progress,
                           graph_name=args.name or args.from_dir, **options)
    print(f"wrote {root}")
    print(format_summary(meta))
    return 0


def _run_across_ranks(args: argparse.Namespace, root: str, limit: Any,
                      options: dict[str, Any]) -> int:
    """``--from DIR ROOT --distributed``: one rank of a torchrun job."""
    import datetime

    import torch.distributed as dist

    from pyg_dist.cli.info import format_summary
    from pyg_dist.partitioning.cross_host import partition_files_across_ranks
    from pyg_dist.partitioning.peer_watch import DEFAULT_TIMEOUT_S

    if args.num_nodes is not None:
        raise InvalidPartitionArgumentError(
            "--num-nodes does not apply with --distributed; add a node array to DIR/nodes")
    if args.peer_timeout is not None and not args.peer_timeout > 0:
        raise InvalidPartitionArgumentError(
            f"--peer-timeout must be a number of seconds > 0, got {args.peer_timeout}")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise InvalidPartitionArgumentError(
            "--distributed runs under torchrun (RANK and WORLD_SIZE are unset), e.g. "
            "torchrun --nproc-per-node 2 -m pyg_dist partition --from DIR ROOT -n 4 "
            "--distributed")
    owned = not dist.is_initialized()
    if owned:
        # A rank that fails stops the others within seconds; this timeout
        # is for a rank that hangs (or a host that vanishes without a reset).
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    try:
        meta = partition_files_across_ranks(
            args.from_dir, args.num_parts, root, args.partitioner or "streaming",
            memory_limit=limit, overwrite=args.overwrite, progress=not args.no_progress,
            graph_name=args.name or args.from_dir,
            peer_timeout=args.peer_timeout or DEFAULT_TIMEOUT_S, **options)
    finally:
        # A rank that fails destroys the group itself (pyg_dist.partitioning.rank_failure).
        if owned and dist.is_initialized():
            dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(f"wrote {root}")
        print(format_summary(meta))
    return 0
