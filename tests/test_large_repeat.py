"""cfgzip_lab.grammar.large_repeat: a regex repetition past 128 where XGrammar's mask holds tokens its own
matcher refuses (MaskBench Github_hard o79409, found by the full 10,282-file run: 4 of 2,752,397 masks
differed). The premise is read from the installed binary; the serving path hands such a grammar to
XGrammar itself (its masks then equal XGrammar's at the steps that differed), the compressed engine
refuses it, and the scan finds exactly the bounds past the threshold."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgrammar as xgr
from paths import maskbench_row

import cfgzip_lab as cz
from cfgzip_lab.engine import compile_engines, plain_tokenizer_info
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.large_repeat import large_repeat_in_text
from cfgzip_lab.pipeline import compile_grammar
from cfgzip_lab.verify import identity_classes

NAME = "Github_hard---o79409"


@pytest.fixture(scope="module")
def llama3():
    return cz.load_vocab("llama3")


@pytest.fixture(scope="module")
def o79409():
    row = maskbench_row(NAME)
    schema = row["schema"] if isinstance(row["schema"], str) else json.dumps(row["schema"])
    return schema, json.loads(schema)["properties"]["name"]["pattern"]


def _xgrammar_mask_after(compiler, vocab, schema: str, prefix: str):
    matcher = xgr.GrammarMatcher(compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=True))
    assert matcher.accept_string(prefix)
    bitmask = xgr.allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return matcher, np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")[: vocab.vocab_size]


def test_premise_xgrammars_mask_holds_tokens_its_matcher_refuses(llama3, o79409):
    """The quirk, read from the binary: with the pattern's ``{1,200}`` the mask after ``"`` holds `` {``
    and its matcher refuses it; with ``+`` or ``{1,128}`` (no counted sub-rule) the mask leaves it out.
    If a release fixes this, the fallback can go (this test then says so)."""
    _, pattern = o79409
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    space_brace = llama3.encoder(" {")
    assert len(space_brace) == 1
    matcher, mask = _xgrammar_mask_after(compiler, llama3, json.dumps({"type": "string", "pattern": pattern}), '"')
    assert mask[space_brace[0]] == 1 and not matcher.accept_token(space_brace[0])
    for bound in ("+", "{1,128}"):
        narrow = json.dumps({"type": "string", "pattern": pattern.replace("{1,200}", bound)})
        _, mask = _xgrammar_mask_after(compiler, llama3, narrow, '"')
        assert mask[space_brace[0]] == 0, bound


def test_the_served_masks_are_xgrammars_where_they_differed(llama3, o79409):
    """matcher_for serves o79409 through XGrammar itself (the reason names the repetition), and its masks
    along the instance that showed the difference (steps 356-359 of MaskBench's first instance) are
    XGrammar's own, bit for bit."""
    schema, _ = o79409
    matcher = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert "bound above 128" in matcher.engine.unavailable
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    theirs = xgr.GrammarMatcher(compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=True))
    row = maskbench_row(NAME)
    data = row["tests"][0]["data"]
    tokens = llama3.encoder(data if isinstance(data, str) else json.dumps(data))[:362]
    want, got = xgr.allocate_token_bitmask(1, llama3.vocab_size), matcher.allocate_bitmask(1)
    refused_in_mask = 0
    for step, token in enumerate(tokens):
        theirs.fill_next_token_bitmask(want)
        matcher.fill_next_token_bitmask(got)
        assert np.array_equal(got.numpy()[0], want.numpy()[0]), step
        if step == 357:  # inside the name: the quirk's tokens are in the mask
            refused_in_mask = int(
                np.unpackbits(want.numpy()[0].view(np.uint8), bitorder="little")[llama3.encoder(" {")[0]]
            )
        assert theirs.accept_token(token) and matcher.accept_token(token), step
    assert refused_in_mask == 1


SMALL = 'root ::= "\\"" r{bound} "\\""\nr ::= [a-z ]\n'


def test_premise_on_a_small_grammar_and_its_served_masks(llama3):
    """``r ::= [a-z ]`` repeated ``{1,200}`` between quotes: after ``"`` XGrammar's mask holds `` \\xe0``, which
    its matcher refuses, and ``{1,128}`` does not; matcher_for serves the large one through XGrammar, mask
    for mask, and the small one natively."""
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    partial = [i for i, b in enumerate(llama3.token_bytes) if bytes(b) == b" \xe0"]
    assert partial
    for bound, quirk in (("{1,200}", True), ("{1,128}", False)):
        text = SMALL.replace("{bound}", bound)
        theirs = xgr.GrammarMatcher(compiler.compile_grammar(text))
        assert theirs.accept_string('"')
        want = xgr.allocate_token_bitmask(1, llama3.vocab_size)
        theirs.fill_next_token_bitmask(want)
        in_mask = np.unpackbits(want.numpy()[0].view(np.uint8), bitorder="little")[partial[0]]
        assert bool(in_mask) is quirk and not theirs.accept_token(partial[0])
        mine = cz.matcher_for(text, llama3, cache=cz.GrammarCache(cache_dir=False))
        assert (mine.engine.unavailable is not None) is quirk
        assert mine.accept_token(llama3.encoder('"')[0])
        got = mine.allocate_bitmask(1)
        mine.fill_next_token_bitmask(got)
        if quirk:
            assert np.array_equal(got.numpy()[0], want.numpy()[0])
        else:  # the language's mask: XGrammar's too, where no fast path runs
            assert np.array_equal(got.numpy()[0], want.numpy()[0])


def test_the_compressed_engine_refuses_it_at_the_regex(llama3):
    text = 'root ::= "x" Regex("[a-z\\u00e0-\\u00ff]{1,200}")\n'
    with pytest.raises(GrammarError) as error:
        _ = compile_engines(text, llama3, identity_classes(llama3)).compressed_grammar
    assert error.value.diagnostics[0].line == 1 and error.value.diagnostics[0].column == text.index("{1,200}") + 1
    assert "compressed engine refuses" in str(error.value)
    compile_grammar(text)  # the explicit build API still builds it


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('root ::= "x" r{1, 200}\nr ::= (([a-z ]))\n', True),  # as XGrammar prints a schema's pattern
        ('root ::= "x" [a-z ]{129}\n', True),
        ('root ::= "x" r{129, -1}\nr ::= [a-z ]\n', True),
        ('root ::= "x" ([a-z]){0, 300}\n', True),  # a group: may be one class
        ('root ::= Regex("[a-z]{1,300}")\n', True),
        ('root ::= "x" r{1, 128}\nr ::= [a-z ]\n', False),
        ('root ::= "x" r{100, -1}\nr ::= [a-z ]\n', False),
        ('root ::= "x" r{1, 200}\nr ::= [a-z ] | "xy"\n', False),  # a choice: no fast path
        ('root ::= "x" r{0, 200}\nr ::= "ab"\n', False),
        ('root ::= "ab"{0, 200}\n', False),
        ('root ::= Regex("[a-z]{1,128}")\n', False),
    ],
)
def test_the_scan_finds_classes_repeated_past_128(text, found):
    assert (large_repeat_in_text(text) is not None) is found


def test_the_scan_on_maskbench_o79409_points_at_the_pattern(o79409):
    """The schema's EBNF as XGrammar writes it: the first repetition found is one of its patterns'."""
    schema, _ = o79409
    text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=True))
    found = large_repeat_in_text(text)
    assert found is not None
    assert "{1, 200}" in found.message or "{1, 500}" in found.message
