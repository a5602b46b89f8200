"""The Python walk's trie rows, made one node at a time (``index.TrieRows``, issue 33).

A counted-repetition grammar's trie is walked in Python. Its rows were all made before the first
mask; now each is read from the index's arrays when the walk first reaches its node. Here the rows
equal the lists the eager path made, node for node, and the native masks over an arrays-only index
(what ``matcher_for`` builds) equal XGrammar's, as the list-backed index's do.
"""

from __future__ import annotations

import pytest
from toy_vocab import JSON_PIECES

from cfgzip_lab.engine import compile_engines
from cfgzip_lab.native import build_native_engine
from cfgzip_lab.native.index import SigmaInIndex, TrieRow, build_index
from cfgzip_lab.native.walk import StateWalker
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_engines
from cfgzip_lab.vocab import vocab_from_bytes

RUNS = [b"a" * k for k in range(2, 9)] + [b'a"', b'aa"', b'"a', b'"aa', b"0" * 3, b"00", b'",', b'"]']
TOKENS = JSON_PIECES + RUNS + [b"", b""]  # then a stop and a special id
STOP, SPECIAL = len(TOKENS) - 2, len(TOKENS) - 1
COUNTED = [
    'root ::= "\\"" [a-b]{17,21} "\\""',
    'root ::= "[" ("\\"" "a"{0,3} "\\"" ("," "\\"" "a"{0,3} "\\""){0,18})? "]"',
    'root ::= ("a" | "0"){20,24}',
]


def _docs() -> list[str]:
    out = []
    for n in (0, 17, 18, 19, 20, 21, 22):
        out += ['"' + "ab" * (n // 2) + "a" * (n % 2) + '"', "a" * n, "a0" * (n // 2)]
    return out + ["[" + ",".join(['"aa"'] * k) + "]" for k in (1, 18, 19, 20)]


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOKENS, stop_ids=[STOP], special_ids=[SPECIAL], name="rows-toy")


def _built(text: str, vocab):
    compiled = compile_grammar(text, counted_threshold=0)
    result = build_classes(compiled, vocab)
    index = build_index(
        compiled.gnf, result.classes, vocab.token_bytes, rep_nodes=result.rep_nodes, displacer=result.displacer
    )
    return compiled, result, index


@pytest.mark.parametrize("text", COUNTED)
def test_rows_from_arrays_equal_the_index_lists_node_for_node(toy, text):
    compiled, _, index = _built(text, toy)
    assert compiled.gnf.families and index.has_family_edges, "the bound must be counted"
    arrays_only = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
    assert arrays_only.arrays_only
    lazy, listed = arrays_only.rows(), index.rows()
    for t in range(index.num_nodes):
        want = TrieRow(index.children[t], index.family_children[t], index.bits[t], bool(index.children[t]))
        assert lazy[t] == want == listed[t], t
    assert arrays_only.arrays_only, "reading rows must not build the whole index's lists"


@pytest.mark.parametrize("text", COUNTED)
def test_masks_over_lazy_rows_equal_xgrammar_and_the_listed_index(toy, text):
    compiled, result, index = _built(text, toy)
    engines = compile_engines(text, toy, result.classes)
    arrays_only = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
    lazy = build_native_engine(compiled, toy, result.classes, classing=result, index=arrays_only)
    listed = build_native_engine(compiled, toy, result.classes, classing=result, index=index)
    for engine, name in ((lazy, "lazy rows"), (listed, "listed rows")):
        report = verify_engines(
            engines, candidate=engine.matcher, candidate_name=name, walks=30, steps=40, seed=2, docs=_docs()
        )
        assert report.ok, (name, report.first_mismatch)
    assert arrays_only.arrays_only


def test_first_mask_reads_only_the_rows_it_reaches(toy):
    text = 'root ::= "[" ("\\"" "a"{0,3} "\\"" ("," "\\"" "a"{0,3} "\\""){0,18})? "]"'
    compiled, result, index = _built(text, toy)
    arrays_only = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
    engine = build_native_engine(compiled, toy, result.classes, classing=result, index=arrays_only)
    matcher = engine.matcher()
    matcher.fill_next_token_bitmask(matcher.allocate_bitmask(1))
    if engine.walker._trie is not None:  # the compiled walk (counted edges too) reads the kernel's arrays only
        assert engine.walker._rows is None
    # the Python walk (the reference, and the walk without the kernel) makes the rows it reaches
    python = StateWalker(
        compiled.gnf, result.classes, toy.token_bytes, arrays_only, displacer=engine.displacer, compiled_mask=False
    )
    assert python.class_mask(python.initial) == engine.walker.class_mask(engine.walker.initial)
    made = len(python._rows._rows)
    assert 0 < made < index.num_nodes, (made, index.num_nodes)
