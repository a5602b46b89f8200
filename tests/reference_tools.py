"""Test tools shared by the model, engine and verifier test modules: the reference JSON
grammar, and XGrammar as referee over a vocabulary table."""
from __future__ import annotations

from pathlib import Path

import xgrammar as xgr

ROOT = Path(__file__).resolve().parents[1]
JSON_BUILTIN = Path("/work/shared/grammars/third_party/xgrammar_builtin_json.ebnf")
if not JSON_BUILTIN.exists():  # the repository's own copy of the same language
    JSON_BUILTIN = ROOT / "grammars" / "json.ebnf"
#: XGrammar's built-in JSON grammar where the shared copy is at hand, else ours.
JSON_BUILTIN_GRAMMAR = JSON_BUILTIN.read_text()


def is_prefix(grammar_text: str, data: bytes, vocab) -> bool:
    """XGrammar's own matcher, fed bytes (not tokens): is ``data`` a prefix of a sentence?"""
    compiled = xgr.GrammarCompiler(vocab.to_xgrammar()).compile_grammar(grammar_text)
    return not data or bool(xgr.GrammarMatcher(compiled).accept_string(data))
