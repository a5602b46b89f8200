"""Test tools shared by the model, engine and verifier test modules: the reference JSON
grammar, and XGrammar as referee over a vocabulary table."""

from __future__ import annotations

import xgrammar as xgr
from paths import BUILTIN_JSON, BUNDLED_DIR

JSON_BUILTIN = BUILTIN_JSON
if not JSON_BUILTIN.exists():  # the package's own copy of the same language
    JSON_BUILTIN = BUNDLED_DIR / "json.ebnf"
#: XGrammar's built-in JSON grammar where the shared copy is at hand, else ours.
JSON_BUILTIN_GRAMMAR = JSON_BUILTIN.read_text()


def is_prefix(grammar_text: str, data: bytes, vocab) -> bool:
    """XGrammar's own matcher, fed bytes (not tokens): is ``data`` a prefix of a sentence?"""
    compiled = xgr.GrammarCompiler(vocab.to_xgrammar()).compile_grammar(grammar_text)
    return not data or bool(xgr.GrammarMatcher(compiled).accept_string(data))
