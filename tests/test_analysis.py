"""NULLABLE / FIRST / left corners of the source rules, and the bytes expected after a prefix."""

from __future__ import annotations

import pytest

from cfgzip_lab.grammar.analysis import analyse, describe_bytes, expected_bytes, format_code_points
from cfgzip_lab.grammar.cfg import ByteSet
from cfgzip_lab.pipeline import compile_grammar, resolve_grammar
from tests.grammar_tools import xgrammar_matcher

EXPR = """root ::= ws expr ws
expr ::= expr ("+" | "-") term | term
term ::= [0-9]+ | "(" expr ")" | sign? "x"
sign ::= "-"
ws ::= [ \\t]*
"""


def test_nullable_first_and_left_corners():
    sets = analyse(compile_grammar(EXPR).ast)
    assert [n for n, s in sets.items() if s.nullable] == ["ws"]
    assert format_code_points(sets["term"].first) == "'(', '-', '0'–'9', 'x'"
    assert format_code_points(sets["root"].first) == "\\t, ' ', '(', '-', '0'–'9', 'x'"
    assert sets["expr"].left_recursive and not sets["term"].left_recursive
    assert sets["root"].left_corners == ("expr", "term", "sign", "ws")
    assert sets["sign"].left_corners == ()


def test_first_of_a_tag_dispatch_is_any_character():
    """TagDispatch's free text spans every byte: FIRST is one range, the fixpoint ends at once.
    Reversed ranges from non-continuation second bytes and lead bytes 0xF5-0xF7 (which
    normalize never merges) made FIRST grow every round: minutes on a two-tool structural tag."""
    text = 'root ::= TagDispatch(("<a>", a), ("<b>", b))\na ::= "1" "</a>"\nb ::= "2" "</b>"\n'
    sets = analyse(compile_grammar(text).ast)
    assert sets["root"].first == ((0, 0x10FFFF),) and all(lo <= hi for s in sets.values() for lo, hi in s.first)


@pytest.mark.parametrize(
    "ranges, text",
    [
        ((), "nothing"),
        (((0x22, 0x22),), "'\"'"),
        (((0x0, 0x21), (0x23, 0x10FFFF)), "anything but '\"'"),
        (((0x0, 0x10FFFF),), "any character"),
        (((0x0A, 0x0A), (0xE9, 0xE9), (0x85, 0x85)), "\\n, \\x85, 'é'"),
    ],
)
def test_format_code_points(ranges, text):
    assert format_code_points(tuple(sorted(ranges))) == text


def test_describe_bytes_names_utf8_parts():
    assert describe_bytes(ByteSet.of(b"09[")) == "'0', '9', '['"
    assert describe_bytes(ByteSet.range(0x30, 0x39) | ByteSet.range(0x80, 0xBF)) == (
        "'0'–'9', \\x80–\\xbf (UTF-8 continuation bytes)"
    )
    assert describe_bytes(ByteSet(0)) == "nothing"


@pytest.mark.parametrize("prefix", [b"", b"{", b'{"a"', b'{"a": [1', b'["\xc3', b"[tr", b"[1,2]"])
def test_expected_bytes_match_xgrammar(prefix):
    """Every byte XGrammar takes after the prefix is expected, and nothing else."""
    text = resolve_grammar("json").read_text(encoding="utf-8")
    gnf = compile_grammar(text).gnf
    expected, can_end = expected_bytes(gnf, prefix)
    matcher = xgrammar_matcher(text)
    taken = set()
    for b in range(256):
        matcher.reset()
        if matcher.accept_string(prefix + bytes([b])):
            taken.add(b)
    assert set(expected) == taken
    matcher.reset()
    assert matcher.accept_string(prefix) or not prefix
    assert can_end == (bool(prefix) and matcher.is_terminated())


def test_expected_bytes_of_a_non_prefix_is_empty():
    gnf = compile_grammar(EXPR).gnf
    assert expected_bytes(gnf, b"1+)") == (ByteSet(0), False)
    allowed, end = expected_bytes(gnf, b"1+")
    assert set(allowed) == set(b"(-0123456789x") and not end
