"""``Substring("c1", "c2", ...)``: any run of consecutive chunks, as XGrammar matches it.

0.2.8 and 0.2.9 are the same here (``tests/test_substring.py`` runs under each).

The language is ``{c_i c_(i+1) ... c_(j-1) : 0 <= i <= j <= n}``: chunks are atomic (no part
of one), in order, contiguous; ε included (checked against the installed binary on XGrammar's
own brute-force cases, repeated, empty, multi-byte and NUL chunks: ``tests/test_substring.py``).
Empty chunks add nothing and are dropped. As an automaton: one state per chunk boundary and
per byte inside a chunk, every boundary final, the start reading the first byte of any chunk.
"""

from __future__ import annotations

from .tree import Automaton, Span

__all__ = ["substring_automaton"]


def substring_automaton(chunks: list[bytes], span: Span | None) -> Automaton:
    """The automaton of ``Substring(*chunks)`` (chunks as UTF-8 bytes)."""
    chunks = [chunk for chunk in chunks if chunk]
    # State 0: the start (nothing read). Boundary i (after chunk i-1, i >= 1) and the bytes
    # inside each chunk get their own states.
    edges: list[tuple[int, tuple[int, int], int]] = []
    boundary = [0]  # boundary[i]: the state where chunk i may begin (0 for i = 0: the start)
    states = 1
    inner: list[list[int]] = []  # inner[i][k]: the state after k+1 bytes of chunk i (last: boundary i+1)
    for chunk in chunks:
        inner.append(list(range(states, states + len(chunk))))
        states += len(chunk)
        boundary.append(inner[-1][-1])
    for i, chunk in enumerate(chunks):
        path = inner[i]
        for k in range(1, len(chunk)):
            edges.append((path[k - 1], (chunk[k], chunk[k]), path[k]))
        # The chunk's first byte: from the boundary before it, and from the start.
        sources = {boundary[i], 0}
        for source in sorted(sources):
            edges.append((source, (chunk[0], chunk[0]), path[0]))
    finals = tuple([0] + boundary[1:])
    return Automaton(states, 0, finals, tuple(edges), "Substring", span)
