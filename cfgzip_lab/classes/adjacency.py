"""Stack adjacency A_S of a GNF pushdown automaton (paper §3.2.2, appendix D).

We use the *directly-below* form: ``B ∈ below[A]`` when some reachable stack has
B immediately under A. A displacement backtrack that has consumed the context
symbol A and emptied its output must next consume the symbol directly below A,
so backtracks are restricted to ``below[A_last]``. This is at least as tight as
the paper's "popped right after" form: the last symbol popped before the
backtrack was the bottom of A's expansion, whose below-set contains A's.
The fixpoint itself lives with the GNF (:func:`cfgzip_lab.grammar.gnf.stack_below`),
which also uses it to keep nonterminal merging from blurring stack contexts.
"""

from __future__ import annotations

from ..grammar.gnf import BOTTOM, GNF, stack_below


def stack_adjacency(gnf: GNF) -> list[set[int]]:
    """``below[A]``: the symbols (or BOTTOM) that can sit directly under A; entry
    ``n + f`` stands for every member of family f (see :func:`stack_below`)."""
    return stack_below(gnf.table, gnf.store, gnf.start, [f.item for f in gnf.families])


__all__ = ["BOTTOM", "stack_adjacency"]
