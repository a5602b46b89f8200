"""The byte CFG from XGrammar's grammar object (cfgzip_lab/grammar/serialized.py) against the text path.

The text path (``parse_ebnf`` of the printed EBNF, then ``lower``) is the referee: on every schema the two
CFGs must be equal in all that later stages read (rules and their order, productions, byte sets, counted
repetitions, origins, symbol spans), and a compiled grammar from either path the same (GNF arrays and
provenance, syntax tree, warnings, notes, nested-root verdict, errors with their line and column).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import xgrammar
from paths import CORPORA, MASKBENCH

from cfgzip_lab import pipeline
from cfgzip_lab.grammar import serialized
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.gnf_arrays import gnf_to_arrays
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.grammar.printed import printed_ebnf
from cfgzip_lab.grammar.serialized import Unsupported, cfg_from_grammar, cfg_from_serialized, copy_of
from cfgzip_lab.pipeline import ParsedLaterGrammar, compile_grammar, nested_root_reason

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from serialized_cfg import cfg_difference  # noqa: E402 (the benchmark's comparison, one definition)

SUITE = CORPORA / "json-schema-test-suite"
# MaskBench files compared at the CFG level in CI: a seeded sample (all 10,282 with
# benchmarks/serialized_cfg.py --all --suite, ~25 min on the 2-core VM at load ~10)
MASKBENCH_SAMPLE = 400

# Hand-written schemas: each construct the conversion reads, and the ones it hands to the text path.
SCHEMAS = {
    "object": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}}, "required": ["a"]},
    "bounds": {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 40}}},
    "counted": {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 100},
    "pattern": {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+){0,3}$"},
    "enum": {"enum": ["é", "éa", 'qu"ote', "back\\slash", "tab\there", "😀", 1, None, True]},
    "const": {"const": {"a": [1, 2, {"b": "c"}]}},
    "any": {},
    "anyOf": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 1200}, {"type": "boolean"}]},
    "nested root": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}},
    "format": {"type": "string", "format": "date-time"},
    "additional": {"type": "object", "additionalProperties": {"type": "integer"}},
    # a definition that never ends ("x" requires itself): dead ends, kept exactly and warned about
    "dead ends": {
        "$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}},
        "type": "object",
        "properties": {"y": {"$ref": "#/$defs/a"}},
    },
}


def _text_path(monkeypatch):
    monkeypatch.setattr(pipeline, "_serialized_cfg", lambda *args: None)


def _both(schema: str, monkeypatch, **options):
    fast = compile_grammar(schema, kind="json_schema", **options)
    with monkeypatch.context() as m:
        _text_path(m)
        text = compile_grammar(schema, kind="json_schema", **options)
    return fast, text


def _text_cfg(text: str):
    return lower(parse_ebnf(text, reachable_only=True, warn_unreachable=False))


def _same_compiled(fast, text) -> None:
    assert cfg_difference(text.cfg, fast.cfg) is None
    arrays_f, doc_f = gnf_to_arrays(fast.gnf)
    arrays_t, doc_t = gnf_to_arrays(text.gnf)
    for doc in (doc_f, doc_t):  # each step's seconds aside
        doc["steps"] = [step[:4] for step in doc.get("steps", [])]
    assert doc_f == doc_t  # names, provenance, families, the steps' sizes
    assert arrays_f.keys() == arrays_t.keys()
    for key in arrays_t:
        assert np.array_equal(arrays_f[key], arrays_t[key]), key
    assert fast.text == text.text and fast.seconds.keys() == text.seconds.keys()
    assert nested_root_reason(fast) == nested_root_reason(text)
    assert fast.grammar_source.notes == text.grammar_source.notes
    assert fast.ast == text.ast and fast.warnings == text.warnings and fast.stats() == text.stats()


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_hand_written_schemas_compile_alike_on_both_paths(name, monkeypatch):
    fast, text = _both(json.dumps(SCHEMAS[name]), monkeypatch)
    assert isinstance(fast, ParsedLaterGrammar) and not isinstance(text, ParsedLaterGrammar)
    assert not fast.parsed  # nothing above asked for the syntax tree yet
    _same_compiled(fast, text)
    assert fast.parsed


@pytest.mark.parametrize("name", ["object", "dead ends"])
def test_a_schema_built_again_gets_the_same_grammar_and_the_kept_cfg_stays_as_read(name, monkeypatch):
    schema = json.dumps(SCHEMAS[name])
    first, text = _both(schema, monkeypatch)
    again = compile_grammar(schema, kind="json_schema")
    _same_compiled(first, text)
    _same_compiled(again, text)
    if name == "dead ends":  # the pipeline changed a copy (DEAD productions), not the kept CFG
        assert cfg_difference(_text_cfg(text.text), text.cfg) is not None  # DEAD productions added
        assert "not shown" in text.grammar_source.notes[-1]  # the dead-end warning counted among them
        grammar = xgrammar.Grammar.from_json_schema(schema)
        kept = cfg_from_grammar(grammar, printed_ebnf(grammar))
        assert cfg_difference(_text_cfg(text.text), kept) is None
        assert kept is not again.cfg and cfg_difference(kept, again.cfg) is not None


def test_a_copy_of_a_cfg_is_equal_and_its_own():
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(SCHEMAS["bounds"]))
    cfg = cfg_from_grammar(grammar, printed_ebnf(grammar))
    copy = copy_of(cfg)
    assert cfg_difference(cfg, copy) is None
    name = next(iter(copy.rules))
    copy.rules[name].append(())
    copy.symbol_spans[name].append(())
    assert cfg_difference(cfg, copy) is not None and cfg_difference(cfg, _text_cfg(cfg.text)) is None


def test_reading_the_notes_first_runs_the_parse_once_in_the_text_paths_order(monkeypatch):
    schema = json.dumps(SCHEMAS["object"])
    fast, text = _both(schema, monkeypatch)
    notes = fast.grammar_source.notes  # before the syntax tree: the parse's note is there all the same
    assert fast.parsed and notes == text.grammar_source.notes
    assert "warnings about XGrammar's generated rules not shown" in notes[-1]
    assert fast.grammar_source.notes == notes and fast.ast is fast.ast  # once


def test_a_nested_root_is_found_without_the_syntax_tree_where_the_root_is_named_once(monkeypatch):
    fast, text = _both(json.dumps(SCHEMAS["object"]), monkeypatch)
    assert nested_root_reason(fast) is None and not fast.parsed  # "root" named once: no parse
    fast, text = _both(json.dumps(SCHEMAS["nested root"]), monkeypatch)
    assert nested_root_reason(fast) == nested_root_reason(text) is not None


def test_a_normal_form_error_keeps_its_line_and_column(monkeypatch):
    schema = json.dumps({"type": "array", "items": SCHEMAS["object"]})
    errors = []
    for text_path in (False, True):
        with monkeypatch.context() as m:
            if text_path:
                _text_path(m)
            with pytest.raises(GrammarError) as caught:
                compile_grammar(schema, kind="json_schema", max_gnf_nodes=50)
            errors.append(caught.value)
    fast, text = errors
    assert fast.diagnostics == text.diagnostics and str(fast) == str(text)
    assert all(d.line >= 1 and d.column >= 1 for d in fast.diagnostics)


def test_what_the_conversion_does_not_read_takes_the_text_path(monkeypatch):
    # a pattern XGrammar warns about (an anchor mid-pattern): its warning is placed in the schema by the parse
    schema = json.dumps({"type": "string", "pattern": "(^a+)|(^b+)"})
    grammar = xgrammar.Grammar.from_json_schema(schema)
    with pytest.raises(Unsupported):
        cfg_from_grammar(grammar, printed_ebnf(grammar))
    fast, text = _both(schema, monkeypatch)
    assert type(fast) is type(text) is pipeline.CompiledGrammar
    assert fast.warnings == text.warnings and fast.warnings  # the regex warning, in the schema's terms
    # another serialization format, or a text that is not this grammar's printing
    serialized = json.loads(grammar.serialize_json())
    with pytest.raises(Unsupported):
        cfg_from_serialized({**serialized, "__VERSION__": "v99"}, printed_ebnf(grammar))
    other = xgrammar.Grammar.from_json_schema(json.dumps(SCHEMAS["object"]))
    with pytest.raises(Unsupported):
        cfg_from_serialized(json.loads(other.serialize_json()), printed_ebnf(grammar))
    with pytest.raises(Unsupported, match="one line a rule"):  # a rule the arrays do not hold
        cfg_from_serialized(json.loads(other.serialize_json()), printed_ebnf(other) + 'extra ::= "x"\n')
    # a NUL: XGrammar prints it as the literal's end ("a" "" "b"), so the printed text reads another language
    nul = xgrammar.Grammar.from_regex("a\\0b")
    assert printed_ebnf(nul) == 'root ::= (("a" "" "b"))\n'
    with pytest.raises(Unsupported, match="does not spell"):
        cfg_from_grammar(nul, printed_ebnf(nul))


def test_another_start_rule_and_other_kinds_take_the_text_path():
    schema = json.dumps(SCHEMAS["object"])
    compiled = compile_grammar(schema, kind="json_schema")
    assert isinstance(compile_grammar(compiled.text, kind="ebnf"), pipeline.CompiledGrammar)
    assert not isinstance(compile_grammar(compiled.text, kind="ebnf"), ParsedLaterGrammar)
    assert not isinstance(compiled.from_rule("basic_string"), ParsedLaterGrammar)


def _maskbench_sample(n: int, seed: int) -> list[tuple[str, str]]:
    if not MASKBENCH.exists():
        pytest.skip("MaskBench is not checked out")
    with gzip.open(MASKBENCH, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    rng = random.Random(seed)
    return [(row["name"], json.dumps(row["schema"])) for row in rng.sample(rows, min(n, len(rows)))]


def _compare_cfgs(named: list[tuple[str, str]]) -> tuple[int, list[str]]:
    compared, wrong = 0, []
    for name, schema in named:
        try:
            grammar = xgrammar.Grammar.from_json_schema(schema)
        except Exception:
            continue  # XGrammar refuses it: no grammar on either path
        text = printed_ebnf(grammar)
        try:
            fast = cfg_from_grammar(grammar, text)
        except Unsupported:
            continue  # the pipeline takes the text path
        try:
            referee = _text_cfg(text)
        except Exception as error:
            wrong.append(f"{name}: the text path refuses it ({error!r:.120}), the serialized path does not")
            continue
        why = cfg_difference(referee, fast)
        if why is not None:
            wrong.append(f"{name}: {why}")
        compared += 1
    return compared, wrong


def test_maskbench_schemas_give_the_text_paths_cfg():
    compared, wrong = _compare_cfgs(_maskbench_sample(MASKBENCH_SAMPLE, seed=33))
    assert not wrong, wrong[:5]
    assert compared >= MASKBENCH_SAMPLE * 0.9


def test_json_schema_test_suite_schemas_give_the_text_paths_cfg():
    files = sorted(SUITE.glob("[0-9][0-9][0-9][0-9].json"))
    if not files:
        pytest.skip("the JSON-Schema-Test-Suite corpus is not checked out")
    compared, wrong = _compare_cfgs([(p.stem, p.read_text()) for p in files])
    assert not wrong, wrong[:5]
    assert compared >= len(files) * 0.8


def test_maskbench_schemas_compile_alike_on_both_paths(monkeypatch):
    for _name, schema in _maskbench_sample(12, seed=7):
        try:
            fast, text = _both(schema, monkeypatch)
        except GrammarError:
            continue
        if isinstance(fast, ParsedLaterGrammar):
            _same_compiled(fast, text)


def _both_walks(data: dict, text: str):
    """The CFG (or the refusal) of the walk in C and of the Python walk, its reference."""
    out = []
    for in_c in (True, False):
        serialized.IN_C = in_c
        try:
            out.append(cfg_from_serialized(data, text))
        except Unsupported:
            out.append("Unsupported")
        finally:
            serialized.IN_C = True
    return out


@pytest.mark.skipif(serialized.kernel is None, reason="the compiled kernel is not built")
def test_the_walk_in_c_makes_the_python_walks_cfg():
    """csrc/serialized.c against _Converter.rule and its methods: the same rules, names and order, origins and
    spans (cfg_difference reads them all), and the same refusals, on MaskBench and the JSON-Schema-Test-Suite."""
    named = _maskbench_sample(150, seed=61) + [(p.stem, p.read_text()) for p in sorted(SUITE.glob("00*.json"))]
    named += [(n, json.dumps(s)) for n, s in SCHEMAS.items()]
    named.append(("a regex with a warning", json.dumps({"type": "string", "pattern": "(^a+)|(^b+)"})))
    # origins' excerpts about their width (40): rule lines of 33 to 50 characters, some with a space near its end
    for k in range(14, 32):
        named.append((f"const {k}", json.dumps({"const": "a" * k})))
        named.append((f"enum {k}", json.dumps({"enum": ["a" * (k - 10), "b b"], "maxLength": 3})))
        named.append((f"array {k}", json.dumps({"type": "array", "items": {"const": "a" * (k - 20) + " x"}})))
    compared = refused = 0
    for name, schema in named:
        try:
            grammar = xgrammar.Grammar.from_json_schema(schema)
        except Exception:
            continue
        in_c, in_python = _both_walks(json.loads(grammar.serialize_json()), printed_ebnf(grammar))
        if in_python == "Unsupported":
            assert in_c == "Unsupported", name
            refused += 1
            continue
        assert in_c != "Unsupported", name
        assert cfg_difference(in_python, in_c) is None, name
        compared += 1
    assert compared >= 100 and refused >= 1


@pytest.mark.skipif(serialized.kernel is None, reason="the compiled kernel is not built")
def test_the_walk_in_c_refuses_arrays_out_of_range_rather_than_read_past_them():
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(SCHEMAS["object"]))
    data, text = json.loads(grammar.serialize_json()), printed_ebnf(grammar)
    cut = {**data, "grammar_expr_data": data["grammar_expr_data"][: len(data["grammar_expr_data"]) // 2]}
    far = {**data, "grammar_expr_indptr": [i + 10**6 for i in data["grammar_expr_indptr"]]}
    # every rule a sequence of one that holds itself
    loop = {
        **data,
        "grammar_expr_data": [5, 1, 0],
        "grammar_expr_indptr": [0],
        "rules": [[r[0], 0, *r[2:]] for r in data["rules"]],
    }
    starts = set(data["grammar_expr_indptr"])  # every expression a tag dispatch, which the walk does not read
    other_type = {
        **data,
        "grammar_expr_data": [7 if i in starts else v for i, v in enumerate(data["grammar_expr_data"])],
    }
    for broken in (cut, far, loop, other_type):
        with pytest.raises(Unsupported):
            cfg_from_serialized(broken, text)


@pytest.mark.skipif(serialized.kernel is None, reason="the compiled kernel is not built")
def test_the_serialized_text_reads_as_json_loads_reads_it():
    """_read_serialized (the expression arrays read in C) against json.loads: on schemas, and on texts where the
    arrays are not what it reads (it then reads the whole text with json.loads)."""
    for _name, schema in _maskbench_sample(60, seed=62) + [(n, json.dumps(s)) for n, s in SCHEMAS.items()]:
        try:
            text = xgrammar.Grammar.from_json_schema(schema).serialize_json()
        except Exception:
            continue
        data = serialized._read_serialized(text)
        assert data == json.loads(text) and list(data) == list(json.loads(text))
    odd = [
        '{"rules":[],"grammar_expr_data":[1, -2 ,3],"grammar_expr_indptr":[ ],"x":1}',
        '{"rules":[],"grammar_expr_data":[1.5],"grammar_expr_indptr":[0]}',  # not integers
        '{"rules":[],"grammar_expr_data":[1e3],"grammar_expr_indptr":[0]}',
        '{"rules":[],"grammar_expr_data":[123456789012345678901234],"grammar_expr_indptr":[0]}',
        '{"rules":["\\"grammar_expr_data\\":[1]"],"grammar_expr_data":[2],"grammar_expr_indptr":[0]}',
        '{"rules":[{"grammar_expr_data":[1]}],"grammar_expr_data":[2],"grammar_expr_indptr":[0]}',  # nested first
        '{"rules":[],"grammar_expr_indptr":[0]}',  # no data array
    ]
    for text in odd:
        assert serialized._read_serialized(text) == json.loads(text), text
    with pytest.raises(ValueError):
        serialized._read_serialized('{"rules":[],"grammar_expr_data":[01],"grammar_expr_indptr":[0]}')
