"""``pyg-dist partition DATASET ROOT``: partition a graph once, offline."""

from __future__ import annotations

import argparse
import json
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
            "nothing is left behind. 'pyg-dist plugins' lists the partitioners."))
    p.add_argument("dataset", metavar="DATASET",
                   help="module:callable returning a Data or HeteroData")
    p.add_argument("root", metavar="ROOT", help="the dataset directory to create")
    p.add_argument("-n", "--num-parts", type=int, required=True, help="number of parts")
    p.add_argument("-p", "--partitioner", default="metis",
                   help="partitioner plugin name (default: metis)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="partitioner option, repeatable; VALUE is read as JSON when it "
                        "parses (true, 3, \"x\") and as a string otherwise, e.g. "
                        "-o balance_train=true")
    p.add_argument("--name", help="graph name recorded in meta.json (default: DATASET)")
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
    """Loads the dataset, partitions it and prints the summary."""
    options = parse_options(args.option)
    from pyg_dist.cli.info import format_summary
    from pyg_dist.datasets import load_dataset
    from pyg_dist.partitioning import partition

    data = load_dataset(args.dataset, search_cwd=True)
    reader = partition(data, args.num_parts, args.root, args.partitioner,
                       overwrite=args.overwrite, progress=not args.no_progress,
                       graph_name=args.name or args.dataset, **options)
    print(f"wrote {args.root}")
    print(format_summary(reader.meta))
    return 0
