"""The compiled word store and classing walk (``csrc/``: words.c, displace.c, classing.c, ...) against the Python reference.

Node for node: a compiled store is seeded with a Python store's nodes, and every operation must
create its nodes in the Python order, so after the same calls both hold the same nodes under the
same ids. Class for class: compiled classing and the Python walk give the same partition, the same
representatives, the same displacement node per token and the same metadata, on the bundled
grammars, a seeded sample of the third-party and shared corpora, with Llama-3 and SmolLM2, and on
small vocabularies through budgets, fallbacks, the DAG cap and cancellation.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paths import BUNDLED, CORPORA, REPO, grammar_id, maskbench_row, third_party_grammars
from toy_vocab import NESTING_TOKENS

from cfgzip_lab.classes import compiled_displacement
from cfgzip_lab.classes.classing import ClassingResult, _classify_steps, compute_classes
from cfgzip_lab.classes.displacement import Displacer
from cfgzip_lab.classes.limits import ClassingLimitError
from cfgzip_lab.grammar import compiled_words as compiled
from cfgzip_lab.grammar.words import EMPTY, EPSILON, BudgetExceeded, WordStore
from cfgzip_lab.pipeline import compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes
from cfgzip_lab.vocab_trie import vocab_trie

needs_compiled = pytest.mark.skipif(not compiled.available(), reason="the compiled kernel is not built here")
pytestmark = needs_compiled

ARITH = (
    'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
    'factor ::= [0-9]+ | "(" expr ")"\n'
)
JSON_SMALL = (
    'root ::= value\nvalue ::= object | array | string | number | "true" | "false" | "null"\n'
    'object ::= "{" ws ( member ( "," ws member )* )? "}"\nmember ::= string ws ":" ws value ws\n'
    'array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"\nstring ::= "\\"" [a-z]* "\\""\n'
    'number ::= "-"? [0-9]+\nws ::= [ \\n]*\n'
)
NESTED = 'root ::= "(" root ")" | [ab]+ | "[" root* "]"\n'


@pytest.fixture(scope="module")
def toy():
    tokens = NESTING_TOKENS + [b"((((", b"))))", b"[[(", b"ab" * 8, b"1" * 30]
    return vocab_from_bytes(tokens, stop_ids=[29], special_ids=[30], vocab_size=len(tokens) + 3, name="toy")


def _load(name: str):
    from cfgzip_lab.vocab_sources import load_vocab

    try:
        return load_vocab(name)
    except Exception as err:  # pragma: no cover - depends on the machine's offline files
        pytest.skip(f"{name} vocabulary unavailable: {err}")


def assert_same_nodes(python: WordStore, other) -> None:
    assert len(python) == len(other) and python.created == other.created
    mismatched = [i for i in range(len(python)) if python.nodes[i] != other.nodes[i]]
    assert not mismatched, f"{len(mismatched)} nodes differ, first {mismatched[0]}"


WALK_STATISTICS = {"distinct_byte_class_strings", "byte_class_strings_walked", "tokens_skipped", "tokens_scanned"}


def assert_same_metadata(python: dict, walked: dict, skip: set[str], *, skipping: bool = True) -> None:
    """The Python path's metadata equals the compiled walk's, but for how the walk went: the Python
    path counts every distinct byte-class string; the compiled walk counts the strings it walked and
    the tokens it assigned without walking (subtrees a configuration set loops through, csrc/classing.c's
    walk_skips, and subtrees numbered from the step memo by walk_scan, counted among them), so it
    walks at most as many, and all of them where it cannot skip."""
    rest = skip | WALK_STATISTICS
    assert {k: v for k, v in python.items() if k not in rest} == {k: v for k, v in walked.items() if k not in rest}
    assert "distinct_byte_class_strings" not in walked and "byte_class_strings_walked" not in python
    assert 0 < walked["byte_class_strings_walked"] <= python["distinct_byte_class_strings"]
    assert 0 <= walked["tokens_scanned"] <= walked["tokens_skipped"]
    if not skipping:
        assert walked["tokens_skipped"] == 0
        assert walked["byte_class_strings_walked"] == python["distinct_byte_class_strings"]
    elif walked["tokens_skipped"] == 0:
        assert walked["byte_class_strings_walked"] == python["distinct_byte_class_strings"]


def assert_same_classing(a: ClassingResult, b: ClassingResult) -> None:
    """``a`` from the Python path, ``b`` from the compiled one (each on its own compile of a grammar)."""
    assert type(a.displacer) is Displacer and isinstance(b.displacer, compiled_displacement.CompiledDisplacer)
    for name in ("class_of", "representatives", "class_kind"):
        x, y = getattr(a.classes, name), getattr(b.classes, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert np.array_equal(a.token_node, b.token_node)
    skip = {"classing_seconds", "workers"}
    assert_same_metadata(a.classes.metadata, b.classes.metadata, skip)
    assert_same_nodes(a.displacer.store, b.displacer.store)
    assert a.displacer.initial == b.displacer.initial


def _both(text: str, vocab, *, kind: str = "ebnf", **options) -> tuple[ClassingResult, ClassingResult]:
    """(Python, compiled) classing of two separate compiles of ``text``."""
    one = compile_grammar(text, kind=kind, compiled_store=False).gnf
    two = compile_grammar(text, kind=kind).gnf
    a = compute_classes(one, vocab.token_bytes, vocab.kinds, compiled=False, **options)
    b = compute_classes(two, vocab.token_bytes, vocab.kinds, compiled=True, **options)
    return a, b


# -- the store itself ----------------------------------------------------------------------------
def _random_words(rng: random.Random, count: int) -> list[tuple[int, ...]]:
    return [tuple(rng.randrange(6) for _ in range(rng.randrange(0, 7))) for _ in range(count)]


def test_the_set_algebra_interns_the_python_stores_nodes_in_its_order():
    """Random unions and concatenations of random word sets, the same calls on a WordStore and on a
    compiled store seeded with it: the same result ids and the same node table after every call."""
    rng = random.Random(0)
    py = WordStore()
    for w in _random_words(rng, 20):
        py.word(w)
    cs = compiled.CompiledWordStore.seeded(py)
    assert_same_nodes(py, cs)
    live = list(range(len(py)))
    for _ in range(3000):
        op = rng.random()
        a, b = rng.choice(live), rng.choice(live)
        if op < 0.45:
            got = (py.union(a, b), cs.union(a, b))
        elif op < 0.9:
            got = (py.concat(a, b), cs.concat(a, b))
        else:
            w = _random_words(rng, 1)[0]
            got = (py.word(w), cs.word(w))
        assert got[0] == got[1]
        live.append(got[0])
    assert_same_nodes(py, cs)
    for node in rng.sample(range(len(py)), 200):
        assert py.count(node) == cs.count(node) and list(py.words(node, 20)) == list(cs.words(node, 20))
        assert py.accepts(node) == cs.accepts(node) and py.edges(node) == cs.edges(node)
    assert cs.reachable(live[-50:]) == py.reachable(live[-50:])


def _interned(into: WordStore, store: WordStore, node: int) -> int:
    """``node`` of ``store`` made in ``into`` (its id there)."""
    done = {EMPTY: EMPTY, EPSILON: EPSILON}

    def visit(n: int) -> int:
        if n not in done:
            accepts, edges = store.nodes[n]
            done[n] = into.make(accepts, tuple((s, visit(c)) for s, c in edges))
        return done[n]

    return visit(node)


def test_the_union_of_many_concatenations_is_the_fold_and_interns_in_the_python_order():
    """union_concats (the displacement step's one union of its terms a · b) and union_many: the set
    the pairwise fold of concat and union gives, the same result ids and node table in both stores,
    fewer nodes made than the fold (union_many: only the result's), and a budget that trips at the
    same node."""
    rng = random.Random(2)
    py = WordStore()
    for w in _random_words(rng, 40):
        py.word(w)
    cs = compiled.CompiledWordStore.seeded(py)
    live = list(range(len(py)))
    seeds = live[:]  # the right-hand sides: words stay short (a · b of results doubles them)
    fewer = 0
    for i in range(300):
        plain = i % 3 == 0
        terms = [(rng.choice(live), EPSILON if plain else rng.choice(seeds)) for _ in range(rng.randrange(0, 9))]
        terms += [(EMPTY, rng.choice(live))] * rng.randrange(2) + [(EPSILON, rng.choice(live))] * rng.randrange(2)
        if terms:
            terms += [terms[0]] * rng.randrange(2)
        rng.shuffle(terms)
        ops = [a for a, _ in terms] if plain else None
        if plain:
            terms = [(a, EPSILON) for a in ops]

        def unite(store):
            return store.union_many(ops) if plain else store.union_concats(terms)

        if i % 5 == 4:  # budgets: the same outcome, the same nodes left behind
            budget = rng.randrange(0, 4)
            outcomes = []
            for store in (py, cs):
                store.limit = store.created + budget
                try:
                    outcomes.append(unite(store))
                except BudgetExceeded:
                    outcomes.append("budget")
                finally:
                    store.limit = float("inf")
            assert outcomes[0] == outcomes[1]
            continue
        probe = WordStore()  # the pairwise fold in a copy of the store as it was
        probe.nodes, probe._index = list(py.nodes), dict(py._index)
        probe._union, probe._concat = dict(py._union), dict(py._concat)
        before = len(py)
        got = unite(py)
        assert unite(cs) == got
        if plain:  # only the result's nodes are made (a term made whole by concat may leave its own)
            assert py.reachable([got]) >= set(range(before, len(py)))
        folded = probe.union_all([probe.concat(a, b) for a, b in terms])
        fewer += len(probe) - len(py)
        assert _interned(probe, py, got) == folded  # the same set (equal sets are one node of a store)
        live.append(got)
    assert_same_nodes(py, cs)
    assert fewer > 0
    assert py.union_many([]) == cs.union_concats(iter([])) == EMPTY
    assert py.union_many([5, 5]) == cs.union_many([5]) == py.union_concats([(EPSILON, 5)]) == 5
    assert py.union_concats([(5, 6)]) == cs.union_concats([(5, 6), (EMPTY, 7)]) == cs.concat(5, 6)


def test_count_and_reachable_are_the_python_ones_past_64_bits():
    """count() runs in C up to 64 bits and in Python's ints past them (2**70 words here); reachable()
    walks the DAG in C: both as WordStore gives them."""

    def doubling(store) -> list[int]:  # nodes of 2, 4, ... 2**70 words
        two = store.union(store.word((1,)), store.word((2,)))
        node, nodes = EPSILON, []
        for _ in range(70):
            node = store.concat(two, node)
            nodes.append(node)
        return nodes

    py = WordStore()
    cs = compiled.CompiledWordStore.seeded(py)
    nodes = doubling(py)
    assert doubling(cs) == nodes
    assert [cs.count(n) for n in nodes] == [py.count(n) for n in nodes] == [2**k for k in range(1, 71)]
    assert cs.count(EMPTY) == 0 and cs.count(EPSILON) == 1
    assert cs.reachable(nodes[-3:] + [EMPTY, EPSILON]) == py.reachable(nodes[-3:] + [EMPTY, EPSILON])
    assert cs.reachable(iter([])) == set()
    with pytest.raises(IndexError):
        cs.reachable([len(cs) + 5])


def test_budgets_trip_at_the_same_node_and_leave_the_store_usable():
    rng = random.Random(1)
    py = WordStore()
    for w in _random_words(rng, 30):
        py.word(w)
    cs = compiled.CompiledWordStore.seeded(py)
    for _ in range(400):
        a, b = rng.randrange(len(py)), rng.randrange(len(py))
        budget = rng.randrange(0, 4)
        outcomes = []
        for store in (py, cs):
            store.limit = store.created + budget
            try:
                outcomes.append(store.concat(a, b))
            except BudgetExceeded:
                outcomes.append("budget")
            finally:
                store.limit = float("inf")
        assert outcomes[0] == outcomes[1]
        assert_same_nodes(py, cs)


@pytest.mark.parametrize("path", BUNDLED, ids=grammar_id)
def test_the_normal_form_built_in_the_compiled_store_is_the_python_one(path):
    """compile_grammar builds the GNF in the compiled store (pipeline.py): the same nonterminals,
    table and nodes as in a WordStore; classing then continues in that very store."""
    text = path.read_text(encoding="utf-8")
    python, other = compile_grammar(text, compiled_store=False).gnf, compile_grammar(text).gnf
    assert type(python.store) is WordStore and isinstance(other.store, compiled.CompiledWordStore)
    assert python.names == other.names and python.table == other.table and python.start == other.start
    assert_same_nodes(python.store, other.store)
    assert compiled_displacement.CompiledDisplacer(other).store is other.store


def test_the_store_refuses_what_is_no_canonical_store():
    words = compiled._kernel.Words
    with pytest.raises(ValueError, match="EMPTY and EPSILON"):
        words([(True, ()), (False, ())])
    with pytest.raises(ValueError, match="not a canonical store"):
        words([(False, ()), (True, ()), (False, ((3, 1),)), (False, ((3, 1),))])
    with pytest.raises(ValueError, match="sorted by symbol"):
        words([(False, ()), (True, ()), (False, ((3, 1), (2, 1)))])
    store = compiled.CompiledWordStore(words([(False, ()), (True, ())]))
    with pytest.raises(IndexError):
        store.union(0, 7)
    with pytest.raises(ValueError, match="sorted by symbol"):
        store.make(False, ((1, EMPTY),))


def test_past_its_depth_the_compiled_store_says_so():
    """A set operation deeper than the compiled store recurses raises Unsupported (the callers then use
    the Python path, or hand the request to XGrammar); nothing is half-done."""
    store = compiled.CompiledWordStore.seeded(WordStore())
    deep = store.word(range(compiled._kernel.MAX_DEPTH + 10))
    before = len(store)
    with pytest.raises(compiled.Unsupported):
        store.concat(deep, store.word((7,)))
    assert store.concat(store.word((1, 2)), store.word((3,))) == store.word((1, 2, 3))
    assert len(store) >= before


def test_a_normal_form_past_the_compiled_depth_is_built_in_a_word_store():
    """A rule whose two alternatives share a tail longer than MAX_DEPTH: their union nests past the
    compiled store's recursion, so compile_grammar builds the normal form again in a WordStore (the
    reference), the same normal form as compiled_store=False gives."""
    n = compiled._kernel.MAX_DEPTH + 1000
    text = 'root ::= "x" ' + "a " * n + '| "x" ' + "a " * (n - 1) + '"y"\na ::= "a" | "b"\n'
    python, other = compile_grammar(text, compiled_store=False).gnf, compile_grammar(text).gnf
    assert type(other.store) is WordStore
    assert python.names == other.names and python.table == other.table
    assert_same_nodes(python.store, other.store)
    assert other.accepts(b"x" + b"ab" * (n // 2) + b"a" * (n % 2)) and not other.accepts(b"x" + b"a" * (n - 2))


# -- classing, small vocabularies ------------------------------------------------------------------
@pytest.mark.parametrize("budget", [200_000, 40, 6, 1])
@pytest.mark.parametrize("grammar", [ARITH, JSON_SMALL, NESTED], ids=["arith", "json", "nested"])
def test_classing_toy_node_for_node(toy, grammar, budget):
    """Every budget from none to one node per token: the same fallback singletons, nodes and classes."""
    a, b = _both(grammar, toy, budget=budget)
    assert_same_classing(a, b)
    if budget == 1:
        assert b.classes.metadata["fallback_singletons"] > 0


def test_the_dag_cap_stops_both_paths_with_the_same_message(toy):
    full = compute_classes(
        compile_grammar(NESTED, compiled_store=False).gnf, toy.token_bytes, toy.kinds, compiled=False
    )
    cap = full.classes.metadata["dag_nodes"] - 5
    messages = []
    for flag in (False, True):
        gnf = compile_grammar(NESTED, compiled_store=flag).gnf
        with pytest.raises(ClassingLimitError) as info:
            compute_classes(gnf, toy.token_bytes, toy.kinds, max_dag_nodes=cap, compiled=flag)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "while walking the token" in messages[0]


def test_progress_reaches_the_end_and_cancel_stops(toy):
    seen = []
    gnf = compile_grammar(JSON_SMALL).gnf
    compute_classes(gnf, toy.token_bytes, toy.kinds, progress=lambda d, t: seen.append((d, t)), compiled=True)
    assert seen and seen[-1][0] == seen[-1][1] > 0
    vocab = vocab_from_bytes([bytes([a, b]) for a in range(97, 123) for b in range(97, 123)] * 4, name="pairs")
    with pytest.raises(InterruptedError):
        compute_classes(gnf, vocab.token_bytes, vocab.kinds, cancel=lambda: True, compiled=True)


def test_the_vocabulary_trie_is_kept_per_vocabulary(toy):
    one = vocab_trie(toy.token_bytes, toy.kinds)
    assert vocab_trie(list(toy.token_bytes), toy.kinds) is one  # equal tokens, another list
    other_kinds = np.array(toy.kinds)
    other_kinds[0] = 2
    assert vocab_trie(toy.token_bytes, other_kinds) is not one
    copied = [bytes(bytearray(b)) for b in toy.token_bytes]  # equal bytes, other objects: compared by value
    assert one.same(copied, toy.kinds) and one.same(list(toy.token_bytes), toy.kinds)
    changed = list(toy.token_bytes)
    changed[len(changed) // 2] = changed[len(changed) // 2] + b"?"
    assert not one.same(changed, toy.kinds) and not one.same(changed[:-1], toy.kinds[:-1])
    info = one.info()
    assert info["tokens"] == toy.vocab_size and info["eligible"] == int(
        np.count_nonzero((np.asarray(toy.kinds) == 0) & (np.array([len(b) for b in toy.token_bytes]) > 0))
    )


def _utf8_vocab():
    """Words in three scripts, their prefixes (a token may end inside a character), with and
    without a leading space or a closing quote: subtrees of the trie where a string's set and its
    continuation-byte sets alternate byte by byte, what walk_scan numbers from the step memo."""
    words = ["привет", "пример", "правда", "мир", "日本語", "日本", "café", "naïve", "über", "abc", "abd"]
    tokens = set()
    for w in words:
        b = w.encode()
        for cut in range(1, len(b) + 1):
            for head in (b"", b" ", b'"'):
                tokens.add(head + b[:cut])
                tokens.add(head + b[:cut] + b'"')
    return vocab_from_bytes(sorted(tokens), name="utf8-words")


@pytest.mark.parametrize("budget", [200_000, 6, 1])
def test_utf8_subtrees_numbered_from_the_memo_node_for_node(budget):
    """walk_scan numbers subtrees from the step memo alone: the Python path's classes, token nodes
    and store, node for node, at every budget (no step is computed by a scan, so none moves)."""
    vocab = _utf8_vocab()
    grammar = 'root ::= "[" ( str ( "," str )* )? "]"\nstr ::= "\\"" [^"\\\\]* "\\""\n'
    a, b = _both(grammar, vocab, budget=budget)
    assert_same_classing(a, b)
    if budget == 200_000:
        assert b.classes.metadata["tokens_scanned"] > 0


UTF8_GRAMMARS = [
    'root ::= "[" ( str ( "," str )* )? "]"\nstr ::= "\\"" [^"\\\\]* "\\""\n',  # JSON-like strings
    'root ::= "[" ( str ( "," str )* )? "]"\nstr ::= "\\"" [^"\\\\]* "\\""\n',  # the same, compiled anew
    'root ::= "[" ( str ( "," str )* )? "]"\nstr ::= "\\"" [^"\\\\]* "\\""\n',  # and again
    'root ::= "[" ( str ( "," str )* )? "]"\nstr ::= "\\"" [^"\\\\é日]* "\\""\n',  # two characters fewer
    'root ::= ( str | [a-z]+ )+\nstr ::= "\\"" [^"]* "\\"" | [а-я]+\n',  # other sets, other loops
]


@pytest.mark.parametrize("budget", [200_000, 6])
def test_later_grammars_reuse_the_vocabularys_scans_node_for_node(budget):
    """The scan cache (csrc/classing.c, scan_apply): a scan's outcome is kept per vocabulary trie as
    facts about the step memo (from the second scan of a subtree root), and a later grammar's walk
    reuses it where its own memo makes every fact hold. Grammars classed one after another on one fresh
    trie, each the Python path's classes, token nodes and store, node for node: the first marks the
    roots it scans, the same grammar again records them and a third time reuses them; one with two
    characters fewer in its strings or other sets altogether refuses the entries that do not hold and
    scans instead."""
    vocab = _utf8_vocab()
    kinds = np.ascontiguousarray(vocab.kinds, dtype=np.uint8)
    trie = compiled._kernel.VocabTrie(list(vocab.token_bytes), kinds, 0, 1)
    seen = []
    for grammar in UTF8_GRAMMARS:
        a = compute_classes(
            compile_grammar(grammar, compiled_store=False).gnf,
            vocab.token_bytes,
            vocab.kinds,
            compiled=False,
            budget=budget,
        )
        b = compute_classes(compile_grammar(grammar).gnf, vocab.token_bytes, vocab.kinds, budget=budget, trie=trie)
        assert_same_classing(a, b)
        seen.append({k: v for k, v in trie.info().items() if k.startswith("scans")})
    assert seen[0]["scans_kept"] == 0 and seen[1]["scans_kept"] > 0 and seen[1]["scans_reused"] == 0
    assert seen[2]["scans_reused"] > 0  # the same grammar a third time
    assert seen[-1]["scans_refused"] > seen[2]["scans_refused"]  # entries that do not hold for the others
    assert 0 < seen[-1]["scans_bytes"] < 1 << 20


def test_dead_subtrees_are_filled_in_token_order_and_counted(toy):
    """One pass in token order before the walk gives every token the vocabulary's node (the empty set
    in the trie, -1 outside it), the walk writes its live tokens over it, and the tokens of dead
    subtrees keep the empty set: whatever node_of held on entry, the result is the same. A token it
    left out (here: dead tokens flagged as fallbacks on entry, so fewer tokens are left dead than the
    walk skipped) is an error, not a silent dead class."""
    gnf = compile_grammar(JSON_SMALL).gnf
    result = compute_classes(gnf, toy.token_bytes, toy.kinds, compiled=True)
    eligible = (np.asarray(toy.kinds) == 0) & (np.array([len(b) for b in toy.token_bytes]) > 0)
    node_of = result.token_node
    assert (node_of[eligible] >= 0).all() and (node_of[~eligible] == -1).all()
    assert (node_of[eligible] == 0).any()  # some tokens are dead (JSON_SMALL has no "@")

    def classify(node_of, fallback):
        displacer = compiled_displacement.CompiledDisplacer(compile_grammar(JSON_SMALL).gnf)
        trie = vocab_trie(toy.token_bytes, toy.kinds)
        args = (displacer.atom_table, displacer.initial, 200_000, 10**8, node_of, fallback, None, None)
        return displacer.store.native.classify(trie, *args)

    stale = np.full(toy.vocab_size, 7, dtype=np.int64)
    classify(stale, np.zeros(toy.vocab_size, dtype=np.uint8))
    assert np.array_equal(stale, node_of)
    flagged = (node_of == 0).astype(np.uint8)
    with pytest.raises(RuntimeError, match="skipped as dead"):
        classify(np.empty(toy.vocab_size, dtype=np.int64), flagged)


def test_the_stack_adjacency_is_the_python_one(monkeypatch):
    from cfgzip_lab.classes.adjacency import stack_adjacency
    from cfgzip_lab.grammar import gnf as gnf_module

    for text in (ARITH, JSON_SMALL, NESTED, *(p.read_text(encoding="utf-8") for p in BUNDLED)):
        gnf = compile_grammar(text).gnf
        below = compiled_displacement.CompiledDisplacer(gnf).below
        assert below == stack_adjacency(gnf)
        monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)  # the Python fixpoint, not gnf_merge.c's
        assert below == stack_adjacency(gnf)
        monkeypatch.setattr(gnf_module, "PASSES_IN_C", True)


@pytest.mark.parametrize(
    "name", ["Snowplow---sp_333_Normalized", "Github_medium---o9906", "Github_ultra---o65975", "Github_medium---o9914"]
)
def test_the_stack_adjacency_of_counted_maskbench_schemas_is_the_python_fixpoint(name):
    """Words.grammar's adjacency (its closure over Tarjan's components, csrc/displace.c) on counted schemas of
    thousands of rows with their families' rows: gnf.stack_below's Python fixpoint, set for set."""
    import json

    from paths import maskbench_row

    from cfgzip_lab.classes.adjacency import stack_adjacency

    gnf = compile_grammar(json.dumps(maskbench_row(name)["schema"]), kind="json_schema").gnf
    assert gnf.families and compiled.supports(gnf)
    assert compiled_displacement.CompiledDisplacer(gnf).below == stack_adjacency(gnf)


@pytest.mark.parametrize(
    "name",
    [
        "Github_hard---o48425.json",  # 14,773 nonterminals: the inclusions took 34 rounds before close_below
        "Kubernetes---kb_739_Normalized.json",
        "Github_ultra---o65975.json",  # counted families: their rows n + f in the inclusions
    ],
)
def test_the_stack_adjacency_of_large_schemas_is_the_python_one(name, monkeypatch):
    """The displacer's adjacency (csrc/displace.c compute_below: sparse lasts, the inclusions closed over
    their strongly connected parts in one pass) on MaskBench schemas whose inclusions form long chains and
    cycles, against merging's (csrc/gnf_below.c, a worklist) and the Python fixpoint."""
    import json

    from cfgzip_lab.classes.adjacency import stack_adjacency
    from cfgzip_lab.grammar import gnf as gnf_module

    gnf = compile_grammar(json.dumps(maskbench_row(name)["schema"]), kind="json_schema").gnf
    assert compiled.supports(gnf)
    below = compiled_displacement.CompiledDisplacer(gnf).below
    assert below == stack_adjacency(gnf)
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    assert below == stack_adjacency(gnf)


