# C twin: csrc/expand.c (expansion_tables: tests/test_native_kernel.py; docs/design.md)
"""The tables that expand a class set to a packed vocabulary row without a 128k-entry gather.

Shared by the numpy backend (:mod:`.cpu`), the compiled kernel's ``expand_row``
(``csrc/expand.c``) and the native engine's row cache (:mod:`cfgzip_lab.native.rows`):

- :func:`union_tables`: the large classes four at a time, each group a table of all 16 unions
  of their packed rows, so their part of a row is one lookup and one OR per group;
- :func:`pair_lists`: every other class as (word, OR of its bits in that word) pairs, so its
  part is one OR (or AND NOT) per word it touches, plus the OR of all those bits.

Rows are XGrammar's packed int32 layout; bits past the vocabulary stay 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CompiledExpansion", "PairLists", "compiled_tables", "largest_classes", "pair_lists", "union_tables"]


def largest_classes(class_of: np.ndarray, num_classes: int, *, most: int, min_tokens: int) -> np.ndarray:
    """Up to ``most`` classes with at least ``min_tokens`` tokens, largest first (ties by id)."""
    sizes = np.bincount(class_of, minlength=num_classes)
    largest = np.argsort(-sizes, kind="stable")[:most]
    return largest[sizes[largest] >= min_tokens]


def union_tables(class_of: np.ndarray, large: np.ndarray, vocab_words: int) -> tuple[np.ndarray, np.ndarray]:
    """``(members (G, 4) int32, tables (G, 16, W) int32)``: row ``tables[g, code]`` is the OR of the
    packed rows of the members of group ``g`` whose bit is set in ``code``. A short last group
    repeats its last class (a union with itself is itself)."""
    groups = -(-large.size // 4)
    members = np.concatenate([large, np.repeat(large[-1:], groups * 4 - large.size)]).astype(np.int32)
    tables = np.zeros((groups, 16, vocab_words), dtype=np.int32)
    bits = np.zeros(vocab_words * 32, dtype=bool)
    for g in range(groups):
        rows = []  # the four members' packed rows, each compared once (not once per code)
        for member in members[4 * g : 4 * g + 4].tolist():
            bits[: class_of.size] = class_of == member
            rows.append(np.packbits(bits, bitorder="little").view(np.int32))
        for code in range(1, 16):
            low = (code & -code).bit_length() - 1
            tables[g, code] = tables[g, code & (code - 1)] | rows[low]
    return members.reshape(groups, 4), tables


@dataclass(frozen=True)
class PairLists:
    """Class ``k``'s pairs are ``words/bits[indptr[k]:indptr[k + 1]]`` (none for a class in the tables)."""

    indptr: np.ndarray  # int32 (K + 1,)
    words: np.ndarray  # int32 (P,)
    bits: np.ndarray  # int32 (P,)
    all_bits: np.ndarray  # int32 (W,): every listed class's tokens


def pair_lists(class_of: np.ndarray, in_tables: np.ndarray, vocab_words: int) -> PairLists:
    """The (word, bits) pairs of every class not in the union tables (``in_tables[k]`` false)."""
    num_classes = in_tables.size
    pos = np.flatnonzero(~in_tables[class_of])
    cls = class_of[pos].astype(np.int64)
    order = np.lexsort((pos, cls))
    pos, cls = pos[order], cls[order]
    key = cls * vocab_words + (pos >> 5)
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=np.int64)
    bits = np.left_shift(np.uint64(1), (pos & 31).astype(np.uint64))
    pair_bits = np.bitwise_or.reduceat(bits, starts) if key.size else np.zeros(0, dtype=np.uint64)
    indptr = np.zeros(num_classes + 1, dtype=np.int64)
    np.cumsum(np.bincount(cls[starts], minlength=num_classes), out=indptr[1:])
    listed = np.zeros(vocab_words * 32, dtype=bool)
    listed[pos] = True
    return PairLists(
        indptr=indptr.astype(np.int32),
        words=(pos[starts] >> 5).astype(np.int32),
        bits=pair_bits.astype(np.uint32).view(np.int32),
        all_bits=np.packbits(listed, bitorder="little").view(np.int32),
    )


def compiled_tables(
    kernel,
    class_of: np.ndarray | None,
    num_classes: int,
    *,
    most: int,
    min_tokens: int,
    vocab_words: int,
    lazy: bool = False,
    defer: np.ndarray | None = None,
    listed: np.ndarray | None = None,
    listed_classes: np.ndarray | None = None,
    vocab_size: int = -1,
) -> tuple[np.ndarray, np.ndarray, PairLists] | tuple[np.ndarray, np.ndarray, PairLists, np.ndarray]:
    """``(members, tables, pairs)`` as :func:`largest_classes`, :func:`union_tables` and
    :func:`pair_lists` give them, built by the compiled kernel (``csrc/expand.c``, ``expansion_tables``)
    in one pass over ``class_of`` that lists the ids outside its largest class, then passes over that list
    (read-only arrays; ``tests/test_native_kernel.py`` checks them equal). Measured with Llama-3 on the
    median MaskBench schemas' partitions (~300 classes, ~21k ids outside the largest): ~0.23 ms a call
    (0.57 before the list, ~1.1 ms for the numpy functions: a bincount, a comparison per large class, a
    lexsort of the rest).

    ``defer`` (lazy only; bool per class): large classes whose own rows are left unwritten too,
    made from ``class_of`` by the first expand that needs one (:class:`CompiledExpansion` given
    ``class_of``): the native engine's BLOCKED class, in no state's class set.

    ``listed`` (int32, ascending): every id whose class is not 0, where the caller knows them: ``class_of``
    is read at those ids alone, not scanned; the same tables (each id checked, ValueError for ids the
    map contradicts). With ``listed_classes`` (their classes) and ``vocab_size`` instead of ``class_of``
    (None): a sparse map (:meth:`cfgzip_lab.classes.classing.TokenClasses.sparse_map`), never made."""
    co = None if class_of is None else np.ascontiguousarray(class_of, dtype=np.int32)
    args = (co, int(num_classes), int(most), int(min_tokens), int(vocab_words), bool(lazy))
    if defer is not None or listed is not None:
        args += (None if defer is None else np.ascontiguousarray(defer, dtype=np.uint8),)
    if listed is not None:
        args += (np.ascontiguousarray(listed, dtype=np.int32),)
    if listed_classes is not None:
        args += (np.ascontiguousarray(listed_classes, dtype=np.int32), int(vocab_size))
    got = kernel.expansion_tables(*args)
    groups, tables, indptr, words, bits, all_bits = got[:6]
    i32 = np.int32
    pairs = PairLists(
        indptr=np.frombuffer(indptr, dtype=i32),
        words=np.frombuffer(words, dtype=i32),
        bits=np.frombuffer(bits, dtype=i32),
        all_bits=np.frombuffer(all_bits, dtype=i32),
    )
    members = np.frombuffer(groups, dtype=i32).reshape(-1, 4)
    table_rows = np.frombuffer(tables, dtype=i32).reshape(members.shape[0], 16, vocab_words)
    if lazy:  # the union rows of 2+ members made by expand_row on first use; `built` says which are
        return members, table_rows, pairs, np.frombuffer(got[6], dtype=np.uint8)
    return members, table_rows, pairs


