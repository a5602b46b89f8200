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
"""

from __future__ import annotations

from dataclasses import dataclass

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
        # For each atom: the nonterminals with a production on it, and their tails.
        self._tops = [[(a, row[k]) for a, row in enumerate(table) if k in row] for k in range(self.num_atoms)]
        # Stack adjacency and the backtrack candidates are built by the first backtrack: a native
        # engine loaded with its index never backtracks (its states have no SEP), and building
        # them cost 0.31 s on c_like, most of a load from the cache.
        self._below: list[set[int]] | None = None
        self._backtracks_table: list[list[list[tuple[int, int]]]] | None = None
        self._step: dict[int, int] = {}
        self.initial = self.store.make(False, ((self.sep, EPSILON),))
        self.atom_table = bytes(gnf.atom_of)  # for bytes.translate

    @property
    def below(self) -> list[set[int]]:
        """Stack adjacency (:func:`~.adjacency.stack_adjacency`): ``below[A]`` may sit under A."""
        if self._below is None:
            self._below = stack_adjacency(self.gnf)
        return self._below

    @property
    def _backtracks(self) -> list[list[list[tuple[int, int]]]]:
        """For each (A_last, atom): the backtrack candidates A below A_last, with their tails."""
        if self._backtracks_table is None:
            below = self.below
            self._backtracks_table = [
                [[(a, t) for a, t in self._tops[k] if a in below[last]] for k in range(self.num_atoms)]
                for last in range(self.n)
            ]
        return self._backtracks_table

    def step(self, node: int, atom: int) -> int:
        key = node * self.num_atoms + atom
        got = self._step.get(key)
        if got is not None:
            return got
        store, n, sep = self.store, self.n, self.sep
        union, concat, make = store.union, store.concat, store.make
        table = self.gnf.table
        result = EMPTY
        for sym, rest in store.edges(node):
            if sym < n:
                tail = table[sym].get(atom)
                if tail is not None:
                    result = union(result, concat(tail, rest))
            else:  # SEP: σ_out is empty, backtrack into the context
                if store.accepts(rest):
                    candidates = [(a, t, EPSILON) for a, t in self._tops[atom]]
                else:
                    candidates = []
                backtracks = self._backtracks_table or self._backtracks
                for in_sym, deeper in store.edges(rest):
                    consumed = make(False, ((in_sym, deeper),))
                    candidates += [(a, t, consumed) for a, t in backtracks[in_sym - n - 1][atom]]
                for a, tail, consumed in candidates:
                    enqueued = make(False, ((sep, make(False, ((n + 1 + a, consumed),))),))
                    result = union(result, concat(tail, enqueued))
        self._step[key] = result
        return result

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

    def pairs(self, node: int, limit: int = 50) -> list[DisplacementPair]:
        """Readable (σ_in, σ_out) pairs of a displacement node, at most ``limit``."""
        names, n = self.gnf.names, self.n
        out = []
        for word in self.store.words(node, limit):
            cut = word.index(self.sep)
            pushed = tuple(names[s] for s in word[:cut])
            consumed = tuple(names[s - n - 1] for s in reversed(word[cut + 1 :]))
            out.append(DisplacementPair(consumed, pushed))
        return out

    def num_pairs(self, node: int) -> int:
        return self.store.count(node)


__all__ = ["Displacer", "DisplacementPair"]