# -- counted families (issue 17's F_c, IN, REL symbols) in the compiled store -----------------------
COUNTED = [
    'root ::= "(" [ab]{2,40} ")"\n',
    # recursion through a rule of its own: a root nested with input after it is served by XGrammar
    # itself, not walked (cfgzip_lab/grammar/nested_root.py)
    'root ::= e\ne ::= ("(" e ")" | "[" [ab()]{0,30} "]")+\n',
    'root ::= "{" ("[" [0-9]{1,20} "]" ","?){0,25} "}"\n',
]
COUNTED_EDGES = [
    'root ::= "(" [ab]{20,} ")"\n',  # unbounded: the members saturate at F_last
    'root ::= [ab]{17,17} "x"\n',  # m = n
    'root ::= ([ab]{0,18} ",")*\n',  # m = 0, repeated
    'root ::= "<" [0-9]{17,30} ">" | "[" [ab]{16,17} "]"\n',  # the toy's "1" * 30 and "ab" * 8 fill the bounds
    'root ::= "{" ([ab]{0,20} ","){0,20} "}"\n',  # nested counted repetitions
]
WIDE = [
    g.replace("{2,40}", "{2,4000000}").replace("{0,30}", "{0,3000000}").replace("{0,25}", "{0,2500000}")
    for g in COUNTED
]
"""COUNTED with bounds past what a packed compiled symbol holds (compiled.symbol_widths): the Python step."""


