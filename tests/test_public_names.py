"""Public names: every package's ``__all__`` resolves, and every
``pyg_dist.x.Y`` the documentation cites exists (docs/*.md, README.md, and
the Sphinx roles of the package's docstrings)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["pyg_dist", "pyg_dist.sampler", "pyg_dist.loader", "pyg_dist.store"]

# A dotted name starting at pyg_dist; a trailing "*" or "/" marks a glob or a
# path (``pyg_dist.store.remote_*``), not a name.
_CITED = re.compile(r"\bpyg_dist(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?![A-Za-z0-9_*/])")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data):`~?(pyg_dist(?:\.\w+)+)`")


def _resolve(dotted: str) -> object:
    """Imports the longest module prefix of ``dotted`` and gets the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise
            continue
        for attr in parts[cut:]:
            value = getattr(value, attr)
        return value
    raise ModuleNotFoundError(dotted)


def _cited_names() -> list[tuple[str, str]]:
    from pyg_dist.plugins import GROUPS  # entry-point groups share the prefix, not names

    found = set()
    for path in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        for name in _CITED.findall(path.read_text(encoding="utf-8")):
            found.add((path.name, name))
    for path in sorted((REPO / "pyg_dist").rglob("*.py")):
        for name in _ROLE.findall(path.read_text(encoding="utf-8")):
            found.add((str(path.relative_to(REPO)), name))
    return sorted((source, name) for source, name in found if name not in GROUPS)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__)), "no repeats"
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module), name
    with pytest.raises(AttributeError, match="no attribute"):
        module.no_such_name  # noqa: B018


def test_subpackages_export_what_the_top_level_does():
    import pyg_dist
    from pyg_dist import loader, sampler, store

    assert sampler.DistNeighborSampler is pyg_dist.DistNeighborSampler
    assert loader.DistNeighborLoader is pyg_dist.DistNeighborLoader
    assert store.RemoteFeatureStore is pyg_dist.RemoteFeatureStore
    assert store.RemoteGraphStore is pyg_dist.RemoteGraphStore


def test_the_docs_cite_names():
    names = {name for _, name in _cited_names()}
    assert "pyg_dist.sampler.DistNeighborSampler" in names  # the scan finds what it should


@pytest.mark.parametrize("source, name", _cited_names())
def test_every_name_the_docs_cite_exists(source, name):
    _resolve(name)
