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
from paths import BUNDLED, CORPORA, REPO, grammar_id, maskbench_row, third_party_grammars

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
    calls = _passes_seen(monkeypatch)
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n')
    assert calls and all(calls)
    calls.clear()
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n', compiled_store=False)
    assert calls and not any(calls)


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_lifting_in_one_c_call_is_the_loop_per_rule(name, text, kind, monkeypatch):
    """gnf._lift_terminals's one C call (``lift_all``) lifts as its loop per rule (``lift_rule``) and as the
    Python loop: the same names, origins, rule sets in order and store nodes, with the partition's shapes
    not yet kept (made in C, kept as shape_of keeps them) and kept."""
    try:
        cfg = compile_grammar(text, kind=kind).cfg
    except GrammarError:
        pytest.skip("not lowered")
    real, one_calls = gnf_module._plain_dicts, []

    def one_call(c, live) -> bool:
        one_calls.append(real(c, live))
        return one_calls[-1]

    def lifted(how: str) -> tuple:
        monkeypatch.setattr(gnf_module, "PASSES_IN_C", how != "python")
        monkeypatch.setattr(gnf_module, "_plain_dicts", one_call if how == "one call" else lambda c, live: False)
        tokens = any(s.bits >> 256 for s in cfg.byte_sets())
        store = compiled.new_word_store(counted=bool(cfg.counted), tokens=tokens)
        rules, start, atom_of = gnf_module._lift_terminals(cfg, store, True)
        nodes = [store.nodes[i] for i in range(len(store))]
        return rules.names, rules.origins, list(rules.rhs.items()), start, atom_of, nodes, type(store)

    def kept() -> dict:
        return dict(gnf_module._partition(cfg.byte_sets()).shapes)

    monkeypatch.setattr(gnf_module, "_ATOMS", {})  # the partition's shapes not kept yet: made in C (or shape_of)
    first, shapes = lifted("one call"), kept()
    monkeypatch.setattr(gnf_module, "_ATOMS", {})
    assert lifted("python") == first and kept() == shapes  # the shapes C kept are shape_of's
    assert first == lifted("per rule") == lifted("python") == lifted("one call")
    if first[-1] is compiled.CompiledWordStore:
        assert one_calls == [True, True], "the one C call ran"


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_byte_sets_and_their_partition_in_c_are_the_python_ones(name, text, kind, monkeypatch):
    """The partition's atoms and each byte's atom in C (``byte_atoms``, gnf._partition) are cfg.byte_classes's
    and the Python walk's (None with token atoms); CFG.byte_sets in C against its Python loop is
    test_cfg_passes's."""
    try:
        cfg = compile_grammar(text, kind=kind).cfg
    except GrammarError:
        pytest.skip("not lowered")
    sets = cfg.byte_sets()
    got = compiled._kernel.byte_atoms(frozenset(s.bits for s in sets))
    if any(s.bits >> 256 for s in sets):
        assert got is None
        return
    atoms, atom_of = gnf_module._atoms_and_bytes(sets)
    assert (got[0], list(got[1])) == ([a.bits for a in atoms], atom_of)
    monkeypatch.setattr(gnf_module, "_ATOMS", {})
    kept = gnf_module._partition(sets)
    assert (list(kept.atoms), list(kept.atom_of)) == (atoms, atom_of)


def test_the_partition_in_c_is_byte_classes_on_random_sets():
    """``byte_atoms`` against cfg.byte_classes on random byte sets: wide, narrow, single bytes, empty."""
    from cfgzip_lab.grammar.cfg import ByteSet

    rng = random.Random(7)
    for _ in range(2000):
        masks = [(1 << 256) - 1, (1 << rng.randrange(1, 256)) - 1, 1 << rng.randrange(256), 0]
        sets = {ByteSet(rng.getrandbits(256) & rng.choice(masks)) for _ in range(rng.randrange(0, 40))}
        atoms, atom_of = gnf_module._atoms_and_bytes(sets)
        got = compiled._kernel.byte_atoms(frozenset(s.bits for s in sets))
        assert (got[0], list(got[1])) == ([a.bits for a in atoms], atom_of)
    assert compiled._kernel.byte_atoms([1, 1 << 256]) is None  # a token atom's bits: the Python partition


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


# -- counted-repetition families: merging in C on a compiled copy of the WordStore ----------------------

