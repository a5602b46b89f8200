"""A build's time budget (cfgzip_lab/deadline.py): a grammar cache's build past ``build_seconds`` ends
with a BuildBudgetError that names the stage, never with a request waiting as long as the build takes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from toy_vocab import ARITH_TOKENS, SPECIAL_ID, STOP_ID

import cfgzip_lab as cz
from cfgzip_lab.cache.grammars import DEFAULT_BUILD_SECONDS
from cfgzip_lab.classes.classing import compute_classes
from cfgzip_lab.deadline import BuildBudgetError, Deadline
from cfgzip_lab.grammar.compiled_words import supports
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.gnf import to_gnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.pipeline import compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

SCHEMA = '{"type": "object", "properties": {"a": {"type": "string", "maxLength": 40}}, "required": ["a"]}'


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(ARITH_TOKENS, stop_ids=[STOP_ID], special_ids=[SPECIAL_ID], name="deadline-toy")


def _spent() -> Deadline:
    deadline = Deadline(1e-6)
    time.sleep(0.001)
    return deadline


def test_a_deadline_raises_once_spent_and_names_the_stage():
    assert not Deadline(60).passed()
    Deadline(60).check("anything")  # not spent: nothing happens
    deadline = _spent()
    assert deadline.passed()
    with pytest.raises(BuildBudgetError, match=r"time budget of 1e-06 s: stopped in classing after") as got:
        deadline.check("classing")
    error = got.value
    assert isinstance(error, cz.CfgzipError) and isinstance(error, TimeoutError)
    assert (error.stage, error.budget) == ("classing", 1e-6) and error.elapsed > 0
    assert cz.BuildBudgetError is BuildBudgetError
    with pytest.raises(ValueError):
        Deadline(0)


def test_the_normal_form_checks_its_deadline_between_steps():
    cfg = lower(parse_ebnf('root ::= "a" [b-c]{0,40} "d"'))
    with pytest.raises(BuildBudgetError, match=r"the normal form \(after terminal lifting\)"):
        to_gnf(cfg, deadline=_spent())
    assert to_gnf(cfg, deadline=Deadline(60)).families  # within it: the same normal form
    with pytest.raises(BuildBudgetError, match=r"the front end \(after parsing\)"):
        compile_grammar(SCHEMA, kind="json_schema", deadline=_spent())


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled walk", "python walk"])
def test_classing_stops_at_its_cancel_without_a_progress_callback(toy, compiled):
    gnf = compile_grammar(SCHEMA, kind="json_schema").gnf
    if compiled and not supports(gnf):
        pytest.skip("the compiled kernel is not built")
    with pytest.raises(InterruptedError):
        compute_classes(gnf, toy.token_bytes, np.asarray(toy.kinds), cancel=lambda: True, compiled=compiled)


def test_a_grammar_cache_build_past_its_budget_is_a_budget_error(toy, monkeypatch):
    with pytest.raises(BuildBudgetError, match="the front end"):
        cz.GrammarCache(cache_dir=False, build_seconds=1e-9).matcher(SCHEMA, toy, kind="json_schema")
    # a budget spent during classing: the walk's cancel stops it, and the error says classing
    monkeypatch.setattr(Deadline, "check", lambda self, stage: None)
    monkeypatch.setattr(Deadline, "passed", lambda self: True)
    with pytest.raises(BuildBudgetError, match="stopped in classing"):
        cz.GrammarCache(cache_dir=False, build_seconds=30).matcher(SCHEMA, toy, kind="json_schema")
    monkeypatch.undo()
    # none, or one that is not spent: the grammar builds
    for seconds in (None, 60):
        grammars = cz.GrammarCache(cache_dir=False, build_seconds=seconds)
        assert grammars.build_seconds == seconds
        assert grammars.get(SCHEMA, toy, kind="json_schema").classes.num_classes > 1
    assert cz.GrammarCache(cache_dir=False).build_seconds == DEFAULT_BUILD_SECONDS
    with pytest.raises(ValueError, match="build_seconds"):
        cz.GrammarCache(build_seconds=0)
