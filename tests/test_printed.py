"""XGrammar's printed EBNF read back as the grammar it prints (cfgzip_lab.grammar.printed)."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from cfgzip_lab.grammar.printed import printed_ebnf, unambiguous_escapes
from cfgzip_lab.grammar.sources import to_ebnf
from cfgzip_lab.native.from_xgrammar import native_matcher

# text, expected
ESCAPES = [
    (r'root ::= "\xe9a"', r'root ::= "\u00e9a"'),  # é then a, not U+0E9A
    (r'root ::= "\xe9"', r'root ::= "\xe9"'),  # nothing follows: unchanged
    (r'root ::= "\xe9z"', r'root ::= "\xe9z"'),  # not a hex digit after it
    (r"root ::= [\xe0-\xe9F]", r"root ::= [\xe0-\u00e9F]"),
    (r'root ::= "\\x41"', r'root ::= "\\x41"'),  # an escaped backslash, then x41
    (r'root ::= "\"\xe9F"', r'root ::= "\"\u00e9F"'),
    (r'root ::= "\x41BC"', r'root ::= "\u0041BC"'),
]


@pytest.mark.parametrize("text, expected", ESCAPES)
def test_unambiguous_escapes(text, expected):
    assert unambiguous_escapes(text) == expected


@pytest.mark.parametrize("ebnf", ['root ::= "éa"', 'root ::= [à-é] "F" | "ÿ0"', 'root ::= "a\\\\xe9b"'])
def test_printed_ebnf_reads_back_as_the_grammar_xgrammar_prints(ebnf):
    grammar = xgr.Grammar.from_ebnf(ebnf)
    assert str(xgr.Grammar.from_ebnf(printed_ebnf(grammar))) == str(grammar)


def test_a_schema_enum_with_an_accented_letter_before_a_hex_digit():
    source = to_ebnf('{"enum": ["éa", "café"]}', kind="json_schema")
    assert r"\u00e9a" in source.ebnf and "\\xe9a" not in source.ebnf


def test_native_matcher_reads_the_characters_xgrammar_compiled():
    info = xgr.TokenizerInfo([b"\xc3", b"\xa9", b"a", b"</s>"], xgr.VocabType.RAW, stop_token_ids=[3])
    matcher = native_matcher(xgr.GrammarCompiler(info).compile_grammar('root ::= "éa"'))
    assert matcher.find_jump_forward_string() == "éa"
    assert matcher.accept_token(0) and matcher.find_jump_forward_string() == ""
    assert matcher.accept_token(1) and matcher.accept_token(2) and matcher.accept_token(3)


def test_a_text_the_quick_check_passes_is_what_the_rewrite_gives():
    # the early return (no "\x" with three hex digits after it) against the rewrite itself, over short
    # texts of backslashes, x, hex digits and other letters: every text of up to 6 characters
    import itertools
    import re

    from cfgzip_lab.grammar import printed

    def rewritten(text: str) -> str:
        return printed._ESCAPE.sub(lambda m: "\\u00" + m.group(1)[1:] if len(m.group(1)) == 3 else m.group(0), text)

    quick = 0
    for n in range(7):
        for chars in itertools.product("\\xe9Fz", repeat=n):
            text = "".join(chars)
            assert unambiguous_escapes(text) == rewritten(text), text
            quick += re.search(r"\\x[0-9a-fA-F]{3}", text) is None
    assert quick > 1000  # the early return was taken (and agreed)
