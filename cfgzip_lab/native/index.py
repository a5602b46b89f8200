# C twin: csrc/sigma_index.c (build_index), csrc/trie.c (kernel_arrays; docs/design.md)
"""The σ_in index: which classes a stack top admits, as a trie over stack symbols (top first).

Every pair (σ_in, σ_out) of a class's displacement Δ(k) says: a token of class k can be
read from any stack whose top |σ_in| symbols are σ_in (every GNF nonterminal is productive,
so every stack in a parser state is completable; DESIGN.md, "the pipeline"). The mask of
a state is therefore the OR of the class sets stored at the trie nodes that the tops of its
stacks reach. The σ_out side is never listed (on c_like a median class has ~10^5 pairs);
the σ_in side is small: a displacement node's words are ``σ_out · SEP · reverse(σ_in)``, so
walking only output symbols from the class's node up to a SEP edge gives the set of
``reverse(σ_in)`` words, whose word sets are small (measured with Llama-3: json 232 distinct
σ_in, c_like ≥ 35,000, mostly 1–3 symbols, the longest 32).

A class whose displacement is unknown (a classing fallback singleton: its token ran past the
per-token budget) is listed in :attr:`SigmaInIndex.unindexed`; the walk decides those
classes by running the representative's bytes.

Layout: trie node 0 is the root; ``edges`` is an ``int32[E, 3]`` table of ``(parent,
symbol, child)``, ``bits_indptr``/``bits_classes`` a CSR list of the classes at each node.
These arrays are what the class cache stores; :meth:`SigmaInIndex.from_arrays` rebuilds the
dicts the walk reads.

Counted repetitions (:mod:`cfgzip_lab.grammar.counted`): a σ_in may consume a family member
with a symbolic count, ``IN(f, lo, hi)``; such symbols are keys of ``children`` like any other,
and :attr:`SigmaInIndex.family_children` lists them per node and family as ``(lo, hi, child)``:
a stack top ``F_c`` of family f follows every edge whose interval holds c. The cache stores
them apart, as ``native_family_edges`` (int64 rows ``parent, family, lo, hi, child``); the
compiled walk does not follow them (an index with some is walked in Python).
"""

from __future__ import annotations

import hashlib
import time
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np

from ..classes.classing import NORMAL, TokenClasses
from ..classes.compiled_displacement import make_displacer, stepping_store
from ..classes.displacement import Displacer
from ..errors import CfgzipError
from ..grammar.compiled_words import Unsupported
from ..grammar.counted import (
    INPUT_BASE,
    RELATIVE_BASE,
    input_symbol,
    is_family_symbol,
    split_input_symbol,
    split_relative_symbol,
)
from ..grammar.gnf import GNF
from ..grammar.token_macros import token_paths
from ..grammar.words import EMPTY, BudgetExceeded

__all__ = ["SigmaInIndex", "TrieRows", "NativeIndexError", "IndexTooLarge", "gnf_digest", "build_index"]

INDEX_FORMAT = 2

MAX_SIGMA_IN_WORDS = 2_000_000
"""σ_in words listed for one index at most. Most grammars list few (c_like: 131,376 over 7,971
SEP-rest nodes); llama.cpp's java.gbnf with Llama-3 has 2.9×10^20 over 16,844 (listing them ran
past 8.6 GB in benchmarks/sweep.py before this bound)."""
MAX_UNINDEXED = 32
"""Classes left to the walk (each decided by running its representative at every new state)."""


class NativeIndexError(CfgzipError, ValueError):
    """An index that does not fit the grammar or classes it is used with."""


class IndexTooLarge(CfgzipError, RuntimeError):
    """The σ_in sets are too large to list: the native engine serves the grammar through the
    compressed XGrammar engine instead (see :class:`cfgzip_lab.native.NativeEngine`)."""


def gnf_digest(gnf: GNF) -> str:
    """sha256 over the GNF's nonterminal names and start: trie symbols are GNF ids.

    The GNF of a grammar text is deterministic, so an index saved with the classes stays valid
    as long as this digest matches (a change to the normal form renumbers nonterminals).
    """
    return DigestInputs.of(gnf).digest()


class DigestInputs(NamedTuple):
    """What :func:`gnf_digest` reads of a GNF. A freshly built index keeps these and hashes them when its
    digest is first read (a cache writing it), and the engine compares them with its GNF's without hashing:
    the two digests were ~0.05 ms of a small schema's index and engine stages, for a check of equal names."""

    start: int
    accepts_empty: bool
    atoms: int
    names: tuple[str, ...]
    families: tuple[tuple, ...]

    @staticmethod
    def of(gnf: GNF) -> DigestInputs:
        families = tuple((f.name, f.item, f.min, f.max) for f in gnf.families)
        return DigestInputs(gnf.start, gnf.accepts_empty, len(gnf.atoms), tuple(gnf.names), families)

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(f"{self.start}|{self.accepts_empty}|{self.atoms}|".encode())
        h.update("\x00".join(self.names).encode("utf-8"))
        for name, item, least, most in self.families:
            h.update(f"|{name}:{item}:{least}:{most}".encode())
        return h.hexdigest()


