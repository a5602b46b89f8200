# C twin: csrc/displace.c (node for node: tests/test_compiled.py; docs/design.md)
"""Displacement Δ(t) of byte strings under a GNF pushdown automaton (paper §3.2, Alg. 1).

Δ(t) is the set of pairs (σ_in, σ_out): running the PDA over t consumes the
context-stack prefix σ_in and leaves σ_out on top of the rest. Equal Δ implies
syntactic congruence (Theorem 2), so equal-Δ tokens are interchangeable for
every engine and every state: that is the whole soundness argument.

Exact without blow-up: the set of pairs after a prefix is held as ONE word set
(see :mod:`cfgzip_lab.grammar.words`) over words ``σ_out · SEP · reverse(σ_in)``.
Output symbols are the GNF nonterminals ``0..n-1`` (so a production's tail set
is spliced in with one ``concat``), SEP is ``n``, and input symbol A is
``n + 1 + A``. Reading byte class c:

* a word whose σ_out starts with B becomes ``tail(B, c) · rest`` (pop B, push β);
* a word ``SEP · A_last · …`` (σ_out empty) *backtracks*: it consumes the next
  context symbol A, which must sit directly below A_last (stack adjacency), and
  becomes ``tail(A, c) · SEP · A · A_last · …``. At the start of a token
  (σ_in = ε) any nonterminal may be the context's top.

Each set is a canonical minimal DAG, so node identity is set identity: Δ(t) is
the final node's id, steps are memoised by (node, byte class), and a token's
displacement is shared with every token that has the same byte-class prefix.

Counted repetitions (:mod:`cfgzip_lab.grammar.counted`, docs/counted_repetition.md): a
family member ``F_c`` on top of σ_out reads its computed row. A backtrack into a family
consumes ``F_x`` for a symbolic x in ``[1, max - 1]``; its pair keeps x symbolic:

* *continue* (another item follows) leaves ``T_X(a) · REL(f, 1, lo, hi)``, where
  ``REL(f, j, lo, hi)`` is one symbol for ``F_(x+j) · SEP · IN(f, lo, hi)``: the member
  relative to x at the bottom of σ_out, SEP, and x's interval as the deepest σ_in symbol;
* *stop* (the repetition ends after this item) leaves ``T_X(a) · SEP · IN(f, lo, hi)``.

Reading from a ``REL(f, j, lo, hi)`` top narrows x: continuing needs ``x + j + 1 <= max - 1``,
stopping ``x + j + 1 >= min``. Relative members only ever sit directly above SEP (after a
backtrack σ_out is empty, and only the consumed member's row pushes its successor at the
bottom), which is why one symbol can carry both. Equal symbolic sets instantiate to equal
concrete sets (x ↦ each value of its interval), so equal symbolic Δ still means
interchangeable tokens, and a token of k items has O(k) pairs, not one per position.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..grammar.counted import (
    INPUT_BASE,
    RELATIVE_BASE,
    UNBOUNDED,
    family_symbol,
    input_symbol,
    is_family_symbol,
    relative_symbol,
    split_family_symbol,
    split_input_symbol,
    split_relative_symbol,
)
from ..grammar.gnf import GNF
from ..grammar.words import EMPTY, EPSILON
from .adjacency import stack_adjacency


@dataclass(frozen=True, slots=True)
class DisplacementPair:
    """One (σ_in, σ_out) pair with nonterminal names, top of stack first."""

    consumed: tuple[str, ...]
    pushed: tuple[str, ...]

    def __str__(self) -> str:
        return f"[{' '.join(self.consumed)}] → [{' '.join(self.pushed)}]"


class Displacer:
    """Computes displacement nodes of byte strings, memoised across calls."""

    def __init__(self, gnf: GNF):
        self.gnf = gnf
        self.store = gnf.store
        n = gnf.num_nonterminals
        self.n = n
        self.sep = n
        self.num_atoms = len(gnf.atoms)
        table = gnf.table
        self.families = gnf.families
        # For each atom: the nonterminals with a production on it, and their tails; the
        # families whose item has one (a member F_x of any x may be consumed on that atom).
        self._tops = [[(a, row[k]) for a, row in enumerate(table) if k in row] for k in range(self.num_atoms)]
        self._family_tops = [
            [(f, table[fam.item][k]) for f, fam in enumerate(self.families) if k in table[fam.item]]
            for k in range(self.num_atoms)
        ]
        # Stack adjacency is built by the first backtrack, the candidates per (last, atom) as
        # they are met: a native engine loaded with its index never backtracks (its states have
        # no SEP), and building them cost 0.31 s on c_like, most of a load from the cache.
        self._below: list[set[int]] | None = None
        self._backtracks_memo: dict[int, tuple[list, list]] = {}
        self._step: dict[int, int] = {}
        self.initial = self.store.make(False, ((self.sep, EPSILON),))
        self.atom_table = bytes(gnf.atom_of)  # for bytes.translate

    @property
    def below(self) -> list[set[int]]:
        """Stack adjacency (:func:`~.adjacency.stack_adjacency`): ``below[A]`` may sit under A."""
        if self._below is None:
            self._below = stack_adjacency(self.gnf)
        return self._below

    def _backtrack_candidates(self, last: int, atom: int) -> tuple[list, list]:
        """The backtrack candidates below ``last`` on ``atom``: plain nonterminals A (with
        their tails) and families f (with the item's tails) that may sit directly below it
        (``last`` = n + f: some member of family f was consumed last).

        Made per (last, atom) on first use: the full table is (n + families) × atoms lists over
        n candidates each, 2·10^9 membership tests for the 5,160 nonterminals and 81 atoms of a
        large JSON Schema (jsb_0172: 123 s of its classing), while a vocabulary meets a few
        thousand pairs.
        """
        key = last * self.num_atoms + atom
        got = self._backtracks_memo.get(key)
        if got is None:
            below = self.below[last]
            n = self.n
            got = (
                [(a, t) for a, t in self._tops[atom] if a in below],
                [(f, t) for f, t in self._family_tops[atom] if n + f in below],
            )
            self._backtracks_memo[key] = got
        return got

    def step(self, node: int, atom: int) -> int:
        """The configuration set after reading one more byte of class ``atom``.

        Its terms ``tail · rest`` (one per edge of ``node`` and backtrack candidate, up to three per
        counted repetition's item) are listed in edge and candidate order (their ``rest`` nodes made
        as they are met), then united at once without being made
        (:meth:`~cfgzip_lab.grammar.words.WordStore.union_concats`): folding them pairwise made each
        term and a node per partial result, 60% of sql_select's classing nodes partial results and
        most of the rest terms merged away.
        """
        key = node * self.num_atoms + atom
        got = self._step.get(key)
        if got is not None:
            return got
        store, n, sep = self.store, self.n, self.sep
        make = store.make
        table = self.gnf.table
        terms: list[tuple[int, int]] = []  # (a, b): the term a · b
        for sym, rest in store.edges(node):
            if sym < n:
                tail = table[sym].get(atom)
                if tail is not None:
                    terms.append((tail, rest))
            elif sym == sep:  # σ_out is empty, backtrack into the context
                if store.accepts(rest):
                    candidates = [(a, t, EPSILON) for a, t in self._tops[atom]]
                    family_candidates = [(f, t, EPSILON) for f, t in self._family_tops[atom]]
                else:
                    candidates, family_candidates = [], []
                memo, candidates_of = self._backtracks_memo, self._backtrack_candidates
                for in_sym, deeper in store.edges(rest):
                    consumed = make(False, ((in_sym, deeper),))
                    last = in_sym - n - 1 if in_sym < INPUT_BASE else n + split_input_symbol(in_sym)[0]
                    plain, families = memo.get(last * self.num_atoms + atom) or candidates_of(last, atom)
                    candidates += [(a, t, consumed) for a, t in plain]
                    family_candidates += [(f, t, consumed) for f, t in families]
                for a, tail, consumed in candidates:
                    enqueued = make(False, ((sep, make(False, ((n + 1 + a, consumed),))),))
                    terms.append((tail, enqueued))
                for f, tail, consumed in family_candidates:
                    fam = self.families[f]
                    self._member_terms(f, 0, 1, fam.last, tail, consumed, terms)
            elif is_family_symbol(sym):  # a concrete member F_c (pushed by this token)
                tail = self.gnf.row(sym).get(atom)
                if tail is not None:
                    terms.append((tail, rest))
            elif sym >= RELATIVE_BASE:  # F_(x+j) · SEP · IN(f, lo, hi)
                f, j, lo, hi = split_relative_symbol(sym)
                tail = table[self.families[f].item].get(atom)
                if tail is not None:
                    self._member_terms(f, j, lo, hi, tail, rest, terms)
            else:  # pragma: no cover - input symbols never stand on top of σ_out
                raise AssertionError(f"symbol {sym} on top of a displacement word")
        result = store.union_concats(terms)
        self._step[key] = result
        return result

    def _member_terms(self, f: int, j: int, lo: int, hi: int, tail: int, rest: int, terms: list) -> None:
        """Append the terms ``(tail, rest')`` of the words after reading one item from ``F_(x+j)``, x ∈ [lo, hi],
        given the item's tail, to ``terms``.

        Continue (``x + j + 1 <= max - 1``): ``tail · REL(f, j + 1, lo, hi')``; stop
        (``x + j + 1 >= min``): ``tail · SEP · IN(f, lo', hi)``. ``rest`` is what follows the
        consumed member in reverse(σ_in). An unbounded family saturates at ``F_last``: the x
        for which ``x + j + 1 >= last`` continue with that concrete member instead.
        """
        make, sep = self.store.make, self.sep
        fam = self.families[f]
        if fam.max is not None:
            top = min(hi, fam.max - 2 - j)
            if lo <= top:
                terms.append((tail, make(False, ((relative_symbol(f, j + 1, lo, top), rest),))))
        else:
            split = fam.last - j - 1  # x >= split reach the saturated member
            if lo < split:
                top = min(hi, split - 1)
                terms.append((tail, make(False, ((relative_symbol(f, j + 1, lo, top), rest),))))
            if hi >= split:
                start = max(lo, split)
                saturated = make(False, ((sep, make(False, ((input_symbol(f, start, hi), rest),))),))
                saturated = make(False, ((family_symbol(f, fam.last), saturated),))
                terms.append((tail, saturated))
        bottom = max(lo, fam.min - 1 - j)
        if bottom <= hi:
            ended = make(False, ((sep, make(False, ((input_symbol(f, bottom, hi), rest),))),))
            terms.append((tail, ended))

    def of_atoms(self, atoms: bytes) -> int:
        node = self.initial
        for a in atoms:
            node = self.step(node, a)
            if node == EMPTY:
                break
        return node

    def of_bytes(self, data: bytes) -> int:
        """Δ(data) as a word-set node (EMPTY: in no sentence)."""
        return self.of_atoms(data.translate(self.atom_table))

    def split_word(self, word: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(σ_in, σ_out) of one displacement word, top of stack first.

        Symbols are GNF nonterminals (plain ids, concrete family members) or, for a pair that
        consumed a member of a family with a symbolic count, the σ_in symbol
        ``input_symbol(f, lo, hi)`` and the σ_out symbol ``relative_symbol(f, j, lo, hi)``
        (``F_(x+j)``); :meth:`symbol_text` names them.
        """
        for cut, s in enumerate(word):
            if s == self.sep:
                pushed, after = word[:cut], word[cut + 1 :]
                break
            if s >= RELATIVE_BASE:
                f, j, lo, hi = split_relative_symbol(s)
                pushed, after = word[: cut + 1], (input_symbol(f, lo, hi),) + word[cut + 1 :]
                break
        else:  # pragma: no cover - every displacement word has its separator
            raise ValueError("not a displacement word")
        n = self.n
        consumed = tuple(s - n - 1 if s < INPUT_BASE else s for s in reversed(after))
        return consumed, tuple(pushed)

    def symbol_text(self, symbol: int) -> str:
        """The name of a symbol of :meth:`split_word`'s output."""
        gnf = self.gnf
        if symbol >= RELATIVE_BASE:
            f, j, lo, hi = split_relative_symbol(symbol)
            return f"{self.families[f].name}[x+{j}]"
        if symbol >= INPUT_BASE:
            f, lo, hi = split_input_symbol(symbol)
            top = "∞" if hi == UNBOUNDED else str(hi)
            return f"{self.families[f].name}[x] (x in {lo}..{top})"
        return gnf.symbol_name(symbol)

    def pairs(self, node: int, limit: int = 50) -> list[DisplacementPair]:
        """Readable (σ_in, σ_out) pairs of a displacement node, at most ``limit``."""
        out = []
        for word in self.store.words(node, limit):
            consumed, pushed = self.split_word(word)
            out.append(DisplacementPair(tuple(map(self.symbol_text, consumed)), tuple(map(self.symbol_text, pushed))))
        return out

    def num_pairs(self, node: int) -> int:
        return self.store.count(node)


__all__ = ["Displacer", "DisplacementPair", "split_family_symbol"]
