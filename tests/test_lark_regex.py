"""Lark grammars and bare regexes as inputs (cfgzip_lab.grammar.lark_regex), built by XGrammar.

Errors tables (XGrammar's message at its place in the author's text, columns in characters), the
kind detection, and the third-party Lark grammars of tests/data/lark/ (SOURCES.md): llguidance's
sample grammars and the grammars of XGrammar's own test_lark.py. Each of those is classed and
walked as ``cfgzip-lab verify`` walks (0 mismatches), and its native matcher masks as XGrammar's
own ``GrammarCompiler.compile_lark`` does along each string XGrammar's tests accept, byte by byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import xgrammar as xgr

import cfgzip_lab as cz
from cfgzip_lab.engine import plain_tokenizer_info
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.sources import detect_kind, to_ebnf
from cfgzip_lab.grammar.token_macros import stop_tokens_as_terminals

DATA = Path(__file__).parent / "data" / "lark"
XGRAMMAR_CASES = json.loads((DATA / "xgrammar_cases.json").read_text())

# Every byte (so any string can be fed byte by byte: id = byte), a few multi-byte pieces, one stop.
PIECES = [b"ab", b"abc", b"12", b"true", b'"a"', b"\xc3\xa9", b"  ", b"\n", b"<rfc", b"</", b'="', b"xx"]
TOKENS = [bytes([b]) for b in range(256)] + PIECES + [b"</s>"]
STOP = len(TOKENS) - 1


@pytest.fixture(scope="module")
def vocab():
    return cz.vocab_from_bytes(TOKENS, stop_ids=[STOP], name="bytes-and-pieces")


# ---- errors, placed in the author's text ------------------------------------------------------

LARK_ERRORS = [
    # grammar, line, column, message part
    ('start: "é" /[0-9/\n', 1, 12, "Unclosed '['"),  # XGrammar says column 13: bytes; "é" is 2
    ('start: "a"\nb: "é" c\n', 2, 8, "unknown name 'c'"),
    ('b: "x"\n', 1, 1, "no start rule found"),
    ('start: "a" ~ 3..2\n', 1, 8, "repetition end must be greater than or equal to start"),
    ('start: x\nx: "a" %%%\n', 2, 8, "directive % is not supported"),
]


@pytest.mark.parametrize("grammar__line__column__message", LARK_ERRORS, ids=lambda row: row[3])
def test_lark_error_is_placed_in_the_lark_text(grammar__line__column__message):
    grammar, line, column, message = grammar__line__column__message
    with pytest.raises(GrammarError) as info:
        cz.compile_grammar(grammar, kind="lark", source="tool.lark")
    (diagnostic,) = info.value.diagnostics
    assert (diagnostic.line, diagnostic.column) == (line, column)
    assert message in diagnostic.message and "XGrammar cannot read this Lark grammar" in diagnostic.message
    assert "/project/cpp" not in diagnostic.message and info.value.text == grammar  # the author's text
    assert str(info.value).startswith(f"tool.lark:{line}:{column}: error:")


REGEX_ERRORS = [
    # pattern, column, message part
    ("[a-", 4, "Unclosed '['"),
    ("é(b", 4, "The parenthesis is not closed"),  # XGrammar's position 4 (code points), past the end
    ("é(?<=x)a", 4, "Lookbehind is not supported"),
    ("(?<=x)a", 3, "Lookbehind is not supported"),
    ("ab\\", 3, "Escape sequence is not finished"),
    ("a{3,2}", 2, "Lower bound is larger than upper bound"),  # XGrammar names no place: ours finds "{"
]


@pytest.mark.parametrize("pattern__column__message", REGEX_ERRORS, ids=lambda row: row[0])
def test_regex_error_is_placed_in_the_pattern(pattern__column__message):
    pattern, column, message = pattern__column__message
    with pytest.raises(GrammarError) as info:
        cz.compile_grammar(pattern, kind="regex")
    (diagnostic,) = info.value.diagnostics
    assert (diagnostic.line, diagnostic.column) == (1, column)
    assert message in diagnostic.message and "XGrammar cannot read this regex" in diagnostic.message


DETECTED = [
    # text, file name, kind
    ('start: "a" b\nb: /[0-9]+/\n', None, "lark"),
    ('// a tool\n?start: value\nvalue: "x"\n', None, "lark"),
    ("%import common.WS\n%ignore WS\nitem: WS\n", None, "lark"),
    ('root ::= "a"\n', None, "ebnf"),
    ('root ::= start\nstart: ::= "a"\n', None, "ebnf"),
    ('item: "a"\n', "tool.lark", "lark"),
    ("[a-z]+", "id.regex", "regex"),
    ("[a-z]+", None, "ebnf"),  # a bare regex is never guessed
    ('{"type": "string"}', None, "json_schema"),
]


@pytest.mark.parametrize("text__name__kind", DETECTED, ids=lambda row: f"{row[2]}:{row[0][:20]}")
def test_detect_kind(text__name__kind):
    text, name, kind = text__name__kind
    assert detect_kind(text, name) == kind


def test_the_grammar_xgrammar_built_is_kept_with_the_authors_text():
    text = 'start: "a" NUMBER\nNUMBER: /[0-9]+/\n'
    source = to_ebnf(text)
    assert source.kind == "lark" and source.text == text and source.written_by_xgrammar
    assert source.ebnf == str(xgr.Grammar.from_lark(text))
    assert "xgrammar.Grammar.from_lark" in source.notes[0]
    regex = to_ebnf("[a-z]+@x\\.com", "regex")
    assert regex.ebnf == str(xgr.Grammar.from_regex("[a-z]+@x\\.com")) and regex.kind == "regex"


def test_matcher_for_and_the_cache_key_take_the_kind(vocab):
    lark = 'start: "a" /[0-9]+/\n'
    matcher = cz.matcher_for(lark, vocab)  # auto: Lark
    assert matcher.accept_token(ord("a")) and matcher.accept_token(ord("7"))
    regex = cz.matcher_for("a[0-9]+", vocab, kind="regex")
    assert regex.accept_token(ord("a")) and not regex.accept_token(ord("b"))
    cache = cz.GrammarCache(cache_dir=False)
    assert cache.key("a+", vocab, kind="regex") != cache.key("a+", vocab, kind="ebnf")


# ---- third-party Lark grammars: verify-style walks and XGrammar's own compile_lark --------------


def _bits(bitmask: torch.Tensor, size: int) -> np.ndarray:
    """The first ``size`` bits of a packed row: the bits past the vocabulary are XGrammar's 0 or 1
    as it happened to compute the row (cfgzip_lab.native.matcher.fill_vocab_rows), read by nobody."""
    return np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:size]


def _masks_equal_along(text: str, vocab, data: bytes) -> tuple[int, int]:
    """Steps where the native matcher's mask differs from compile_lark's, and steps checked."""
    compiled = xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False).compile_lark(text)
    theirs = xgr.GrammarMatcher(compiled)
    ours = cz.matcher_for(text, vocab, kind="lark")
    a, b = xgr.allocate_token_bitmask(1, vocab.vocab_size), xgr.allocate_token_bitmask(1, vocab.vocab_size)
    differ = checked = 0
    for byte in [None, *data]:
        if byte is not None:
            took = theirs.accept_token(byte)
            assert ours.accept_token(byte) == took
            if not took:
                break
        theirs.fill_next_token_bitmask(a)
        ours.fill_next_token_bitmask(b)
        differ += not np.array_equal(_bits(a, vocab.vocab_size), _bits(b, vocab.vocab_size))
        checked += 1
    return differ, checked


def _verify(text: str, vocab, docs: list[str]):
    compiled = cz.compile_grammar(text, kind="lark")
    classes = cz.build_classes(compiled, vocab).classes
    return cz.verify_lossless(compiled.text, vocab, classes, walks=4, steps=24, docs=docs, max_doc_tokens=64)


@pytest.mark.parametrize("case", XGRAMMAR_CASES, ids=lambda case: case["id"])
def test_xgrammar_test_lark_case_is_lossless(case, vocab):
    if "<[^" in case["grammar"] and stop_tokens_as_terminals():
        # an excluded token set reads as ExcludeToken, which cfgzip refuses under XGrammar >= 0.2.9
        # (token_macros.stop_tokens_as_terminals): a clear refusal at the construct, never a wrong mask
        with pytest.raises(GrammarError, match="ExcludeToken"):
            _verify(case["grammar"], vocab, case["accepted"])
        return
    report = _verify(case["grammar"], vocab, case["accepted"])
    assert report.mismatches == 0, report
    for doc in case["accepted"]:
        differ, checked = _masks_equal_along(case["grammar"], vocab, doc.encode("utf-8"))
        assert differ == 0 and checked > len(doc.encode("utf-8")), (doc, differ, checked)


# grammar, a document it accepts: llguidance's RFC sample, and Lark's grammar of Lark reading itself
# (without its three "#" header lines, which XGrammar's reading of its %ignore does not skip at the start)
LLGUIDANCE = [
    ("llguidance_rfc.lark", (DATA / "llguidance_rfc.xml").read_text()),
    ("llguidance_lark.lark", (DATA / "llguidance_lark.lark").read_text().split("\n", 3)[3]),
]


@pytest.mark.parametrize("grammar__doc", LLGUIDANCE, ids=lambda row: row[0])
def test_llguidance_sample_grammar_is_lossless(grammar__doc, vocab):
    name, doc = grammar__doc
    text = (DATA / name).read_text()
    assert detect_kind(text, name) == "lark"
    report = _verify(text, vocab, [doc])
    assert report.mismatches == 0 and report.steps_checked > 0 and not report.docs_rejected, report
    differ, checked = _masks_equal_along(text, vocab, doc.encode()[:300])
    assert differ == 0 and checked == 301, (differ, checked)


# ---- the serving plugins' requests (vLLM's extra_args, SGLang's ebnf field) -------------------


def test_a_serving_request_takes_lark_through_xgrammar():
    from cfgzip_lab.serving.grammars import ServingError, request_from_json

    text = 'start: "a" NUMBER\nNUMBER: /[0-9]+/\n'
    request = request_from_json({"lark": text})
    assert request.kind == "lark" and request.to_ebnf() == str(xgr.Grammar.from_lark(text))
    with pytest.raises(ServingError, match="invalid lark: .*unknown name 'c'"):
        request_from_json({"lark": "start: c\n"}).to_ebnf()
    with pytest.raises(ServingError, match="give exactly one of json_schema, ebnf, regex, lark, structural_tag"):
        request_from_json({"lark": text, "regex": "a"})
