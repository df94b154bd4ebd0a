"""``pyg-dist info ROOT``: what a partitioned dataset holds, part by part."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist info``."""
    p = sub.add_parser(
        "info", help="show a partitioned dataset: nodes, edges, halo, edge cut, balance",
        description=(
            "Prints what meta.json records about a dataset written by 'pyg-dist "
            "partition': per part its owned nodes, stored (incoming) edges, halo nodes "
            "(sources owned by other parts), cut edges and training nodes, then the total "
            "edge cut and the balance (largest part / mean part); for a heterogeneous "
            "graph also per node type and edge type."))
    p.add_argument("root", help="the dataset directory (holding meta.json)")
    p.add_argument("--verify", action="store_true",
                   help="also check the sha256 of every file (reads all of them)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the summary of the dataset at ``args.root``."""
    from pyg_dist.partitioning import PartitionReader

    reader = PartitionReader(args.root, verify=args.verify)
    if args.verify:
        reader.verify_all()
    print(format_summary(reader.meta))
    if args.verify:
        print(f"checksums: all {len(reader.meta['files'])} files verified")
    return 0


def format_summary(meta: dict[str, Any]) -> str:
    """A human-readable summary of a dataset's ``meta.json``."""
    partitioner = meta.get("partitioner", {})
    options = ", ".join(f"{k}={v}" for k, v in sorted(partitioner.get("options", {}).items()))
    lines = [
        f"format: {meta['format']} v{meta['format_version']}"
        + (f"   graph: {meta['graph_name']}" if meta.get("graph_name") else ""),
        f"nodes: {meta['num_nodes']}   edges: {meta['num_edges']}   parts: {meta['num_parts']}",
        f"partitioner: {partitioner.get('name')} ({options or 'default options'})"
        + (f" from {partitioner['distribution']}" if partitioner.get("distribution") else ""),
        "",
    ]
    header = ("part", "nodes", "edges", "halo", "cut edges", "train", "nodes/mean")
    mean = meta["num_nodes"] / meta["num_parts"]
    rows = [header]
    for part in meta["parts"]:
        s = part["stats"]
        rows.append((str(part["part"]), str(s["num_nodes"]), str(s["num_edges"]),
                     str(s["num_halo_nodes"]), str(s["num_cut_edges"]),
                     str(s["num_train_nodes"]), f"{s['num_nodes'] / mean:.3f}"))
    lines += _table(rows)
    stats = meta["stats"]
    lines += [
        "",
        f"edge cut: {stats['edge_cut']} of {meta['num_edges']} edges "
        f"({100 * stats['edge_cut_fraction']:.2f}%)   halo nodes: {stats['total_halo_nodes']}",
        f"balance (largest / mean): nodes {stats['node_balance']:.3f}   "
        f"edges {stats['edge_balance']:.3f}",
    ]
    if meta["is_hetero"]:
        lines += ["", *_type_table(meta)]
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned columns: the first (names) to the left, numbers to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))) for r in rows]


def _type_table(meta: dict[str, Any]) -> list[str]:
    """Per node type and edge type: totals, count per part, halo / cut, balance."""
    def per_part(kind: str, index: int, key: str) -> list[int]:
        return [part[kind][index][key] for part in meta["parts"]]

    nodes = [("node type", "nodes", "per part", "halo", "train", "balance")]
    for i, entry in enumerate(meta["node_types"]):
        nodes.append((entry["type"], str(entry["num_nodes"]),
                      "/".join(map(str, per_part("node_types", i, "num_nodes"))),
                      str(sum(per_part("node_types", i, "num_halo_nodes"))),
                      str(sum(per_part("node_types", i, "num_train_nodes"))),
                      f"{entry['balance']:.3f}"))
    edges = [("edge type", "edges", "per part", "cut", "cut %", "balance")]
    for i, entry in enumerate(meta["edge_types"]):
        total = entry["num_edges"]
        edges.append((" -> ".join(entry["type"][::2]) + f" ({entry['type'][1]})", str(total),
                      "/".join(map(str, per_part("edge_types", i, "num_edges"))),
                      str(entry["edge_cut"]),
                      f"{100 * entry['edge_cut'] / total:.2f}" if total else "0.00",
                      f"{entry['balance']:.3f}"))
    return [*_table(nodes), "", *_table(edges)]
