# C twin: csrc/expand.c (expand_row: tests/test_native_kernel.py; docs/design.md)
"""Class set (a Python int) → packed vocabulary bitmask row, memoised, and derived from the last row.

The walk gives each state's allowed classes as an int; decoding revisits the same class sets
over and over (inside identifiers, strings, whitespace), so the packed row is kept per class
set (least recently used out, bounded by bytes) and a repeated set costs one dict lookup.

A new set is usually close to the previous step's: a token moves the parser a little, and
only the classes that depend on the changed stack tops flip. So a new row is the previous
row XOR the rows of the classes that differ, when that is cheaper than expanding from
scratch: a large class (``LARGE`` tokens or more) XORs its precomputed packed row (16 KB for
Llama-3); the small ones are stored as (word, bits) pairs, gathered for all differing
classes at once and summed into words with one ``bincount`` (a class's tokens set distinct
bits, and classes are disjoint, so the sum of the bits in a word is their OR: exact in
float64 below 2^53). Otherwise (more than ``max_delta_tokens`` tokens flip, or no previous
row) :class:`cfgzip_lab.expand.Expander` expands the set (union tables for the large classes,
a scatter for the small ones). Both give the gather's bits exactly (tested against it).

Where the compiled kernel (``csrc/expand.c``, built by ``pip install -e .`` / the wheel; optional)
is importable, a new set is expanded by it instead, from scratch every time: union tables of
the 64 largest classes plus one (word, bits) pair per small class and word, set or cleared in
place, no numpy call. Measured with Llama-3 on the 200 class sets of bython's timed sample
steps, memos off, load 5 on 2 cores: 22 µs median / 28 µs p90 against 92 / 111 µs for the
numpy path above (json: 5 / 6 against 74 / 90). ``CFGZIP_NATIVE_KERNEL=0`` in the environment
keeps the numpy path (the reference the kernel is tested against).

The kernel makes a new row from the nearest of the last ``NEAR_ROWS`` rows it made where that is
cheaper (``expand_near``: that row XOR the rows of the classes the two sets do not share): from
scratch, a c_like row sets ~6,000 small-class (word, bits) pairs behind a branch per class, ~20 µs
of CPU; most new sets of a decode are within a few hundred pairs of one of the last 16. The native
matcher's ``fill_next_token_bitmask`` does not come here at all where ``NativeEngine.filler`` exists
(``csrc/fill.c``: the same rows, memoised per state and per class set in C, one call a mask).
"""

from __future__ import annotations

import math

import numpy as np

from .._binding import kernel as _kernel  # None: not built, or CFGZIP_NATIVE_KERNEL=0 (the numpy path)
from ..classes.classing import BLOCKED, CLASS_IDS_OUTSIDE, ClassesError
from ..expand import Expander
from ..kernels.union_tables import CompiledExpansion, compiled_tables

__all__ = ["RowCache", "kernel_available"]

LARGE = 2048
"""Classes with at least this many tokens keep a whole packed row for the delta path."""
UNION_CLASSES = 64
"""The compiled path's union tables: at most this many large classes, four per table of 16 rows
(4 MB for Llama-3), each with at least ``UNION_MIN_TOKENS`` tokens; the other tokens are set one
by one."""
UNION_MIN_TOKENS = 256
NEAR_ROWS = 16
"""The compiled path makes a new row from the nearest of the last this many rows where that is cheaper
than expanding it (csrc/expand.c, ``expand_near``)."""


def kernel_available() -> bool:
    """Whether the compiled expansion kernel is built and in use (``CFGZIP_NATIVE_KERNEL=0``: never)."""
    return _kernel is not None