def test_counted_families_run_compiled_everywhere(toy):
    """A GNF with counted families is classed, indexed and walked on the compiled store (its IN / REL
    symbols packed into 64 bits); one whose counts pass the packed symbols takes the Python step."""
    from cfgzip_lab.native import build_native_engine

    grammar = compile_grammar(COUNTED[0])
    assert grammar.gnf.families and compiled.supports(grammar.gnf) and compiled.symbol_widths(grammar.gnf) == (1, 6)
    result = compute_classes(grammar.gnf, toy.token_bytes, toy.kinds)
    assert isinstance(result.displacer, compiled_displacement.CompiledDisplacer)
    assert isinstance(compiled_displacement.make_displacer(grammar.gnf), compiled_displacement.CompiledDisplacer)
    engine = build_native_engine(grammar, toy, result.classes, classing=result)
    assert engine.walker._native is result.displacer.store.native and engine.walker._advancer is not None
    m = engine.matcher()
    assert m.accept_token(toy.token_bytes.index(b"(")) and not m.is_completed()
    wide = compile_grammar(WIDE[0])
    assert wide.gnf.families and compiled.symbol_widths(wide.gnf) is None and not compiled.supports(wide.gnf)
    assert type(compiled_displacement.make_displacer(wide.gnf)) is Displacer
    assert type(compute_classes(wide.gnf, toy.token_bytes, toy.kinds).displacer) is Displacer
    with pytest.raises(RuntimeError):
        compute_classes(wide.gnf, toy.token_bytes, toy.kinds, compiled=True)


