"""cfgzip_lab.cache.xgrammar_only: the serving path hands a grammar to XGrammar itself where cfgzip's
engines cannot serve it (a nested root, decided from the parsed grammar alone) or where the normal form
or classing passes its size budget (served, not refused), while the explicit build APIs keep raising.
On MaskBench files: masks compared with XGrammar's own ``compile_json_schema``."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import xgrammar as xgr
from paths import maskbench_row

import cfgzip_lab as cz
import cfgzip_lab.pipeline
from cfgzip_lab.classes.limits import ClassingLimitError
from cfgzip_lab.engine import compile_engines, plain_tokenizer_info
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.gnf import NormalFormTooLarge
from cfgzip_lab.pipeline import compile_grammar


@pytest.fixture(scope="module")
def llama3():
    return cz.load_vocab("llama3")


@pytest.fixture(scope="module")
def xgrammar_compiler(llama3):
    return xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)


def _assert_xgrammars_masks(matcher, compiler, vocab, schema: str, instance: str) -> int:
    """Every mask of ``matcher`` along ``instance``'s tokens is XGrammar's own (its JSON Schema compile,
    as MaskBench's referee runs it); the number of masks compared."""
    theirs = xgr.GrammarMatcher(compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=True))
    want = xgr.allocate_token_bitmask(1, vocab.vocab_size)
    got = matcher.allocate_bitmask(1)
    steps = 0
    for token in [*vocab.encoder(instance), None]:
        theirs.fill_next_token_bitmask(want)
        matcher.fill_next_token_bitmask(got)
        assert np.array_equal(got.numpy()[0], want.numpy()[0]), steps
        steps += 1
        if token is None:
            break
        assert theirs.accept_token(token) and matcher.accept_token(token)
    return steps


def test_a_nested_root_is_decided_before_the_normal_form(llama3, xgrammar_compiler, monkeypatch):
    """MaskBench Github_easy o58637 (``"$ref": "#"``): served by XGrammar itself without a byte CFG,
    normal form or classing of its own (each of them would fail here), XGrammar's masks at every step."""
    row = maskbench_row("Github_easy---o58637")
    schema = json.dumps(row["schema"])

    def never(*args, **kwargs):
        raise AssertionError("built for a grammar XGrammar itself serves")

    for name in ("lower", "_normal_form", "build_classes"):
        monkeypatch.setattr(cfgzip_lab.pipeline, name, never)
    ready = cz.GrammarCache(cache_dir=False).get(schema, llama3, kind="json_schema")
    assert ready.compiled.gnf is None and ready.index is None
    assert (
        ready.xgrammar_only.startswith("line ") and "XGrammar itself over the whole vocabulary" in ready.xgrammar_only
    )
    matcher = ready.matcher()
    assert matcher.engine.xgrammar_fallback and matcher.engine.unavailable == ready.xgrammar_only
    instance = next(json.dumps(t["data"]) for t in row["tests"] if t["valid"])
    assert _assert_xgrammars_masks(matcher, xgrammar_compiler, llama3, schema, instance) > 20
    with pytest.raises(GrammarError, match="the compressed engine refuses this grammar"):  # at the reference
        compile_engines(ready.compiled.text, llama3, ready.classes)


def test_explicit_builds_of_a_nested_root_still_build(llama3):
    """Only the serving path stops early: compile_grammar without ``stop_where_xgrammar_serves`` builds the
    normal form of a nested root, and with it raises ``NestedRootFound`` carrying the EBNF."""
    text = 'root ::= "(" root ")" | "x"'
    assert compile_grammar(text).gnf.accepts(b"((x))")
    with pytest.raises(cfgzip_lab.pipeline.NestedRootFound) as found:
        compile_grammar(text, stop_where_xgrammar_serves=True)
    assert found.value.ebnf == text and found.value.reason.startswith("line 1, column 14: the root rule")


def _small_budgets(monkeypatch, *, gnf_nodes: int | None = None, dag_nodes: int | None = None) -> None:
    """The serving path's builds with a small normal-form or classing budget (the real ones need a
    grammar of hundreds of KB to pass them)."""
    if gnf_nodes is not None:
        small = functools.partial(cfgzip_lab.pipeline.compile_grammar, max_gnf_nodes=gnf_nodes)
        monkeypatch.setattr(cfgzip_lab.pipeline, "compile_grammar", small)
    if dag_nodes is not None:
        small = functools.partial(cfgzip_lab.pipeline.build_classes, max_dag_nodes=dag_nodes)
        monkeypatch.setattr(cfgzip_lab.pipeline, "build_classes", small)


SMALL = "Github_easy---o10016"


