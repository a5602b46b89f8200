"""cfgzip_lab.grammar.large_repeat and .lookahead_reading: a class repeated past 128 in the grammar, where
XGrammar's lookahead reads the class otherwise than its matcher and its mask leaves the matcher (MaskBench
Github_hard o79409, found by the full 10,282-file run: 4 of 2,752,397 masks differed). The premises are read
from the installed binary (mask against accept_token over the whole vocabulary); the model must name every
token where they disagree; the serving path hands such a grammar to XGrammar itself (its masks then equal
XGrammar's at the steps that differed), the compressed engine refuses it, and grammars the vocabulary
cannot show it on (JSON strings with maxLength, Regex repetitions) stay native."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgrammar as xgr
from paths import maskbench_row

import cfgzip_lab as cz
from cfgzip_lab.engine import compile_engines, plain_tokenizer_info
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.large_repeat import _reading, large_repeat_in_text
from cfgzip_lab.grammar.lookahead_reading import ClassReading, exact_reads, lenient_reads, misread_tokens
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
    assert "bound above 128" in matcher.engine.unavailable and "{1, 200}" in matcher.engine.unavailable
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


GRAMMAR_LEVEL = 'root ::= "\\"" r{1,200} "\\""\nr ::= [a-z\u0430-\u044f\u4e00-\u9fa5]\n'
REGEX_LEVEL = 'root ::= "\\"" Regex("[a-z\u0430-\u044f\u4e00-\u9fa5]{1,200}") "\\""\n'


def _differences(compiler, vocab, text: str, prefix: str, bound: str | None = None) -> set[int]:
    """The tokens where XGrammar's mask after ``prefix`` and its own matcher disagree, both ways."""
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(text), terminate_without_stop_token=True)
    assert matcher.accept_string(prefix)
    bitmask = xgr.allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")[: vocab.vocab_size]
    return {
        t for t in range(vocab.vocab_size) if vocab.token_bytes[t] and bool(bits[t]) != matcher.fork().accept_token(t)
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cls", "bound", "differs"),
    [
        ("[a-z ]", "1,200", True),  # \xe0 and \xf0 read as U+0000-0FFF and U+0000-3FFFF: 2 tokens in
        ("[^\\x80-\\xff]", "1,200", True),  # a negated class takes \xc2 and \xc3: 2 tokens in
        ("[^\\u0800-\\u0fff]", "200,300", True),  # bounds cut to their low byte: 103,665 tokens left out
        ("[a-z\u0430-\u044f\u4e00-\u9fa5]", "1,200", True),  # U+0430 cut to 0: 'E' read as in it, 747 in
        ('[^"\\\\\\r\\n]', "0,1000", False),  # a JSON string's class: read alike
        ("[0-9a-zA-Z_-]", "1,255", False),
    ],
)
def test_the_lookahead_model_covers_every_difference_the_binary_shows(llama3, cls, bound, differs):
    """Ground truth from the installed binary, both directions (mask against ``accept_token`` over the whole
    vocabulary, after the opening quote): every token where they disagree is one misread_tokens names,
    and it names none where the binary shows none, so the native engine serves exactly those grammars."""
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    text = f'root ::= "\\"" r{{{bound}}} "\\""\nr ::= {cls}\n'
    found = _differences(compiler, llama3, text, '"')
    misread = set(misread_tokens(_reading(cls), llama3))
    assert bool(found) is differs
    assert found <= misread
    assert bool(misread) is differs
    assert (large_repeat_in_text(text, llama3) is not None) is differs