@pytest.mark.parametrize("budget", [200_000, 40, 6, 1])
@pytest.mark.parametrize(
    "grammar",
    COUNTED + COUNTED_EDGES,
    ids=["bounded", "nested", "list", "unbounded", "m=n", "m=0", "filled", "nested2"],
)
def test_counted_families_class_in_c_node_for_node(toy, grammar, budget, monkeypatch):
    """The compiled step of family members, REL tops and backtracks into families: the Python path's
    nodes, ids, classes and metadata through every budget, the same stack adjacency and σ_in index
    (built in C where classing knows every class's node, with the IN(f, lo, hi) edges apart)."""
    from cfgzip_lab.classes.adjacency import stack_adjacency
    from cfgzip_lab.native import index as index_module

    a, b = _both(grammar, toy, budget=budget)
    assert b.displacer.gnf.families
    assert_same_classing(a, b)
    assert b.displacer.below == stack_adjacency(b.displacer.gnf)
    if budget == 1:
        assert b.classes.metadata["fallback_singletons"] > 0
    if budget in (200_000, 6):
        built = []
        compiled_build = index_module._build_compiled
        monkeypatch.setattr(index_module, "_build_compiled", lambda *x: built.append(1) or compiled_build(*x))
        for with_nodes in (True, False):
            python, other = _index_pair(a, b, toy, with_nodes=with_nodes)
            assert_same_index(python, other)
            if budget == 200_000 and with_nodes:
                assert built == [1] and not isinstance(other, str)
        assert_same_nodes(a.displacer.store, b.displacer.store)
    # the Python API reads the packed symbols back as the Python ints (displacement pairs, explanations)
    read = [int(t) for t in a.classes.representatives if a.token_node[t] > EPSILON]
    assert read or budget < 200_000
    assert all(a.displacer.pairs(int(a.token_node[t])) == b.displacer.pairs(int(b.token_node[t])) for t in read)


def test_the_compiled_store_packs_counted_symbols_in_python_order():
    """IN(f, lo, hi) and REL(f, j, lo, hi) (Python ints past 2^100 and 2^120) go into a compiled store
    and come back as they were; made in a random order, the edges are sorted as Python sorts the ints;
    a store without the widths, or a symbol past them, is refused with a clear error."""
    from cfgzip_lab.grammar.counted import family_symbol, input_symbol, relative_symbol

    rng = random.Random(5)
    symbols = [input_symbol(f, lo, hi) for f in range(3) for lo in (1, 2, 9) for hi in (9, 30)]
    symbols += [relative_symbol(f, j, lo, hi) for f in range(3) for j in (1, 4) for lo in (1, 7) for hi in (7, 31)]
    symbols += [3, 4, family_symbol(2, 5), family_symbol(0, 31)]
    py = WordStore()
    cs = compiled.CompiledWordStore(compiled._kernel.Words(py.nodes, 0, BudgetExceeded, (2, 5)))
    for _ in range(300):
        word = tuple(rng.choice(symbols) for _ in range(rng.randrange(1, 4)))
        assert py.word(word) == cs.word(word)
        a, b = rng.randrange(len(py)), rng.randrange(len(py))
        assert py.union(a, b) == cs.union(a, b)
    assert_same_nodes(py, cs)
    for node in range(len(py)):
        for s, c in py.edges(node):
            assert cs.child(node, s) == c
    assert cs.child(5, relative_symbol(2, 31, 31, 31) + 1) == EMPTY
    with pytest.raises(ValueError, match="past what this store holds"):
        cs.make(False, ((relative_symbol(0, 1, 1, 32), EPSILON),))  # a count past the 5 bits
    with pytest.raises(ValueError, match="past what this store holds"):
        compiled.CompiledWordStore.seeded(py)  # no widths: its nodes hold packed symbols
    with pytest.raises(ValueError, match="61 bits"):
        compiled._kernel.Words(WordStore().nodes, 0, None, (3, 20))