#: Counted MaskBench schemas (a family per string property with a maxLength: 18, 228 and 1 of them, merged
#: to 10, 19 and 1): the ones issue 33's time-to-first-mask tail is measured on, o9802 and o9914 aside
#: (the same shape, seconds of Python merging each).
COUNTED_MASKBENCH = ["Github_ultra---o62897", "Github_medium---o9906", "Snowplow---sp_370_Normalized"]
#: Small counted grammars (every bounded repetition counted): families over one item with equal and
#: unequal bounds, nested ones, an unbounded one, a nullable item.
COUNTED_EBNF = [
    'root ::= "{" ([ab]{0,20} ","){0,20} "}"\n',
    'root ::= "<" [a-z]{2,9} "|" [a-z]{2,9} "|" [a-z]{3,9} "|" [0-9]{2,9} ">"\n',
    'root ::= ("x" [a-z]{1,5})* "y" [a-z]{1,5} "z" [a-z]{0,5} [a-z]{1,}\n',
    'root ::= "[" ("a"? "b"?){2,7} "]" [0-9]{1,4} "." [0-9]{1,4}\n',
]


def _maskbench_schema(name: str) -> str:
    return json.dumps(maskbench_row(name)["schema"])


def _counted_built(text: str, kind: str, in_c: bool, monkeypatch, in_compiled: bool = False, **options) -> tuple:
    """A counted grammar's normal form, built in a WordStore (``in_compiled`` False: merging's C path on a
    compiled copy, or off) or in the compiled store (every pass in C, or the Python walks over that store):
    its nonterminals, table, families and every store node (the spy says whether the C merge answered)."""
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", in_c)
    monkeypatch.setattr(compiled, "COUNTED_IN_COMPILED_STORE", in_compiled)
    answered = []
    real = gnf_module._merge_families_in_c

    def spy(*args):
        got = real(*args)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(gnf_module, "_merge_families_in_c", spy)
    try:
        gnf = compile_grammar(text, kind=kind, **options).gnf
    except GrammarError as error:
        return ("error", str(error)), answered
    store = gnf.store
    assert gnf.families and type(store).__name__ == ("CompiledWordStore" if in_compiled else "WordStore")
    sizes = [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in gnf.steps]
    built = (gnf.names, gnf.table, gnf.start, gnf.families, gnf.merged_from, sizes, store.created)
    return (*built, [store.nodes[i] for i in range(len(store))]), answered


@pytest.mark.parametrize("name", COUNTED_MASKBENCH)
def test_counted_maskbench_merges_in_c_node_for_node(name, monkeypatch):
    """Merging a counted schema's families (hundreds, one per string property) in C on a compiled copy of
    the WordStore: the same blocks, merged families and table, and the WordStore left node for node as the
    Python walk leaves it (the nodes the C merge made interned in its order)."""
    text = _maskbench_schema(name)
    python, answered = _counted_built(text, "json_schema", False, monkeypatch)
    assert answered == [False]
    native, answered = _counted_built(text, "json_schema", True, monkeypatch)
    assert answered == [True], "the C merge did not run"
    assert python[:-1] == native[:-1]
    assert python[-1] == native[-1], "same normal form, but the store's nodes differ"


@pytest.mark.parametrize("text", COUNTED_EBNF)
def test_counted_grammars_merge_in_c_node_for_node(text, monkeypatch):
    python, _ = _counted_built(text, "ebnf", False, monkeypatch, counted_threshold=0)
    native, answered = _counted_built(text, "ebnf", True, monkeypatch, counted_threshold=0)
    assert answered == [True]
    assert python == native


# -- counted-repetition grammars built in the compiled store: every pass in C ------------------------------


def _passes_seen(monkeypatch) -> list[bool]:
    """Whether each pass asking ``gnf._passes`` got the compiled store's (spied from now on)."""
    calls: list[bool] = []
    real = gnf_module._passes

    def spy(store):
        native = real(store)
        calls.append(native is not None)
        return native

    monkeypatch.setattr(gnf_module, "_passes", spy)
    return calls


