"""Grammar inputs: JSON Schema (XGrammar builds it) and llama.cpp GBNF, turned into XGrammar EBNF
with the exact meaning kept, errors placed in the user's own text.

Every language claim is checked on XGrammar's own matcher; the schemas are also checked end to
end (our GNF against ``Grammar.from_json_schema``'s matcher, and the compressed engine against
plain XGrammar on random constrained walks).
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import xgrammar
from grammar_tools import sample, utf8, xgrammar_matcher, xgrammar_matches
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import THIRD_PARTY

from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.sources import GrammarSource, check_source, detect_kind, to_ebnf
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_lossless
from cfgzip_lab.vocab import vocab_from_bytes

GBNF_FILES = sorted(THIRD_PARTY.rglob("*.gbnf")) if THIRD_PARTY.is_dir() else []


# ---- kinds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, name, kind",
    [
        ('{"type": "string"}', None, "json_schema"),
        ('  \n{"type": "string"}', "x.txt", "json_schema"),
        ("{not json", None, "json_schema"),  # EBNF never starts with '{': report the JSON error
        ("true", "schema.json", "json_schema"),
        ('root ::= "a"', "g.gbnf", "gbnf"),
        ('root ::= "a"', "g.GBNF", "gbnf"),
        ('root ::= "a"', "g.ebnf", "ebnf"),
        ('root ::= "a"', None, "ebnf"),
    ],
)
def test_text__name__kind(text, name, kind):
    assert detect_kind(text, name) == kind


def test_ebnf_passes_through_and_unknown_kinds_are_refused():
    source = to_ebnf('root ::= "a"', "ebnf")
    assert (source.ebnf, source.kind, source.text) == ('root ::= "a"', "ebnf", 'root ::= "a"')
    with pytest.raises(ValueError, match="unknown grammar kind 'peg'"):
        to_ebnf("x", "peg")


# ---- GBNF: llama.cpp's meaning kept --------------------------------------------------------------

# gbnf text, accepted, rejected (checked on XGrammar's matcher over the converted EBNF)
gbnf__accepted__rejected = [
    (r'root ::= "\x41BC"', ["ABC"], ["\u41bc"]),  # two hex digits in GBNF; XGrammar would read U+41BC
    (r'root ::= [\x41-\x43]"\u00e9"', ["Bé"], ["D"]),
    ('root ::= | "a"', ["", "a"], ["b"]),  # an empty alternative
    ('root ::= "x" ( | "y" | )', ["x", "xy"], ["y"]),
    ("root ::= . .", ["ab", "\n中"], ["a"]),
    ('root ::= "a"**', ["", "aaa"], ["b"]),  # a quantifier on a quantifier: (a*)*
    ('root ::= "ab"+?', ["", "ab", "abab"], ["a"]),
    ('root ::= "a"{ 2 , 3 }', ["aa", "aaa"], ["a"]),
    ('root ::= "a"{2,}', ["aa", "aaaa"], ["a"]),
    ('root ::= 1st\n1st ::= "q"', ["q"], [""]),  # a rule name that starts with a digit
    ('root ::= true\ntrue ::= "t"', ["t"], [""]),  # a name XGrammar reads as a boolean
    ('root ::= my_rule\nmy_rule ::= "u"', ["u"], []),
    ("root ::= [\\]\\[-]", ["]", "[", "-"], ["a"]),
    ('root ::= [^"\\\\]', ["a"], ['"', "\\"]),
    ('root ::= "a" # comment\n# another\nb ::= "b"', ["a"], ["b"]),
    ('root ::= (\n  "a"\n  | "b"  # inside parentheses newlines are free\n)', ["a", "b"], ["ab"]),
    ('root ::= "line\nbreak"', ["line\nbreak"], []),  # a raw newline inside a GBNF string
    ("root ::= [\t]", ["\t"], [" "]),
]


@pytest.mark.parametrize("gbnf, accepted, rejected", gbnf__accepted__rejected)
def test_gbnf__accepted__rejected(gbnf, accepted, rejected):
    source = to_ebnf(gbnf, "gbnf")
    matcher = xgrammar_matcher(source.ebnf)
    gnf = compile_grammar(gbnf, kind="gbnf").gnf
    for s in accepted + rejected:
        expected = s in accepted
        assert xgrammar_matches(matcher, utf8(s)) == expected, (source.ebnf, s)
        assert gnf.accepts(utf8(s)) == expected, (source.ebnf, s)


def test_gbnf_renamed_rules_are_noted():
    source = to_ebnf('root ::= 1st\n1st ::= "q"', "gbnf")
    assert any("'1st' renamed" in note for note in source.notes)


# gbnf text, line, column, message
gbnf__line__column__message = [
    ('root ::= "a\\q"', 1, 12, r"unknown escape \\q"),
    ('root ::= "\\x4"', 1, 11, r"\\x takes exactly 2 hex digits"),
    ("root ::= [\\u00e]", 1, 11, r"\\u takes exactly 4 hex digits"),
    ('root ::= "abc', 1, 10, "unterminated string"),
    ("root ::= [abc", 1, 10, "unterminated character class"),
    ('root = "a"', 1, 6, "expected '::='"),
    ('// a C comment\nroot ::= "a"', 1, 1, "comments start with '#'"),
    ('root ::= "a"\n  | "b"', 2, 3, "expected a rule name"),  # a newline ends a top-level body
    ('root ::= "a" )', 1, 14, "expected a newline or the end"),
    ("root ::= <think>", 1, 10, "token references"),
    ('root ::= "a"{2001}', 1, 13, "more than 2000"),
    ('root ::= "a"{3,2}', 1, 13, "invalid repetition bounds"),
    ("root ::= *", 1, 10, "expecting an item"),
    ('root ::= ("a"', 1, 14, "expected '\\)'"),
    ("root ::= [z-a]", 1, 10, "inverted character range"),
    ('root ::= "a" | foo', 1, 16, "undefined rule 'foo'"),  # found by the EBNF stage, placed in the GBNF
    ('x ::= "a"', 1, 1, "no root rule 'root'"),
]


@pytest.mark.parametrize("gbnf, line, column, message", gbnf__line__column__message)
def test_gbnf__line__column__message(gbnf, line, column, message):
    with pytest.raises(GrammarError, match=message) as info:
        compile_grammar(gbnf, kind="gbnf", source="t.gbnf")
    (error,) = info.value.errors
    assert (error.line, error.column) == (line, column)
    assert info.value.text == gbnf


def test_gbnf_warnings_point_into_the_gbnf_text():
    gbnf = 'root ::= "a"\n\n\nunused ::= "x"'
    compiled = compile_grammar(gbnf, kind="gbnf")
    (warning,) = compiled.warnings
    assert (warning.line, warning.column) == (4, 1)
    assert compiled.grammar_source.kind == "gbnf" and compiled.grammar_source.text == gbnf


@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: str(p.relative_to(THIRD_PARTY)))
def test_third_party_gbnf_converts_with_its_language(path):
    """Every corpus GBNF converts; XGrammar reads the result; our samples of it are sentences
    for XGrammar (a wrong escape, class or bound in the conversion shows up here)."""
    source = to_ebnf(path.read_text(encoding="utf-8"), name=str(path))
    assert source.kind == "gbnf"
    xgrammar.Grammar.from_ebnf(source.ebnf)
    ast = parse_ebnf(source.ebnf)
    matcher = xgrammar_matcher(source.ebnf)
    rng = random.Random(0)
    for _ in range(10):
        text = sample(ast, rng, free_depth=4)
        assert xgrammar_matches(matcher, utf8(text)), repr(text)


# ---- JSON Schema ----------------------------------------------------------------------------

SCHEMAS = {
    "pattern": {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"}, "n": {"type": "integer"}},
        "required": ["id"],
    },
    "format": {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}, "mail": {"type": "string", "format": "email"}},
        "required": ["day"],
    },
    "enum": {"enum": ["red", "green", 3, None, True]},
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 5}, "tags": {"type": "array"}},
                "required": ["name"],
            }
        },
        "required": ["user"],
    },
    "array": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "maxItems": 3},
    "pattern_json_chars": {"type": "string", "pattern": "^(x|\\\\y|[^a]{2})$"},
}

# schema name, valid instances, invalid instances (checked on Grammar.from_json_schema's matcher)
schema__valid__invalid = [
    ("pattern", ['{"id": "AB-123"}', '{"id":"ZZ-1234","n":5}'], ['{"id": "ab-123"}', '{"id": "AB-12"}', "{}"]),
    ("format", ['{"day": "2024-02-29"}', '{"day":"2024-01-01","mail":"a@b.co"}'], ['{"day": "2024-13-01"}']),
    ("enum", ['"red"', "3", "null", "true"], ['"blue"', "4", "false"]),
    ("nested", ['{"user": {"name": "ab", "tags": [1, "x"]}}'], ['{"user": {"name": "abcdef"}}', '{"user": {}}']),
    ("array", ["[0]", "[1, 2, 3]"], ["[]", "[1, 2, 3, 4]", "[-1]"]),
    ("pattern_json_chars", ['"x"', '"bc"', '"é中"'], ['"\\\\y"', '"\\y"', '"ab"', '"\\"a"']),
]


@pytest.mark.parametrize("name, valid, invalid", schema__valid__invalid)
def test_schema__valid__invalid(name, valid, invalid):
    schema = json.dumps(SCHEMAS[name])
    compiled = compile_grammar(schema, kind="auto")
    assert compiled.grammar_source.kind == "json_schema" and compiled.grammar_source.text == schema
    theirs = xgrammar.GrammarMatcher(
        xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False).compile_grammar(
            xgrammar.Grammar.from_json_schema(schema)
        ),
        terminate_without_stop_token=True,
    )
    for instance in valid + invalid:
        expected = instance in valid
        assert xgrammar_matches(theirs, utf8(instance)) == expected, f"the table is wrong on {instance}"
        assert compiled.gnf.accepts(utf8(instance)) == expected, instance


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_samples_are_instances_for_xgrammar(name):
    """Our language ⊆ the schema's, on samples, checked on the matcher XGrammar builds from the
    schema itself (not from its printed EBNF): the printed EBNF keeps the schema's meaning."""
    schema = json.dumps(SCHEMAS[name])
    compiled = compile_grammar(schema, kind="json_schema")
    theirs = xgrammar.GrammarMatcher(
        xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False).compile_grammar(
            xgrammar.Grammar.from_json_schema(schema)
        ),
        terminate_without_stop_token=True,
    )
    rng = random.Random(1)
    for _ in range(20):
        text = sample(compiled.ast, rng, free_depth=5)
        assert xgrammar_matches(theirs, utf8(text)), repr(text)