def test_a_regex_repetition_has_no_such_lookahead(llama3):
    """The same class and bound: written as a grammar repetition, XGrammar's mask leaves its matcher on 747
    tokens, and the native engine hands it to XGrammar; inside ``Regex`` (a counted edge of the regex's
    automaton) mask and matcher agree, the native engine serves it, and the compressed engine takes it."""
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    assert len(_differences(compiler, llama3, GRAMMAR_LEVEL, '"')) == 747
    assert _differences(compiler, llama3, REGEX_LEVEL, '"') == set()
    cache = cz.GrammarCache(cache_dir=False)
    assert "747 tokens" in cz.matcher_for(GRAMMAR_LEVEL, llama3, cache=cache).engine.unavailable
    native = cz.matcher_for(REGEX_LEVEL, llama3, cache=cache)
    assert native.engine.unavailable is None
    theirs = xgr.GrammarMatcher(compiler.compile_grammar(REGEX_LEVEL))
    want, got = xgr.allocate_token_bitmask(1, llama3.vocab_size), native.allocate_bitmask(1)
    for token in llama3.encoder('"abc\u0430\u4e00"'):
        theirs.fill_next_token_bitmask(want)
        native.fill_next_token_bitmask(got)
        assert np.array_equal(got.numpy()[0], want.numpy()[0])
        assert theirs.accept_token(token) and native.accept_token(token)
    _ = compile_engines(REGEX_LEVEL, llama3, identity_classes(llama3)).compressed_grammar
    with pytest.raises(GrammarError) as error:
        _ = compile_engines(GRAMMAR_LEVEL, llama3, identity_classes(llama3)).compressed_grammar
    assert error.value.diagnostics[0].line == 1 and error.value.diagnostics[0].column == GRAMMAR_LEVEL.index("{") + 1
    assert "compressed engine refuses" in str(error.value)
    compile_grammar(GRAMMAR_LEVEL)  # the explicit build API still builds it


@pytest.mark.parametrize(
    ("data", "lenient", "exact"),
    [
        (b"\xe0", True, False),  # an overlong reading: U+0000-0FFF meets [a-z ]
        (b"\xe1", False, False),
        (b"ab", True, True),
        (b"a\xc3", False, False),
        (b"A", False, False),
    ],
)
def test_the_two_readings_of_a_positive_class(data, lenient, exact):
    cls = ClassReading(((ord("a"), ord("z")), (32, 32)))
    assert lenient_reads(cls, data) is lenient and exact_reads(cls, data) is exact


def test_the_two_readings_of_classes_with_wide_ranges():
    """Bounds cut to their low byte on an ASCII byte: ``\\u0f20-\\u0f33`` takes ``(``; a negated class takes
    every first and continuation byte and checks the finished code point only."""
    wide = ClassReading(((0x0F20, 0x0F33),))
    assert lenient_reads(wide, b"(") and not exact_reads(wide, b"(")
    assert lenient_reads(wide, "\u0f21".encode()) and exact_reads(wide, "\u0f21".encode())
    negated = ClassReading(((0x80, 0xFF),), negated=True)
    assert lenient_reads(negated, b"\xc3") and not exact_reads(negated, b"\xc3")
    assert not lenient_reads(negated, "\u00e9".encode()) and not exact_reads(negated, "\u00e9".encode())
    assert lenient_reads(negated, "\u0101".encode()) and exact_reads(negated, "\u0101".encode())
    assert lenient_reads(negated, b"\xe0\x80\x81") and not exact_reads(negated, b"\xe0\x80\x81")  # overlong


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('root ::= "x" r{1, 200}\nr ::= (([a-z ]))\n', True),  # as XGrammar prints a schema's pattern
        ('root ::= "x" [a-z ]{129}\n', True),
        ('root ::= "x" r{129, -1}\nr ::= [a-z ]\n', True),
        ('root ::= "x" ([a-z]){0, 300}\n', True),  # a group: may be one class
        ('root ::= "x" ("a" [b]){0, 300}\n', True),  # a group of several parts
        ('root ::= "x" r{1, 128}\nr ::= [a-z ]\n', False),
        ('root ::= "x" r{100, -1}\nr ::= [a-z ]\n', False),
        ('root ::= "x" r{1, 200}\nr ::= [a-z ] | "xy"\n', False),  # a choice: no lookahead copies
        ('root ::= "x" r{0, 200}\nr ::= "ab"\n', False),
        ('root ::= "ab"{0, 200}\n', False),
        ('root ::= Regex("[a-z]{1,300}")\n', False),  # a counted edge of the regex's automaton
        ('root ::= "[{" "x{1,300}"\n', False),  # bounds inside string literals
    ],
)
def test_the_scan_finds_classes_repeated_past_128(text, found):
    assert (large_repeat_in_text(text) is not None) is found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('root ::= "x" r{1, 200}\nr ::= (([a-z ]))\n', True),  # " \xe0" is a token
        ('root ::= "x" ([a-z]){0, 300}\n', False),  # no token "<letter>\xe0"
        ('root ::= "x" ([0-9]*){200, 1000}\n', False),
        ('root ::= "\\"" [^"\\\\\\r\\n]{0, 1000} "\\""\n', False),  # a JSON string with maxLength
        ('root ::= "x" ("a" [b]){0, 300}\n', True),  # not read as one class: counted, to be safe
    ],
)
def test_with_a_vocabulary_only_misread_classes_count(llama3, text, found):
    assert (large_repeat_in_text(text, llama3) is not None) is found


