"""Where the tests find grammar files: the bundled ones (package data, through
:mod:`cfgzip_lab.bundled`) and the third-party corpus beside the repository.

The corpus lives in ``../shared/grammars/third_party`` (40 grammars from other projects, see
SOURCES.md there) and ``../shared/corpora``; this module is the one place that spells those paths
(``CFGZIP_SHARED`` moves them, for a clone away from ``../shared``). Tests that need it skip
or shrink when it is not checked out.
"""

from __future__ import annotations

import os
from pathlib import Path

from cfgzip_lab.bundled import bundled_dir, bundled_grammars, bundled_samples

__all__ = [
    "REPO",
    "BUNDLED_DIR",
    "BUNDLED",
    "SHARED",
    "CORPORA",
    "THIRD_PARTY",
    "BUILTIN_JSON",
    "bundled_samples",
    "third_party_grammars",
    "grammar_id",
]

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIR = bundled_dir()
#: The bundled grammar files, sorted by name.
BUNDLED: list[Path] = list(bundled_grammars().values())
#: ``../shared`` beside the checkout, or wherever ``CFGZIP_SHARED`` says (a clone elsewhere)
SHARED = Path(os.environ.get("CFGZIP_SHARED", REPO.parent / "shared"))
#: Inputs other projects wrote (JSON-Schema-Test-Suite, XGrammar's test grammars, regressions).
CORPORA = SHARED / "corpora"
MASKBENCH = CORPORA / "maskbench" / "maskbench.jsonl.gz"
THIRD_PARTY = SHARED / "grammars" / "third_party"
#: XGrammar's built-in JSON grammar, as text in the corpus (it may be absent).
BUILTIN_JSON = THIRD_PARTY / "xgrammar_builtin_json.ebnf"


def third_party_grammars() -> list[Path]:
    """Every ``.ebnf`` and ``.gbnf`` file of the corpus, sorted; ``[]`` where it is not checked out."""
    if not THIRD_PARTY.is_dir():
        return []
    return sorted(p for p in THIRD_PARTY.rglob("*") if p.suffix in (".ebnf", ".gbnf"))


def grammar_id(path: Path) -> str:
    """A short test id: the bundled grammar's file name, or the path inside the corpus."""
    return str(path.relative_to(THIRD_PARTY)) if THIRD_PARTY in path.parents else path.name


def maskbench_row(name: str) -> dict:
    """One MaskBench file's row (``schema``, ``tests``...) by its name, with or without ``.json``;
    the test is skipped where MaskBench is not checked out, and fails where the name is not in it."""
    import gzip
    import json

    import pytest

    if not MASKBENCH.exists():
        pytest.skip(f"{MASKBENCH} is not checked out")
    wanted = name.removesuffix(".json")
    with gzip.open(MASKBENCH, "rt", encoding="utf-8") as fh:
        for line in fh:
            if wanted in line:
                row = json.loads(line)
                if row["name"].removesuffix(".json") == wanted:
                    return row
    pytest.fail(f"{name} is not in {MASKBENCH}")
