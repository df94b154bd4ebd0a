"""The library's wheel holds no benchmark harness, and without the benchmarks
package ``pyg-dist bench`` says how to install it.

Both tests use a wheel built from this checkout (from a copy of it, so that
setuptools' build/ and egg-info stay out of the repository). The second runs
that wheel, unpacked, in an interpreter started with ``-S``: no site
directory is processed, so none of the venv's ``.pth`` files run and the
editable installs they would activate (pyg-dist's and the benchmarks
package's) are not importable. The venv's site-packages directory is still
on ``PYTHONPATH``, so every ordinary dependency (torch, PyG, pyzmq, ...) is
there exactly as installed: the one thing missing is the benchmarks package,
as after a plain ``pip install pyg-dist``. The test checks that premise in
the same environment before it checks the message.
"""

from __future__ import annotations

import ast
import email
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "benchmarks" / "pyg_dist_bench"
# What the library's own packages are; anything else in the wheel is foreign.
LIBRARY_PACKAGES = {"pyg_dist", "pyg_dist_plugins"}
# The baseline's fingerprints: PyG's deprecated distributed package and
# operator registration under torch.ops (the pyg-lib stand-in).
HARNESS_IMPORTS = ("torch_geometric.distributed", "torch.library")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The pyg-dist wheel built from a copy of this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".tox", "build", "dist", "*.egg-info", "__pycache__",
        ".pytest_cache", ".ruff_cache"))
    out = tmp / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("pyg_dist-*.whl")
    return path


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.library":
            names.add("torch.library")
    return names


def test_wheel_holds_no_benchmark_harness_and_no_psutil(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        modules = {n: zf.read(n).decode() for n in names if n.endswith(".py")}
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_string(zf.read(meta_name).decode())
    assert modules, names
    assert {n.split("/")[0] for n in modules} == LIBRARY_PACKAGES
    for name, source in modules.items():
        found = {i for i in _imports(source)
                 if any(i == h or i.startswith(h + ".") for h in HARNESS_IMPORTS)}
        assert not found, f"{name} imports harness-only modules: {sorted(found)}"
    # psutil is for the tests (extra == "test"), never for the library.
    runtime = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert runtime and not [r for r in runtime if r.lower().startswith("psutil")], runtime
    harness_files = {p.name for p in HARNESS.glob("*.py")} - {"__init__.py"}
    assert harness_files, f"no harness modules found under {HARNESS}"
    shipped = {n for n in modules if n.rsplit("/", 1)[-1] in harness_files}
    assert not shipped, f"harness modules in the wheel: {sorted(shipped)}"


def _run_without_harness(target: Path, *args: str) -> subprocess.CompletedProcess:
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), *sorted(site)]),
               PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-S", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=target)


@pytest.fixture(scope="module")
def without_harness(wheel, tmp_path_factory) -> Path:
    """The wheel unpacked (a pure-Python wheel unpacked is an install), checked
    to be a place where pyg-dist and its dependencies import and the benchmarks
    package does not, though it is installed in this venv."""
    import importlib.util

    assert importlib.util.find_spec("pyg_dist_bench") is not None
    target = tmp_path_factory.mktemp("without-harness")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    probe = _run_without_harness(target, "-c", (
        "import importlib.util as u, pyg_dist; "
        "print(*[u.find_spec(m) is not None for m in "
        "('torch', 'torch_geometric', 'zmq', 'pyg_dist_bench')], pyg_dist.__file__)"))
    assert probe.returncode == 0, probe.stderr[-3000:]
    *found, origin = probe.stdout.split()
    assert found == ["True", "True", "True", "False"], probe.stdout
    assert Path(origin).is_relative_to(target), origin
    return target


@pytest.mark.parametrize("option", [[], ["--baseline"], ["--link-delay-ms", "1"],
                                    ["--num-nodes", "1000"]])
def test_bench_without_the_benchmarks_package_names_the_install(without_harness, option):
    done = _run_without_harness(without_harness, "-m", "pyg_dist", "bench", *option)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""  # stopped before any work
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pyg-dist bench: error: pyg-dist bench comes with pyg-dist's "
                               "benchmarks package (pyg_dist_bench)"), lines[0]
    assert lines[0].endswith("in a pyg-dist checkout run: pip install -e benchmarks/")


def test_other_commands_still_refuse_unknown_arguments_without_the_package(
        without_harness):
    done = _run_without_harness(without_harness, "-m", "pyg_dist", "info", "/nonexistent",
                                "--no-such-option")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "unrecognized arguments: --no-such-option" in done.stderr