class SigmaInIndex:
    """A trie of σ_in (top of stack first) whose nodes carry the set of classes with that σ_in.

    ``children[t]`` maps a GNF nonterminal to the child trie node; ``bits[t]`` is the class
    set at ``t`` as a Python int (bit k = class k; OR of 4,000-bit ints costs ~0.1 µs);
    ``has_children[t]`` says whether the walk needs to go deeper from ``t``.

    Two equal forms: those lists (what :func:`build_index` makes and the Python walk reads) and
    the arrays of :meth:`to_arrays` (what the cache stores and the compiled walk reads, through
    :meth:`kernel_arrays`). An index read from a cache holds only the arrays and builds the
    lists on first use, so a process that walks with the compiled kernel never builds them
    (c_like, 46,568 trie nodes: 0.29 s of Python per load before). Either form is converted to
    the other with numpy, a chunk of nodes at a time, never one node per numpy call (sql_select's
    index took 0.86 s to write that way).
    """

    def __init__(
        self,
        num_classes: int,
        children: list[dict[int, int]] | None = None,
        bits: list[int] | None = None,
        unindexed: np.ndarray | None = None,
        gnf_digest: str = "",
        build_seconds: float = 0.0,
        stats: dict | None = None,
        *,
        arrays: dict[str, np.ndarray] | None = None,
        digest_inputs: DigestInputs | None = None,
    ) -> None:
        """``digest_inputs``: the GNF's (:meth:`DigestInputs.of`), hashed into ``gnf_digest`` when it is first
        read, in place of a ``gnf_digest`` given."""
        if (children is None or bits is None) and arrays is None:
            raise ValueError("an index needs its children and bits, or its arrays")
        self.num_classes = int(num_classes)
        self._children = children
        self._bits = bits
        self._arrays = arrays
        self.unindexed = np.asarray(unindexed if unindexed is not None else [], dtype=np.int32)
        self._gnf_digest = gnf_digest
        self._digest_inputs = digest_inputs
        self.build_seconds = build_seconds
        self.stats = stats if stats is not None else {}

    @property
    def gnf_digest(self) -> str:
        """:func:`gnf_digest` of the GNF this index was built for (hashed on first read where built here)."""
        if self._digest_inputs is not None:
            self._gnf_digest, self._digest_inputs = self._digest_inputs.digest(), None
        return self._gnf_digest

    def fits_gnf(self, gnf: GNF) -> bool:
        """Whether this index was built for ``gnf``'s numbering: its digest is ``gnf``'s (compared as the
        digest's inputs, unhashed, where this index has not hashed its own yet)."""
        if self._digest_inputs is not None:
            return self._digest_inputs == DigestInputs.of(gnf)
        return self._gnf_digest == gnf_digest(gnf)

    def __repr__(self) -> str:
        return f"SigmaInIndex({self.num_classes} classes, {self.num_nodes} trie nodes, {len(self.unindexed)} unindexed)"

    @property
    def arrays_only(self) -> bool:
        """Whether the index holds only its arrays (read from a cache, or built in C): the lists are
        made on first use."""
        return self._children is None and self._arrays is not None

    @property
    def num_nodes(self) -> int:
        if self._children is not None:
            return len(self._children)
        return int(self._arrays["native_bits_indptr"].shape[0]) - 1

    @property
    def children(self) -> list[dict[int, int]]:
        if self._children is None:
            nodes = self.num_nodes
            children: list[dict[int, int]] = [{} for _ in range(nodes)]
            for p, s, c in self._arrays["native_edges"].tolist():
                children[p][s] = c
            for p, f, lo, hi, c in self._family_edges().tolist():
                children[p][input_symbol(f, lo, hi)] = c
            self._children = children
        return self._children

    def _family_edges(self) -> np.ndarray:
        """``int64[E, 5]`` rows ``(parent, family, lo, hi, child)`` of the ``IN(f, lo, hi)`` edges."""
        if self._arrays is not None and "native_family_edges" in self._arrays:
            return self._arrays["native_family_edges"]
        rows = [
            (p, *split_input_symbol(s), c)
            for p, kids in enumerate(self._children or ())
            for s, c in kids.items()
            if s >= INPUT_BASE
        ]
        return np.array(rows, dtype=np.int64).reshape(-1, 5)

    @property
    def family_children(self) -> list[dict[int, list[tuple[int, int, int]]]]:
        """Per trie node: family → ``[(lo, hi, child)]``, its ``IN(f, lo, hi)`` edges."""
        got = self.__dict__.get("_family_children_lists")
        if got is None:
            got = [{} for _ in range(self.num_nodes)]
            for p, f, lo, hi, c in self._family_edges().tolist():
                got[p].setdefault(f, []).append((lo, hi, c))
            self.__dict__["_family_children_lists"] = got
        return got

    @property
    def has_family_edges(self) -> bool:
        return bool(self._family_edges().size)

    @property
    def bits(self) -> list[int]:
        if self._bits is None:
            self._bits = _csr_to_ints(
                self._arrays["native_bits_indptr"], self._arrays["native_bits_classes"], self.num_classes
            )
        return self._bits

    @property
    def has_children(self) -> list[bool]:
        return [bool(c) for c in self.children]

    def rows(self) -> TrieRows:
        """The trie's nodes one at a time, as the Python walk reads them (:class:`TrieRows`): a node's
        children, counted-repetition edges and class set made when the walk first reaches it."""
        return TrieRows(self)

    # -- arrays for the cache ------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The index as plain arrays (no pickle): edges, CSR class lists, unindexed classes."""
        if self._arrays is None:
            family_edges = self._family_edges()
            children = self._children
            if family_edges.size:  # IN(f, lo, hi) keys go to their own table
                children = [{s: c for s, c in kids.items() if s < INPUT_BASE} for kids in children]
            counts = np.fromiter(map(len, children), dtype=np.int64, count=len(children))
            total = int(counts.sum())
            edges = np.empty((total, 3), dtype=np.int32)
            edges[:, 0] = np.repeat(np.arange(len(children), dtype=np.int32), counts)
            edges[:, 1] = np.fromiter(chain.from_iterable(children), dtype=np.int32, count=total)
            edges[:, 2] = np.fromiter(chain.from_iterable(map(dict.values, children)), dtype=np.int32, count=total)
            indptr, flat = _ints_to_csr(self._bits, self.num_classes)
            self._arrays = {
                "native_edges": edges,
                "native_family_edges": family_edges,
                "native_bits_indptr": indptr,
                "native_bits_classes": flat,
            }
        return {**self._arrays, "native_unindexed": np.asarray(self.unindexed, dtype=np.int32)}

    def kernel_arrays(self, dense_classes: int, words: int) -> dict[str, np.ndarray]:
        """The trie as the compiled walk takes it (``csrc/trie.c``, ``trie_new``): children CSR sorted
        by symbol; class sets of ``dense_classes`` classes or more as dense rows of ``words``
        uint64, the others as class lists. From :meth:`to_arrays` with numpy alone."""
        arrays = self.to_arrays()
        nodes = self.num_nodes
        edges = _by_parent_and_symbol(arrays["native_edges"].astype(np.int64).reshape(-1, 3))
        ptr = np.zeros(nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(edges[:, 0], minlength=nodes), out=ptr[1:])
        indptr = arrays["native_bits_indptr"].astype(np.int64)
        flat = arrays["native_bits_classes"].astype(np.int64)
        counts = np.diff(indptr)
        dense = counts >= dense_classes
        dense_idx = np.full(nodes, -1, dtype=np.int32)
        dense_idx[dense] = np.arange(int(dense.sum()), dtype=np.int32)
        owner = np.repeat(np.arange(nodes, dtype=np.int64), counts)
        in_dense = dense[owner]
        rows = np.zeros((int(dense.sum()), words * 64), dtype=bool)
        rows[dense_idx[owner[in_dense]], flat[in_dense]] = True
        list_ptr = np.zeros(nodes + 1, dtype=np.int64)
        np.cumsum(np.where(dense, 0, counts), out=list_ptr[1:])
        i32 = np.int32
        return {
            "ptr": ptr.astype(i32),
            "syms": edges[:, 1].astype(i32),
            "kids": edges[:, 2].astype(i32),
            "dense_idx": dense_idx,
            "rows": np.packbits(rows, axis=1, bitorder="little").reshape(-1).view(np.uint64).copy(),
            "list_ptr": list_ptr.astype(i32),
            "list_cls": flat[~in_dense].astype(i32),
        }

    def metadata(self) -> dict:
        return {
            "native_index_format": INDEX_FORMAT,
            "native_gnf_digest": self.gnf_digest,
            "native_num_classes": self.num_classes,
            "native_trie_nodes": self.num_nodes,
            "native_build_seconds": round(self.build_seconds, 4),
        }

    @staticmethod
    def from_arrays(arrays: dict[str, np.ndarray], meta: dict) -> SigmaInIndex:
        """Inverse of :meth:`to_arrays` with :meth:`metadata`; raises :class:`NativeIndexError` if
        inconsistent. Checks every array with numpy and keeps them; the lists are built on first use."""
        if meta.get("native_index_format") != INDEX_FORMAT:
            raise NativeIndexError(f"native index format {meta.get('native_index_format')!r}, expected {INDEX_FORMAT}")
        k = int(meta["native_num_classes"])
        nodes = int(meta["native_trie_nodes"])
        edges = np.asarray(arrays["native_edges"]).reshape(-1, 3)
        indptr = np.asarray(arrays["native_bits_indptr"], dtype=np.int64)
        flat = np.asarray(arrays["native_bits_classes"])
        if indptr.shape != (nodes + 1,) or (
            edges.size and (edges[:, [0, 2]].min() < 0 or edges[:, [0, 2]].max() >= nodes)
        ):
            raise NativeIndexError("native index arrays do not match their node count")
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise NativeIndexError("native index class lists are not in order")
        if flat.size and (flat.min() < 0 or flat.max() >= k) or indptr[-1] != flat.size:
            raise NativeIndexError("native index lists classes outside its class count")
        family_edges = np.asarray(arrays.get("native_family_edges", np.zeros((0, 5))), dtype=np.int64).reshape(-1, 5)
        if family_edges.size and (
            family_edges[:, [0, 4]].min() < 0
            or family_edges[:, [0, 4]].max() >= nodes
            or family_edges[:, 1:4].min() < 0
            or family_edges[:, 2:4].max() >= 1 << 32
            or np.any(family_edges[:, 2] > family_edges[:, 3])
        ):
            raise NativeIndexError("native index counted-repetition edges do not match their node count")
        # A tree: every node but the root is the child of exactly one edge, and no node has two
        # edges on one symbol (sorted by parent and symbol here, as the compiled walk takes them).
        edges = _by_parent_and_symbol(edges)
        targets = np.concatenate([edges[:, 2], family_edges[:, 4]]).astype(np.int64)
        parents = np.bincount(targets, minlength=nodes) if targets.size else np.zeros(nodes, dtype=np.int64)
        alike = (edges[1:, 0] == edges[:-1, 0]) & (edges[1:, 1] == edges[:-1, 1])
        if nodes < 1 or parents[0] != 0 or np.any(parents[1:] != 1) or np.any(alike):
            raise NativeIndexError("native index trie is not a tree (a node with two parents or two edges alike)")
        unindexed = np.asarray(arrays["native_unindexed"], dtype=np.int32)
        if unindexed.size and (unindexed.min() < 0 or unindexed.max() >= k):
            raise NativeIndexError("native index leaves classes outside its class count to the walk")
        return SigmaInIndex(
            num_classes=k,
            unindexed=unindexed,
            gnf_digest=str(meta["native_gnf_digest"]),
            build_seconds=float(meta.get("native_build_seconds", 0.0)),
            arrays={
                "native_edges": edges.astype(np.int32),
                "native_family_edges": family_edges,
                "native_bits_indptr": indptr,
                "native_bits_classes": flat.astype(np.int32),
            },
        )