JSON_TOKENS = [
    *'{}[]":, -.0123456789', "AB", "ZZ", "-1", "12", "123", '"id"', '"n"', '":', '",', '{"', "null", "true", "x",
    "y", "\\\\", "\\", '"x"', "bc", "é", "a", "b", " \n", "2024", "-0", "-01", '"day"', "@", "co",
]  # fmt: skip
JSON_VOCAB = vocab_from_bytes(
    [t.encode() for t in JSON_TOKENS] + [b""], stop_ids=[len(JSON_TOKENS)], name="json-schema-toy"
)


@pytest.mark.parametrize("name", ["pattern", "array", "pattern_json_chars", "enum"])
def test_schema_compressed_masks_equal_xgrammar(name):
    compiled = compile_grammar(json.dumps(SCHEMAS[name]), kind="json_schema")
    classes = build_classes(compiled, JSON_VOCAB).classes
    report = verify_lossless(compiled.text, JSON_VOCAB, classes, walks=6, steps=16, seed=2)
    assert report.ok, report.first_mismatch
    assert report.steps_checked > 10


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_schema_keeps_the_rules_its_root_reaches_with_the_same_classes_and_notes(name):
    # XGrammar's EBNF of a schema carries ~20 basic_* helpers; the front end keeps the rules the
    # root reaches (parse_ebnf(reachable_only=True)). The same text compiled as plain EBNF keeps
    # every rule: the classes must be the same partition.
    schema = json.dumps(SCHEMAS[name])
    compiled = compile_grammar(schema, kind="json_schema")
    full = compile_grammar(compiled.text, kind="ebnf")
    kept = set(compiled.ast.rules)
    assert kept <= set(full.ast.rules)
    unreachable = {w.message.split("'")[1] for w in full.warnings if "is unreachable from" in w.message}
    assert kept == set(full.ast.rules) - unreachable
    ours = np.asarray(build_classes(compiled, JSON_VOCAB).classes.class_of)
    theirs = np.asarray(build_classes(full, JSON_VOCAB).classes.class_of)
    assert same_partition(ours, theirs)


