"""The compiled trie walk over counted repetitions' ``IN(f, lo, hi)`` edges (csrc/trie.c, issue 33).

A counted-repetition schema's state masks were walked in Python (``StateWalker._product``), 50-1,800
µs for a new state on MaskBench; the C walk now follows those edges too. The Python walk stays the
reference: here every state met along MaskBench instances of counted schemas, and along random
walks of toy counted grammars, gets the same class set from both, and the kernel refuses family
arrays that do not fit its trie.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernel_tools import llama3_or_skip
from paths import maskbench_row
from test_native_index_rows import COUNTED, TOKENS
from test_native_kernel import _mask_states, _python_mask, needs_kernel

from cfgzip_lab.grammar.counted import FAMILY_BASE, family_symbol
from cfgzip_lab.native import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

COUNTED_FILES = ["Github_medium---o6271.json", "Github_medium---o82676.json", "Snowplow---sp_405_Normalized.json"]
"""MaskBench files whose tries have counted-repetition edges (the 100-file sample's slowest masks before)."""


def _full_mask(walker, state: int) -> int:
    """The Python walk's whole class set: the trie product, the stop bit and the unindexed classes."""
    got = _python_mask(walker, state)
    for k, data, rep in walker._unindexed:
        if walker._run(state, data, walker.limits.token_budget, token_id=rep)[0] != -1:
            got |= 1 << k
    return got


@needs_kernel
@pytest.mark.parametrize("text", COUNTED)
def test_compiled_walk_follows_counted_edges_as_the_python_walk(text):
    stop, special = len(TOKENS) - 2, len(TOKENS) - 1
    vocab = vocab_from_bytes(TOKENS, stop_ids=[stop], special_ids=[special], name="families-toy")
    compiled = compile_grammar(text, counted_threshold=0)
    result = build_classes(compiled, vocab)
    engine = build_native_engine(compiled, vocab, result.classes, classing=result)
    walker = engine.walker
    assert walker.index.has_family_edges and walker._trie is not None, "the counted trie must be walked in C"
    docs = ['"' + "ab" * 9 + '"', "a" * 22, "a0" * 11, "[" + ",".join(['"aa"'] * 19) + "]"]
    checked = 0
    for state in _mask_states(engine, vocab, docs, walks=20, seed=3):
        assert walker.class_mask(state) == _full_mask(walker, state), state
        checked += 1
    assert checked > 100


@needs_kernel
@pytest.mark.slow
@pytest.mark.parametrize("name", COUNTED_FILES)
def test_compiled_walk_gives_the_python_walks_masks_on_maskbench(name):
    """Every state along the file's instances (as MaskBench replays them) and random walks from them."""
    import cfgzip_lab as cz

    row = maskbench_row(name)
    vocab = llama3_or_skip()
    matcher = cz.matcher_for(json.dumps(row["schema"]), vocab, kind="json_schema", cache=False)
    walker = matcher.walker
    assert walker.index.has_family_edges and walker._trie is not None
    docs = [json.dumps(t["data"], indent=None, ensure_ascii=False) for t in row["tests"]]
    checked = 0
    for state in _mask_states(matcher.engine, vocab, docs, walks=6, seed=1):
        assert walker.class_mask(state) == _full_mask(walker, state), state
        checked += 1
    assert checked > 50


@needs_kernel
def test_trie_kernel_walks_members_into_intervals_and_refuses_bad_family_arrays():
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.grammar.counted import _C_BITS

    i32, i64, u64 = np.int32, np.int64, np.uint64
    # root --IN(f=2, 1, 3)--> 1 --[5]--> 2, classes {3} at 1, {7} at 2; root --IN(2, 9, 9)--> 3, class {9}
    good = dict(fptr=[0, 2, 2, 2, 2], fedges=[2, 1, 3, 1, 2, 9, 9, 3])

    def trie(**kw):
        a = {**good, **kw}
        return _kernel.trie_new(
            np.array([0, 0, 1, 1, 1], i32), np.array([5], i32), np.array([2], i32), np.array([-1] * 4, i32),
            np.array([], u64), np.array([0, 0, 1, 2, 3], i32), np.array([3, 7, 9], i32), 1,
            np.array(a["fptr"], i32), np.array(a["fedges"], i64), FAMILY_BASE, _C_BITS,
        )  # fmt: skip

    t = trie()
    out = np.zeros(1, u64)
    f1, f2, f4, f9 = (family_symbol(2, c) for c in (1, 2, 4, 9))
    # state 2 = {F_1 [5], F_2 [5], F_4 [5]}: F_1 and F_2 reach (node 3, trie node 1) twice, F_4 no interval
    nodes = [(False, ()), (True, ()), (False, ((f1, 3), (f2, 3), (f4, 3))), (False, ((5, 1),))]
    _kernel.trie_mask(t, nodes, 2, out)
    assert int(out[0]) == (1 << 3) | (1 << 7)
    nodes[2] = (False, ((f4, 3), (f9, 1)))  # F_9: the other edge, a leaf
    _kernel.trie_mask(t, nodes, 2, out)
    assert int(out[0]) == 1 << 9
    nodes[2] = (False, ((family_symbol(1, 2), 3),))  # another family: nothing
    _kernel.trie_mask(t, nodes, 2, out)
    assert int(out[0]) == 0
    bad_arrays = (
        dict(fptr=[0, 2, 2, 2]),  # too short
        dict(fptr=[0, 3, 2, 2, 2]),  # out of order
        dict(fedges=[2, 1, 3, 1]),  # fewer rows than fptr says
        dict(fedges=[2, 3, 1, 1, 2, 9, 9, 3]),  # lo > hi
        dict(fedges=[2, 1, 3, 4, 2, 9, 9, 3]),  # a child past the trie
        dict(fedges=[2, 1, 3, 0, 2, 9, 9, 3]),  # the root as a child
    )
    for bad in bad_arrays:
        with pytest.raises(ValueError, match="do not fit"):
            trie(**bad)
