"""The normal form's passes in C (``csrc/gnf_passes.c``) against their Python walks in ``grammar/gnf.py``.

Where the GNF is built in a compiled store, GENERATING / NULLABLE, restricting to generating symbols,
REACHABLE, ε-removal's optional occurrences, the dense renumbering and merging's renaming run in C.
The Python walks stay the reference: the same grammar built with ``gnf.PASSES_IN_C`` off must give the
same nonterminals, table and store nodes under the same ids (and so the WordStore's, which
``tests/test_compiled.py`` checks on the bundled grammars).
"""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
from paths import BUNDLED, CORPORA, REPO, grammar_id, third_party_grammars

from cfgzip_lab.grammar import compiled_words as compiled
from cfgzip_lab.grammar import gnf as gnf_module
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.pipeline import compile_grammar

_spec = importlib.util.spec_from_file_location("_startup_bench", REPO / "benchmarks" / "startup.py")
_startup_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_startup_bench)  # the benchmark's json-mode-eval-like object schemas

pytestmark = pytest.mark.skipif(
    not compiled.available() or not hasattr(compiled._kernel.Words, "map_symbols"),
    reason="the compiled kernel (with the normal form's passes) is not built here",
)


def _sample() -> list[tuple[str, str, str]]:
    """Bundled grammars, a seeded sample of third-party grammars, XGrammar's test grammars and JSON
    Schemas, and calflow (its merging unites edges that meet in one block: the C pass's other branch)."""
    rng = random.Random(20)
    out = [(grammar_id(p), p.read_text(encoding="utf-8"), "ebnf") for p in BUNDLED]
    third = third_party_grammars()
    out += [(grammar_id(p), p.read_text(encoding="utf-8"), "auto") for p in rng.sample(third, min(5, len(third)))]
    out += [(grammar_id(p), p.read_text(encoding="utf-8"), "auto") for p in third if p.name == "calflow.ebnf"]
    ebnf = sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))
    out += [(p.name, p.read_text(encoding="utf-8"), "ebnf") for p in rng.sample(ebnf, min(12, len(ebnf)))]
    schemas = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("*.json") if ".instance" not in p.name)
    out += [(p.name, p.read_text(encoding="utf-8"), "json_schema") for p in rng.sample(schemas, min(8, len(schemas)))]
    # json-mode-eval-like object schemas (benchmarks/startup.py's): the inputs the start-up is measured on
    out += [(f"object{i}", json.dumps(_startup_bench._object(random.Random(i))[0]), "json_schema") for i in range(3)]
    return out


SAMPLE = _sample()