def same_partition(a, b) -> bool:
    """Two class-id arrays group the tokens alike (class ids may differ)."""
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_schema_warnings_about_xgrammar_rules_become_one_note():
    compiled = compile_grammar(json.dumps(SCHEMAS["nested"]), kind="json_schema")
    assert compiled.warnings == []
    assert any("XGrammar's generated rules" in note for note in compiled.grammar_source.notes)


# schema text, line, column, message
schema__line__column__message = [
    ('{"type": "string",\n "pattern": "a"', 2, 16, "not valid JSON: Expecting ',' delimiter"),
    ("[1, 2]", 1, 1, "a JSON Schema is an object"),
    ('{"type": "strin"}', 1, 1, 'XGrammar cannot build a grammar from this schema: Unsupported type "strin"'),
    ('{"type": "string", "pattern": "\\\\p{L}"}', 1, 32, "Unicode character class"),
    ('{"properties": {"a": {"type": "string",\n  "pattern": "a(b"}}}', 2, 15, "parenthesis is not closed"),
]


@pytest.mark.parametrize(
    "schema, line, column, message",
    [
        # XGrammar reads these otherwise than the pattern says; cfgzip mirrors it and warns (issue 17)
        ('{"type": "string",\n  "pattern": "^(?!foo).*$"}', 2, 16, "lookahead assertion"),
        ('{"type": "string", "pattern": "ab^c"}', 1, 34, "anchor '\\^'"),
    ],
)
def test_schema_pattern_warning__line__column(schema, line, column, message):
    compiled = compile_grammar(schema, kind="auto", source="s.json")
    (warning,) = [w for w in compiled.warnings if re.search(message, w.message)]
    assert (warning.line, warning.column, warning.severity) == (line, column, "warning")


