"""The table ``pyg-dist bench`` prints, its ratios and its JSON file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from pyg_dist_bench.timing import Row

if TYPE_CHECKING:
    from pyg_dist_bench.bench_config import BenchConfig


def ratios(rows: list[Row], cfg: BenchConfig, baselines: Sequence[str] = ()) -> dict[str, float]:
    """The ratios the project's targets are stated in.

    Args:
        rows: Every measured row.
        cfg: The configuration the rows were measured with.
        baselines: Names of the rows pyg-dist's loader rows are compared
            with (the benchmarks package's rows, when it ran).

    Returns:
        ``{description: ratio}`` for every ratio whose rows were measured.
    """
    by = {r.name: r for r in rows}
    k = cfg.prefetch
    out: dict[str, float] = {}

    def put(name: str, num: Optional[Row], den: Optional[Row], attr: str) -> None:
        if num is not None and den is not None and getattr(den, attr):
            out[name] = getattr(num, attr) / getattr(den, attr)

    for row in (f"pyg-dist K={k}", f"pyg-dist K={k} over TCP"):
        put(f"{row} / pyg-local (seeds/s)", by.get(row), by.get("pyg-local NeighborLoader"),
            "seeds_per_s")
    multi = next((r for r in rows if r.name.startswith(f"pyg-dist K={k} x")), None)
    for baseline in baselines:
        put(f"pyg-dist K={k} / {baseline} (seeds/s)", by.get(f"pyg-dist K={k}"),
            by.get(baseline), "seeds_per_s")
        put(f"pyg-dist K={k} over TCP / {baseline} (seeds/s)",
            by.get(f"pyg-dist K={k} over TCP"), by.get(baseline), "seeds_per_s")
        if multi is not None:
            put(f"{multi.name} / {baseline} (seeds/s)", multi, by.get(baseline),
                "seeds_per_s")
    compute, loader = by.get("epoch compute only"), by.get(f"epoch loader only K={k}")
    both = by.get(f"epoch train K={k}")
    if compute and loader and both:
        out[f"epoch K={k} / max(compute, loader)"] = both.seconds / max(compute.seconds,
                                                                        loader.seconds)
    learned = by.get(f"epoch train K={k}, DistEmbedding")
    gradient = by.get(f"epoch train K={k}, input gradient")
    put(f"epoch K={k} DistEmbedding / fixed features (seeds/s)", learned, both, "seeds_per_s")
    put(f"epoch K={k} input gradient / fixed features (seeds/s)", gradient, both, "seeds_per_s")
    put(f"epoch K={k} local nn.Embedding / fixed features (seeds/s)",
        by.get(f"epoch train K={k}, local nn.Embedding"), both, "seeds_per_s")
    put(f"epoch K={k} DistEmbedding / input gradient (seeds/s)", learned, gradient,
        "seeds_per_s")
    for kk in (0, k):
        put(f"pyg-dist K={kk} server hops / hop by hop (seeds/s)",
            by.get(f"pyg-dist K={kk} server hops"), by.get(f"pyg-dist K={kk}"), "seeds_per_s")
        put(f"pyg-dist K={kk} colocated / pyg-local (seeds/s)",
            by.get(f"pyg-dist K={kk} colocated"), by.get("pyg-local NeighborLoader"),
            "seeds_per_s")
    for delay in cfg.link_delays_ms:
        put(f"epoch K={k} / K=0 @{delay:g}ms (time)", by.get(f"epoch train K={k} @{delay:g}ms"),
            by.get(f"epoch train K=0 @{delay:g}ms"), "seconds")
        put(f"epoch K=0 @{delay:g}ms / no delay (time)", by.get(f"epoch train K=0 @{delay:g}ms"),
            by.get("epoch train K=0"), "seconds")
        hop = by.get(f"loader K=0 @{delay:g}ms")
        for suffix in ("", ", servers apart"):
            put(f"loader K=0 @{delay:g}ms server hops{suffix} / hop by hop (time)",
                by.get(f"loader K=0 @{delay:g}ms server hops{suffix}"), hop, "seconds")
    return out


def _short(note: str, width: int = 70) -> str:
    # The table stays readable; the full note (what was stood in) is in the JSON.
    return note if len(note) <= width else note[: width - 14] + "... (see JSON)"


def format_table(result: dict[str, Any]) -> str:
    """Renders the rows and ratios of :func:`~pyg_dist_bench.runner.run_bench`'s
    result as a plain-text table.

    Args:
        result: ``{"rows": [Row.as_dict(), ...], "ratios": {...}}``.

    Returns:
        The table, one line per row, then one line per ratio.
    """
    head = f"{'row':46} {'s':>8} {'batches':>7} {'seeds/s':>10} {'edges/s':>12} {'feat MB/s':>10}"
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['name']:46} {r['seconds']:8.2f} {r['batches']:7d} "
                     f"{r['seeds_per_s']:10.0f} {r['edges_per_s']:12.0f} "
                     f"{r['feature_mb_per_s']:10.1f}"
                     + (f"  {_short(r['note'])}" if r["note"] else ""))
    lines.append("")
    for name, value in result["ratios"].items():
        lines.append(f"{name:68} {value:6.2f}x")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str) -> None:
    """Writes the result as JSON (for plotting or CI artefacts).

    Args:
        result: What :func:`~pyg_dist_bench.runner.run_bench` returned.
        path: The file to write (replaced if it exists).
    """
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