@pytest.mark.parametrize("budget", [200_000, 40, 6, 1])
@pytest.mark.parametrize("grammar", WIDE, ids=["bounded", "nested", "list"])
def test_counted_families_walk_in_c_with_the_python_step(toy, grammar, budget, monkeypatch):
    """A GNF with counted families whose counts pass the packed symbols is classed by the compiled trie
    walk and numbering calling the Python displacer's step: the Python path's nodes, ids and classes,
    through every budget (fallback singletons included)."""
    from cfgzip_lab.classes import classing

    one, two = compile_grammar(grammar).gnf, compile_grammar(grammar).gnf
    assert two.families and not compiled.supports(two) and compiled.supports_walk(two)
    called = []
    monkeypatch.setattr(classing, "_classify_steps", lambda *a: called.append(1) or _classify_steps(*a))
    a = compute_classes(one, toy.token_bytes, toy.kinds, compiled=False, budget=budget)
    b = compute_classes(two, toy.token_bytes, toy.kinds, budget=budget)
    assert called == [1]
    assert_same_stepped_classing(a, b)
    if budget == 1:
        assert b.classes.metadata["fallback_singletons"] > 0


TOKEN_GRAMMARS = [
    'root ::= "(" Token(3) [ab]* ")"\n',
    'root ::= ExcludeToken(3, 5) | "a" Token(5) "b"\n',
    'root ::= Token(2) TokenTagDispatch((3, body), excludes=(5,)) Token(6)\nbody ::= Token(4) | "ab"\n',
    'root ::= TokenTagDispatch((10, s), loop_after_dispatch=true, excludes=())\ns ::= "(" [ab]{2,6} ")"\n',
]
"""Token(...) & co.: token atoms, whose paths the classing adds to each token's node."""


@pytest.mark.parametrize("budget", [200_000, 6, 1])
@pytest.mark.parametrize("grammar", TOKEN_GRAMMARS, ids=["token", "exclude", "dispatch", "dispatch-loop"])
def test_token_atoms_walk_in_c_with_the_python_step(toy, grammar, budget, monkeypatch):
    """A GNF with token atoms is classed by the compiled trie walk and numbering with the Python
    displacer's step, the token atoms' unions added before the numbering: the Python path's nodes,
    ids, classes and metadata, through every budget."""
    from cfgzip_lab.classes import classing
    from cfgzip_lab.grammar import ebnf

    # The passes compared here do not depend on XGrammar: under 0.2.9, where the front end refuses
    # ExcludeToken/TokenTagDispatch (token_macros.stop_tokens_as_terminals), they are still compared.
    monkeypatch.setattr(ebnf, "stop_tokens_as_terminals", lambda: False)
    one, two = compile_grammar(grammar).gnf, compile_grammar(grammar).gnf
    assert compiled.has_token_atoms(two) and not compiled.supports(two) and compiled.supports_walk(two)
    called = []
    monkeypatch.setattr(classing, "_classify_steps", lambda *a: called.append(1) or _classify_steps(*a))
    a = compute_classes(one, toy.token_bytes, toy.kinds, compiled=False, budget=budget)
    b = compute_classes(two, toy.token_bytes, toy.kinds, budget=budget)
    assert called == [1] and b.classes.metadata["named_token_ids"] == a.classes.metadata["named_token_ids"] > 0
    assert_same_stepped_classing(a, b)