@pytest.mark.parametrize("name", COUNTED_MASKBENCH + ["Snowplow---sp_333_Normalized", "Snowplow---sp_418_Normalized"])
def test_counted_maskbench_in_the_compiled_store_is_the_word_stores_node_for_node(name, monkeypatch):
    """A counted schema's normal form built in the compiled store, its passes in C (useless symbols with a
    member naming its item, ε-rules, unit rules, left recursion, leading substitution, the table, merging):
    the Python reference's (a WordStore, the Python walks) node for node; and the Python walks over the
    compiled store give it too."""
    text = _maskbench_schema(name)
    python, _ = _counted_built(text, "json_schema", False, monkeypatch)
    calls = _passes_seen(monkeypatch)
    native, answered = _counted_built(text, "json_schema", True, monkeypatch, in_compiled=True)
    assert answered == [True] and calls and all(calls), "a pass did not run in C"
    assert python[:-1] == native[:-1]
    assert python[-1] == native[-1], "same normal form, but the store's nodes differ"
    walks, _ = _counted_built(text, "json_schema", False, monkeypatch, in_compiled=True)
    assert walks == python


@pytest.mark.parametrize("text", COUNTED_EBNF)
def test_counted_grammars_in_the_compiled_store_are_the_word_stores_node_for_node(text, monkeypatch):
    python, _ = _counted_built(text, "ebnf", False, monkeypatch, counted_threshold=0)
    native, answered = _counted_built(text, "ebnf", True, monkeypatch, in_compiled=True, counted_threshold=0)
    assert answered == [True]
    assert python == native


def test_reach_and_useless_follow_a_member_to_its_item():
    """Words.reach / Words.useless with the families' items: a member F_c names its family's item (the
    item's rule set is kept although no word names the item itself); without them it is not reached."""
    from cfgzip_lab.grammar.counted import family_symbol

    store = compiled.new_word_store()
    native = store.native
    # 0 → 'a' F(0, 1);  1 (the item) → 'b';  2 → 'c' (unreachable)
    roots = [store.word((-1, family_symbol(0, 1))), store.word((-2,)), store.word((-3,))]
    assert native.reach(roots, 0, [1]) == [0, 1]
    assert native.reach(roots, 0) == [0]
    assert native.useless([0, 1, 2], roots, 3, 0, [1]) == [0, 1]
    assert native.useless([0, 1, 2], roots, 3, 0) == [0]


def test_counted_symbols_past_the_packing_move_the_normal_form_to_a_word_store(monkeypatch):
    """A counted grammar whose packed symbols do not fit (a bound past 2^20 beside others) is built in the
    compiled store, then handed to classing in a WordStore holding the same nodes (its Python step)."""
    text = 'root ::= [a-c]{0,2147483647} "x" [a-c]{0,5000} "y"\n'
    monkeypatch.setattr(compiled, "COUNTED_IN_COMPILED_STORE", True)
    moved = compile_grammar(text).gnf
    assert compiled.symbol_widths(moved) is None and type(moved.store).__name__ == "WordStore"
    monkeypatch.setattr(compiled, "COUNTED_IN_COMPILED_STORE", False)
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    reference = compile_grammar(text).gnf
    assert [moved.store.nodes[i] for i in range(len(moved.store))] == [
        reference.store.nodes[i] for i in range(len(reference.store))
    ]
    assert (moved.table, moved.families, moved.store.created) == (
        reference.table,
        reference.families,
        reference.store.created,
    )


@pytest.mark.parametrize("in_compiled", [False, True], ids=["word-store", "compiled-store"])
@pytest.mark.parametrize("base", [0, 5, 60, 600, 100_000])
def test_counted_merging_past_its_budget_in_c_is_the_python_walks(base, in_compiled, monkeypatch):
    """A counted merge stopped by its node budget: the store keeps the nodes the C merge made until
    then (as the Python walk's store does), and the GNF is left unmerged alike (o62897's merge makes
    33,384 nodes: within 100,000 it runs to its end); in a WordStore (the C merge on a compiled copy) and in
    the compiled store."""
    monkeypatch.setattr(gnf_module, "MERGE_BUDGET_BASE", base)
    monkeypatch.setattr(gnf_module, "MERGE_BUDGET_PER_NODE", 0)
    text = _maskbench_schema("Github_ultra---o62897")
    python, _ = _counted_built(text, "json_schema", False, monkeypatch)
    native, _ = _counted_built(text, "json_schema", True, monkeypatch, in_compiled=in_compiled)
    assert python == native
    assert ("merging (skipped: past its budget)" in [s[0] for s in native[5]]) == (base < 100_000)