class RowCache:
    """Packed int32 vocabulary rows (XGrammar's layout, bits past V zero) per class set."""

    def __init__(
        self,
        expander: Expander,
        class_of: np.ndarray,
        *,
        memo_bytes: int = 64 << 20,
        max_delta_tokens: int = 8192,
        compiled: bool | None = None,
        class_kind: np.ndarray | None = None,
        sparse: tuple[int, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.expander = expander
        self.num_classes = expander.num_classes
        self.class_words = math.ceil(self.num_classes / 32)
        self.class_bytes = 4 * self.class_words
        self.vocab_words = expander.vocab_bitmask_size
        self.max_delta_tokens = max_delta_tokens
        self._limit = max(16, memo_bytes // max(1, 4 * self.vocab_words))
        self._rows: dict[int, np.ndarray] = {}
        self._last: tuple[int, np.ndarray] | None = None
        self.misses = 0
        self.delta_builds = 0
        self.compiled = kernel_available() if compiled is None else compiled
        if self.compiled and _kernel is None:
            raise RuntimeError("the compiled expansion kernel (cfgzip_lab._native) is not built")
        # one of the two: the XOR-from-the-last-row tables serve only the Python path (preparing
        # both cost 0.75 ms more of a JSON Schema's ~2.8 ms engine build with Llama-3, load 2)
        if sparse is not None and not self.compiled:
            raise ValueError("a sparse class map (TokenClasses.sparse_map) is read by the compiled rows alone")
        if self.compiled:  # sparse: (vocab_size, ids outside class 0, their classes), class_of then None
            self._prepare_kernel(None if sparse is not None else np.asarray(class_of), class_kind, sparse)
        else:
            self._prepare(np.asarray(class_of, dtype=np.int64))

    def _prepare(self, class_of: np.ndarray) -> None:
        k, w = self.num_classes, self.vocab_words
        self._sizes = np.bincount(class_of, minlength=k)
        large = np.flatnonzero(self._sizes >= LARGE)
        self._is_large = np.zeros(k, dtype=bool)
        self._is_large[large] = True
        self._large_rows: dict[int, np.ndarray] = {}
        for c in large.tolist():
            bits = np.zeros(w * 32, dtype=bool)
            bits[: class_of.size] = class_of == c
            self._large_rows[c] = np.packbits(bits, bitorder="little").view(np.int32)
        # Small classes: (word, OR of bits) pairs per class, CSR by class.
        pos = np.flatnonzero(~self._is_large[class_of])
        cls = class_of[pos]
        order = np.lexsort((pos >> 5, cls))
        pos, cls = pos[order], cls[order]
        words = pos >> 5
        bits = (np.int64(1) << (pos & 31)).astype(np.float64)
        key = cls * w + words
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=np.int64)
        self._pair_words = words[starts] if key.size else np.zeros(0, dtype=np.int64)
        self._pair_bits = np.add.reduceat(bits, starts) if key.size else np.zeros(0)
        pair_cls = cls[starts] if key.size else np.zeros(0, dtype=np.int64)
        self._indptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair_cls, minlength=k), out=self._indptr[1:])

    def _prepare_kernel(
        self,
        class_of: np.ndarray | None,
        class_kind: np.ndarray | None = None,
        sparse: tuple[int, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Union tables of the largest classes and the (word, bits) pairs of the rest (see csrc/expand.c),
        built by the kernel itself (:func:`~cfgzip_lab.kernels.union_tables.compiled_tables`; the
        numpy functions are the reference)."""
        # lazy: the unions of 2+ large classes made when a row first needs one (c_like with
        # Llama-3: the tables 1.02 -> 0.93 ms to build, most of their 1.8 MB never written).
        # defer: the BLOCKED class's own row too, made from class_of if a set ever holds it (none
        # does: the walk's sets are NORMAL classes (index, unindexed) and the STOP bit). With a small
        # schema it is ~128k of Llama-3's tokens, the one large class: 16 KB not written, and with
        # row 0 and the short group's copies, 20 of the engine build's 4-KB page faults gone.
        # (a sparse map: no deferred row, which expand_row would make from a map that is never made; its
        # BLOCKED row is written with the tables, from the ids the map lists)
        defer = None if class_kind is None or sparse is not None else np.asarray(class_kind) == BLOCKED
        listed = {} if sparse is None else {"listed": sparse[1], "listed_classes": sparse[2], "vocab_size": sparse[0]}
        try:
            members, tables, pairs, built = compiled_tables(
                _kernel,
                class_of,
                self.num_classes,
                most=UNION_CLASSES,
                min_tokens=UNION_MIN_TOKENS,
                vocab_words=self.vocab_words,
                lazy=True,
                defer=defer,
                **listed,
            )
        except ValueError as exc:  # the tables' check of every id, as TokenClasses.validate words it
            if "outside [0, num_classes)" not in str(exc):
                raise
            raise ClassesError(CLASS_IDS_OUTSIDE.format(k=self.num_classes)) from None
        self._compiled = CompiledExpansion(
            _kernel, members, tables, pairs, built, class_of if built is not None else None
        )
        self._near = self._compiled.nearest(NEAR_ROWS)

    def _expand_compiled(self, class_set: int) -> np.ndarray:
        return self._near.expand(class_set)

    def class_row(self, class_set: int) -> np.ndarray:
        """The class set as XGrammar's packed int32 class bitmask ``(ceil(K/32),)``."""
        return np.frombuffer(bytearray(class_set.to_bytes(self.class_bytes, "little")), dtype=np.int32)

    def _ids(self, class_set: int) -> np.ndarray:
        raw = np.frombuffer(class_set.to_bytes(self.class_bytes, "little"), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little"))

    def _from_last(self, class_set: int) -> np.ndarray | None:
        """``class_set``'s row from the last row by XOR of the differing classes; None if too costly."""
        if self._last is None:
            return None
        last_set, last_row = self._last
        delta = class_set ^ last_set
        if delta.bit_count() * 8 > self.num_classes:  # far apart: expanding is cheaper
            return None
        ids = self._ids(delta)
        large = ids[self._is_large[ids]]
        small = ids[~self._is_large[ids]]
        if int(self._sizes[small].sum()) > self.max_delta_tokens:
            return None
        row = last_row.copy()
        for c in large.tolist():
            row ^= self._large_rows[c]
        if small.size:
            starts = self._indptr[small]
            lengths = self._indptr[small + 1] - starts
            total = int(lengths.sum())
            if total:
                offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)
                flips = np.bincount(
                    self._pair_words[offsets], weights=self._pair_bits[offsets], minlength=self.vocab_words
                )
                row ^= flips.astype(np.uint32).view(np.int32)
        self.delta_builds += 1
        return row

    def vocab_row(self, class_set: int) -> np.ndarray:
        """Read-only packed vocabulary row for ``class_set``."""
        rows = self._rows
        got = rows.pop(class_set, None)
        if got is None:
            self.misses += 1
            if self.compiled:
                got = self._expand_compiled(class_set)
            else:
                got = self._from_last(class_set)
                if got is None:
                    got = self.expander.cpu.to_vocab_bitmask(self.class_row(class_set))  # numpy: no torch
            got.flags.writeable = False
            while len(rows) >= self._limit:
                rows.pop(next(iter(rows)))
        rows[class_set] = got
        if not self.compiled:  # only the Python path derives rows from the last one; the compiled path keeps
            self._last = (class_set, got)  # no tuple, so a memoised row allocates no collected object
        return got
