"""The grammars the benchmark scripts run over: the bundled ones (package data, through
:mod:`cfgzip_lab.bundled`) and the third-party corpus beside the repository.

The corpus lives in ``../shared/grammars/third_party`` (40 grammars from other projects, see
SOURCES.md there); this module is the one place in ``benchmarks/`` that spells that path.
Scripts import it as ``corpus`` (they run with ``benchmarks/`` first on ``sys.path``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # a checkout without `pip install -e .` still finds cfgzip_lab
    sys.path.insert(1, str(REPO))

from cfgzip_lab.bundled import bundled_grammars  # noqa: E402

THIRD_PARTY = Path(os.environ.get("CFGZIP_SHARED", REPO.parent / "shared")) / "grammars" / "third_party"


def third_party_grammars() -> list[Path]:
    """Every ``.ebnf`` and ``.gbnf`` file of the corpus, sorted; ``[]`` where it is not checked out."""
    if not THIRD_PARTY.is_dir():
        return []
    return sorted(p for p in THIRD_PARTY.rglob("*") if p.suffix in (".ebnf", ".gbnf"))


def all_grammars() -> list[Path]:
    """The bundled grammars (by name), then the corpus (by path)."""
    return list(bundled_grammars().values()) + third_party_grammars()


def grammar_name(path: Path) -> str:
    """The path inside the corpus (``llama.cpp/list.gbnf``), or a bundled grammar's name (``json``)."""
    resolved, corpus = Path(path).resolve(), THIRD_PARTY.resolve()
    return str(resolved.relative_to(corpus)) if corpus in resolved.parents else Path(path).stem
