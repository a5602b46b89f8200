"""Test tools shared by the model test modules: XGrammar as referee over a vocabulary table."""
from __future__ import annotations

import xgrammar as xgr


def is_prefix(grammar_text: str, data: bytes, vocab) -> bool:
    """XGrammar's own matcher, fed bytes (not tokens): is ``data`` a prefix of a sentence?"""
    compiled = xgr.GrammarCompiler(vocab.to_xgrammar()).compile_grammar(grammar_text)
    return not data or bool(xgr.GrammarMatcher(compiled).accept_string(data))