@pytest.mark.parametrize(
    "budgets, error, says",
    [
        ({"gnf_nodes": 50}, NormalFormTooLarge, "the normal form grew past 50 nodes"),
        ({"dag_nodes": 1}, ClassingLimitError, "classing stopped at its memory cap"),
    ],
    ids=["normal form", "classing"],
)
def test_a_grammar_past_a_size_budget_is_served_by_xgrammar(
    llama3, xgrammar_compiler, monkeypatch, budgets, error, says
):
    """Past the normal form's node budget or classing's memory cap, the explicit API raises that
    budget's error, and the serving path serves the grammar through XGrammar itself, the budget's
    message in ``engine.unavailable``, XGrammar's masks at every step of a MaskBench instance."""
    row = maskbench_row(SMALL)
    schema = json.dumps(row["schema"])
    _small_budgets(monkeypatch, **budgets)
    with pytest.raises(error, match=says):
        cfgzip_lab.pipeline.build_classes(cfgzip_lab.pipeline.compile_grammar(schema, kind="json_schema"), llama3)
    matcher = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert matcher.engine.xgrammar_fallback and matcher.engine.index is None
    assert matcher.engine.unavailable.startswith("past cfgzip's size budget, served by XGrammar itself: ")
    assert says in matcher.engine.unavailable
    with pytest.raises(cz.CfgzipError, match="no token classes for this grammar, XGrammar itself serves it"):
        compile_engines(matcher.engine.compiled.text, llama3, matcher.engine.classes)  # a placeholder partition
    instance = next(json.dumps(t["data"]) for t in row["tests"] if t["valid"])
    assert _assert_xgrammars_masks(matcher, xgrammar_compiler, llama3, schema, instance) > 5


def test_a_normal_form_past_its_budget_keeps_the_ebnf_it_came_from():
    """The budget's error keeps its type through the schema's remapping, with the EBNF XGrammar compiles."""
    schema = json.dumps(maskbench_row(SMALL)["schema"])
    with pytest.raises(NormalFormTooLarge) as raised:
        compile_grammar(schema, kind="json_schema", max_gnf_nodes=50)
    assert raised.value.grammar_source.kind == "json_schema"
    assert raised.value.ebnf == raised.value.grammar_source.ebnf and "root ::=" in raised.value.ebnf


@pytest.mark.slow
def test_maskbench_service_schema_past_the_normal_form_budget_is_served(llama3, xgrammar_compiler):
    """JsonSchemaStore service-schema (544 KB): its normal form passes 1,000,000 nodes in merging
    (134,218 rows; let through, classing then stops at its 2,500,000-node cap), while XGrammar builds it
    (~20 s). compile_grammar refuses it; matcher_for serves it through XGrammar with that reason."""
    row = maskbench_row("JsonSchemaStore---service-schema")
    schema = json.dumps(row["schema"])
    with pytest.raises(NormalFormTooLarge, match="the normal form grew past 1,000,000 nodes"):
        compile_grammar(schema, kind="json_schema")
    matcher = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert matcher.engine.xgrammar_fallback
    assert "the normal form grew past 1,000,000 nodes" in matcher.engine.unavailable
    # (the file has no valid instance: the first masks, where its object opens)
    assert _assert_xgrammars_masks(matcher, xgrammar_compiler, llama3, schema, "{") == 2


def test_a_schema_with_an_empty_language_is_served_as_xgrammar_serves_it(llama3, xgrammar_compiler):
    """MaskBench Github_medium o74424: every object requires itself, so no JSON document matches and the
    language is empty. XGrammar (0.2.8 and 0.2.9) compiles it and lets decoding in; the serving path serves
    it through XGrammar itself (refusing it would refuse a request XGrammar serves), saying in
    ``engine.unavailable`` that no output can complete, while ``compile_grammar`` names the rules as errors."""
    schema = json.dumps(maskbench_row("Github_medium---o74424")["schema"])
    with pytest.raises(GrammarError, match="never ends"):
        compile_grammar(schema, kind="json_schema")
    with pytest.raises(cfgzip_lab.pipeline.EmptyLanguage) as found:
        compile_grammar(schema, kind="json_schema", stop_where_xgrammar_serves=True)
    assert "root ::=" in found.value.ebnf
    matcher = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert matcher.engine.xgrammar_fallback and matcher.engine.index is None
    assert matcher.engine.unavailable.startswith("served by XGrammar itself: the language of 'root' is empty")
    assert "no output can ever complete" in matcher.engine.unavailable
    # a prefix as deep as a model could go: XGrammar's masks at every step (the stop token never in them)
    prefix = '{"MyModule.Def": {"nest": {"nest": {"nest": {"nest": '
    assert _assert_xgrammars_masks(matcher, xgrammar_compiler, llama3, schema, prefix) > 10


def test_an_empty_ebnf_language_is_still_an_error_on_the_serving_path():
    """Only a JSON Schema's empty language is served: an EBNF author's (which may recurse with no input at all,
    where XGrammar 0.2.8 can crash) stays the error naming the rule, on every path."""
    text = 'root ::= "(" x ")"\nx ::= "[" x "]" | x x\n'
    for stop in (False, True):
        with pytest.raises(GrammarError, match="the language of 'root' is empty because rule 'x' never ends"):
            compile_grammar(text, stop_where_xgrammar_serves=stop)
