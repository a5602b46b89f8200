"""Stack adjacency A_S of a GNF pushdown automaton (paper §3.2.2, appendix D).

We use the *directly-below* form: ``B ∈ below[A]`` when some reachable stack has
B immediately under A. A displacement backtrack that has consumed the context
symbol A and emptied its output must next consume the symbol directly below A,
so backtracks are restricted to ``below[A_last]``. It over-approximates real
stacks (sound) and is computed as a fixpoint::

    below[S] ∋ ⊥
    for every production A → a B1…Bk:   below[Bi] ∋ B(i+1)        (i < k)
                                         below[Bk] ⊇ below[A]
"""
from __future__ import annotations

from ..grammar.gnf import GNF

BOTTOM = -1  # ⊥, the empty rest of the stack


def stack_adjacency(gnf: GNF) -> list[set[int]]:
    """``below[A]``: the symbols (or BOTTOM) that can sit directly under A."""
    store = gnf.store
    n = gnf.num_nonterminals
    below: list[set[int]] = [set() for _ in range(n)]
    below[gnf.start].add(BOTTOM)
    lasts_memo: dict[int, frozenset[int]] = {}

    def lasts(node: int) -> frozenset[int]:
        # Symbols that end some word of the tail set.
        got = lasts_memo.get(node)
        if got is None:
            acc: set[int] = set()
            for s, c in store.edges(node):
                if store.accepts(c):
                    acc.add(s)
                acc |= lasts(c)
            got = lasts_memo[node] = frozenset(acc)
        return got

    # Consecutive pairs inside tails.
    tails = store.reachable(t for row in gnf.table for t in row.values())
    for node in tails:
        for s, c in store.edges(node):
            for s2, _ in store.edges(c):
                below[s].add(s2)
    # below[last] ⊇ below[A], propagated to a fixpoint.
    ends: list[set[int]] = [set() for _ in range(n)]
    for a, row in enumerate(gnf.table):
        for t in set(row.values()):
            ends[a] |= lasts(t)
    changed = True
    while changed:
        changed = False
        for a in range(n):
            for b in ends[a]:
                if not below[a] <= below[b]:
                    below[b] |= below[a]
                    changed = True
    return below