@pytest.mark.parametrize("schema, line, column, message", schema__line__column__message)
def test_schema__line__column__message(schema, line, column, message):
    with pytest.raises(GrammarError, match=message) as info:
        compile_grammar(schema, kind="auto", source="s.json")
    errors = info.value.errors
    assert [(e.line, e.column) for e in errors] == [(line, column)]
    assert info.value.text == schema
    assert "Traceback" not in str(info.value) and "/project/cpp" not in str(info.value)


def test_to_ebnf_keeps_its_signature_for_the_workbench():
    source = to_ebnf(json.dumps(SCHEMAS["pattern"]), name="s.json")
    assert isinstance(source, GrammarSource)
    assert 'Regex("^[A-Z]{2}-\\\\d{3,4}$", json_string=true)' in source.ebnf
    assert source.notes and source.name == "s.json"


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ('root ::= "a" | foo', "gbnf", [(1, 16, "error", "undefined rule 'foo'")]),
        ('root ::= "\\q"', "gbnf", [(1, 11, "error", "unknown escape")]),
        ('root ::= "a"\n\nx ::= "b"', "gbnf", [(3, 1, "warning", "unreachable")]),
        ('{"type": "string", "pattern": "a^b"}', "auto", [(1, 33, "warning", "anchor")]),
        ('{"type": "string"', "auto", [(1, 18, "error", "not valid JSON")]),
        (json.dumps(SCHEMAS["nested"]), "auto", []),  # XGrammar's own rules' warnings left out
        ('root ::= exprr\nexpr ::= "a"', "ebnf", [(1, 10, "error", "did you mean 'expr'"), (2, 1, "warning", "")]),
    ],
)
def test_check_source__diagnostics_in_the_users_text(text, kind, expected):
    found = check_source(text, kind)
    assert [(d.line, d.column, d.severity) for d in found] == [e[:3] for e in expected]
    for diagnostic, (_, _, _, fragment) in zip(found, expected):
        assert fragment in diagnostic.message