class CompiledExpansion:
    """``expand_row`` of the compiled kernel over one set of tables: class set → packed row.

    ``members``/``tables`` from :func:`union_tables` (any large classes, none included), the
    pair lists of the rest; the kernel reads them, and writes only the union rows a lazy build
    (``built``) left for it, and the deferred single rows, from ``class_of`` (held, read-only to the
    kernel). About 20 µs a Llama-3 row.
    """

    def __init__(
        self,
        kernel,
        members: np.ndarray,
        tables: np.ndarray,
        pairs: PairLists,
        built: np.ndarray | None = None,
        class_of: np.ndarray | None = None,
    ) -> None:
        self.kernel = kernel
        self.members = np.ascontiguousarray(members, dtype=np.int32).reshape(-1)
        self.tables = np.ascontiguousarray(tables, dtype=np.int32)
        self.pairs = pairs
        self.vocab_words = pairs.all_bits.size
        self.built = built  # compiled_tables(..., lazy=True)'s: expand_row completes the tables as it goes
        self.class_of = None if class_of is None else np.ascontiguousarray(class_of, dtype=np.int32)

    def expand(self, class_set: bytes | np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``class_set``: little-endian bytes (bit k = class k) or a packed int32 class row."""
        if out is None:
            out = np.empty(self.vocab_words, dtype=np.int32)
        p = self.pairs
        self.kernel.expand_row(
            class_set, self.members, self.tables, p.indptr, p.words, p.bits, p.all_bits, out, self.built, self.class_of
        )
        return out

    def nearest(self, ring: int = 16) -> NearestRows:
        """A :class:`NearestRows` over these tables: rows made from the last ``ring`` rows where cheaper."""
        return NearestRows(self, ring)


class NearestRows:
    """``expand_near`` of the compiled kernel: each new class set's row made from the nearest of the
    last ``ring`` rows made (their row XOR the rows of the classes the two sets do not share; exact, the
    classes being disjoint), or expanded from scratch where that is cheaper.

    Why: decoding meets class sets a few tokens apart that differ in a handful of classes, where a row
    from scratch sets every small class's (word, bits) pairs (c_like with Llama-3: ~6,000 pairs behind a
    branch per class, ~20 µs; a near row's XOR of ~100 pairs and one 16 KB copy, a few µs).
    ``expand`` gives :meth:`CompiledExpansion.expand`'s row, bit for bit (tested against it). The kernel
    holds the tables' buffers and the ring (``ring`` rows) for this object's life: one call per row.
    """

    def __init__(self, expansion: CompiledExpansion, ring: int = 16) -> None:
        self.expansion = expansion
        p = expansion.pairs
        k = p.indptr.size - 1
        self.set_bytes = 8 * max(1, -(-k // 64))
        groups = expansion.members.reshape(-1, 4)
        large_slot = np.full(k, -1, dtype=np.int32)
        for g in range(groups.shape[0] - 1, -1, -1):  # a short group's repeated class: its first member's row
            for j in range(3, -1, -1):
                large_slot[groups[g, j]] = g * 16 + (1 << j)
        bits = np.zeros(self.set_bytes * 8, dtype=bool)
        bits[:k] = large_slot >= 0
        self._capsule = expansion.kernel.near_rows_new(
            expansion.members, expansion.tables, p.indptr, p.words, p.bits, p.all_bits, expansion.built,
            expansion.class_of, np.packbits(bits, bitorder="little").tobytes(), large_slot, ring,
            expansion.vocab_words,
        )  # fmt: skip
        self._expand_near = expansion.kernel.expand_near

    def expand(self, class_set: int) -> np.ndarray:
        """The packed vocabulary row of ``class_set`` (bit k = class k), a new array."""
        out = np.empty(self.expansion.vocab_words, dtype=np.int32)
        self._expand_near(self._capsule, class_set.to_bytes(self.set_bytes, "little"), out)
        return out

    @property
    def near(self) -> int:
        """Rows made from a ring entry (by this object or a filler sharing its ring)."""
        return self.stats()[0]

    def stats(self) -> tuple[int, int, int]:
        """(rows made near, rows made from scratch, classes XORed into the near ones)."""
        return self.expansion.kernel.near_rows_stats(self._capsule)