@pytest.mark.parametrize("grammar", [WIDE[1], COUNTED[1]], ids=["python-step", "compiled-step"])
def test_counted_families_keep_the_cap_progress_and_cancel(toy, grammar):
    gnf = compile_grammar(grammar).gnf
    outcomes = []
    for options in ({"compiled": False}, {}):
        try:
            compute_classes(compile_grammar(grammar).gnf, toy.token_bytes, toy.kinds, max_dag_nodes=30, **options)
        except ClassingLimitError as err:
            outcomes.append(str(err))
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1]
    seen = []
    compute_classes(gnf, toy.token_bytes, toy.kinds, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 0
    vocab = vocab_from_bytes([bytes([a, b]) for a in range(97, 123) for b in range(97, 123)] * 4, name="pairs")
    with pytest.raises(InterruptedError):
        compute_classes(compile_grammar(grammar).gnf, vocab.token_bytes, vocab.kinds, cancel=lambda: True)


@pytest.mark.parametrize("budget", [200_000, 3])
@pytest.mark.parametrize(
    "grammar",
    ['root ::= "[true]"', 'root ::= "ab" [0-9]* | "{" [a-c]{1,3} "}"', 'root ::= ([a-z] " ")* "."'],
)
def test_the_numbering_from_the_walks_ranges_is_the_pass_over_every_token(grammar, budget):
    """Where few tokens have a live node, assemble numbers them from the walk's ranges alone (every
    other token's class known from the vocabulary): the same classes, representatives and counts as
    the pass over every token, and as the Python reference; fallback tokens (budget 3) included."""
    tokens = [bytes([b]) for b in range(256)] + [bytes([a, b]) for a in range(97, 123) for b in range(32, 127)]
    tokens += [b"", b"[true]", b"[t", b"rue]", b"ab12", b"{abc}"]
    vocab = vocab_from_bytes(tokens, stop_ids=[3], special_ids=[4, 5], name="bytes-and-pairs")
    gnf = compile_grammar(grammar).gnf
    kinds = np.ascontiguousarray(vocab.kinds, dtype=np.uint8)
    trie = vocab_trie(vocab.token_bytes, kinds)
    displacer = compiled_displacement.CompiledDisplacer(gnf)
    node_of = np.full(vocab.vocab_size, -1, dtype=np.int64)
    fallback = np.zeros(vocab.vocab_size, dtype=np.uint8)
    *_, ranges = displacer.store.native.classify(
        trie, displacer.atom_table, displacer.initial, budget, 10**8, node_of, fallback, None, None
    )
    assert ranges is not None  # few live tokens: the walk kept its ranges
    long_way, short_way = np.empty(vocab.vocab_size, np.int32), np.empty(vocab.vocab_size, np.int32)
    args = (trie, kinds, node_of, fallback)
    *expected, no_ids, no_classes = compiled._kernel.assemble(*args, long_way, 0, 1, len(displacer.store))
    *got, ids, classes = compiled._kernel.assemble(*args, short_way, 0, 1, len(displacer.store), ranges)
    assert got == expected and np.array_equal(short_way, long_way) and no_ids is no_classes is None
    # the short way lists the ids outside class 0 (BLOCKED), ascending, with their classes: the whole map
    ids, classes = np.frombuffer(ids, dtype=np.int32), np.frombuffer(classes, dtype=np.int32)
    assert np.array_equal(ids, np.flatnonzero(long_way != 0)) and np.array_equal(classes, long_way[ids])
    # and without a map given, those alone (TokenClasses.from_sparse)
    *alone, alone_ids, alone_classes = compiled._kernel.assemble(*args, None, 0, 1, len(displacer.store), ranges)
    assert alone == expected and alone_ids == ids.tobytes() and alone_classes == classes.tobytes()
    if budget == 3:
        assert fallback.any()
    reference = compute_classes(gnf, vocab.token_bytes, vocab.kinds, budget=budget, compiled=False).classes
    result = compute_classes(gnf, vocab.token_bytes, vocab.kinds, budget=budget, compiled=True).classes
    assert np.array_equal(result.class_of, reference.class_of)
    assert np.array_equal(result.representatives, reference.representatives)
    assert np.array_equal(result.class_kind, reference.class_kind)


@pytest.mark.parametrize("budget", [200_000, 3])
@pytest.mark.parametrize(
    "grammar, dense",
    [('root ::= "[true]"', False), ('root ::= "ab" [0-9]* | "{" [a-c]{1,3} "}"', False), ("root ::= [ -~]*", True)],
    ids=["literal", "small", "most-live"],
)
def test_a_lazy_walk_leaves_node_of_to_its_ranges(grammar, dense, budget):
    """classify(lazy=True) keeps its ranges however many tokens are live (at most one range per token)
    and never writes node_of; the result's token_node, made from the classes when first read, is what
    the full walk writes. Where most tokens are live (dense) the numbering writes the map whole from
    the ranges (assemble's dense way: no list of ids, node_of not read), else it lists the ids outside
    class 0 (TokenClasses.from_sparse). The same classes, representatives and representatives' nodes
    as the pass over every token and the Python reference either way."""
    tokens = [bytes([b]) for b in range(256)] + [bytes([a, b]) for a in range(97, 123) for b in range(32, 127)]
    tokens += [b"", b"[true]", b"[t", b"rue]", b"ab12", b"{abc}"]
    vocab = vocab_from_bytes(tokens, stop_ids=[3], special_ids=[4, 5], name="bytes-and-pairs")
    kinds = np.ascontiguousarray(vocab.kinds, dtype=np.uint8)
    trie = vocab_trie(vocab.token_bytes, kinds)

    def walk(node_of, *lazy):  # each on a fresh compile: a store's step memo would spare the budgets
        displacer = compiled_displacement.CompiledDisplacer(compile_grammar(grammar).gnf)
        fallback = np.zeros(vocab.vocab_size, dtype=np.uint8)
        args = (trie, displacer.atom_table, displacer.initial, budget, 10**8, node_of)
        return displacer, fallback, displacer.store.native.classify(*args, fallback, None, None, *lazy)

    full = np.empty(vocab.vocab_size, dtype=np.int64)
    displacer, fallback, (*_, full_ranges) = walk(full)
    lazy = np.full(vocab.vocab_size, 7, dtype=np.int64)
    _, _, (*_, ranges) = walk(lazy, True)
    assert ranges is not None and ranges == full_ranges and (lazy == 7).all()  # kept, node_of not written
    # the numbering from the ranges (node_of given unwritten: not read) is the pass over every token
    args, numbering = (trie, kinds), (0, 1, len(displacer.store))
    long_way, from_ranges = np.empty(vocab.vocab_size, np.int32), np.empty(vocab.vocab_size, np.int32)
    *expected, _, _ = compiled._kernel.assemble(*args, full, fallback, long_way, *numbering)
    *got, ids, classes = compiled._kernel.assemble(*args, lazy, fallback, from_ranges, *numbering, ranges)
    assert got == expected and np.array_equal(from_ranges, long_way) and (ids is classes is None) == dense
    sparse = compiled._kernel.assemble(*args, lazy, fallback, None, *numbering, ranges)
    assert (sparse is None) == dense  # dense: no list of ids, a map is asked for
    result = compute_classes(compile_grammar(grammar).gnf, vocab.token_bytes, vocab.kinds, budget=budget, compiled=True)
    reference = compute_classes(
        compile_grammar(grammar).gnf, vocab.token_bytes, vocab.kinds, budget=budget, compiled=False
    )
    assert result._token_node is None  # made on first read, not by classing
    assert (result.classes.sparse_map() is None) == dense
    assert np.array_equal(result.rep_nodes, result.token_node[result.classes.representatives])
    assert np.array_equal(result.token_node, full)
    for name in ("class_of", "representatives", "class_kind"):
        assert np.array_equal(getattr(result.classes, name), getattr(reference.classes, name)), name
    assert np.array_equal(result.rep_nodes, reference.rep_nodes)  # the same store ids (the same steps in order)


def test_the_python_step_inside_the_compiled_walk_keeps_its_errors(toy):
    gnf = compile_grammar(WIDE[1]).gnf
    with pytest.raises(ZeroDivisionError):  # an error inside the step comes out as it is
        compiled._kernel.classify_steps(
            vocab_trie(toy.token_bytes, toy.kinds),
            bytes(gnf.atom_of),
            len(gnf.atoms),
            1,
            np.full(toy.vocab_size, -1, dtype=np.int64),
            np.zeros(toy.vocab_size, dtype=np.uint8),
            None,
            None,
            lambda node, atom, fresh: 1 // 0,
        )


def assert_same_stepped_classing(a: ClassingResult, b: ClassingResult) -> None:
    """``a`` from the Python path, ``b`` from classify_steps: both Python displacers on their own
    compile of the grammar, the same classes, token nodes, metadata and store nodes."""
    assert type(a.displacer) is Displacer and type(b.displacer) is Displacer
    for name in ("class_of", "representatives", "class_kind"):
        x, y = getattr(a.classes, name), getattr(b.classes, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert np.array_equal(a.token_node, b.token_node)
    assert_same_metadata(a.classes.metadata, b.classes.metadata, {"classing_seconds"}, skipping=False)
    assert list(a.displacer.store.nodes) == list(b.displacer.store.nodes)


COUNTED_SCHEMAS = [
    '{"type": "array", "items": {"type": "integer"}, "maxItems": 40}',
    '{"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}}}',
    '{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"maxItems":40}},"required":["tags"]}',
]


@pytest.mark.slow
@pytest.mark.parametrize("schema", COUNTED_SCHEMAS, ids=["maxItems", "maxLength", "tags"])
def test_counted_schemas_llama3_node_for_node(schema):
    vocab = _load("llama3")
    a, b = _both(schema, vocab, kind="json_schema")
    assert b.displacer.gnf.families
    assert_same_classing(a, b)
    assert_same_index(*_index_pair(a, b, vocab))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["jsb_0044", "jsb_0082", "jsb_0282"])
def test_counted_regressions_llama3_node_for_node(name):
    """The shared regressions with counted repetitions (maxLength 131072 among them): compiled classing
    and index are the Python reference's, node for node."""
    vocab = _load("llama3")
    path = CORPORA / "regressions" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not here")
    a, b = _both(path.read_text(encoding="utf-8"), vocab, kind="json_schema")
    assert b.displacer.gnf.families
    assert_same_classing(a, b)
    assert_same_index(*_index_pair(a, b, vocab))


@pytest.mark.slow
def test_counted_schema_past_the_packed_symbols_llama3_stepped_walk_is_the_python_one():
    vocab = _load("llama3")
    schema = '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 4000000}}}'
    one = compile_grammar(schema, kind="json_schema").gnf
    two = compile_grammar(schema, kind="json_schema").gnf
    assert two.families and not compiled.supports(two) and compiled.supports_walk(two)
    a = compute_classes(one, vocab.token_bytes, vocab.kinds, compiled=False)
    b = compute_classes(two, vocab.token_bytes, vocab.kinds)
    assert_same_stepped_classing(a, b)


def test_a_python_displacer_on_a_compiled_store_steps_there_too(toy):
    """A Python Displacer over a compiled store (classing's fall-back, or compute_classes(compiled=False)
    on a normal form built in a compiled store): the index and the walk step in C on that store
    (stepping_store sets the grammar's tables first), with the Python reference's classes and masks."""
    from cfgzip_lab.expand import unpack_bitmask
    from cfgzip_lab.native import build_native_engine

    python_grammar, grammar = compile_grammar(JSON_SMALL, compiled_store=False), compile_grammar(JSON_SMALL)
    assert isinstance(grammar.gnf.store, compiled.CompiledWordStore)
    result = compute_classes(grammar.gnf, toy.token_bytes, toy.kinds, compiled=False)
    assert type(result.displacer) is Displacer and result.displacer.store is grammar.gnf.store
    engine = build_native_engine(grammar, toy, result.classes, classing=result)
    assert engine.walker._native is grammar.gnf.store.native and engine.walker._advancer is not None
    reference = compute_classes(python_grammar.gnf, toy.token_bytes, toy.kinds, compiled=False)
    assert np.array_equal(result.classes.class_of, reference.classes.class_of)
    assert np.array_equal(result.token_node, reference.token_node)
    other = build_native_engine(python_grammar, toy, reference.classes, classing=reference)
    assert other.walker._native is None
    one, two = engine.matcher(), other.matcher()
    rng = random.Random(3)
    for _ in range(12):  # a seeded walk: the same rows at every step, then one allowed token
        row = one.vocab_row()
        assert np.array_equal(row, two.vocab_row())
        bits = unpack_bitmask(row, toy.vocab_size)
        allowed = [t for t in np.flatnonzero(bits).tolist() if toy.kinds[t] == 0]
        if not allowed:
            break
        tid = rng.choice(allowed)
        assert one.accept_token(tid) and two.accept_token(tid)


def test_grammars_with_token_atoms_take_the_python_path(toy):
    """Token-level macros (issue 19: atoms with pseudo-byte bits from 256 on) are not in the kernel:
    a token then also reads as its token atom, which only the Python classing, index and walk add
    (cfgzip_lab.grammar.token_macros). supports() says no, so every compiled entry point leaves it."""
    from dataclasses import replace

    from cfgzip_lab.grammar.cfg import ByteSet

    gnf = compile_grammar(JSON_SMALL).gnf
    assert compiled.supports(gnf) and not compiled.has_token_atoms(gnf)
    with_token = replace(gnf, atoms=[*gnf.atoms, ByteSet(1 << 257)])  # what a Token(0) atom looks like
    assert compiled.has_token_atoms(with_token) and not compiled.supports(with_token)
    assert type(compiled_displacement.make_displacer(with_token)) is Displacer
    with pytest.raises(RuntimeError):
        compiled_displacement.CompiledDisplacer(with_token)
    with pytest.raises(RuntimeError):
        compute_classes(with_token, toy.token_bytes, toy.kinds, compiled=True)
    try:
        from cfgzip_lab.grammar import token_macros
    except ImportError:
        return  # the token macros are not in this checkout yet: the guard above is what they need
    from cfgzip_lab.native import build_native_engine

    grammar = compile_grammar('root ::= Token(5) "b" | "ab"\n')
    assert token_macros.token_atoms(grammar.gnf) is not None and not compiled.supports(grammar.gnf)
    assert type(grammar.gnf.store) is WordStore
    result = compute_classes(grammar.gnf, toy.token_bytes, toy.kinds)
    assert type(result.displacer) is Displacer
    engine = build_native_engine(grammar, toy, result.classes, classing=result)
    assert engine.walker._native is None and engine.walker._advancer is None
    assert token_macros.token_paths(engine.walker.displacer) is not None


def test_without_the_kernel_classing_runs_in_python():
    code = (
        "from cfgzip_lab.grammar import compiled_words as compiled\n"
        "from cfgzip_lab.classes.classing import compute_classes\n"
        "from cfgzip_lab.classes.displacement import Displacer\n"
        "from cfgzip_lab.pipeline import compile_grammar\n"
        "from cfgzip_lab.vocab import vocab_from_bytes\n"
        "v = vocab_from_bytes([b'a', b'b', b'ab', b'('], name='t')\n"
        "r = compute_classes(compile_grammar('root ::= [ab]+').gnf, v.token_bytes, v.kinds)\n"
        "assert not compiled.available() and type(r.displacer) is Displacer\n"
        "assert r.classes.num_classes == 2, r.classes.num_classes  # blocked '(', and a = b = ab\n"
        "print('ok')\n"
    )
    env = {**os.environ, "CFGZIP_NATIVE_KERNEL": "0"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# -- classing, real vocabularies -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("path", BUNDLED, ids=grammar_id)
def test_bundled_grammars_llama3_node_for_node(path):
    vocab = _load("llama3")
    a, b = _both(path.read_text(encoding="utf-8"), vocab)
    assert_same_classing(a, b)
    assert_same_index(*_index_pair(a, b, vocab))


@pytest.mark.slow
@pytest.mark.parametrize(
    "text,kind,share",
    [
        (None, "ebnf", 0.5),  # the bundled json: past a byte or two most tokens sit in a string's loop
        ('{"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 9}', "json_schema", 0.95),
    ],
    ids=["json-strings", "schema-without-strings"],
)
def test_the_walk_skips_the_subtrees_a_set_loops_through(text, kind, share):
    """The compiled walk assigns whole subtrees of the vocabulary trie without walking them where the
    step memo says every byte below steps the configuration set to itself (dead tokens included),
    and still gives the Python path's classes, token nodes and store, node for node. The shares
    are what makes classing of a typical schema cheap (measured: 82k of 128k json tokens skipped,
    128k of 128k for a schema without strings)."""
    from cfgzip_lab.bundled import bundled_grammars

    vocab = _load("llama3")
    text = text if text is not None else bundled_grammars()["json"].read_text(encoding="utf-8")
    a, b = _both(text, vocab, kind=kind)
    assert_same_classing(a, b)
    eligible = int(np.count_nonzero(np.asarray(vocab.kinds) == 0))
    assert b.classes.metadata["tokens_skipped"] > share * eligible
    assert b.classes.metadata["byte_class_strings_walked"] < a.classes.metadata["distinct_byte_class_strings"] / 4
    if kind == "ebnf":  # strings: the multi-byte UTF-8 below them numbered by walk_scan (measured: 81k)
        assert b.classes.metadata["tokens_scanned"] > 0.4 * eligible


def _corpus_sample() -> list[tuple[str, Path, str]]:
    """A seeded sample: 6 third-party grammars, 6 of XGrammar's test grammars, 4 JSON Schemas."""
    rng = random.Random(18)
    out = [(grammar_id(p), p, "gbnf" if p.suffix == ".gbnf" else "ebnf") for p in third_party_grammars()]
    out = rng.sample(out, min(6, len(out)))
    ebnf = sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))
    schemas = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("*.json") if ".instance" not in p.name)
    out += [(p.name, p, "ebnf") for p in rng.sample(ebnf, min(6, len(ebnf)))]
    out += [(p.name, p, "json_schema") for p in rng.sample(schemas, min(4, len(schemas)))]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,path,kind", _corpus_sample(), ids=[n for n, _, _ in _corpus_sample()])
