"""docs/configuration.md lists every setting pyg-dist reads, and nothing else:
every ``RpcConfig`` field with its variable, and every ``PYG_DIST_*`` name
that the library, its plugins or its deployment recipes read."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pyg_dist.rpc.config import ENV_VARS, RpcConfig

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
# Where settings are read: the library, the bundled plugins, the recipes.
SOURCES = [*(REPO / "pyg_dist").rglob("*.py"), *(REPO / "plugins").rglob("*.py"),
           *(REPO / "examples" / "deploy").rglob("*.*")]
# A name split across string literals ends in "_" here; its parts are read whole elsewhere.
VARIABLE = re.compile(r"\bPYG_DIST_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])")


def _table_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| `PYG_DIST_"):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def test_every_rpc_config_field_has_its_variable_in_the_table():
    rows = {row[0]: row for row in _table_rows()}
    fields = [f.name for f in dataclasses.fields(RpcConfig)]
    assert sorted(ENV_VARS) == sorted(fields), "a field without a variable, or the reverse"
    for field in fields:
        var = ENV_VARS[field]
        assert var in rows, f"{var} ({field}) missing from docs/configuration.md"
        assert rows[var][1] == field, rows[var]


def test_the_table_names_exactly_the_variables_the_code_reads():
    read = set()
    for path in SOURCES:
        read |= set(VARIABLE.findall(path.read_text(errors="replace")))
    documented = {row[0] for row in _table_rows()}
    assert len(documented) == len(_table_rows()), "a variable listed twice"
    assert read - documented == set(), "read but not documented"
    assert documented - read == set(), "documented but read nowhere"