def _built(text: str, kind: str, in_c: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", in_c)
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError as error:
        return ("error", str(error))
    store = gnf.store
    sizes = [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in gnf.steps]  # (counted in C too)
    return (
        gnf.names,
        gnf.table,
        gnf.start,
        (gnf.origins, gnf.merged_from, sizes),
        [store.nodes[i] for i in range(len(store))],
    )


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_c_passes_make_the_python_walks_nodes(name, text, kind, monkeypatch):
    python = _built(text, kind, False, monkeypatch)
    native = _built(text, kind, True, monkeypatch)
    assert python[:4] == native[:4]
    assert python[4:] == native[4:], "same normal form, but the store's nodes differ"


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_stack_adjacency_in_c_is_the_python_fixpoint(name, text, kind, monkeypatch):
    """gnf.stack_below (merging's contexts, classing's adjacency) in C is the Python fixpoint."""
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError:
        pytest.skip("not lowered")
    if gnf.families:
        pytest.skip("counted families: the Python fixpoint only")
    native = gnf_module.stack_below(gnf.table, gnf.store, gnf.start)
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    assert native == gnf_module.stack_below(gnf.table, gnf.store, gnf.start)


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_left_corner_order_in_c_is_tarjans_python_walk(name, text, kind, monkeypatch):
    """Left-recursion removal's order (Tarjan's components, sources first) is the Python walk's."""
    real, orders = gnf_module._left_corner_order, []

    def both(rules):
        native = real(rules)
        gnf_module.PASSES_IN_C = False
        try:
            orders.append((native, real(rules)))
        finally:
            gnf_module.PASSES_IN_C = True
        return native

    monkeypatch.setattr(gnf_module, "_left_corner_order", both)
    try:
        compile_grammar(text, kind=kind)
    except GrammarError:
        pytest.skip("not lowered")
    assert orders and all(native == python for native, python in orders)


def test_the_passes_run_in_c_where_the_store_is_compiled(monkeypatch):
    """Not only equal results: the C passes are what runs (a Python walk left in the way would pass
    the comparison above by itself)."""
    calls = []
    real = gnf_module._passes

    def spy(store):
        native = real(store)
        calls.append(native is not None)
        return native

    monkeypatch.setattr(gnf_module, "_passes", spy)
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n')
    assert calls and all(calls)
    calls.clear()
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n', compiled_store=False)
    assert calls and not any(calls)


def test_useless_symbols_in_one_c_call_is_the_python_walk(monkeypatch):
    """gnf._remove_useless's one C call (``useless``: GENERATING, then REACHABLE, where nothing needs
    restricting) keeps the rule sets the Python walk keeps, in the same order, at every pass of the
    sample's grammars; where it answers None (restricting needed, or the start not generating) the
    walk runs, and both answers occur."""
    import copy

    real = gnf_module._remove_useless
    answers = []

    def spy(rules, start):
        native = gnf_module._passes(rules.store)
        if native is not None and not rules.families:
            before = dict(rules.rhs)
            kept = native.useless(list(before), list(before.values()), len(rules.names), start)
            answers.append(kept is not None)
            if kept is not None:  # the Python walk restricts nothing here: it makes no nodes
                reference = copy.copy(rules)
                reference.rhs = dict(before)
                monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
                try:
                    real(reference, start)
                finally:
                    monkeypatch.setattr(gnf_module, "PASSES_IN_C", True)
                real(rules, start)
                assert list(rules.rhs.items()) == list(reference.rhs.items())
                return
        real(rules, start)

    monkeypatch.setattr(gnf_module, "_remove_useless", spy)
    texts = [(text, kind) for _, text, kind in SAMPLE]
    texts.append(('root ::= "a" x | "b"\nx ::= "c" x\ny ::= "d"\n', "ebnf"))  # a dead end, an unreachable rule
    for text, kind in texts:
        try:
            compile_grammar(text, kind=kind)
        except GrammarError:
            continue
    assert any(answers) and not all(answers)


def test_merge_on_the_tables_dicts_is_merge_on_lists(monkeypatch):
    """merge_table (the table's dicts in, the merged rows' dicts out) answers what merge_equivalent on the
    rows as lists does, rebuilt into dicts of each block's last member's atoms, key order included."""
    real = gnf_module._merge_within_budget
    checked = []

    def spy(store, table, start, family_items=(), family_bounds=(), deadline=None):
        native = gnf_module._passes(store)
        if native is not None and not family_items:
            rows = [dict(row) for row in table]
            got = native.merge_equivalent([list(r) for r in rows], [list(r.values()) for r in rows], start)
            if got is not None:
                block, tails = got
                last = {b: a for a, b in enumerate(block)}
                want = (block, [list(zip(rows[last[b]], tails[b])) for b in range(len(tails))])
                block2, merged = native.merge_table(rows, start)
                assert (block2, [list(row.items()) for row in merged]) == want
                checked.append(1)
        return real(store, table, start, family_items, family_bounds, deadline)

    monkeypatch.setattr(gnf_module, "_merge_within_budget", spy)
    for _, text, kind in SAMPLE:
        try:
            compile_grammar(text, kind=kind)
        except GrammarError:
            continue
    assert len(checked) > 10


def test_merging_runs_in_c_where_the_store_is_compiled(monkeypatch):
    """The equivalent-nonterminal merge is the C pass (it computes the stack adjacency itself: the Python
    walk's stack_below is not called), and the Python walk where the store is a WordStore."""
    calls = []
    real = gnf_module.stack_below

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(gnf_module, "stack_below", spy)
    text = 'root ::= "a" x "b" | "c" x "b"\nx ::= [0-9]+ | "" \n'
    native = compile_grammar(text).gnf
    assert not calls
    python = compile_grammar(text, compiled_store=False).gnf
    assert calls
    assert native.names == python.names and native.merged_from == python.merged_from


@pytest.mark.parametrize("base", [0, 3, 40, 400])
def test_merging_past_its_budget_in_c_is_the_python_walks(base, monkeypatch):
    """A merge stopped by its node budget stops at the same node in C: the GNF is left unmerged alike
    (same step name, same nodes), whatever round the budget runs out in."""
    monkeypatch.setattr(gnf_module, "MERGE_BUDGET_BASE", base)
    monkeypatch.setattr(gnf_module, "MERGE_BUDGET_PER_NODE", 0)
    text = (BUNDLED[0].parent / "json.ebnf").read_text(encoding="utf-8")
    python = _built(text, "ebnf", False, monkeypatch)
    native = _built(text, "ebnf", True, monkeypatch)
    assert python[:4] == native[:4] and python[4:] == native[4:]
    steps = [s.name for s in compile_grammar(text).gnf.steps]
    assert ("merging (skipped: past its budget)" in steps) == (base < 400)


@pytest.mark.parametrize("name", ["json.ebnf", "object0"])
def test_a_normal_form_past_its_budget_fails_alike_in_c(name, monkeypatch):
    """The C passes stop at the node the Python walks stop at, and name the same step and rule: the error
    (message, line, column) is the same for budgets that run out in every step."""
    text, kind = next((t, k) for n, t, k in SAMPLE if n == name)
    full = compile_grammar(text, kind=kind).gnf.store.created
    seen = set()
    for budget in sorted({max(1, full * i // 40) for i in range(40)}):
        python = _built_within(text, kind, budget, False, monkeypatch)
        native = _built_within(text, kind, budget, True, monkeypatch)
        assert python == native, budget
        seen.add(python[0].split("in step '")[-1].split("'")[0] if python[0] else None)
    assert {"unit rules", "leading substitution", "merging"} <= seen, seen


def _built_within(text: str, kind: str, budget: int, in_c: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", in_c)
    try:
        gnf = compile_grammar(text, kind=kind, max_gnf_nodes=budget).gnf
    except GrammarError as error:
        return str(error), [(d.line, d.column, d.message) for d in error.diagnostics]
    return "", gnf.names, gnf.table, [gnf.store.nodes[i] for i in range(len(gnf.store))]


def test_count_sum_in_64_bits_and_past_them():
    """count_sum adds in 64 bits while the sum fits and with Python's ints past that; None where a root's
    own count is past 64 bits: the sum of count(r) either way (a chain doubling its words per node)."""
    from cfgzip_lab.grammar.words import EPSILON

    store = compiled.new_word_store()
    native = store.native
    node, chain = EPSILON, []
    for _ in range(66):
        node = store.make(False, ((-2, node), (-1, node)))
        chain.append(node)
    cases = [[], [chain[0]], [chain[61]] * 3, [chain[61]] * 4, [chain[61]] * 5 + [chain[62]],
             [chain[62], chain[62], chain[61], chain[0]], [chain[0], chain[63]], [chain[61]] * 4 + [chain[63]]]  # fmt: skip
    for roots in cases:
        counts = [native.count(r) for r in roots]
        want = None if None in counts else sum(counts)
        assert native.count_sum(roots) == want
