# C twin: csrc/trie.c (the state mask), csrc/step.c (advance; tests/test_native_kernel.py; docs/design.md)
"""The parser state as one word DAG of GNF stacks, advanced by bytes and masked through the σ_in trie.

A state is a node of the grammar's hash-consed word store (:mod:`cfgzip_lab.grammar.words`)
whose words are the stacks (top first, GNF nonterminal ids) the PDA may be in after the
prefix; the empty word is in it exactly when the prefix is a complete sentence. Reading a
byte is :meth:`Displacer.step` on such a node: a word ``B · rest`` becomes ``tail(B, atom) ·
rest``, so the unchanged rest of every stack keeps its node ids from one step to the next
and every memo keyed by node stays warm.

The class mask of a state is the OR of the trie nodes' class sets reached by a product walk of
the state's DAG with the σ_in trie (:mod:`.index`), memoised by (state node, trie node): a
new state pays only for its new top nodes, the rest is looked up. Where the compiled kernel is
built (``csrc/trie.c``, ``trie_mask``) the walk runs there instead, afresh for each new state with
the trie as arrays: measured with Llama-3 on the sample documents' timed states at load 3, 4.9-5.7
µs median and 11-16 µs p90 on c_like and bython against 10.5-11.2 and 42-59 µs for the memoised
Python walk (the reference it is tested against).

Bounds (the DAG stays small on real documents: deep nesting is a path, not a blow-up; an
ambiguous grammar is where it grows): each accepted token may create at most
``token_budget`` new store nodes and a request at most ``request_budget``; past either,
:class:`StateBudgetExceeded` is raised before anything changes, and the matcher hands the
request to the compressed XGrammar engine. Memo tables are bounded and dropped whole when full
(they only hold finished results, so dropping them never changes an answer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._binding import kernel as _kernel
from ..classes.classing import STOP, TokenClasses
from ..classes.compiled_displacement import make_displacer, stepping_store
from ..classes.displacement import Displacer
from ..grammar.compiled_words import Unsupported
from ..grammar.counted import _C_BITS, FAMILY_BASE, INPUT_BASE, split_family_symbol
from ..grammar.gnf import GNF
from ..grammar.token_macros import token_paths
from ..grammar.words import EMPTY, EPSILON, BudgetExceeded
from .index import SigmaInIndex, TrieRows

DENSE_CLASSES = 32
"""Trie nodes with at least this many classes keep them as a dense bit row for the compiled walk."""

__all__ = ["StateWalker", "StateBudgetExceeded", "WalkLimits", "DEFAULT_LIMITS"]


class StateBudgetExceeded(Exception):
    """Advancing the state would create more DAG nodes than the limits allow."""


@dataclass(frozen=True)
class WalkLimits:
    """Bounds on state growth and memo sizes (entries)."""

    token_budget: int = 50_000
    request_budget: int = 2_000_000
    memo_entries: int = 400_000


DEFAULT_LIMITS = WalkLimits()


class StateWalker:
    """Shared by every matcher of one grammar + classes: the store, the trie, and the memos.

    Not thread-safe beyond what the GIL gives dict operations: the word store's node budget
    (``store.limit``) is process-wide state, so two threads must not advance states of one
    grammar at once (classing in another thread included).
    """

    def __init__(
        self,
        gnf: GNF,
        classes: TokenClasses,
        token_bytes,
        index: SigmaInIndex,
        limits: WalkLimits = DEFAULT_LIMITS,
        displacer: Displacer | None = None,
        compiled_mask: bool | None = None,
    ) -> None:
        """``compiled_mask``: walk the trie with the compiled kernel (default: where it is built), its
        counted-repetition edges included; False: the Python walk (``_product``, the reference)."""
        if compiled_mask is None:
            compiled_mask = _kernel is not None
        elif compiled_mask and _kernel is None:
            raise RuntimeError("the compiled kernel (cfgzip_lab._native) is not built")
        self.gnf = gnf
        self.displacer = displacer or make_displacer(gnf)
        self.store = self.displacer.store
        # The compiled store (a CompiledDisplacer's; None for the Python WordStore): steps, runs and
        # trie masks of states then run in C on it (csrc/trie.c), node for node as in Python.
        self._native = stepping_store(self.displacer)
        self.index = index
        self.limits = limits
        self.num_classes = classes.num_classes
        self._classes = classes  # (class_of made from a sparse map only where the Python step reads it)
        kinds = np.asarray(classes.class_kind)
        stop = np.flatnonzero(kinds == STOP)
        self.stop_class = int(stop[0]) if stop.size else -1
        self.stop_bit = (1 << self.stop_class) if stop.size else 0
        self._token_bytes = token_bytes
        self._atoms: dict[int, bytes] = {}
        self._unindexed = [
            (int(k), bytes(token_bytes[int(classes.representatives[k])]), int(classes.representatives[k]))
            for k in index.unindexed
        ]
        self._token_paths = token_paths(self.displacer)  # Token(...) macros: tokens also read whole
        # The start state: {[S]}, plus the empty stack when the language holds ε.
        start_word = self.store.word((gnf.start,))
        self.initial = self.store.union(start_word, EPSILON) if gnf.accepts_empty else start_word
        self._mask_memo: dict[int, int] = {}
        self._product_memo: dict[tuple[int, int], int] = {}
        self._advance_memo: dict[int, int] = {}  # state * K + class → state
        self._class_list: list[int] | None = None  # class_of as a list (~3x numpy's indexing), for the Python advance
        self._step = self._make_step()
        self._trie = self._compile_trie() if compiled_mask else None
        # The Python walk's trie rows, each made when the walk first reaches its node (index.TrieRows: an
        # index built or read from a cache holds only arrays; the compiled walk never needs rows). Making
        # every row before the first mask took 747 ms on a counted-repetition schema's trie.
        self._rows: TrieRows | None = None
        self._stats = {"mask_memo_hits": 0, "mask_walks": 0, "advance_memo_hits": 0, "advances": 0, "memo_drops": 0}
        # On a compiled store the whole accept step is one call (csrc/step.c, Advancer): the token's class,
        # the (state, class) memo, the byte steps and the budgets, as advance() below does in Python.
        # A sparse class map (TokenClasses.from_sparse) is read as its listed ids and classes: never made.
        self._advancer = None
        if self._native is not None:
            sparse = classes.sparse_map()
            self._advancer = _kernel.Advancer(
                self._native,
                token_bytes if isinstance(token_bytes, list) else list(token_bytes),
                np.ascontiguousarray(self._class_of, dtype=np.int32) if sparse is None else None,
                np.ascontiguousarray(kinds, dtype=np.uint8),
                bytes(self.displacer.atom_table),
                limits.token_budget,
                limits.request_budget,
                limits.memo_entries,
                StateBudgetExceeded,
                *(() if sparse is None else (sparse[1], sparse[2])),
            )

    @property
    def _class_of(self) -> np.ndarray:
        """The classes' map (made from a sparse one when first read: only the Python step needs it)."""
        return np.asarray(self._classes.class_of)

    @property
    def stats(self) -> dict:
        """Memo hits, walks, advances and memo drops (the compiled accept step's counters included)."""
        if self._advancer is None:
            return dict(self._stats)
        c = self._advancer.stats()
        return {
            **self._stats,
            "advance_memo_hits": self._stats["advance_memo_hits"] + c["advance_memo_hits"],
            "advances": self._stats["advances"] + c["advances"],
            "memo_drops": self._stats["memo_drops"] + c["memo_drops"],
        }

    @property
    def atom_members(self) -> list[bytes]:
        """The bytes of each atom (byte class of the grammar), in atom order; made on first use."""
        got = getattr(self, "_atom_members", None)
        if got is None:
            members = [bytearray() for _ in range(self.displacer.num_atoms)]
            for byte, atom in enumerate(self.displacer.atom_table):
                members[atom].append(byte)
            got = self._atom_members = [bytes(m) for m in members]
        return got

    # -- masks --------------------------------------------------------------------
    def accepts_stop(self, state: int) -> bool:
        return self.store.accepts(state)

    def class_mask(self, state: int) -> int:
        """Class set allowed after ``state`` as a Python int (bit k = class k), stop class included."""
        got = self._mask_memo.get(state)
        if got is not None:
            self._stats["mask_memo_hits"] += 1
            return got
        self._stats["mask_walks"] += 1
        if self._trie is not None:
            if self._native is not None:
                self._native.trie_mask(self._trie, state, self._mask_out)
            else:
                _kernel.trie_mask(self._trie, self.store.nodes, state, self._mask_out)
            got = int.from_bytes(self._mask_out, "little")
        else:
            got = self._product(state, 0)
        if self._unindexed:
            for k, data, rep in self._unindexed:
                if self._run(state, data, self.limits.token_budget, token_id=rep)[0] != EMPTY:
                    got |= 1 << k
        if self.store.accepts(state):
            got |= self.stop_bit
        if len(self._mask_memo) >= self.limits.memo_entries:
            self._mask_memo.clear()
            self._stats["memo_drops"] += 1
        self._mask_memo[state] = got
        return got

    def _compile_trie(self):
        """The trie as the kernel's arrays (see csrc/trie.c, trie_mask): children CSR sorted by symbol,
        class sets as dense bit rows (``DENSE_CLASSES`` classes or more) or class lists.

        The kernel walks the state's DAG with the trie afresh for every new state (no memo: the DAG is
        deterministic and the trie a tree, so each pair is met once); measured with Llama-3 on the
        sample documents' timed states (bython, c_like, sql_select): 28-42 trie nodes met at the
        median, 136-157 at p90, at most 476.
        """
        words = max(1, -(-self.num_classes // 64))
        t = _compiled_kernel_arrays(self.index, DENSE_CLASSES, words)
        if t is None:
            t = self.index.kernel_arrays(DENSE_CLASSES, words)  # numpy from the index's arrays, no loop per node
        self._mask_out = np.zeros(words, dtype=np.uint64)
        return _kernel.trie_new(
            t["ptr"], t["syms"], t["kids"], t["dense_idx"], t["rows"], t["list_ptr"], t["list_cls"], words,
            *_family_arrays(self.index),
        )  # fmt: skip

    def _product(self, node: int, t: int) -> int:
        """OR of the class sets of trie nodes below ``t`` that words of ``node`` spell out."""
        rows = self._rows
        if rows is None:
            rows = self._rows = self.index.rows()
        row = rows[t]
        kids, families = row.children, row.families
        memo = self._product_memo
        acc = 0
        for sym, child in self.store.nodes[node][1]:
            if sym >= FAMILY_BASE:
                # a member F_c: every IN(f, lo, hi) edge whose interval holds c
                f, c = split_family_symbol(sym)
                targets = [nt for lo, hi, nt in families.get(f, ()) if lo <= c <= hi]
            else:
                nt = kids.get(sym)
                if nt is None:
                    continue
                targets = (nt,)
            for nt in targets:
                below = rows[nt]
                acc |= below.bits
                if below.deep and child != EPSILON:
                    key = (child, nt)
                    sub = memo.get(key)
                    if sub is None:
                        sub = self._product(child, nt)
                        if len(memo) >= self.limits.memo_entries:
                            memo.clear()
                            self._stats["memo_drops"] += 1
                        memo[key] = sub
                    acc |= sub
        return acc

    # -- advancing ----------------------------------------------------------------
    def atoms_of(self, token_id: int) -> bytes:
        got = self._atoms.get(token_id)
        if got is None:
            got = self._atoms[token_id] = bytes(self._token_bytes[token_id]).translate(self.displacer.atom_table)
        return got

    def _make_step(self):
        """:meth:`Displacer.step` specialised to states (words of nonterminals only, no SEP).

        Same store, same memo tables (``Displacer._step``, the store's concat memo), so the
        nodes it returns are the ones ``Displacer.step`` would return; only the interpreter
        work differs: the concat below looks up its memo and the interning table before
        recursing, and a tail edge ending the word (child ε) is the rest itself. Measured with
        Llama-3 on the sample documents: concat is ~60% of a cold accept. On a compiled store the
        step is the compiled one (the same nodes, see :mod:`.compiled`).
        """
        if self._native is not None:
            return self._native.step
        store, displacer = self.store, self.displacer
        nodes, index, make, union = store.nodes, store._index, store.make, store.union
        union_concats = store.union_concats
        cmemo, smemo = store._concat, displacer._step
        table, n, num_atoms = self.gnf.table, displacer.n, displacer.num_atoms
        slow_step = displacer.step
        family_row = self.gnf.row

        def concat(a: int, b: int) -> int:
            # a is a tail node (never EMPTY or EPSILON here), b the rest (never EMPTY)
            accepts, edges = nodes[a]
            out = []
            for s, c in edges:
                if c == EPSILON:
                    out.append((s, b))
                else:
                    got = cmemo.get((c, b))
                    out.append((s, got if got is not None else concat(c, b)))
            key = (False, tuple(out))
            got = index.get(key)
            if got is None:
                got = make(False, key[1])
            if accepts:
                got = union(got, b)
            cmemo[(a, b)] = got
            return got

        def step(node: int, atom: int) -> int:
            key = node * num_atoms + atom
            got = smemo.get(key)
            if got is not None:
                return got
            terms = []
            for sym, rest in nodes[node][1]:
                if sym < n:
                    tail = table[sym].get(atom)
                elif FAMILY_BASE <= sym < INPUT_BASE:  # a counted repetition's member F_c
                    tail = family_row(sym).get(atom)
                else:  # a SEP word: not a parser state, the displacer's own step
                    return slow_step(node, atom)
                if tail is not None:
                    terms.append((tail, rest))
            if len(terms) != 1:  # united at once, as Displacer.step does (the same nodes)
                result = union_concats(terms)
            else:  # one term: concat(tail, rest)
                tail, rest = terms[0]
                if tail == EPSILON:
                    result = rest
                elif rest == EPSILON:
                    result = tail
                else:
                    result = cmemo.get((tail, rest))
                    if result is None:
                        result = concat(tail, rest)
            smemo[key] = result
            return result

        return step

    def _run(
        self, state: int, atoms_or_bytes: bytes, budget: int, *, atoms: bool = False, token_id: int | None = None
    ) -> tuple[int, int]:
        """Run bytes (or atoms) from ``state``; returns (new state, nodes created). With
        ``token_id`` (a grammar with token macros), the token read whole is added."""
        store = self.store
        data = atoms_or_bytes if atoms else atoms_or_bytes.translate(self.displacer.atom_table)
        if self._native is not None:
            try:
                return self._native.run(state, data, budget)
            except BudgetExceeded:
                raise StateBudgetExceeded(f"a token would create more than {budget} state nodes") from None
            except Unsupported:
                raise StateBudgetExceeded(
                    "a token would nest the state deeper than the compiled store allows"
                ) from None
        step = self._step
        before = store.created
        store.limit = before + budget
        start = state
        try:
            for a in data:
                state = step(state, a)
                if state == EMPTY:
                    break
            if token_id is not None and self._token_paths is not None:
                state = self._token_paths.advance(step, start, token_id, state)
        except BudgetExceeded:
            raise StateBudgetExceeded(f"a token would create more than {budget} state nodes") from None
        finally:
            store.limit = float("inf")
        return state, store.created - before

    def run_bytes(self, state: int, data: bytes, spent: int) -> tuple[int, int]:
        """State after the bytes ``data`` (EMPTY: not allowed) and the nodes it created, under the
        same budgets as :meth:`advance` (``accept_string``, the jump-forward search). Not memoised:
        a string is not a class."""
        budget = min(self.limits.token_budget, self.limits.request_budget - spent)
        if budget <= 0:
            raise StateBudgetExceeded(f"the request created more than {self.limits.request_budget} state nodes")
        return self._run(state, bytes(data), budget)

    def advance(self, state: int, token_id: int, spent: int) -> tuple[int, int]:
        """State after a NORMAL token (EMPTY: not allowed) and the nodes it created.

        ``spent`` is what the request created so far; raises :class:`StateBudgetExceeded`
        past :attr:`WalkLimits.request_budget` or the per-token budget.
        """
        if self._advancer is not None:
            return self._advancer.accept(state, token_id, spent)
        # Keyed by class, not token: equal displacements give equal successor sets of stacks
        # (C' = {σ_out·rest : σ_in·rest ∈ C, (σ_in, σ_out) ∈ Δ(t)}), so every token of a class
        # leads to the same canonical node (bython sample documents: 1,029 runs instead of 1,194).
        if self._class_list is None:  # made on first use: the compiled accept step never needs it (1 ms for 128k ids)
            self._class_list = self._class_of.tolist()
        key = state * self.num_classes + self._class_list[token_id]
        got = self._advance_memo.get(key)
        if got is not None:
            self._stats["advance_memo_hits"] += 1
            return got, 0
        self._stats["advances"] += 1
        budget = min(self.limits.token_budget, self.limits.request_budget - spent)
        if budget <= 0:
            raise StateBudgetExceeded(f"the request created more than {self.limits.request_budget} state nodes")
        new, created = self._run(state, self.atoms_of(token_id), budget, atoms=True, token_id=token_id)
        if len(self._advance_memo) >= self.limits.memo_entries:
            self._advance_memo.clear()
            self._stats["memo_drops"] += 1
        self._advance_memo[key] = new
        return new, created


_KERNEL_ARRAY_NAMES = ("ptr", "syms", "kids", "dense_idx", "rows", "list_ptr", "list_cls")
_KERNEL_ARRAY_DTYPES = (np.int32, np.int32, np.int32, np.int32, np.uint64, np.int32, np.int32)


def _family_arrays(index: SigmaInIndex) -> tuple:
    """The counted-repetition edges as ``trie_new`` takes them (``()`` where the trie has none): ``fptr``
    int32[nodes + 1] (node t's edges are rows ``fptr[t]:fptr[t+1]``), ``fedges`` int64 rows (family, lo,
    hi, child), and the member encoding (``FAMILY_BASE``, ``_C_BITS``: F_c's family and count).

    Walking them in C too took the Python walk out of counted-repetition schemas' masks: a new state's
    mask cost 50-1,800 µs there (MaskBench Github_medium o35868, o6271, o82676, Snowplow sp_405), the
    slowest steps of the 100-file sample (issue 33, TBM p99.9 and max)."""
    family = index._family_edges()
    if not family.size:
        return ()
    family = family[np.argsort(family[:, 0], kind="stable")]
    fptr = np.zeros(index.num_nodes + 1, dtype=np.int32)
    np.cumsum(np.bincount(family[:, 0], minlength=index.num_nodes), out=fptr[1:])
    return fptr, np.ascontiguousarray(family[:, 1:5], dtype=np.int64), FAMILY_BASE, _C_BITS


def _compiled_kernel_arrays(index: SigmaInIndex, dense_classes: int, words: int) -> dict[str, np.ndarray] | None:
    """:meth:`SigmaInIndex.kernel_arrays` in one C pass per array (``_native.trie_arrays``; equal array
    for array, tests/test_native_kernel.py): sql_select with Llama-3, 4 ms of numpy and a bool matrix
    of the dense rows, of its ~6 ms engine build. None without the kernel, or when the index's
    edges are not sorted by parent and symbol (the numpy path sorts them)."""
    if _kernel is None:
        return None
    arrays = index.to_arrays()
    got = _kernel.trie_arrays(
        np.ascontiguousarray(arrays["native_edges"], dtype=np.int32).reshape(-1),
        np.ascontiguousarray(arrays["native_bits_indptr"], dtype=np.int64),
        np.ascontiguousarray(arrays["native_bits_classes"], dtype=np.int32),
        index.num_nodes,
        dense_classes,
        words,
    )
    if got is None:
        return None
    return {name: np.frombuffer(b, dtype=dt) for name, b, dt in zip(_KERNEL_ARRAY_NAMES, got, _KERNEL_ARRAY_DTYPES)}
