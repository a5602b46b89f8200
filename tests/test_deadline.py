"""A build's time budget (cfgzip_lab/deadline.py): a grammar cache's build past ``build_seconds`` ends
with a BuildBudgetError that names the stage, never with a request waiting as long as the build takes."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from paths import maskbench_row
from toy_vocab import ARITH_TOKENS, SPECIAL_ID, STOP_ID

import cfgzip_lab as cz
from cfgzip_lab.cache.grammars import DEFAULT_BUILD_SECONDS
from cfgzip_lab.classes.classing import compute_classes
from cfgzip_lab.deadline import BuildBudgetError, Deadline
from cfgzip_lab.grammar import regex, serialized
from cfgzip_lab.grammar.compiled_words import supports
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.gnf import to_gnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.grammar.sources import to_ebnf_and_grammar
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


class _SpentAt(Deadline):
    """A spent deadline that only ``stage`` reads (the stages before it go on as if there were none): that
    stage is reached with the build's deadline in hand. ``raised`` counts its errors: a caller that catches
    one and builds again some other way would raise it twice."""

    __slots__ = ("stage", "raised")

    def __init__(self, stage: str) -> None:
        super().__init__(1e-9)
        self.stage, self.raised = stage, 0

    def check(self, stage: str) -> None:
        if stage == self.stage:
            self.raised += 1
            raise self.error(stage)


def test_the_normal_form_checks_its_deadline_between_steps():
    cfg = lower(parse_ebnf('root ::= "a" [b-c]{0,40} "d"'))
    with pytest.raises(BuildBudgetError, match=r"the normal form \(terminal lifting\)"):
        to_gnf(cfg, deadline=_spent())  # (and within it: per rule)
    with pytest.raises(BuildBudgetError, match=r"the normal form \(after terminal lifting\)"):
        to_gnf(cfg, deadline=_SpentAt("the normal form (after terminal lifting)"))
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


#: Seconds a budget may be overrun on a loaded 2-core machine. The build checked its deadline only between
#: stages: aerleon overran a budget set half a second into its regex by ~3 s idle and ~8 s under load.
OVERRUN = 1.5


# A pattern whose automaton takes seconds (XGrammar unrolls it to 88,000 states), and EBNF holding it.
SLOW_PATTERN = r"(.{1,63}\.){1,127}[a-z0-9-]+"
SLOW_EBNF = f'root ::= "h=" Regex({json.dumps(SLOW_PATTERN)})'


REGEX = "the front end (a regex's automaton)"
SLOW_SCHEMA = json.dumps({"type": "string", "pattern": SLOW_PATTERN})
SMALL_SCHEMA = json.dumps({"type": "string", "pattern": "^[a-z]{2,4}$"})


def _serialized(schema: str, deadline: Deadline):
    """The byte CFG read from XGrammar's arrays (the pipeline's first path for a schema)."""
    source, grammar = to_ebnf_and_grammar(schema, "json_schema")
    return serialized.cfg_from_grammar(grammar, source.ebnf, deadline=deadline)


@pytest.mark.parametrize(
    "build__stage",
    [
        (lambda d: regex.regex_to_expr(SLOW_PATTERN, deadline=d), REGEX),
        (lambda d: parse_ebnf(SLOW_EBNF, deadline=d), "the front end (parsing)"),
        (lambda d: parse_ebnf(SLOW_EBNF, deadline=d), REGEX),
        (lambda d: lower(parse_ebnf('root ::= "a" [b-c]*'), deadline=d), "the front end (lowering)"),
        (lambda d: _serialized(SLOW_SCHEMA, d), REGEX),
        (lambda d: _serialized(SMALL_SCHEMA, d), "the front end (lowering)"),
        (lambda d: compile_grammar(SLOW_EBNF, deadline=d), REGEX),
        (lambda d: compile_grammar(SLOW_SCHEMA, kind="json_schema", deadline=d), REGEX),  # not the text path then
        (
            lambda d: compile_grammar(SCHEMA, kind="json_schema", deadline=d),
            "the front end (after the productive rules)",
        ),
        (lambda d: compile_grammar(SCHEMA, kind="json_schema", deadline=d), "the front end (after the dead ends)"),
    ],
    ids=[
        "regex",
        "ebnf",
        "ebnf regex",
        "lowering",
        "serialized regex",
        "serialized lowering",
        "compile ebnf regex",
        "compile schema regex",
        "productive",
        "dead ends",
    ],
)
def test_each_front_end_stage_checks_its_deadline(build__stage, monkeypatch):
    build, stage = build__stage
    monkeypatch.setattr(regex, "_BUILT", {})  # the patterns built anew, not read from the caches
    monkeypatch.setattr(serialized, "_KEPT", {})
    deadline = _SpentAt(stage)
    with pytest.raises(BuildBudgetError) as got:
        build(deadline)
    assert (got.value.stage, deadline.raised) == (stage, 1)
    if stage == REGEX:  # a regex stopped short is kept nowhere
        assert regex._BUILT == {} and serialized._KEPT == {}


def test_a_slow_regex_stops_within_its_budget(monkeypatch):
    """Checked every 1,024 states of each pass, not only between them: merging its equivalent states
    alone takes seconds."""
    monkeypatch.setattr(regex, "_BUILT", {})
    t0 = time.perf_counter()
    with pytest.raises(BuildBudgetError, match="a regex's automaton"):
        regex.regex_to_expr(SLOW_PATTERN, json_string=True, deadline=Deadline(0.5))
    assert time.perf_counter() - t0 < 0.5 + OVERRUN


@pytest.fixture(scope="module")
def aerleon() -> str:
    """MaskBench's aerleon schema: its host-name pattern is the automaton above (~13 s to compile idle,
    ~25 s on a loaded machine; a deadline read only between stages let it run seconds past its budget)."""
    return json.dumps(maskbench_row("JsonSchemaStore---aerleon-definitions.schema.json")["schema"])


def _budget_past_xgrammar(schema: str) -> float:
    """A budget that runs out half a second into cfgzip's own front end: after XGrammar's conversion of
    ``schema`` (which no deadline can stop) has had the time it takes on this machine now."""
    took = []
    for _ in range(2):  # the slower of two: the load moves it between calls
        t0 = time.perf_counter()
        to_ebnf_and_grammar(schema, "json_schema")
        took.append(time.perf_counter() - t0)
    return max(took) + 0.5


def test_a_large_schema_stops_within_its_budget(aerleon, monkeypatch):
    monkeypatch.setattr(regex, "_BUILT", {})  # the regexes and the CFG built anew, not read from the caches
    monkeypatch.setattr(serialized, "_KEPT", {})
    budget = _budget_past_xgrammar(aerleon)
    t0 = time.perf_counter()
    with pytest.raises(BuildBudgetError) as got:
        compile_grammar(aerleon, kind="json_schema", deadline=Deadline(budget))
    elapsed = time.perf_counter() - t0
    assert got.value.stage.startswith("the front end")
    assert elapsed < budget + OVERRUN, (got.value.stage, elapsed, budget)


def test_a_grammar_cache_stops_a_large_schema_within_its_budget(aerleon, toy, monkeypatch):
    monkeypatch.setattr(regex, "_BUILT", {})
    monkeypatch.setattr(serialized, "_KEPT", {})
    budget = _budget_past_xgrammar(aerleon)
    grammars = cz.GrammarCache(cache_dir=False, build_seconds=budget)
    t0 = time.perf_counter()
    with pytest.raises(BuildBudgetError, match="stopped in the front end") as got:
        cz.matcher_for(aerleon, toy, kind="json_schema", cache=grammars)
    elapsed = time.perf_counter() - t0
    assert elapsed < budget + OVERRUN, (got.value.stage, elapsed, budget)


def test_wait_for_gives_a_call_the_time_left():
    deadline = Deadline(60)
    assert deadline.wait_for(lambda: 42, "a call") == 42
    with pytest.raises(ZeroDivisionError):
        deadline.wait_for(lambda: 1 / 0, "a call")
    t0 = time.perf_counter()
    with pytest.raises(BuildBudgetError, match="stopped in a slow call"):
        Deadline(0.2).wait_for(lambda: time.sleep(5), "a slow call")  # (it sleeps on, in the background)
    assert time.perf_counter() - t0 < 0.2 + OVERRUN


NESTED_ROOT = 'root ::= "(" root ")" | "x"'  # served by XGrammar itself over the whole vocabulary


def _slowed(monkeypatch, name: str, seconds: float) -> tuple[list, object]:
    """``CompiledEngines.<name>`` (an XGrammar compile) made ``seconds`` slower; the calls it sees, and the
    property's own getter to put back."""
    from cfgzip_lab.engine import CompiledEngines

    compile_now = getattr(CompiledEngines, name).fget
    seen: list = []

    def slow(engines):
        seen.append(1)
        time.sleep(seconds)
        return compile_now(engines)

    monkeypatch.setattr(CompiledEngines, name, property(slow))
    return seen, compile_now


