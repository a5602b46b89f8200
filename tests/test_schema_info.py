"""What XGrammar made of a JSON Schema (cfgzip_lab.grammar.schema_info), checked against the
installed XGrammar: every rule maps to a pointer that exists in the schema; every keyword listed
as ignored is ignored (an instance breaking it is accepted) and every format listed as enforced
is; properties must come in order; a costly keyword is named with its measured share."""

from __future__ import annotations

import json

import pytest

xgrammar = pytest.importorskip("xgrammar")

from xgrammar.testing import _is_grammar_accept_string as accepts  # noqa: E402

from cfgzip_lab.grammar.provenance import rule_sizes  # noqa: E402
from cfgzip_lab.grammar.schema_info import (  # noqa: E402
    FORMATS_ENFORCED,
    _resolve,
    costly_keywords,
    rule_pointers,
    unenforced_keywords,
    xgrammar_warnings,
)
from cfgzip_lab.pipeline import compile_grammar  # noqa: E402

MEETING = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 12},
        "attendees": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "email": {"type": "string", "format": "email"}},
                "required": ["name"],
            },
            "uniqueItems": True,
        },
        "kind": {"enum": ["call", "visit"]},
        "room": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "not_a_string": {"not": {"type": "string"}},
        "place": {"$ref": "#/$defs/Place"},
        "extra": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "additionalProperties": {"type": "boolean"},
        },
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    },
    "required": ["title"],
    "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def _ebnf(schema) -> str:
    return str(xgrammar.Grammar.from_json_schema(json.dumps(schema)))


def test_every_rule_maps_to_a_pointer_in_the_schema():
    text = json.dumps(MEETING)
    pointers = rule_pointers(text, _ebnf(MEETING))
    assert pointers["root"] == ""
    assert pointers["root_prop_1"] == "/properties/attendees"
    assert pointers["root_prop_1_additional"] == "/properties/attendees/items"
    assert pointers["root_prop_1_additional_prop_1"] == "/properties/attendees/items/properties/email"
    assert pointers["root_prop_5"] == "/properties/place"
    assert pointers["defs_Place"] == "/$defs/Place"
    for rule, pointer in pointers.items():
        if pointer.startswith("("):
            assert rule.startswith("basic_"), rule  # only XGrammar's shared rules have no place
            continue
        _resolve(MEETING, pointer)  # raises if the pointer is not in the schema
    # the email format's helper rules (root_1, root_2, ...) belong to the email property
    helpers = [r for r in pointers if r.startswith("root_") and r[5:6].isdigit()]
    assert helpers and {pointers[r] for r in helpers} <= {"/properties/attendees/items/properties/email", ""}


# keyword, a schema using it, an instance that breaks it: XGrammar 0.2.8 accepts the instance
IGNORED = [
    ("not", {"type": "object", "properties": {"n": {"not": {"type": "string"}}}, "required": ["n"]}, '{"n": "s"}'),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1, 1]"),
    (
        "dependentRequired",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependentRequired": {"a": ["b"]},
        },
        '{"a": 1}',
    ),
    (
        "if/then/else",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "if": {"required": ["a"]},
            "then": {"required": ["b"]},
        },
        '{"a": 1}',
    ),
    ("format", {"type": "string", "format": "color"}, '"x"'),
    ("maxLength", {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}, '"abcdef"'),
    ("multipleOf", {"type": "number", "multipleOf": 0.5}, "0.3"),
    ("multipleOf", {"type": "integer", "minimum": 3, "multipleOf": 3}, "4"),
    (
        "$ref",
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}, "required": ["a"]},
        '{"a": 1}',
    ),
    ("allOf", {"allOf": [{"type": "integer"}, {"minimum": 3}]}, '"s"'),
    ("oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1"),
]


@pytest.mark.parametrize("keyword, schema, instance", IGNORED, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(IGNORED)])
def test_each_keyword_listed_as_unenforced_is_unenforced(keyword, schema, instance):
    text = json.dumps(schema)
    notes = unenforced_keywords(text, xgrammar_warnings(text))
    assert keyword in {n.keyword for n in notes if n.effect in ("ignored", "weakened")}, notes
    assert accepts(xgrammar.Grammar.from_json_schema(text), instance)  # XGrammar lets the breaker through


def test_enforced_keywords_are_not_listed():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "multipleOf": 3}, "m": {"type": "integer", "minimum": 3}},
        "required": ["n", "m"],
    }
    text = json.dumps(schema)
    assert [n for n in unenforced_keywords(text) if n.effect != "stricter"] == []
    grammar = xgrammar.Grammar.from_json_schema(text)
    assert accepts(grammar, '{"n": 6, "m": 3}')
    assert not accepts(grammar, '{"n": 4, "m": 3}') and not accepts(grammar, '{"n": 6, "m": 2}')


@pytest.mark.parametrize("fmt", sorted(FORMATS_ENFORCED))
def test_formats_listed_as_enforced_are_enforced(fmt):
    grammar = xgrammar.Grammar.from_json_schema(json.dumps({"type": "string", "format": fmt}))
    assert not accepts(grammar, '"%%%% !!"')


def test_properties_in_schema_order_and_no_others():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(schema))
    assert accepts(grammar, '{"a": 1, "b": 2}') and not accepts(grammar, '{"b": 2, "a": 1}')  # PROPERTY_ORDER
    assert not accepts(grammar, '{"a": 1, "b": 2, "c": 3}')  # STRICT_OBJECTS
    (strict,) = [n for n in unenforced_keywords(json.dumps(schema)) if n.effect == "stricter"]
    assert strict.keyword == "additionalProperties"


def test_a_costly_keyword_is_named_with_its_measured_share():
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 120}, "n": {"type": "integer"}}}
    text = json.dumps(schema)
    compiled = compile_grammar(text, kind="json_schema")
    pointers = rule_pointers(text, compiled.text)
    sizes = rule_sizes(compiled.cfg, compiled.gnf)
    found = costly_keywords(text, pointers, sizes, seconds=sum(compiled.seconds.values()))
    total = sum(s.gnf_productions for s in sizes)
    biggest = max(sizes, key=lambda s: s.gnf_productions)
    if biggest.gnf_productions < 0.2 * total or biggest.gnf_productions < 200:
        assert found == []  # counted repetitions no longer spelled out: nothing costly to name
        return
    (note,) = found
    assert note.pointer == "/properties/title" and note.keyword == "maxLength: 120"
    assert f"{biggest.gnf_productions:,} of the grammar's {total:,} GNF productions" in note.message
