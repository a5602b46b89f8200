"""The byte CFG's fixpoints in C (``csrc/cfg_passes.c``) against their Python references.

``dead_ends.productive_nonterminals`` (switched by ``dead_ends.IN_C``) and ``gnf._reachable_rules`` (by
``gnf.PASSES_IN_C``) must give the same sets, and so must the scans of every symbol (``CFG.byte_sets``, by
``cfg.BYTE_SETS_IN_C``; ``dead_ends._every_symbol_productive``, and so the dead ends, by ``dead_ends.IN_C``): on the bundled grammars, XGrammar's test grammars, a MaskBench
sample and the JSON-Schema-Test-Suite, and on small grammars made for the edge cases (an empty class, a name
with no rule, counted repetitions with min 0 and 1, a chain written top-down).
"""

from __future__ import annotations

import gzip
import json
import random

import pytest
from paths import BUNDLED, CORPORA, MASKBENCH

from cfgzip_lab._binding import kernel
from cfgzip_lab.grammar import cfg as cfg_module
from cfgzip_lab.grammar import dead_ends
from cfgzip_lab.grammar import gnf as gnf_module
from cfgzip_lab.grammar.cfg import CFG, ByteSet
from cfgzip_lab.grammar.counted import Counted
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.pipeline import compile_grammar

pytestmark = pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built here")

A, EMPTY_CLASS = ByteSet.of(b"a"), ByteSet(0)


def _both(cfg: CFG, monkeypatch) -> tuple:
    got = []
    for in_c in (True, False):
        monkeypatch.setattr(dead_ends, "IN_C", in_c)
        monkeypatch.setattr(gnf_module, "PASSES_IN_C", in_c)
        monkeypatch.setattr(cfg_module, "BYTE_SETS_IN_C", in_c)
        productive = dead_ends.productive_nonterminals(cfg)
        sets = cfg.byte_sets()
        assert all(s.__class__ is ByteSet for s in sets)
        every = dead_ends._every_symbol_productive(cfg, productive)
        got.append((productive, gnf_module._reachable_rules(cfg), sets, every, dead_ends.dead_ends(cfg, productive)))
    return tuple(got)


def _cfgs() -> list[tuple[str, CFG]]:
    texts = [(p.stem, p.read_text(encoding="utf-8"), "ebnf") for p in BUNDLED]
    rng = random.Random(3)
    ebnf = sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))
    texts += [(p.name, p.read_text(encoding="utf-8"), "ebnf") for p in rng.sample(ebnf, min(20, len(ebnf)))]
    suite = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("[0-9][0-9][0-9][0-9].json"))
    texts += [(p.name, p.read_text(encoding="utf-8"), "json_schema") for p in rng.sample(suite, min(40, len(suite)))]
    if MASKBENCH.exists():
        with gzip.open(MASKBENCH, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        texts += [(r["name"], json.dumps(r["schema"]), "json_schema") for r in rng.sample(rows, 60)]
    out = []
    for name, text, kind in texts:
        try:
            out.append((name, compile_grammar(text, kind=kind).cfg))
        except GrammarError:
            continue
    return out


def test_corpus_grammars_give_the_python_sets(monkeypatch):
    cfgs = _cfgs()
    assert len(cfgs) > 50
    for name, cfg in cfgs:
        in_c, in_python = _both(cfg, monkeypatch)
        assert in_c == in_python, name


def _cfg(rules: dict, counted: dict | None = None, start: str = "root") -> CFG:
    return CFG(start=start, rules=rules, counted=counted or {})


# name__cfg: small grammars, each an edge case of the two fixpoints
EDGE_CASES = {
    "empty class": _cfg({"root": [("x",), (A, "y")], "x": [(EMPTY_CLASS,)], "y": [(A,)]}),
    "name with no rule": _cfg({"root": [("ghost",), ("y", "y")], "y": [(A, "root"), ()]}),
    "recursion with no way out": _cfg({"root": [("r",), (A,)], "r": [(A, "r")]}),
    "counted min 0 over a dead item": _cfg({"root": [("k",)], "k": [], "d": [("d",)]}, {"k": Counted("d", 0, 40)}),
    "counted min 1 over a dead item": _cfg({"root": [("k", A)], "k": [], "d": [("d",)]}, {"k": Counted("d", 1, 40)}),
    "counted over a live item": _cfg({"root": [("k",)], "k": [], "i": [(A,)]}, {"k": Counted("i", 2, 40)}),
    "unreachable rules": _cfg({"root": [(A,)], "lost": [("root", "lost2")], "lost2": [(A,)]}),
    "chain written top-down": _cfg({f"r{i}": [(A, f"r{i + 1}")] for i in range(800)} | {"r800": [(A,)]}, start="r0"),
    "counted over a dead item, unreachable": _cfg({"root": [(A,)], "k": [], "d": [("d",)]}, {"k": Counted("d", 1, 4)}),
    "token atoms": CFG(start="root", rules={"root": [(A, ByteSet(1 << 300))]}, tokens=ByteSet(1 << 300 | 1 << 301)),
    "chain with a dead end at the bottom": _cfg(
        {f"r{i}": [(A, f"r{i + 1}")] for i in range(50)} | {"r50": [("r50",)]}, start="r0"
    ),
}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_cases_give_the_python_sets(name, monkeypatch):
    in_c, in_python = _both(EDGE_CASES[name], monkeypatch)
    assert in_c == in_python
