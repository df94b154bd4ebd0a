"""docs/configuration.md lists every setting pyg-dist reads, and nothing else:
every ``RpcConfig`` field with its variable (or, for the few set in code
only, in their own table with the reason), and every ``PYG_DIST_*`` name
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


def _code_only_fields() -> list[str]:
    """The first cells of the table under "Set in code only"."""
    section = DOC.read_text().split("### Set in code only", 1)[1].split("\n#", 1)[0]
    return [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]


def test_every_rpc_config_field_has_its_variable_or_is_listed_as_code_only():
    rows = {row[0]: row for row in _table_rows()}
    fields = [f.name for f in dataclasses.fields(RpcConfig)]
    code_only = _code_only_fields()
    assert set(ENV_VARS) <= set(fields), "a variable of no field"
    assert sorted(code_only) == sorted(set(fields) - set(ENV_VARS)), \
        "a field without a variable missing from 'Set in code only', or listed with one"
    for field in ENV_VARS:
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