def test_corpus_sample_llama3_node_for_node(name, path, kind):
    from cfgzip_lab.grammar.diagnostics import GrammarError

    vocab = _load("llama3")
    text = path.read_text(encoding="utf-8")
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError as err:  # constructs the lowering refuses: nothing to class
        pytest.skip(f"not lowered: {str(err)[:80]}")
    if compiled.has_token_atoms(gnf):  # Token(...) & co. (tokens branch): the default path is Python's
        a = compute_classes(compile_grammar(text, kind=kind, compiled_store=False).gnf, vocab.token_bytes, vocab.kinds)
        b = compute_classes(gnf, vocab.token_bytes, vocab.kinds)
        assert type(a.displacer) is type(b.displacer) is Displacer and type(gnf.store) is WordStore
        for name in ("class_of", "representatives", "class_kind"):
            assert np.array_equal(getattr(a.classes, name), getattr(b.classes, name)), name
        assert np.array_equal(a.token_node, b.token_node)
        return
    a, b = _both(text, vocab, kind=kind)
    assert_same_classing(a, b)
    assert_same_index(*_index_pair(a, b, vocab))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["json", "xml", "c_like"])
def test_smollm2_node_for_node(name):
    from cfgzip_lab.bundled import bundled_grammars

    vocab = _load("smollm2")
    a, b = _both(bundled_grammars()[name].read_text(encoding="utf-8"), vocab)
    assert_same_classing(a, b)
    assert_same_index(*_index_pair(a, b, vocab))


# -- the σ_in index ----------------------------------------------------------------------------------
def _index_pair(a: ClassingResult, b: ClassingResult, vocab, *, with_nodes: bool = True, **options):
    """(Python build on a's Python store, compiled build on b's compiled store); errors as strings."""
    from cfgzip_lab.native.index import IndexTooLarge, build_index

    out = []
    for result in (a, b):
        try:
            out.append(
                build_index(
                    result.displacer.gnf,
                    result.classes,
                    vocab.token_bytes,
                    token_node=result.token_node if with_nodes else None,
                    displacer=result.displacer,
                    **options,
                )
            )
        except IndexTooLarge as err:
            out.append(f"IndexTooLarge: {err}")
    return out


def assert_same_index(python, other) -> None:
    if isinstance(python, str) or isinstance(other, str):
        assert python == other
        return
    x, y = python.to_arrays(), other.to_arrays()
    assert x.keys() == y.keys()
    for key in x:
        assert x[key].dtype == y[key].dtype and np.array_equal(x[key], y[key]), key
    assert python.stats == other.stats and python.metadata() | {"native_build_seconds": 0} == other.metadata() | {
        "native_build_seconds": 0
    }


@pytest.mark.parametrize(
    "options",
    [{}, {"max_words": 3}, {"max_words_per_node": 1, "max_unindexed": 10_000}, {"max_words_per_node": 0}],
    ids=["default", "few-words", "one-word-per-node", "nothing-listed"],
)
@pytest.mark.parametrize(
    "grammar",
    [ARITH, JSON_SMALL, NESTED, 'root ::= "{" ([ab]{0,20} ","){0,20} "}"\n', 'root ::= "(" [ab]{20,} ")"\n'],
    ids=["arith", "json", "nested", "counted", "unbounded"],
)
def test_index_toy_is_the_python_index(toy, grammar, options):
    a, b = _both(grammar, toy)
    for with_nodes in (True, False):
        python, other = _index_pair(a, b, toy, with_nodes=with_nodes, **options)
        assert_same_index(python, other)
    assert_same_nodes(a.displacer.store, b.displacer.store)  # representatives re-run: the same new nodes