def test_without_an_index_the_compressed_engines_compile_is_within_the_budget(toy, monkeypatch):
    """Without a σ_in index every request goes to the compressed engine: its XGrammar compile belongs to the
    build and to its budget (aerleon's took 62 s, after a build within its budget)."""
    from cfgzip_lab import engine
    from cfgzip_lab.engine import CompiledEngines
    from cfgzip_lab.native import index

    monkeypatch.setattr(index, "build_index_or_reason", lambda *args, **kwargs: (None, "past its listing bounds"))
    seen, compile_now = _slowed(monkeypatch, "compressed_grammar", 3)
    t0 = time.perf_counter()
    with pytest.raises(BuildBudgetError) as got:
        cz.GrammarCache(cache_dir=False, build_seconds=1).matcher(SCHEMA, toy, kind="json_schema")
    assert got.value.stage == "the compressed engine (XGrammar's compile)" and seen
    assert time.perf_counter() - t0 < 1 + OVERRUN
    # within the budget: compiled in the build, and the first request finds it compiled (not compiled again)
    monkeypatch.setattr(CompiledEngines, "compressed_grammar", property(compile_now))
    ready = cz.GrammarCache(cache_dir=False, build_seconds=60).get(SCHEMA, toy, kind="json_schema")
    kept = set(engine._compiled)
    assert ready.engine.matcher().fallback_reason is not None
    assert set(engine._compiled) == kept


def test_a_grammar_xgrammar_serves_alone_is_compiled_in_the_build_past_the_budget(toy, monkeypatch):
    """A nested root is served by XGrammar over the whole vocabulary: its compile is made in the build (the
    first request finds it compiled), and not refused for XGrammar's own time, which XGrammar would spend
    serving it too (MaskBench o79409's took over 30 s on a loaded CI machine)."""
    from cfgzip_lab import engine

    seen, _ = _slowed(monkeypatch, "plain_grammar", 2)
    t0 = time.perf_counter()
    ready = cz.GrammarCache(cache_dir=False, build_seconds=1).get(NESTED_ROOT, toy, kind="ebnf")
    assert time.perf_counter() - t0 >= 2 and seen == [1]  # in the build, past its 1 s budget, not refused
    kept = set(engine._compiled)
    assert ready.engine.matcher().fallback_reason is not None
    assert set(engine._compiled) == kept  # the first request compiled nothing again (the same compiled grammars)
