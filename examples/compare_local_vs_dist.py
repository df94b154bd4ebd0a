"""Test accuracy of train_sage_local.py versus train_sage_dist.py, mean over seeds.

    .venv/bin/python examples/compare_local_vs_dist.py --seeds 0 1 2

Partitions Cora into ``--parts`` parts in a temporary directory, runs the
single-process example once per seed, and the distributed one once per seed
under ``pyg-dist launch ROOT --nproc --nproc`` (DDP over gloo), with the same
hyper-parameters, and prints every figure, both means and their difference.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_acc(cmd: list[str]) -> float:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    found = re.findall(r"^test_acc=([0-9.]+)$", out.stdout, flags=re.M)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return float(found[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("train_args", nargs="*", help="extra arguments for both examples, after --")
    args = p.parse_args()

    from pyg_dist.datasets import cora
    from pyg_dist.partitioning.writer import partition

    with tempfile.TemporaryDirectory(prefix="pyg-dist-compare-") as tmp:
        root = f"{tmp}/cora{args.parts}"
        partition(cora(), args.parts, root)
        local, dist = [], []
        for seed in args.seeds:
            common = ["--seed", str(seed), *args.train_args]
            local.append(test_acc([sys.executable, str(HERE / "train_sage_local.py"), *common]))
            dist.append(test_acc([sys.executable, "-m", "pyg_dist", "launch", root, "--nproc",
                                  str(args.nproc), "--", str(HERE / "train_sage_dist.py"),
                                  *common]))
            print(f"seed {seed}: local {local[-1]:.4f}  dist ({args.parts} parts, "
                  f"{args.nproc} ranks) {dist[-1]:.4f}", flush=True)
    mean_local, mean_dist = statistics.mean(local), statistics.mean(dist)
    print(f"mean over {len(args.seeds)} seeds: local {mean_local:.4f}  dist {mean_dist:.4f}  "
          f"difference {100 * (mean_dist - mean_local):+.2f} points")


if __name__ == "__main__":
    main()