def test_the_scan_on_maskbench_o79409_points_at_the_pattern(llama3, o79409):
    """The schema's EBNF as XGrammar writes it: with Llama-3's vocabulary the repetition found is its name
    pattern's (its maxLength strings are read alike), and the message names tokens such as `` {``."""
    schema, _ = o79409
    text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=True))
    found = large_repeat_in_text(text, llama3)
    assert found is not None
    assert "{1, 200}" in found.message
    assert "' {'" in found.message or "tokens of vocabulary 'llama3'" in found.message


def _scan_texts() -> list[str]:
    """EBNF texts the scan's indexes are checked on: XGrammar's test grammars, the bundled ones, counted
    MaskBench schemas as XGrammar writes them (hundreds of bounds and literals), and small edge cases
    (blank lines before a definition, a body on the next line, names with dots and dashes, a prefix name)."""
    from paths import BUNDLED, CORPORA

    texts = [p.read_text(encoding="utf-8") for p in sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))]
    texts += [p.read_text(encoding="utf-8") for p in BUNDLED]
    for name in ("Github_medium---o9906", "Snowplow---sp_333_Normalized", "Github_ultra---o65975"):
        schema = json.dumps(maskbench_row(name)["schema"])
        texts.append(str(xgr.Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=True)))
    texts += [
        'root ::= r{0, 300} "x"\n\n\n  r ::= [a-z]\nr ::= [0-9]\n',
        'root ::= a.b{1, 200} a{1, 200} a-c{0, 300}\na ::=\n  [x]\na.b ::= [y]\na-c ::= "q" | [z]\nab ::= [w]\n',
        'root ::= "a{1,300}" x{0, 129}\n# x ::= [c]\nx ::= "s" [d]\n',
    ]
    return texts


def test_the_scans_indexes_answer_as_its_searches():
    """large_repeat's indexes against the searches they replace, on every text: the rule definitions read
    once per text (``_definitions``) against one search per name (``_definition_of``), for every name the
    text holds; and the bisection over the literals (``_inside``) against a scan of every span, at every
    bound. So ``large_repeats`` finds what it found before, at the same places with the same classes."""
    import re

    from cfgzip_lab.grammar.large_repeat import _BOUND, _definition_of, _definitions, _inside, _lexemes

    for text in _scan_texts():
        index = _definitions(text)
        for name in set(re.findall(r"[A-Za-z_][A-Za-z0-9_.\-]*", text)):
            want, got = _definition_of(text, name), index.get(name)
            assert (want is None) == (got is None), name
            if want is not None:
                assert want.group(1) == got.group(2), name
        lexemes = _lexemes(text)
        for bound in _BOUND.finditer(text):
            at = bound.start()
            assert _inside(lexemes.quoted, lexemes.quoted_starts, at) == any(a <= at < b for a, b in lexemes.quoted)
