"""Every behaviour found to differ between XGrammar 0.2.8 and 0.2.9, one row per difference
(``docs/xgrammar_versions.md`` lists them with their place in XGrammar's sources).

Each row says what each release does; the test runs under whichever release is installed
(``scripts/test.sh`` runs it under both) and checks the installed binary's verdict *and* ours
against that release's row: a row that stops matching its binary means the table (or a new
release) is wrong, a row where only ours differs is a lost mask.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from grammar_tools import xgrammar_matcher, xgrammar_matches
from xgrammar_fsm import nfa_of, same_language, xgrammar_rule_fsms

from cfgzip_lab import xgrammar_version
from cfgzip_lab.grammar.regex import ASCII_SPACE, UNICODE_SPACE, regex_to_expr
from cfgzip_lab.grammar.regex_fsm import subrule_keeps_json_string
from cfgzip_lab.pipeline import compile_grammar

NEW = xgrammar_version.at_least("0.2.9")


@dataclass(frozen=True)
class Difference:
    """One grammar, strings, and which of them each release accepts (a full match)."""

    what: str
    grammar: str
    strings: tuple[str, ...]
    accepted_028: frozenset[str]
    accepted_029: frozenset[str]

    def accepted(self) -> frozenset[str]:
        return self.accepted_029 if NEW else self.accepted_028


def _regex(pattern: str, json_string: bool = False) -> str:
    return f"root ::= Regex({json.dumps(pattern, ensure_ascii=False)}{', json_string=true' if json_string else ''})"


_SPACES = ("\xa0", "\u1680", "\u2000", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff")
_NOT_SPACES = ("a", "\x85", "\u200b", "\u180e", "\u2060")
DIFFERENCES = [
    Difference(
        "\\s takes the Unicode spaces from 0.2.9 (fsm_builder.cc kWhitespaceClassRanges)",
        _regex("\\s"),
        (" ", "\t", "\r", *_SPACES, *_NOT_SPACES),
        frozenset({" ", "\t", "\r"}),
        frozenset({" ", "\t", "\r", *_SPACES}),
    ),
    Difference(
        "\\S leaves them out from 0.2.9",
        _regex("\\S+"),
        ("ab", " ", *_SPACES, *_NOT_SPACES),
        frozenset({"ab", *_SPACES, *_NOT_SPACES}),
        frozenset({"ab", *_NOT_SPACES}),
    ),
    Difference(
        "[^\\s] inside a class likewise",
        _regex("a[^\\s]b"),
        ("axb", "a b", "a\xa0b", "a\u3000b"),
        frozenset({"axb", "a\xa0b", "a\u3000b"}),
        frozenset({"axb"}),
    ),
    Difference(
        "the (?:\\S+\\s+){0,n}\\S+ idiom of schema patterns (regressions/xgr029_unicode_space.ebnf)",
        _regex("(?:\\S+\\s+){0,3}\\S+", json_string=True),
        ("a b", "a\xa0b", "a\u3000b c", "a  b"),
        frozenset({"a b", "a\xa0b", "a\u3000b c", "a  b"}),
        frozenset({"a b", "a\xa0b", "a\u3000b c", "a  b"}),
    ),
    Difference(
        "json_string reaches a large repetition's sub-rule from 0.2.9 (ParseRegexToIR json_string)",
        _regex(".{0,200}", json_string=True),
        ("", "ab", '"', "\\", "\n", 'a"b'),
        frozenset({"", "ab", '"', "\\", "\n", 'a"b'}),
        frozenset({"", "ab"}),
    ),
    Difference(
        "and its unbounded form's starred sub-rule",
        _regex("x[^a]{130,}", json_string=True),
        ("x" + "b" * 130, "x" + "b" * 129 + '"', "x" + "b" * 140 + "\n"),
        frozenset({"x" + "b" * 130, "x" + "b" * 129 + '"', "x" + "b" * 140 + "\n"}),
        frozenset({"x" + "b" * 130}),
    ),
    Difference(
        "a large repetition without json_string is the same in both",
        _regex(".{0,200}"),
        ("", '"', "\n"),
        frozenset({"", '"', "\n"}),
        frozenset({"", '"', "\n"}),
    ),
]


@pytest.mark.parametrize("difference", DIFFERENCES, ids=[d.what for d in DIFFERENCES])
def test_each_release_accepts_its_own_strings_and_so_do_we(difference):
    matcher = xgrammar_matcher(difference.grammar)
    gnf = compile_grammar(difference.grammar).gnf
    expected = difference.accepted()
    for s in difference.strings:
        data = s.encode("utf-8")
        assert xgrammar_matches(matcher, data) == (s in expected), f"XGrammar {xgrammar_version.installed()} on {s!r}"
        assert gnf.accepts(data) == (s in expected), f"cfgzip on {s!r}"


def test_backslash_s_is_the_installed_binarys_set_on_every_code_point():
    """Decided exactly on the automata (all of U+0000..U+10FFFF), not on samples."""
    assert regex_to_expr("\\s").edges == regex_to_expr(_class(UNICODE_SPACE if NEW else ASCII_SPACE)).edges
    for pattern in ("\\s", "\\S"):
        theirs = xgrammar_rule_fsms(_regex(pattern))["root"]
        same, witness = same_language(nfa_of(regex_to_expr(pattern)), theirs)
        assert same, f"{pattern}: differs from XGrammar {xgrammar_version.installed()} on {witness!r}"


def _class(ranges) -> str:
    return "[" + "".join(f"\\u{{{lo:x}}}-\\u{{{hi:x}}}" for lo, hi in ranges) + "]"


def test_the_switches_follow_the_installed_release():
    assert subrule_keeps_json_string() is NEW
    assert xgrammar_version.installed_tuple()[:3] in {(0, 2, 8), (0, 2, 9)} or not xgrammar_version.is_supported()


def test_a_dead_end_inside_a_large_repetition_is_kept_from_0_2_9():
    """From 0.2.9 json_string empties the ``\\n`` of the sub-rule: after ``a`` nothing can follow,
    yet XGrammar's matcher takes ``a`` (a dead end, kept with a warning); 0.2.8 matches ``a\\n``."""
    text = _regex("(a\\n|b){0,200}", json_string=True)
    compiled = compile_grammar(text)
    warned = any("dead end" in w.message for w in compiled.warnings)
    assert warned is NEW
    matcher = xgrammar_matcher(text)
    assert matcher.accept_string("a")
    assert compiled.gnf.accepts(b"a\n") is not NEW
    assert xgrammar_matches(xgrammar_matcher(text), b"a\n") is not NEW