def test_merge_table_with_families_answers_the_python_walk(monkeypatch):
    """Words.merge_table with families, called directly on a merged normal form whose families are listed
    twice (each twin with its item and bounds, no member symbol of its own): the blocks, merged rows and
    family numbering of the Python walk, and each twin in its family's merged family."""
    text = _maskbench_schema("Github_medium---o9906")
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    gnf = compile_grammar(text, kind="json_schema", counted_threshold=0).gnf
    scratch = compiled.CompiledWordStore.seeded(gnf.store)
    items = [f.item for f in gnf.families] * 2
    bounds = [(f.min, -1 if f.max is None else f.max) for f in gnf.families] * 2
    block, merged, family_of = scratch.native.merge_table(gnf.table, gnf.start, items, bounds)
    want = gnf_module._merge_equivalent(
        gnf.store, gnf.table, gnf.start, items, [(lo, None if hi < 0 else hi) for lo, hi in bounds]
    )
    assert (block, merged, family_of) == want
    assert family_of[: len(gnf.families)] == family_of[len(gnf.families) :]


@pytest.fixture
def bitsets():
    """The stack adjacency on its bitsets (csrc/gnf_merge.c's gnf_below_bits) instead of its sorted sets
    (csrc/gnf_below.c), as it runs past ``below_sparse_limit``'s entries."""
    before = compiled._kernel.below_sparse_limit(0)
    yield
    compiled._kernel.below_sparse_limit(before)


@pytest.mark.parametrize("name,text,kind", SAMPLE[:12], ids=[name for name, _, _ in SAMPLE[:12]])
def test_the_stack_adjacency_on_bitsets_is_the_sorted_sets(name, text, kind, monkeypatch, bitsets):
    """Both forms of the C stack adjacency give the Python fixpoint, and the same merged normal form."""
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError:
        pytest.skip("not lowered")
    if gnf.families:
        pytest.skip("counted families: the Python fixpoint only")
    on_bits = gnf_module.stack_below(gnf.table, gnf.store, gnf.start)
    assert _built(text, kind, True, monkeypatch)[:4] == gnf_module_built_sparse(text, kind, monkeypatch)[:4]
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    assert on_bits == gnf_module.stack_below(gnf.table, gnf.store, gnf.start)


def gnf_module_built_sparse(text: str, kind: str, monkeypatch) -> tuple:
    before = compiled._kernel.below_sparse_limit(-1)
    try:
        return _built(text, kind, True, monkeypatch)
    finally:
        compiled._kernel.below_sparse_limit(before)


@pytest.mark.parametrize("name", COUNTED_MASKBENCH[:2])
def test_counted_merging_on_bitsets_is_the_python_walks(name, monkeypatch, bitsets):
    """Families' rows (below_families) on the bitsets: the C merge still leaves the Python walk's nodes."""
    text = _maskbench_schema(name)
    python, _ = _counted_built(text, "json_schema", False, monkeypatch)
    native, answered = _counted_built(text, "json_schema", True, monkeypatch)
    assert answered == [True]
    assert python == native


def test_maskbench_merges_alike_on_sorted_sets_and_bitsets(monkeypatch):
    """A MaskBench schema of 22,100 normal-form rows (Github_hard o48425), the case the sorted sets are
    for: the same merged normal form, node for node, as on the bitsets."""
    text = _maskbench_schema("Github_hard---o48425")
    sparse = _built(text, "json_schema", True, monkeypatch)
    before = compiled._kernel.below_sparse_limit(0)
    try:
        dense = _built(text, "json_schema", True, monkeypatch)
    finally:
        compiled._kernel.below_sparse_limit(before)
    assert len(sparse[0]) > 10_000 and sparse == dense


def test_adopting_a_node_the_store_holds_is_refused():
    """WordStore.adopt (the compiled merge's nodes into a counted grammar's WordStore) interns new nodes in
    order and refuses, leaving the store as it was, a node it holds already or one given twice."""
    from cfgzip_lab.grammar.words import WordStore

    store = WordStore()
    held = store.word([7, 8])
    size, created = len(store), store.created
    new = [(False, ((9, held),)), (True, ((3, held),))]
    for bad in ([*new, store.nodes[held]], [new[0], new[0]]):
        with pytest.raises(ValueError, match="already holds"):
            store.adopt(bad)
        assert (len(store), store.created) == (size, created)
    store.adopt(new)
    assert [store.make(*node) for node in new] == [size, size + 1] and store.created == created + 2
