"""The native engine's compiled expansion kernel (``csrc/expand.c``, ``csrc/trie.c``) against its numpy path.

The kernel is optional: where it is not built the engine uses the numpy path, which is what these
tests compare it with, bit for bit (and both with a plain gather), on real partitions of Llama-3's
vocabulary and on native walks over a bundled grammar.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from kernel_tools import gathered_mask, llama3_or_skip

from cfgzip_lab.classes.classing import TokenClasses
from cfgzip_lab.expand import Expander
from cfgzip_lab.native.rows import RowCache, kernel_available

REPO = Path(__file__).resolve().parents[1]
CAN_BUILD = (
    shutil.which(os.environ.get("CC", "cc")) is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()
)
needs_kernel = pytest.mark.skipif(not kernel_available(), reason="the compiled kernel is not built here")


def test_setup_builds_the_kernel_where_a_compiler_is():
    """scripts/setup.sh (pip install -e .) compiles it in place; only a machine without gcc or Python's
    headers, or CFGZIP_NATIVE_KERNEL=0, goes without."""
    if not CAN_BUILD or os.environ.get("CFGZIP_NATIVE_KERNEL") == "0":
        pytest.skip("no C compiler or Python headers, or the kernel is switched off")
    assert kernel_available()


def _partitions(vocab):
    """Three real shapes: a few huge classes, many singletons, and a mix (tokens by id modulo 97
    after the first 3,000)."""
    ids = np.arange(vocab.vocab_size)
    yield np.minimum(ids // 20_000, 6)  # 7 classes of up to 20k tokens
    yield np.where(ids < 20_000, ids, 20_000)  # 20,000 singletons and one class of the rest
    yield np.where(ids < 3_000, ids, 3_000 + ids % 97)


@needs_kernel
def test_kernel_rows_equal_the_numpy_path_and_thegathered_mask():
    vocab = llama3_or_skip()
    rng = np.random.default_rng(0)
    for class_of in _partitions(vocab):
        k = int(class_of.max()) + 1
        _, reps = np.unique(class_of, return_index=True)
        classes = TokenClasses(class_of.astype(np.int32), reps.astype(np.int32), np.zeros(k, dtype=np.uint8))
        expander = Expander(classes)
        compiled = RowCache(expander, classes.class_of, compiled=True)
        numpy_path = RowCache(expander, classes.class_of, compiled=False)
        full = (1 << k) - 1
        sets = [0, full, 1, 1 << (k - 1)]
        for density in (0.02, 0.3, 0.5, 0.7, 0.98):  # both sides of the kernel's complement switch
            for _ in range(6):
                bits = rng.random(k) < density
                sets.append(int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little"))
        for s in sets:
            want = gathered_mask(class_of, k, s)
            assert np.array_equal(compiled.vocab_row(s), want)
            assert np.array_equal(numpy_path.vocab_row(s), want)
        assert compiled.misses == len(set(sets))


def _reference_tables(class_of, k, most, min_tokens, words):
    from cfgzip_lab.kernels.union_tables import largest_classes, pair_lists, union_tables

    class_of = np.asarray(class_of, dtype=np.int64)
    large = largest_classes(class_of, k, most=most, min_tokens=min_tokens)
    members, tables = union_tables(class_of, large, words)
    in_tables = np.zeros(k, dtype=bool)
    in_tables[large] = True
    return members, tables, pair_lists(class_of, in_tables, words)


@needs_kernel
@pytest.mark.parametrize("most, min_tokens", [(64, 256), (5, 1), (3, 0), (0, 1)])
def test_kernel_expansion_tables_equal_the_numpy_ones(most, min_tokens):
    """_kernel.expansion_tables builds what largest_classes, union_tables and pair_lists build (ties of
    size by id, a short last group repeating its class, empty classes), array for array, on real-sized
    partitions of Llama-3's ids and on small odd ones."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import compiled_tables

    rng = np.random.default_rng(1)
    shapes = list(_partitions(llama3_or_skip()))
    shapes += [rng.integers(0, 7, size=n) for n in (1, 31, 33, 100)]
    shapes += [np.repeat(np.arange(9), [5, 5, 3, 3, 3, 7, 1, 1, 5])]  # ties
    shapes += [np.array([0, 2, 2, 4])]  # empty classes 1 and 3 (k = 6 below)
    # One class holding most ids, as a small grammar's BLOCKED class (the kernel's one-pass path reads
    # the other ids from a list); and one that the 64 evenly spaced ids it guesses from never meet.
    dominant = np.full(20_000, 3)
    dominant[rng.choice(20_000, 900, replace=False)] = rng.integers(0, 9, size=900)
    hidden = np.full(4096, 1)
    hidden[::64] = 2
    hidden[5::64] = 0
    # No class holding most ids, at Llama-3's size: every id is listed by the first pass and read from that list
    # (fill_rows once each, branch-free; fill_pairs the small classes' alone)
    spread = rng.choice(60, size=128_256, p=np.r_[np.full(10, 0.08), np.full(50, 0.2 / 50)]).astype(np.int64)
    shapes += [dominant, hidden, spread]
    for class_of in shapes:
        k = int(class_of.max()) + 2
        words = -(-class_of.size // 32)
        want_members, want_tables, want_pairs = _reference_tables(class_of, k, most, min_tokens, words)
        members, tables, pairs = compiled_tables(
            _kernel, class_of, k, most=most, min_tokens=min_tokens, vocab_words=words
        )
        assert np.array_equal(members, want_members) and members.dtype == np.int32
        assert np.array_equal(tables, want_tables) and tables.shape == want_tables.shape
        for name in ("indptr", "words", "bits", "all_bits"):
            assert np.array_equal(getattr(pairs, name), getattr(want_pairs, name)), name
    with pytest.raises(ValueError, match="outside"):
        _kernel.expansion_tables(np.array([0, 3], np.int32), 3, 64, 1, 1)
    for bad in (9, -1):  # at an id the guess does not read, in a class_of of one class elsewhere
        class_of = np.zeros(5000, np.int32)
        class_of[4321] = bad
        with pytest.raises(ValueError, match="outside"):
            _kernel.expansion_tables(class_of, 9, 64, 1, 157)
    with pytest.raises(ValueError, match="does not fit"):
        _kernel.expansion_tables(np.zeros(33, np.int32), 1, 64, 1, 1)


@needs_kernel
def test_expansion_tables_from_the_ids_outside_class_0_equal_the_scan():
    """Given the ids outside class 0 (as classing's short numbering lists them), expansion_tables reads
    class_of there alone: the same tables as its scan, for small grammars' shapes and a lazy build with
    a deferred row; a list the map contradicts (an id of class 0, out of order, past the map) raises."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import compiled_tables

    rng = np.random.default_rng(4)
    shapes = []
    for size, live, k in ((128_256, 15, 14), (128_256, 480, 29), (20_000, 900, 9), (4096, 0, 2), (33, 3, 4)):
        class_of = np.zeros(size, np.int32)
        ids = rng.choice(size, live, replace=False)
        class_of[ids] = rng.integers(1, k, size=live)
        shapes.append((class_of, k))

    def from_sparse(class_of, k, listed, **options):
        # a sparse map: no class_of at all, the listed ids' classes given (TokenClasses.from_sparse)
        words = -(-class_of.size // 32)
        return compiled_tables(
            _kernel,
            None,
            k,
            most=64,
            min_tokens=256,
            vocab_words=words,
            listed=listed,
            listed_classes=class_of[listed],
            vocab_size=class_of.size,
            **options,
        )

    for class_of, k in shapes:
        words = -(-class_of.size // 32)
        listed = np.flatnonzero(class_of).astype(np.int32)
        for options in ({}, {"lazy": True, "defer": np.arange(k) == 0}):
            want = compiled_tables(_kernel, class_of, k, most=64, min_tokens=256, vocab_words=words, **options)
            got = compiled_tables(
                _kernel, class_of, k, most=64, min_tokens=256, vocab_words=words, listed=listed, **options
            )
            sparse_options = {**options, "defer": None} if options else {}
            sparse = from_sparse(class_of, k, listed, **sparse_options)
            undeferred = (
                compiled_tables(_kernel, class_of, k, most=64, min_tokens=256, vocab_words=words, **sparse_options)
                if options
                else want
            )
            for reference, tables in ((want, got), (undeferred, sparse)):
                assert np.array_equal(reference[0], tables[0])  # the groups of large classes
                for name in ("indptr", "words", "bits", "all_bits"):
                    assert np.array_equal(getattr(reference[2], name), getattr(tables[2], name)), name
                if options:  # lazy: the rows made (the others are left unwritten, to expand_row)
                    assert np.array_equal(reference[3], tables[3])
                    made = reference[3].reshape(reference[1].shape[:2]).astype(bool)
                    assert np.array_equal(reference[1][made], tables[1][made])
                else:
                    assert np.array_equal(reference[1], tables[1])
    class_of, k = shapes[1]
    listed = np.flatnonzero(class_of).astype(np.int32)
    words = -(-class_of.size // 32)
    for bad in (np.r_[listed, 0], listed[::-1], np.r_[listed, class_of.size], np.r_[0, listed]):
        bad = np.unique(bad) if bad is not listed[::-1] else bad
        if np.array_equal(bad, listed):
            continue
        with pytest.raises(ValueError, match="listed ids"):
            compiled_tables(
                _kernel, class_of, k, most=64, min_tokens=256, vocab_words=words, listed=bad.astype(np.int32)
            )
    wrong = class_of.copy()
    wrong[listed[3]] = k + 2
    with pytest.raises(ValueError, match="outside"):
        compiled_tables(_kernel, wrong, k, most=64, min_tokens=256, vocab_words=words, listed=listed)
    with pytest.raises(ValueError, match="outside"):
        from_sparse(wrong, k, listed)
    with pytest.raises(ValueError, match="listed and listed_classes"):
        _kernel.expansion_tables(None, k, 64, 256, words, False, None, listed, None, class_of.size)


@needs_kernel
def test_lazy_union_rows_are_the_eager_ones():
    """expansion_tables(..., lazy=True) leaves the unions of two or more large classes to expand_row,
    which makes each when a class set first needs it: the same rows as the eager tables (once made),
    the same packed vocabulary rows for every class set, and unions no set needed never written."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import CompiledExpansion, compiled_tables

    rng = np.random.default_rng(2)
    vocab = llama3_or_skip()
    for class_of in list(_partitions(vocab))[:2] + [rng.integers(0, 40, size=5000)]:
        k = int(class_of.max()) + 1
        words = -(-class_of.size // 32)
        members, tables, pairs = compiled_tables(_kernel, class_of, k, most=64, min_tokens=1, vocab_words=words)
        lm, lt, lp, built = compiled_tables(_kernel, class_of, k, most=64, min_tokens=1, vocab_words=words, lazy=True)
        assert np.array_equal(lm, members) and lt.shape == tables.shape and lt.flags.writeable
        singles = [c for c in range(16) if c and not c & (c - 1)]
        assert np.array_equal(lt[:, singles], tables[:, singles])
        assert built.reshape(-1, 16)[:, singles].all() and not built.reshape(-1, 16)[:, [3, 5, 15]].any()
        eager, lazy = CompiledExpansion(_kernel, members, tables, pairs), CompiledExpansion(_kernel, lm, lt, lp, built)
        sets = [(1 << k) - 1, 1, 0] + [
            int.from_bytes(np.packbits(rng.random(k) < d, bitorder="little").tobytes(), "little")
            for d in (0.05, 0.3, 0.6, 0.95)
            for _ in range(4)
        ]
        nbytes = -(-k // 8)
        for s in sets:
            assert np.array_equal(lazy.expand(s.to_bytes(nbytes, "little")), eager.expand(s.to_bytes(nbytes, "little")))
        made = built.reshape(-1, 16).astype(bool)
        assert np.array_equal(lt[made], tables[made]) and not made.all() or k <= 4
    with pytest.raises(ValueError, match="do not fit"):  # `built` of another size
        _kernel.expand_row(b"\x01", members, tables.copy(), pairs.indptr, pairs.words, pairs.bits, pairs.all_bits,
                           np.zeros(words, np.int32), bytearray(3))  # fmt: skip
    with pytest.raises(ValueError, match="read-only"):  # lazy needs writable tables
        _kernel.expand_row(b"\x01", members, tables, pairs.indptr, pairs.words, pairs.bits, pairs.all_bits,
                           np.zeros(words, np.int32), built)  # fmt: skip


@needs_kernel
def test_deferred_single_rows_are_made_from_class_of_when_needed():
    """expansion_tables(..., lazy=True, defer=...) leaves the deferred large classes' own rows (and a
    short last group's copies of one) unwritten, row 0 too; expand_row makes one from class_of when a
    class set first holds the class: every class set's row is the eager tables' row, and a deferred
    row no set needed is never written (the native engine defers its BLOCKED class)."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import CompiledExpansion, compiled_tables

    rng = np.random.default_rng(3)
    vocab = llama3_or_skip()
    shapes = list(_partitions(vocab))[:2] + [
        rng.integers(0, 40, size=5000),
        np.repeat([0, 1, 2, 3, 4], [90, 5, 3, 1, 1]),
    ]
    for class_of in shapes:
        class_of = np.ascontiguousarray(class_of, dtype=np.int32)
        k = int(class_of.max()) + 1
        words = -(-class_of.size // 32)
        for most in (64, 5, 1):
            members, tables, pairs = compiled_tables(_kernel, class_of, k, most=most, min_tokens=1, vocab_words=words)
            defer = np.zeros(k, dtype=bool)
            defer[np.unique(members)[::2]] = True  # every other large class, the largest (0 above) among them
            defer[rng.integers(0, k)] = True  # and maybe a small class (no row to defer)
            lm, lt, lp, built = compiled_tables(
                _kernel, class_of, k, most=most, min_tokens=1, vocab_words=words, lazy=True, defer=defer
            )
            assert np.array_equal(lm, members)
            for name in ("indptr", "words", "bits", "all_bits"):
                assert np.array_equal(getattr(lp, name), getattr(pairs, name)), name
            b = built.reshape(-1, 16).astype(bool)
            singles = [c for c in range(16) if c and not c & (c - 1)]
            member_of = members.reshape(-1, 4)
            for g in range(b.shape[0]):
                for j, code in enumerate(singles):
                    assert b[g, code] == (not defer[member_of[g, j]])
            assert not b[:, 0].any()
            eager = CompiledExpansion(_kernel, members, tables, pairs)
            lazy = CompiledExpansion(_kernel, lm, lt, lp, built, class_of)
            nbytes = -(-k // 8)
            sets = [0, 1, (1 << k) - 1] + [
                int.from_bytes(np.packbits(rng.random(k) < d, bitorder="little").tobytes(), "little")
                for d in (0.05, 0.3, 0.6, 0.95)
                for _ in range(3)
            ]
            no_deferred = int.from_bytes(np.packbits(~defer, bitorder="little").tobytes(), "little")
            for s in [s & no_deferred for s in sets] + sets:
                got = lazy.expand(s.to_bytes(nbytes, "little"))
                assert np.array_equal(got, eager.expand(s.to_bytes(nbytes, "little")))
            made = built.reshape(-1, 16).astype(bool)
            assert np.array_equal(lt[made], tables[made])
    # a deferred row needed without class_of is refused; defer needs lazy and one flag per class
    class_of = np.repeat(np.arange(3, dtype=np.int32), [40, 20, 4])
    defer = np.array([1, 0, 0], np.uint8)
    lm, lt, lp, built = compiled_tables(
        _kernel, class_of, 3, most=2, min_tokens=1, vocab_words=2, lazy=True, defer=defer
    )
    with pytest.raises(ValueError, match="needs class_of"):
        CompiledExpansion(_kernel, lm, lt, lp, built).expand(b"\x01")
    assert CompiledExpansion(_kernel, lm, lt, lp, built).expand(b"\x02")[1] == (1 << 28) - (1 << 8)
    with pytest.raises(ValueError, match="defer"):
        _kernel.expansion_tables(class_of, 3, 2, 1, 2, False, defer)
    with pytest.raises(ValueError, match="defer"):
        _kernel.expansion_tables(class_of, 3, 2, 1, 2, True, defer[:2])


@needs_kernel
def test_kernel_refuses_tables_that_do_not_fit():
    from cfgzip_lab._binding import kernel as _kernel

    row = np.zeros(4, dtype=np.int32)
    empty = np.zeros(0, dtype=np.int32)
    indptr = np.zeros(2, dtype=np.int32)
    with pytest.raises(ValueError, match="do not fit"):  # small_all has 3 words, the row 4
        _kernel.expand_row(b"\x01", empty, empty, indptr, empty, empty, np.zeros(3, np.int32), row)
    with pytest.raises(ValueError, match="do not fit"):  # one group needs 16 table rows
        _kernel.expand_row(b"\x01", np.zeros(4, np.int32), empty, indptr, empty, empty, np.zeros(4, np.int32), row)
    with pytest.raises(TypeError):
        _kernel.expand_row(b"\x01", empty)


@needs_kernel
@pytest.mark.slow
def test_native_masks_and_states_are_the_same_with_and_without_the_kernel():
    """Random native walks over bython with Llama-3 (rollbacks included): every step's full-vocabulary
    mask from the compiled rows equals the numpy path's and a plain gather of the walk's class set;
    both engines walk the same states (the walk is shared Python code, the states compared anyway)."""
    from cfgzip_lab.bundled import bundled_grammars
    from cfgzip_lab.classes.classing import NORMAL
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    vocab = llama3_or_skip()
    compiled = compile_grammar(bundled_grammars()["bython"].read_text(encoding="utf-8"))
    result = build_classes(compiled, vocab)
    engine = build_native_engine(compiled, vocab, result.classes, classing=result)
    assert engine.rows.compiled and engine.stats()["compiled_rows"]
    reference = RowCache(engine.expander, result.classes.class_of, compiled=False)
    class_of = np.asarray(result.classes.class_of)
    k = result.classes.num_classes
    rng = np.random.default_rng(1)
    steps = 0
    for _ in range(6):
        m = engine.matcher()
        for _ in range(60):
            class_set = m.class_set()
            row = m.next_vocab_bitmask().numpy()
            assert np.array_equal(row, reference.vocab_row(class_set))
            assert np.array_equal(row, gathered_mask(class_of, k, class_set))
            steps += 1
            allowed = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])
            normal = [int(t) for t in allowed if result.classes.class_kind[class_of[t]] == NORMAL]
            if not normal:
                break
            before = m._history[-1]
            assert m.accept_token(int(rng.choice(normal)))
            if rng.random() < 0.15:
                m.rollback(1)
                assert m._history[-1] == before
    assert steps > 200 and engine.fallbacks == 0


def test_without_the_kernel_the_engine_uses_the_numpy_path():
    """CFGZIP_NATIVE_KERNEL=0: no kernel; the row cache still gives the gather's bits and the engine
    walks and masks in Python."""
    code = (
        "import numpy as np\n"
        "from cfgzip_lab.native.rows import RowCache, kernel_available\n"
        "from cfgzip_lab.classes.classing import TokenClasses\n"
        "from cfgzip_lab.expand import Expander\n"
        "class_of = (np.arange(1000) % 37).astype(np.int32)\n"
        "c = TokenClasses(class_of, np.arange(37, dtype=np.int32), np.zeros(37, dtype=np.uint8))\n"
        "r = RowCache(Expander(c), class_of)\n"
        "s = (1 << 3) | (1 << 36)\n"
        "want = np.packbits(np.r_[np.isin(class_of, [3, 36]), np.zeros(-1000 % 32, bool)], bitorder='little')\n"
        "assert not kernel_available() and not r.compiled\n"
        "assert np.array_equal(r.vocab_row(s), want.view(np.int32))\n"
        "from cfgzip_lab.native import build_native_engine\n"
        "from cfgzip_lab.pipeline import build_classes, compile_grammar\n"
        "from cfgzip_lab.vocab import vocab_from_bytes\n"
        "v = vocab_from_bytes([b'a', b'b', b'ab', b''], stop_ids=[3], vocab_size=4, name='t')\n"
        'g = compile_grammar(\'root ::= ("a" | "b")+\')\n'
        "res = build_classes(g, v)\n"
        "e = build_native_engine(g, v, res.classes, classing=res)\n"
        "assert e.walker._trie is None and not e.rows.compiled\n"
        "m = e.matcher()\n"
        "assert not m.is_completed() and m.accept_token(2) and m.is_completed()\n"
        "assert int(m.next_vocab_bitmask().numpy()[0]) == 0b1111  # a, b, ab and the stop token\n"
        "print('ok')\n"
    )
    env = {**os.environ, "CFGZIP_NATIVE_KERNEL": "0"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _python_mask(walker, state: int) -> int:
    return walker._product(state, 0) | (walker.stop_bit if walker.store.accepts(state) else 0)


def _mask_states(engine, vocab, docs, walks: int, seed: int):
    """States of the native matcher along sample documents and random walks (every normal token allowed)."""
    from cfgzip_lab.classes.classing import NORMAL

    rng = np.random.default_rng(seed)
    for doc in docs:
        m = engine.matcher()
        for t in vocab.encode(doc):
            yield m._history[-1]
            if not m.accept_token(t):
                break
    classes = engine.classes
    for _ in range(walks):
        m = engine.matcher()
        for _ in range(40):
            yield m._history[-1]
            allowed = [
                c for c in range(classes.num_classes) if m.class_set() >> c & 1 and classes.class_kind[c] == NORMAL
            ]
            if not allowed:
                break
            c = int(rng.choice(allowed))
            assert m.accept_token(int(classes.representatives[c]))


@needs_kernel
@pytest.mark.parametrize(
    "name", ["json", "c_like", "bython", "xml", "sql_select", "unicode", "arithmetic_left_recursive"]
)
def test_compiled_trie_walk_gives_the_python_walks_class_sets_toy(name):
    """The kernel's trie walk (trie_mask) and the memoised Python product walk give the same class set
    for every state met along the sample documents and random walks, over a byte vocabulary."""
    from cfgzip_lab.bundled import bundled_grammars, bundled_samples
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab import vocab_from_bytes

    tokens = [bytes([b]) for b in range(256)] + [b"", b"  ", b"ab", b"if", b"(\n", b"\xc3\xa9"]
    vocab = vocab_from_bytes(tokens, stop_ids=[256], vocab_size=len(tokens), name="bytes")
    compiled = compile_grammar(bundled_grammars()[name].read_text(encoding="utf-8"))
    result = build_classes(compiled, vocab)
    engine = build_native_engine(compiled, vocab, result.classes, classing=result)
    walker = engine.walker
    assert walker._trie is not None
    docs = [p.read_text(encoding="utf-8")[:300] for p in bundled_samples(name)[:2]]
    checked = 0
    for state in _mask_states(engine, vocab, docs, walks=8, seed=0):
        assert walker.class_mask(state) == _python_mask(walker, state)
        checked += 1
    assert checked > 100


@needs_kernel
@pytest.mark.slow
@pytest.mark.parametrize("name", ["bython", "c_like", "sql_select"])
def test_compiled_trie_walk_gives_the_python_walks_class_sets_llama3(name):
    """The same with Llama-3's vocabulary (tries of 29k-110k nodes) on the sample documents and random walks."""
    from cfgzip_lab.bundled import bundled_grammars, bundled_samples
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    vocab = llama3_or_skip()
    compiled = compile_grammar(bundled_grammars()[name].read_text(encoding="utf-8"))
    result = build_classes(compiled, vocab)
    engine = build_native_engine(compiled, vocab, result.classes, classing=result)
    walker = engine.walker
    docs = [p.read_text(encoding="utf-8") for p in bundled_samples(name)]
    checked = 0
    for state in _mask_states(engine, vocab, docs, walks=4, seed=1):
        assert walker.class_mask(state) == _python_mask(walker, state)
        checked += 1
    assert checked > 500


@needs_kernel
def test_trie_kernel_refuses_bad_arrays_and_bad_stores():
    from cfgzip_lab._binding import kernel as _kernel

    i32, u64 = np.int32, np.uint64
    good = dict(ptr=[0, 1, 1], syms=[5], kids=[1], di=[-1, -1], dense=[], lp=[0, 0, 2], lc=[3, 7])

    def trie(**kw):
        a = {**good, **kw}
        return _kernel.trie_new(
            np.array(a["ptr"], i32), np.array(a["syms"], i32), np.array(a["kids"], i32), np.array(a["di"], i32),
            np.array(a["dense"], u64), np.array(a["lp"], i32), np.array(a["lc"], i32), 1,
        )  # fmt: skip

    t = trie()
    out = np.zeros(1, u64)
    _kernel.trie_mask(t, [(False, ()), (True, ()), (False, ((5, 1),))], 2, out)  # the word [5]
    assert int(out[0]) == (1 << 3) | (1 << 7)
    for bad in (dict(kids=[2]), dict(lc=[3, 64]), dict(ptr=[0, 2, 1]), dict(di=[0, -1])):
        with pytest.raises(ValueError, match="do not fit"):
            trie(**bad)
    with pytest.raises(TypeError, match="word store"):
        _kernel.trie_mask(t, [(False, ()), (True, ()), "not a node"], 2, out)
    with pytest.raises(TypeError, match="word store"):
        _kernel.trie_mask(t, [(False, ())], 5, out)
    with pytest.raises(ValueError, match="wrong size"):
        _kernel.trie_mask(t, [(False, ())], 0, np.zeros(2, u64))


@needs_kernel
@pytest.mark.parametrize(
    "name, dense", [("json", 32), ("sql_select", 32), ("c_like", 32), ("xml", 1), ("bython", 10**9)]
)
def test_trie_arrays_equal_the_numpy_ones(name, dense):
    """``_kernel.trie_arrays`` (the engine's trie in one pass per array) gives what
    :meth:`SigmaInIndex.kernel_arrays` gives, array for array, on real indexes (byte vocabulary),
    with some, every and no node dense; the engine then walks the same trie."""
    from cfgzip_lab.bundled import bundled_grammars
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.native.walk import _compiled_kernel_arrays
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab import vocab_from_bytes

    tokens = [bytes([b]) for b in range(256)] + [b"", b"  ", b"ab", b"if", b"(\n", b"\xc3\xa9", b"</", b"SELECT"]
    vocab = vocab_from_bytes(tokens, stop_ids=[256], vocab_size=len(tokens), name="bytes")
    compiled = compile_grammar(bundled_grammars()[name].read_text(encoding="utf-8"))
    result = build_classes(compiled, vocab)
    index = build_native_engine(compiled, vocab, result.classes, classing=result).index
    words = max(1, -(-result.classes.num_classes // 64))
    want = index.kernel_arrays(dense, words)
    got = _compiled_kernel_arrays(index, dense, words)
    assert got is not None and index.num_nodes > 1 and set(got) == set(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key


@needs_kernel
def test_trie_arrays_refuses_bad_index_arrays():
    from cfgzip_lab._binding import kernel as _kernel

    i32, i64 = np.int32, np.int64
    edges, indptr, classes = np.array([0, 5, 1, 0, 7, 2], i32), np.array([0, 1, 1, 2], i64), np.array([3, 9], i32)
    ptr, syms, kids, di, rows, lp, lc = _kernel.trie_arrays(edges, indptr, classes, 3, 1, 1)
    assert np.frombuffer(ptr, i32).tolist() == [0, 2, 2, 2] and np.frombuffer(di, i32).tolist() == [0, -1, 1]
    assert np.frombuffer(rows, np.uint64).tolist() == [1 << 3, 1 << 9] and np.frombuffer(lp, i32).tolist() == [
        0,
        0,
        0,
        0,
    ]
    assert _kernel.trie_arrays(np.array([0, 7, 2, 0, 5, 1], i32), indptr, classes, 3, 1, 1) is None  # unsorted
    for bad in (
        (np.array([0, 5, 3], i32), indptr, classes, 3),  # a child past the nodes
        (edges, np.array([0, 1, 2], i64), classes, 3),  # indptr of another node count
        (edges, indptr, np.array([3, 64], i32), 3),  # a class past the words
        (edges, np.array([0, 2, 1, 2], i64), classes, 3),  # lists out of order
    ):
        with pytest.raises(ValueError, match="trie_arrays"):
            _kernel.trie_arrays(*bad, 1, 1)
