"""Substring(...): runs of consecutive chunks, checked on XGrammar's own brute-force cases."""

from __future__ import annotations

import itertools

import pytest
from grammar_tools import xgrammar_matcher, xgrammar_matches

from cfgzip_lab.pipeline import compile_grammar


def _literal(chunk: str) -> str:
    return '"' + chunk.replace("\\", "\\\\").replace('"', '\\"').replace("\0", "\\0") + '"'


# XGrammar's tests/python/test_grammar_substring_macro.py brute-force chunk lists, and more
@pytest.mark.parametrize(
    "chunks",
    [
        ["a", "b", "a", "b", "b"],
        ["ab", "a", "b", "ba"],
        ["ab", "abc"],
        ["a", "", "a", ""],
        ["aa", "aa", "aa"],
        ["é", "\0", "ab"],
        [],
        ["abc", "de", "fg"],
    ],  # fmt: skip
    ids=lambda chunks: "+".join(chunks) or "none",
)
def test_substring_language_is_every_run_of_chunks(chunks: list[str]) -> None:
    grammar = "root ::= Substring(" + ", ".join(_literal(c) for c in chunks) + ")"
    expected = {"".join(chunks[i:j]).encode() for i in range(len(chunks) + 1) for j in range(i, len(chunks) + 1)}
    compiled = compile_grammar(grammar)
    matcher = xgrammar_matcher(grammar)
    alphabet = sorted({b for chunk in chunks for b in chunk.encode()}) or [ord("a")]
    # Every string up to the length where that stays under ~1,500 strings, every member and
    # every member with one more byte.
    longest = max(length for length in range(1, 9) if len(alphabet) ** length <= 1_500)
    probes = {bytes(s) for n in range(longest + 1) for s in itertools.product(alphabet, repeat=n)}
    probes |= expected | {member + bytes([b]) for member in expected for b in alphabet}
    for data in sorted(probes):
        assert compiled.gnf.accepts(data) == (data in expected), data
        assert xgrammar_matches(matcher, data) == (data in expected), data


@pytest.mark.parametrize(
    "grammar, accepted, refused",
    [
        ('root ::= "x" Substring("ab", "cd") "y"', [b"xy", b"xabcdy", b"xcdy"], [b"xbcy", b"xacy"]),
        ('root ::= Substring("ab") | "z"', [b"ab", b"z", b""], [b"az"]),
        ('root ::= Substring("ab")* "."', [b".", b"abab."], [b"aba."]),
        ('root ::= r "z"\nr ::= Substring("ab")', [b"z", b"abz"], [b"ab"]),
    ],
)
def test_substring_in_context(grammar: str, accepted: list[bytes], refused: list[bytes]) -> None:
    compiled = compile_grammar(grammar)
    matcher = xgrammar_matcher(grammar)
    for data in accepted:
        assert compiled.gnf.accepts(data) and xgrammar_matches(matcher, data), data
    for data in refused:
        assert not compiled.gnf.accepts(data) and not xgrammar_matches(matcher, data), data
