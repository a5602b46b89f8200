"""cfgzip_lab.serving.grammars: a request's grammar is XGrammar's conversion with the engine's options."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from serving_tools import LEGACY_TAG, PERSON
from xgrammar.testing import _is_grammar_accept_string

from cfgzip_lab.grammar.printed import printed_ebnf
from cfgzip_lab.serving.grammars import GrammarRequest, ServingError, legacy_structural_tag

COMPACT = '{"name":"Ada","age":36}'
SPACED = '{"name": "Ada", "age": 36}'


# (request options, XGrammar's from_json_schema options, accepts COMPACT, accepts SPACED)
JSON_OPTIONS = [
    ({}, {}, True, True),
    ({"any_whitespace": False}, {"any_whitespace": False}, False, True),  # XGrammar's default separators: ", " ": "
    (
        {"any_whitespace": False, "separators": (",", ":")},
        {"any_whitespace": False, "separators": (",", ":")},
        True,
        False,
    ),  # vLLM without whitespace
]


@pytest.mark.parametrize("options, xgrammar_options, compact, spaced", JSON_OPTIONS)
def test_json_schema_request_is_xgrammars_conversion_with_its_options(options, xgrammar_options, compact, spaced):
    schema = json.dumps(PERSON)
    ebnf = GrammarRequest("json_schema", schema, **options).to_ebnf()
    assert ebnf == printed_ebnf(xgr.Grammar.from_json_schema(schema, **xgrammar_options))
    assert _is_grammar_accept_string(ebnf, COMPACT) is compact  # the separators are not dropped on the way
    assert _is_grammar_accept_string(ebnf, SPACED) is spaced


def test_legacy_structural_tag_is_xgrammars_own_reading():
    items = [
        xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"])
        for s in LEGACY_TAG["structures"]
    ]
    request = legacy_structural_tag(LEGACY_TAG["structures"], LEGACY_TAG["triggers"])
    assert request.kind == "structural_tag"
    assert request.to_ebnf() == printed_ebnf(xgr.Grammar.from_structural_tag(items, LEGACY_TAG["triggers"]))
    at_least_one = legacy_structural_tag(LEGACY_TAG["structures"], LEGACY_TAG["triggers"], at_least_one=True)
    assert json.loads(at_least_one.text)["format"]["at_least_one"] is True
    assert not _is_grammar_accept_string(at_least_one.to_ebnf(), "plain text")
    assert _is_grammar_accept_string(request.to_ebnf(), "plain text")


def test_a_schema_xgrammar_refuses_is_a_serving_error_with_its_message():
    with pytest.raises(ServingError, match="invalid json_schema: "):
        GrammarRequest("json_schema", "{not json").to_ebnf()