# ---- token-level macros: what a token edge takes (grammar_matcher.cc) -----------------------------

# grammar, XGrammar 0.2.8's first mask, 0.2.9's (small vocabulary: 0 "a", 1 "b", 2 "ab", 3 stop,
# 4 special, 5 "zz", 6 "q", 7 "a", 8 "dd", 9 "hello")
TOKEN_EDGES = [
    # CanAcceptStopTokenAsTerminal: a stop token taken by a token edge that completes the grammar
    ("root ::= Token(3)", [], [3]),
    ("root ::= ExcludeToken(5)", [0, 1, 2, 6, 7, 8, 9], [0, 1, 2, 3, 6, 7, 8, 9]),
    # FindMidTokenExcludeEdgeRow: "ab" ends the literal "a" and enters the ExcludeToken edge
    ('root ::= "a" ExcludeToken(5)', [0, 7], [0, 2, 7]),
    ('root ::= "a" TokenTagDispatch((6, r))\nr ::= "a"', [0, 7], [0, 2, 7]),
    # a Token edge after a literal takes no token mid-way in either release
    ('root ::= "a" Token(1)', [0, 7], [0, 7]),
]


def _small_vocab():
    from cfgzip_lab.vocab import vocab_from_bytes

    tokens = [b"a", b"b", b"ab", b"</s>", b"", b"zz", b"q", b"a", b"dd", b"hello"]
    return vocab_from_bytes(tokens, stop_ids=[3], special_ids=[4], name="small")


def _first_mask(matcher, size: int) -> list[int]:
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, size)
    matcher.fill_next_token_bitmask(bitmask)
    return [i for i in range(size) if (int(bitmask[0, i // 32]) >> (i % 32)) & 1]


@pytest.mark.parametrize("text, mask_028, mask_029", TOKEN_EDGES, ids=[row[0][:36] for row in TOKEN_EDGES])
def test_token_edges_each_release_and_ours(text, mask_028, mask_029):
    """The binary's first mask is its release's; cfgzip serves 0.2.8's meaning exactly and, under
    0.2.9, refuses what it does not reproduce (ExcludeToken, TokenTagDispatch, a stop id named)."""
    import xgrammar as xgr

    from cfgzip_lab.engine import plain_tokenizer_info
    from cfgzip_lab.grammar.diagnostics import GrammarError
    from cfgzip_lab.grammar.token_macros import TOKEN_REGION_REFUSAL, TokenIdError
    from cfgzip_lab.native.engine import build_native_engine
    from cfgzip_lab.pipeline import build_classes

    vocab = _small_vocab()
    compiled_xgr = xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False).compile_grammar(text)
    theirs = _first_mask(xgr.GrammarMatcher(compiled_xgr), vocab.vocab_size)
    assert theirs == (mask_029 if NEW else mask_028), f"XGrammar {xgrammar_version.installed()}"
    differs = mask_028 != mask_029
    if NEW and differs and ("ExcludeToken" in text or "TokenTagDispatch" in text):
        with pytest.raises(GrammarError, match=re.escape(TOKEN_REGION_REFUSAL)):
            compile_grammar(text)
        return
    compiled = compile_grammar(text)
    if NEW and differs:
        with pytest.raises(TokenIdError, match="stop token id 3"):
            build_classes(compiled, vocab)
        return
    result = build_classes(compiled, vocab)
    native = build_native_engine(compiled, vocab, result.classes, classing=result).matcher()
    ours = native.next_vocab_bitmask()
    assert [i for i in range(vocab.vocab_size) if (int(ours[i // 32]) >> (i % 32)) & 1] == theirs