def test_index_with_fallback_singletons_is_the_python_index(toy):
    a, b = _both(NESTED, toy, budget=6)
    assert b.classes.metadata["fallback_singletons"] > 0
    assert_same_index(*_index_pair(a, b, toy))


def test_the_compiled_index_round_trips_through_the_cache_arrays(toy):
    from cfgzip_lab.native.index import SigmaInIndex

    a, b = _both(JSON_SMALL, toy)
    python, index = _index_pair(a, b, toy)
    again = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
    assert again.children == index.children == python.children and again.bits == index.bits == python.bits
    words = -(-index.num_classes // 64)
    for dense in (1, 2, 1000):
        x, y = again.kernel_arrays(dense, words), python.kernel_arrays(dense, words)
        assert all(np.array_equal(x[k], y[k]) for k in x)


# -- the native engine's walk on the compiled store ----------------------------------------------------
def _byte_vocab():
    tokens = [bytes([b]) for b in range(256)] + [b"", b"  ", b"ab", b"if", b"(\n", b"\xc3\xa9", b"return", b"    "]
    return vocab_from_bytes(tokens, stop_ids=[256], vocab_size=len(tokens) + 2, name="bytes")


def _engines_both(text: str, vocab, limits=None):
    from cfgzip_lab.native import WalkLimits, build_native_engine

    limits = limits or WalkLimits()
    out = []
    for flag in (False, True):
        grammar = compile_grammar(text, compiled_store=flag)
        result = compute_classes(grammar.gnf, vocab.token_bytes, vocab.kinds, compiled=flag)
        out.append(build_native_engine(grammar, vocab, result.classes, classing=result, limits=limits))
    return out


@pytest.mark.parametrize("name", ["json", "c_like", "xml", "sql_select"])
def test_the_compiled_accept_step_walks_the_python_states(name):
    """Sample documents and seeded random walks (every allowed token tried, rejected ones too): the
    compiled accept step (Advancer) and the Python walker reach the same state ids, class sets and
    answers, and leave their stores node for node equal."""
    from cfgzip_lab.bundled import bundled_grammars, bundled_samples
    from cfgzip_lab.classes.classing import NORMAL

    vocab = _byte_vocab()
    text = bundled_grammars()[name].read_text(encoding="utf-8")
    py, cc = _engines_both(text, vocab)
    assert py.walker._advancer is None and cc.walker._advancer is not None
    rng = np.random.default_rng(0)
    docs = [vocab.encode(p.read_text(encoding="utf-8")[:300]) for p in bundled_samples(name)[:2]]
    steps = 0
    for path in docs + [None] * 6:
        a, b = py.matcher(), cc.matcher()
        for i in range(len(path) if path is not None else 60):
            assert a._history == b._history and a.class_set() == b.class_set()
            if path is not None:
                token = path[i]
            else:
                token = int(rng.integers(0, vocab.vocab_size + 2)) - 1  # -1 and V: not ids
                allowed = [t for t in range(vocab.vocab_size) if a.class_set() >> int(py.classes.class_of[t]) & 1]
                if allowed and rng.random() < 0.8:
                    token = int(rng.choice(allowed))
            got = a.accept_token(token)
            assert b.accept_token(token) == got
            steps += 1
            if a.is_terminated() or (path is not None and not got):
                break
            if path is None and not any(
                py.classes.class_kind[k] == NORMAL for k in range(py.classes.num_classes) if a.class_set() >> k & 1
            ):
                break
    assert steps > 200
    assert_same_nodes(py.walker.store, cc.walker.store)
    assert (
        py.stats()["advances"] == cc.stats()["advances"]
        and py.stats()["advance_memo_hits"] == cc.stats()["advance_memo_hits"]
    )


def test_the_compiled_accept_step_keeps_the_budgets():
    """Tight limits: both steps hand the same request to XGrammar at the same token."""
    from cfgzip_lab.native import WalkLimits

    vocab = _byte_vocab()
    text = 'root ::= "(" root ")" | "[" root* "]" | [a-z]+\n'
    py, cc = _engines_both(text, vocab, WalkLimits(token_budget=3, request_budget=40))
    ids = vocab.encode("[[(abc)][x]" + "[(" * 40)
    a, b = py.matcher(), cc.matcher()
    for t in ids:
        assert a.accept_token(t) == b.accept_token(t)
        assert a.in_fallback == b.in_fallback and a.fallback_reason == b.fallback_reason
    assert a.in_fallback and py.fallbacks == cc.fallbacks == 1


@pytest.mark.parametrize(
    "grammar", COUNTED + COUNTED_EDGES[:3], ids=["bounded", "nested", "list", "unbounded", "m=n", "m=0"]
)
def test_the_compiled_accept_step_walks_counted_families_as_python_does(grammar):
    """Seeded random walks (allowed tokens mostly, rejected ones too) on counted grammars: the compiled
    accept step steps the members F_c in C and reaches the Python walker's states, class sets and answers;
    their stores stay node for node equal (classing, the σ_in index and the walk)."""
    vocab = _byte_vocab()
    py, cc = _engines_both(grammar, vocab)
    assert py.walker._advancer is None and cc.walker._advancer is not None
    rng = np.random.default_rng(1)
    closing = {b")", b"]", b"}", b">", b"x"}  # mostly avoided, so that walks run up to the bounds
    steps = 0
    for _ in range(6):
        a, b = py.matcher(), cc.matcher()
        for _ in range(60):
            assert a._history == b._history and a.class_set() == b.class_set()
            allowed = [t for t in range(vocab.vocab_size) if a.class_set() >> int(py.classes.class_of[t]) & 1]
            normal = [t for t in allowed if vocab.kinds[t] == 0]
            if not normal:
                break
            inner = [t for t in normal if vocab.token_bytes[t] not in closing]
            pick = rng.random()
            pool = inner if inner and pick < 0.85 else normal
            token = int(rng.choice(pool)) if pick < 0.95 else int(rng.integers(0, vocab.vocab_size))
            assert a.accept_token(token) == b.accept_token(token)
            steps += 1
            if a.is_terminated():
                break
    assert steps > 60
    assert_same_nodes(py.walker.store, cc.walker.store)


@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_the_accept_step_reads_the_classes_array_it_was_given_and_checks_each_read(toy, form):
    """The compiled Advancer holds the class map's buffers rather than copies (a copy of a dense one was
    512 KB of fresh pages a grammar with Llama-3): a dense class_of, or a sparse map's listed ids and
    classes (TokenClasses.from_sparse, never made dense): the classes' arrays are the ones read, and a
    class id written there afterwards that names no class is refused at the accept, never read past
    class_kind."""
    import dataclasses

    from cfgzip_lab.classes.classing import TokenClasses
    from cfgzip_lab.native import build_native_engine

    grammar = compile_grammar('root ::= "(" [a-c]* ")"\n')
    result = compute_classes(grammar.gnf, toy.token_bytes, toy.kinds)
    classes = result.classes
    opening = toy.token_bytes.index(b"(")
    if form == "dense":
        classes = dataclasses.replace(classes, class_of=np.array(classes.class_of))  # a writable map of its own
        held, at = classes.class_of, opening
    else:
        v, ids, listed = classes.sparse_map()
        listed = listed.copy()  # writable
        classes = TokenClasses.from_sparse(v, ids, listed, classes.representatives, classes.class_kind)
        held, at = listed, int(np.searchsorted(ids, opening))
        assert ids[at] == opening
    engine = build_native_engine(grammar, toy, classes, classing=result)
    walker = engine.walker
    assert walker._advancer is not None and (form == "dense") == ("class_of" in classes.__dict__)
    assert engine.matcher().accept_token(opening)
    saved = int(held[at])
    held[at] = walker.num_classes + 5
    try:
        with pytest.raises(ValueError, match="outside class_kind"):
            engine.matcher().accept_token(opening)
    finally:
        held[at] = saved
    assert engine.matcher().accept_token(opening)
    assert (form == "dense") == ("class_of" in classes.__dict__)  # a sparse map is never made dense