class TrieRow(NamedTuple):
    """One trie node as the Python walk reads it."""

    children: dict[int, int]  # GNF nonterminal → child node
    families: dict[int, list[tuple[int, int, int]]]  # family → its ``IN(f, lo, hi)`` edges ``(lo, hi, child)``
    bits: int  # the class set (bit k = class k)
    deep: bool  # whether the node has any edge to follow


class TrieRows:
    """The rows of a :class:`SigmaInIndex`, each made on first use (``rows[t]``).

    The Python walk (counted-repetition tries, or no compiled kernel) used to turn the whole index
    into per-node lists before its first mask (:attr:`SigmaInIndex.children` and
    :attr:`SigmaInIndex.bits`: one dict and one int per trie node), where a state meets a few dozen
    nodes. Here the arrays are only indexed (a CSR offset per node, with numpy, once) and a node's
    row is read from them when the walk first reaches it; an index that already holds its lists
    serves them. Equal rows either way (tests/test_native_index_rows.py).
    """

    def __init__(self, index: SigmaInIndex) -> None:
        self._rows: dict[int, TrieRow] = {}
        self._k = index.num_classes
        self._lists = index if index._children is not None and index._bits is not None else None
        if self._lists is not None:
            return
        arrays = index.to_arrays()
        nodes = index.num_nodes
        edges = _by_parent_and_symbol(np.asarray(arrays["native_edges"]).reshape(-1, 3))
        ptr = np.zeros(nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(edges[:, 0].astype(np.int64), minlength=nodes), out=ptr[1:])
        self._ptr, self._syms, self._kids = ptr, edges[:, 1], edges[:, 2]
        family = index._family_edges()
        family = family[np.argsort(family[:, 0], kind="stable")] if family.size else family
        fptr = np.zeros(nodes + 1, dtype=np.int64)
        if family.size:
            np.cumsum(np.bincount(family[:, 0], minlength=nodes), out=fptr[1:])
        self._fptr, self._family = fptr, family
        self._indptr = np.asarray(arrays["native_bits_indptr"], dtype=np.int64)
        self._classes = np.asarray(arrays["native_bits_classes"])

    def __getitem__(self, t: int) -> TrieRow:
        got = self._rows.get(t)
        if got is None:
            got = self._rows[t] = self._make(t)
        return got

    def _make(self, t: int) -> TrieRow:
        lists = self._lists
        if lists is not None:
            kids = lists.children[t]
            families = lists.family_children[t]
            return TrieRow(kids, families, lists.bits[t], bool(kids))
        a, b = int(self._ptr[t]), int(self._ptr[t + 1])
        kids = dict(zip(self._syms[a:b].tolist(), self._kids[a:b].tolist())) if b > a else {}
        families: dict[int, list[tuple[int, int, int]]] = {}
        fa, fb = int(self._fptr[t]), int(self._fptr[t + 1])
        for _, f, lo, hi, c in self._family[fa:fb].tolist():
            families.setdefault(f, []).append((lo, hi, c))
        if families:  # IN(f, lo, hi) keys, as SigmaInIndex.children lists them too
            for f, edges in families.items():
                for lo, hi, c in edges:
                    kids[input_symbol(f, lo, hi)] = c
        ca, cb = int(self._indptr[t]), int(self._indptr[t + 1])
        return TrieRow(kids, families, _bits_of(self._classes[ca:cb].tolist(), self._k), bool(kids))