@pytest.fixture(scope="module")
def smollm2():
    from cfgzip_lab.vocab_sources import load_vocab

    return load_vocab("smollm2")


REAL_TOKENIZER_GRAMMARS = {
    "gbnf:arithmetic": ("gbnf", THIRD_PARTY / "llama.cpp" / "arithmetic.gbnf"),
    "gbnf:list": ("gbnf", THIRD_PARTY / "llama.cpp" / "list.gbnf"),
    "schema:pattern": ("json_schema", SCHEMAS["pattern"]),
    "schema:pattern_json_chars": ("json_schema", SCHEMAS["pattern_json_chars"]),
}


@pytest.mark.parametrize("name", sorted(REAL_TOKENIZER_GRAMMARS))
def test_real_tokenizer_compressed_masks_equal_xgrammar(name, smollm2):
    """SmolLM2's 49,152 tokens: random constrained walks, compressed engine against plain XGrammar."""
    kind, what = REAL_TOKENIZER_GRAMMARS[name]
    if kind == "gbnf":
        if not what.exists():
            pytest.skip(f"{what} is not checked out here")
        text = what.read_text(encoding="utf-8")
    else:
        text = json.dumps(what)
    compiled = compile_grammar(text, kind=kind)
    classes = build_classes(compiled, smollm2).classes
    report = verify_lossless(compiled.text, smollm2, classes, walks=3, steps=16, seed=3)
    assert report.ok, report.first_mismatch
    assert report.steps_checked >= 6 and classes.num_classes < smollm2.vocab_size  # short languages end early


GBNF_FRAGMENTS = [
    '"a"', '"ab"', '"\\x41"', '"\\u00e9"', '"\\n"', '"\\\\"', '"\\""', "[a-c]", "[^a]", "[\\x41-\\x43]", "[a-]",
    "[\\]]", "[\\t ]", "x", "(", ")", "|", "*", "+", "?", "{2}", "{1,2}", "{0,}", " ", '""',
]  # fmt: skip
PROBE_STRINGS = ["", "a", "ab", "b", "c", "A", "B", "é", "\n", "\\", '"', "]", "-", " ", "\t", "aa", "abab", "ba"]
PROBE_STRINGS += ["q", "aq", "qq", "Aé", "ab\n", "cc", "aAb"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(GBNF_FRAGMENTS), min_size=1, max_size=8))
def test_gbnf_conversion_keeps_the_language_where_the_dialects_agree(fragments):
    """Where XGrammar reads the GBNF text itself, it must read the same language from our
    conversion (escapes, classes, groups, quantifiers re-spelled without a change of meaning)."""
    gbnf = "root ::= " + " ".join(fragments) + '\nx ::= "q"'
    try:
        source = to_ebnf(gbnf, "gbnf")
    except GrammarError:
        return  # not GBNF (an unbalanced parenthesis, a quantifier with nothing before it...)
    try:
        original = xgrammar_matcher(gbnf)
    except Exception:  # noqa: BLE001 - XGrammar rejects what GBNF allows: an empty alternative, a**
        return
    converted = xgrammar_matcher(source.ebnf)
    for s in PROBE_STRINGS:
        assert xgrammar_matches(converted, utf8(s)) == xgrammar_matches(original, utf8(s)), (source.ebnf, s)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_schema_note_counts_the_unreachable_warnings_the_parse_did_not_make(name):
    # compile_grammar parses XGrammar's EBNF with warn_unreachable=False: the note still counts every
    # warning about XGrammar's rules that the full parse makes and the schema has no place for.
    compiled = compile_grammar(json.dumps(SCHEMAS[name]), kind="json_schema")
    made = parse_ebnf(compiled.text, reachable_only=True).warnings
    dropped = sum(compiled.grammar_source.remap(d) is None for d in made)
    notes = [n for n in compiled.grammar_source.notes if "XGrammar's generated rules" in n]
    assert [n.split(" warnings about")[0] for n in notes] == ([str(dropped)] if dropped else [])
    assert compiled.ast.hidden_warnings == sum("is unreachable from" in d.message for d in made)