def _by_parent_and_symbol(edges: np.ndarray) -> np.ndarray:
    """``(parent, symbol, child)`` rows sorted by parent, then symbol: as they are when the C build
    or :meth:`SigmaInIndex.from_arrays` made them, which one pass checks (sql_select's 110k edges:
    0.3 ms, where lexsort took 5 ms), else sorted."""
    if edges.shape[0] < 2:
        return edges
    p, s = edges[:, 0], edges[:, 1]
    if np.all((p[1:] > p[:-1]) | ((p[1:] == p[:-1]) & (s[1:] >= s[:-1]))):
        return edges
    return edges[np.lexsort((s, p))]


_CHUNK_BYTES = 1 << 22
"""Bytes of class-set rows held at once while converting (4 MB: 8,000 nodes of Llama-3's 4,001 classes)."""


def _ints_to_csr(bits: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Class sets as ints → CSR (indptr int64[N+1], class ids int32 ascending per node).

    The ints' bytes are scanned as 64-bit words and only the non-zero words are unpacked: a
    trie node holds a few classes (c_like: 223,862 over 46,568 nodes), so the work is one scan
    of the rows, not one step per node and class."""
    words = max(1, -(-k // 64))
    step = max(1, _CHUNK_BYTES // (8 * words))
    rows_out: list[np.ndarray] = []
    cols_out: list[np.ndarray] = []
    for lo in range(0, len(bits), step):
        chunk = bits[lo : lo + step]
        raw = b"".join(map(int.to_bytes, chunk, repeat(8 * words), repeat("little")))
        packed = np.frombuffer(raw, dtype="<u8")
        at = np.flatnonzero(packed)
        flags = np.unpackbits(packed[at].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        which, bit = np.nonzero(flags)
        rows_out.append(at[which] // words + lo)
        cols_out.append((at[which] % words) * 64 + bit)
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, dtype=np.int64)
    cols = np.concatenate(cols_out) if cols_out else np.zeros(0, dtype=np.int64)
    indptr = np.zeros(len(bits) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(bits)), out=indptr[1:])
    return indptr, cols.astype(np.int32)


def _csr_to_ints(indptr: np.ndarray, flat: np.ndarray, k: int) -> list[int]:
    """CSR class lists → one int per node (bit c = class c), a chunk of nodes' rows at a time."""
    nodes = int(indptr.shape[0]) - 1
    words = max(1, -(-k // 64))
    step = max(1, _CHUNK_BYTES // (8 * words))
    counts = np.diff(indptr)
    out: list[int] = []
    for lo in range(0, nodes, step):
        hi = min(nodes, lo + step)
        a, b = int(indptr[lo]), int(indptr[hi])
        cls = flat[a:b].astype(np.uint64)
        where = np.repeat(np.arange(hi - lo, dtype=np.int64), counts[lo:hi]) * words + (cls >> np.uint64(6)).astype(
            np.int64
        )
        packed = np.zeros((hi - lo) * words, dtype="<u8")
        np.bitwise_or.at(packed, where, np.left_shift(np.uint64(1), cls & np.uint64(63)))
        out.extend(map(int.from_bytes, packed.view(np.uint8).reshape(hi - lo, 8 * words), repeat("little")))
    return out


def _compiled_build_keeps_ids(gnf, classes, rep_nodes) -> bool:
    """Whether the compiled build makes the store nodes the Python build makes, in its order. With
    counted families the σ_in rests of REL tops are new nodes (``IN(f, lo, hi) · rest``), which the
    Python build makes class by class between the representatives it runs: the compiled build runs
    those first, so with families it is used only where no representative needs running (classing's
    displacement nodes are known for every NORMAL class), and the ids stay the Python ones."""
    if not gnf.families:
        return True
    if rep_nodes is None:
        return False
    return bool(np.all(rep_nodes[np.asarray(classes.class_kind) == NORMAL] >= 0))


def _build_compiled(
    gnf, classes, token_bytes, rep_nodes, displacer, max_words_per_node, max_words, max_unindexed, started
) -> SigmaInIndex:
    """:func:`build_index` in C (``csrc/sigma_index.c``, ``sigma_index``) on a compiled store: the same passes and
    the same arrays (tested against the Python build), returned in the arrays form."""

    native = displacer.store.native
    kinds = np.asarray(classes.class_kind)
    reps = np.asarray(classes.representatives, dtype=np.int64)
    normal = np.flatnonzero(kinds == NORMAL)
    class_nodes = np.zeros(classes.num_classes, dtype=np.int64)  # 0: not indexed
    nodes = rep_nodes[normal] if rep_nodes is not None else np.full(normal.size, -1, dtype=np.int64)
    unindexed: list[int] = []
    for i in np.flatnonzero(nodes < 0).tolist():
        # Not known from classing (cache load, or a fallback singleton): run it under the same kind of
        # budget classing uses; past it the class is decided by the walk.
        k = int(normal[i])
        atoms = bytes(token_bytes[int(reps[k])]).translate(displacer.atom_table)
        try:
            nodes[i] = native.run(displacer.initial, atoms, 200_000)[0]
        except BudgetExceeded:
            unindexed.append(k)
            nodes[i] = 0
    class_nodes[normal] = nodes
    status = native.sigma_index(class_nodes, max_words_per_node, max_words)
    if status[0] == "words":
        raise IndexTooLarge(f"the classes' σ_in sets hold {status[1]:,} words to list (at most {max_words:,})")
    _, edges, indptr, flat, too_big, stats, family_edges = status
    unindexed += np.frombuffer(too_big, dtype=np.int32).tolist()
    if len(unindexed) > max_unindexed:
        raise IndexTooLarge(f"{len(unindexed)} classes have σ_in sets too large to list (at most {max_unindexed})")
    return SigmaInIndex(
        classes.num_classes,
        unindexed=np.asarray(sorted(unindexed), dtype=np.int32),
        digest_inputs=DigestInputs.of(gnf),
        build_seconds=time.perf_counter() - started,
        stats=stats,
        arrays={
            "native_edges": np.frombuffer(edges, dtype=np.int32).reshape(-1, 3).copy(),
            "native_bits_indptr": np.frombuffer(indptr, dtype=np.int64).copy(),
            "native_bits_classes": np.frombuffer(flat, dtype=np.int32).copy(),
            "native_family_edges": np.frombuffer(family_edges, dtype=np.int64).reshape(-1, 5).copy(),
        },
    )


def _reversed_inputs(displacer: Displacer, node: int, memo: dict[int, frozenset[int]]) -> frozenset[int]:
    """The nodes after a SEP edge reachable from ``node`` over output symbols: sets of reverse(σ_in).

    Memoised per node over the whole vocabulary (the σ_out parts of displacements share their
    tails): on c_like this cut the index build from 4 s of repeated searches to a fraction.
    """
    got = memo.get(node)
    if got is not None:
        return got
    store, n, sep = displacer.store, displacer.n, displacer.sep
    parts: list[frozenset[int]] = []
    direct: set[int] = set()
    for sym, child in store.nodes[node][1]:
        if sym == sep:
            direct.add(child)
        elif sym < n or is_family_symbol(sym):
            parts.append(_reversed_inputs(displacer, child, memo))
        elif sym >= RELATIVE_BASE:  # F_(x+j) · SEP · IN(f, lo, hi): reverse(σ_in) starts with IN
            f, _, lo, hi = split_relative_symbol(sym)
            direct.add(store.make(False, ((input_symbol(f, lo, hi), child),)))
    if not direct and len(parts) == 1:
        got = parts[0]
    else:
        got = frozenset(direct.union(*parts))
    memo[node] = got
    return got


def _bits_of(ids: list[int], k: int) -> int:
    raw = bytearray(-(-k // 8))
    for i in ids:
        raw[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(raw, "little")


def build_index_or_reason(
    gnf: GNF, classes: TokenClasses, token_bytes, **options
) -> tuple[SigmaInIndex | None, str | None]:
    """:func:`build_index`, or ``(None, why)`` when the σ_in sets are past its listing bounds; the
    reason is kept in ``classes.metadata["index_unavailable"]`` so that a class cache records it
    (the engine then serves through the compressed engine, and a load does not try again)."""
    try:
        return build_index(gnf, classes, token_bytes, **options), None
    except IndexTooLarge as exc:
        classes.metadata["index_unavailable"] = str(exc)
        return None, str(exc)


def build_index(
    gnf: GNF,
    classes: TokenClasses,
    token_bytes,
    *,
    token_node: np.ndarray | None = None,
    displacer: Displacer | None = None,
    rep_nodes: np.ndarray | None = None,
    max_words_per_node: int = 1_000_000,
    max_words: int = MAX_SIGMA_IN_WORDS,
    max_unindexed: int = MAX_UNINDEXED,
) -> SigmaInIndex:
    """Build the σ_in trie of ``classes`` under ``gnf``.

    Three passes: each NORMAL class's set of distinct σ_in (by id, read once per SEP-rest
    node of the word store); the trie over all distinct σ_in, inserted in sorted order (so
    its numbering is a function of the grammar and classes, not of store ids); the class
    set at each σ_in's trie node.

    Parameters
    ----------
    token_node : int64[V], optional
        Displacement node of each token from classing (``ClassingResult.token_node``); without
        it each NORMAL class's representative is run through a displacer (K tokens, shared
        prefixes memoised), which is what loading a cache without an index does.
    rep_nodes : int64[K], optional
        All the index reads of ``token_node``: the node of each class's representative
        (``ClassingResult.rep_nodes``, which a small grammar's classing gives without the array).
    max_words_per_node : int
        A class whose σ_in set is larger than this is left to the walk (listed in
        ``unindexed``) rather than enumerated.
    max_words, max_unindexed : int
        Bounds on the σ_in words listed in all and on the classes left to the walk; past
        either, :class:`IndexTooLarge` (memory and time stay bounded whatever the grammar).

    Raises
    ------
    IndexTooLarge
        When the σ_in sets cannot be listed within the bounds.
    """

    started = time.perf_counter()
    displacer = displacer or make_displacer(gnf)
    if rep_nodes is None and token_node is not None:
        rep_nodes = np.asarray(token_node, dtype=np.int64)[np.asarray(classes.representatives, dtype=np.int64)]
    elif rep_nodes is not None:
        rep_nodes = np.asarray(rep_nodes, dtype=np.int64)
    if stepping_store(displacer) is not None and _compiled_build_keeps_ids(gnf, classes, rep_nodes):
        try:
            return _build_compiled(
                gnf, classes, token_bytes, rep_nodes, displacer, max_words_per_node, max_words, max_unindexed, started
            )
        except Unsupported:  # what the compiled store does not do: the Python build below, on the same store
            pass
    store, n = displacer.store, displacer.n
    kinds = np.asarray(classes.class_kind)
    reps = np.asarray(classes.representatives)
    k_total = classes.num_classes
    rest_memo: dict[int, frozenset[int]] = {}
    class_rests: list[tuple[int, frozenset[int]]] = []
    sigma_id: dict[tuple[int, ...], int] = {}
    sigma_list: list[tuple[int, ...]] = []
    unindexed: list[int] = []
    paths = token_paths(displacer)
    for k in np.flatnonzero(kinds == NORMAL).tolist():
        rep = int(reps[k])
        node = int(rep_nodes[k]) if rep_nodes is not None else -1
        if node < 0:
            # Not known from classing (cache load, or a fallback singleton): compute it, under
            # the same kind of budget classing uses; past it the class is decided by the walk.
            store.limit = store.created + 200_000
            try:
                node = displacer.of_bytes(bytes(token_bytes[rep]))
                if paths is not None:  # Token(...) macros: the representative read whole, too
                    node = paths.node(rep, node)
            except BudgetExceeded:
                unindexed.append(k)
                continue
            finally:
                store.limit = float("inf")
        if node == EMPTY:
            continue  # a dead class never has its bit set (classing puts dead tokens in BLOCKED)
        class_rests.append((k, _reversed_inputs(displacer, node, rest_memo)))
    # Each SEP-rest node's words are read once; a class with an unlisted rest is unindexed.
    rest_row: dict[int, int] = {}
    too_big: set[int] = set()
    sigma_rows: list[int] = []  # (σ_in id, rest row) incidence, flattened
    sigma_rest: list[int] = []
    # Count first (memoised word counts), so an index too large to list is refused before
    # anything is listed.
    distinct = {r for _, rests in class_rests for r in rests}
    to_list = sum(c for c in map(store.count, distinct) if c <= max_words_per_node)
    if to_list > max_words:
        raise IndexTooLarge(f"the classes' σ_in sets hold {to_list:,} words to list (at most {max_words:,})")
    listed = 0
    for _, rests in class_rests:
        for rest in rests:
            if rest in rest_row or rest in too_big:
                continue
            count = store.count(rest)
            if count > max_words_per_node:
                too_big.add(rest)
                continue
            listed += count
            if listed > max_words:
                raise IndexTooLarge(f"the classes' σ_in sets hold more than {max_words:,} words to list")
            row = rest_row[rest] = len(rest_row)
            for w in store.words(rest):
                sigma = tuple(s - n - 1 if s < INPUT_BASE else s for s in reversed(w))
                i = sigma_id.get(sigma)
                if i is None:
                    i = sigma_id[sigma] = len(sigma_list)
                    sigma_list.append(sigma)
                sigma_rows.append(i)
                sigma_rest.append(row)
    # Class sets per rest node through a bool incidence matrix (~500k (class, rest) pairs on
    # c_like: numpy sets them, Python would loop), 1,024 rest rows at a time (bounded memory),
    # then OR-ed into each σ_in's set.
    pair_class: list[np.ndarray] = []
    pair_rest: list[np.ndarray] = []
    for k, rests in class_rests:
        if too_big and not too_big.isdisjoint(rests):
            unindexed.append(k)
            continue
        pair_rest.append(np.fromiter((rest_row[r] for r in rests), dtype=np.int64, count=len(rests)))
        pair_class.append(np.full(len(rests), k, dtype=np.int64))
    if len(unindexed) > max_unindexed:
        raise IndexTooLarge(f"{len(unindexed)} classes have σ_in sets too large to list (at most {max_unindexed})")
    pairs_rest = np.concatenate(pair_rest) if pair_rest else np.zeros(0, dtype=np.int64)
    pairs_class = np.concatenate(pair_class) if pair_class else np.zeros(0, dtype=np.int64)
    order = np.argsort(pairs_rest, kind="stable")
    pairs_rest, pairs_class = pairs_rest[order], pairs_class[order]
    row_bytes = -(-k_total // 8)
    rest_bits: list[int] = []
    chunk = 1024
    for start in range(0, len(rest_row), chunk):
        stop = min(start + chunk, len(rest_row))
        lo, hi = np.searchsorted(pairs_rest, [start, stop])
        incidence = np.zeros((stop - start, row_bytes * 8), dtype=bool)
        incidence[pairs_rest[lo:hi] - start, pairs_class[lo:hi]] = True
        packed = np.packbits(incidence, axis=1, bitorder="little")
        rest_bits.extend(int.from_bytes(r.tobytes(), "little") for r in packed)
    sigma_bits = [0] * len(sigma_list)
    for i, row in zip(sigma_rows, sigma_rest):
        sigma_bits[i] |= rest_bits[row]
    # The trie, in sorted σ_in order.
    children: list[dict[int, int]] = [{}]
    node_of_sigma = [0] * len(sigma_list)
    for i in sorted(range(len(sigma_list)), key=sigma_list.__getitem__):
        t = 0
        for sym in sigma_list[i]:
            nxt = children[t].get(sym)
            if nxt is None:
                nxt = children[t][sym] = len(children)
                children.append({})
            t = nxt
        node_of_sigma[i] = t
    bits = [0] * len(children)
    for i, t in enumerate(node_of_sigma):
        bits[t] = sigma_bits[i]
    seconds = time.perf_counter() - started
    return SigmaInIndex(
        num_classes=k_total,
        children=children,
        bits=bits,
        unindexed=np.asarray(sorted(unindexed), dtype=np.int32),
        digest_inputs=DigestInputs.of(gnf),
        build_seconds=seconds,
        stats={
            "distinct_sigma_in": len(sigma_list),
            "longest_sigma_in": max(map(len, sigma_list), default=0),
            "trie_nodes": len(children),
            "sep_rest_nodes": len(rest_row),
        },
    )
