# C twin: csrc/words.c, csrc/store.c (node for node: tests/test_compiled.py; docs/design.md)
"""Finite sets of symbol sequences as hash-consed minimal acyclic automata.

Both the factored GNF (each production ``A → a · L`` keeps its tails L as one
set) and displacement classing (each configuration set after a prefix is one set
of words ``σ_out · SEP · reverse(σ_in)``) are built on this store.

A node is ``(accepts_empty_word, ((symbol, child), ...))`` with edges sorted by
symbol. Nodes are interned bottom-up, so the automaton is deterministic and every
node's right language is unique: *equal node ids ⇔ equal sets* (the canonical
minimal acyclic DFA; Daciuk et al. 2000). Every set operation is memoised on
node ids, which is what keeps long runs of identical bytes and nested optional
suffixes polynomial: repeated sub-sets are computed once and shared.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

EMPTY = 0  # ∅
EPSILON = 1  # {ε}

Edges = tuple[tuple[int, int], ...]

# Set operations recurse along word length (token bytes × tail length); Python
# 3.11 runs pure-Python recursion off the C stack, so a higher limit is safe — as long as
# no recursive step passes through C: a call made by ``tuple(generator)``, ``sum``, ``any``
# or ``sorted`` runs on the C stack, and 16,000 of them (a long literal's word) overflowed
# it (a segmentation fault, not a RecursionError). So the recursive set operations here and
# in the normal form recurse from plain loops only.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))


class BudgetExceeded(Exception):
    """Raised by :meth:`WordStore.make` when a caller's node budget runs out.

    Memo tables only ever hold finished results, so the store stays consistent.
    """


class WordStore:
    """Interning table and memoised set algebra over word-set nodes."""

    __slots__ = ("nodes", "_index", "_union", "_union_n", "_concat", "_count", "created", "limit")

    def __init__(self) -> None:
        self.nodes: list[tuple[bool, Edges]] = [(False, ()), (True, ())]
        self._index: dict[tuple[bool, Edges], int] = {self.nodes[0]: EMPTY, self.nodes[1]: EPSILON}
        self._union: dict[tuple[int, int], int] = {}
        self._union_n: dict[tuple[tuple[int, int], ...], int] = {}  # union_concats
        self._concat: dict[tuple[int, int], int] = {}
        self._count: dict[int, int] = {EMPTY: 0, EPSILON: 1}
        self.created = 0  # nodes interned so far; budgets read it
        self.limit = float("inf")  # make() raises BudgetExceeded past this many nodes

    def __len__(self) -> int:
        return len(self.nodes)

    # -- construction -------------------------------------------------------
    def make(self, accepts: bool, edges: Edges) -> int:
        """Intern a node; ``edges`` must be sorted by symbol, children non-empty."""
        key = (accepts, edges)
        node = self._index.get(key)
        if node is None:
            node = len(self.nodes)
            self.nodes.append(key)
            self._index[key] = node
            self.created += 1
            if self.created > self.limit:
                raise BudgetExceeded(self.created)
        return node

    def adopt(self, nodes: list[tuple[bool, Edges]]) -> None:
        """Intern ``nodes``, none of which the store holds, as ids ``len(self)`` on in their order (the nodes a
        compiled store seeded with this one's made, :func:`~.gnf._adopt_nodes`), in two dict/list calls
        rather than a :meth:`make` each (37,313 nodes of a counted MaskBench schema's merging: ~240 ms one
        by one); no budget. Raises ``ValueError``, the store unchanged, where one of them is held already."""
        index = self._index
        if not index.keys().isdisjoint(nodes) or len(set(nodes)) != len(nodes):
            raise ValueError("adopt: a node the store already holds")
        index.update(zip(nodes, range(len(self.nodes), len(self.nodes) + len(nodes))))
        self.nodes.extend(nodes)
        self.created += len(nodes)

    def make_edges(self, accepts: bool, edges: dict[int, int]) -> int:
        return self.make(accepts, tuple(sorted((s, c) for s, c in edges.items() if c != EMPTY)))

    def word(self, symbols) -> int:
        """The singleton set ``{symbols}``."""
        node = EPSILON
        for s in reversed(tuple(symbols)):
            node = self.make(False, ((s, node),))
        return node

    # -- queries ------------------------------------------------------------
    def accepts(self, node: int) -> bool:
        return self.nodes[node][0]

    def edges(self, node: int) -> Edges:
        return self.nodes[node][1]

    def child(self, node: int, symbol: int) -> int:
        for s, c in self.nodes[node][1]:
            if s == symbol:
                return c
        return EMPTY

    def count(self, node: int) -> int:
        """Number of words in the set (can be astronomically large: a Python int)."""
        got = self._count.get(node)
        if got is None:
            accepts, edges = self.nodes[node]
            got = int(accepts)
            for _, c in edges:  # a loop, not sum(...): see the recursion note at the top
                got += self.count(c)
            self._count[node] = got
        return got

    def words(self, node: int, limit: int | None = None) -> Iterator[tuple[int, ...]]:
        """Enumerate words (for tests, views and small explanations)."""
        stack: list[tuple[int, tuple[int, ...]]] = [(node, ())]
        produced = 0
        while stack:
            n, prefix = stack.pop()
            accepts, edges = self.nodes[n]
            if accepts:
                yield prefix
                produced += 1
                if limit is not None and produced >= limit:
                    return
            for s, c in reversed(edges):
                stack.append((c, prefix + (s,)))

    def reachable(self, roots) -> set[int]:
        """All nodes reachable from ``roots`` (the DAG size of a set of sets)."""
        seen: set[int] = set()
        stack = [r for r in roots if r > EPSILON]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(c for _, c in self.nodes[n][1] if c > EPSILON and c not in seen)
        return seen

    # -- set algebra --------------------------------------------------------
    def union(self, a: int, b: int) -> int:
        if a == b or b == EMPTY:
            return a
        if a == EMPTY:
            return b
        if a > b:
            a, b = b, a
        key = (a, b)
        got = self._union.get(key)
        if got is not None:
            return got
        acc_a, ea = self.nodes[a]
        acc_b, eb = self.nodes[b]
        merged: list[tuple[int, int]] = []
        i = j = 0
        while i < len(ea) and j < len(eb):
            sa, ca = ea[i]
            sb, cb = eb[j]
            if sa == sb:
                merged.append((sa, self.union(ca, cb)))
                i += 1
                j += 1
            elif sa < sb:
                merged.append(ea[i])
                i += 1
            else:
                merged.append(eb[j])
                j += 1
        merged.extend(ea[i:])
        merged.extend(eb[j:])
        got = self.make(acc_a or acc_b, tuple(merged))
        self._union[key] = got
        return got

    def union_many(self, nodes) -> int:
        """The union of all of ``nodes`` at once, creating only the nodes of the result
        (:meth:`union_concats` of ``(node, EPSILON)`` terms)."""
        return self.union_concats([(n, EPSILON) for n in nodes])

    def union_concats(self, terms) -> int:
        """The union of the concatenations ``a · b`` of ``terms`` (pairs), creating only the nodes of the result.

        The displacement step's result is such a union, one term per edge and backtrack candidate.
        Folding it pairwise (``union(result, concat(tail, rest))``) made every term whole and a node
        per partial result, with the kid unions under it: 60% of sql_select's classing nodes (93k
        of 158k) were partial results, most of the rest terms merged away, ~15k were left in the
        token nodes' sets. Here the terms' edges are merged by symbol without making the terms: an
        edge ``(s, c)`` of ``a`` stands for ``(s, c · b)``, and where ``a`` holds the empty word,
        ``b``'s edges join as they are; a symbol one term has gets that term made (:meth:`concat`),
        one several have the union of theirs, recursively.

        Order (the C store, ``csrc/words.c`` ``w_union_n``, creates the same nodes in the same order):
        the terms as a sorted set of pairs without EMPTY parts, ``ε · b`` read as ``b · ε``; one
        term is :meth:`concat`, two plain nodes (``b`` = ε) :meth:`union` (their memos and order);
        otherwise memoised on that sorted tuple, the kids made in symbol order, then the node. The
        set is the one the fold gives (nodes are canonical).
        """
        ops = set()
        for a, b in terms:
            if a != EMPTY and b != EMPTY:
                ops.add((b, EPSILON) if a == EPSILON else (a, b))
        ops = sorted(ops)
        if len(ops) <= 2:
            if not ops:
                return EMPTY
            if len(ops) == 1:
                return self.concat(ops[0][0], ops[0][1])
            if ops[0][1] == EPSILON and ops[1][1] == EPSILON:
                return self.union(ops[0][0], ops[1][0])
        key = tuple(ops)
        got = self._union_n.get(key)
        if got is not None:
            return got
        accepts = False
        kids: dict[int, list[tuple[int, int]]] = {}
        nodes = self.nodes
        for a, b in ops:
            acc, edges = nodes[a]
            for s, c in edges:
                group = kids.get(s)
                if group is None:
                    kids[s] = [(c, b)]
                else:
                    group.append((c, b))
            if not acc:
                continue
            if b == EPSILON:
                accepts = True
                continue
            acc, edges = nodes[b]  # a holds the empty word: a · b holds b
            if acc:
                accepts = True
            for s, c in edges:
                group = kids.get(s)
                if group is None:
                    kids[s] = [(c, EPSILON)]
                else:
                    group.append((c, EPSILON))
        merged = []
        for s in sorted(kids):  # a loop, not a comprehension over C calls: see the recursion note
            group = kids[s]
            merged.append((s, self.concat(group[0][0], group[0][1]) if len(group) == 1 else self.union_concats(group)))
        got = self.make(accepts, tuple(merged))
        self._union_n[key] = got
        return got

    def union_all(self, nodes) -> int:
        out = EMPTY
        for n in nodes:
            out = self.union(out, n)
        return out

    def concat(self, a: int, b: int) -> int:
        """``{uv : u ∈ a, v ∈ b}``."""
        if a == EMPTY or b == EMPTY:
            return EMPTY
        if a == EPSILON:
            return b
        if b == EPSILON:
            return a
        key = (a, b)
        got = self._concat.get(key)
        if got is not None:
            return got
        accepts, edges = self.nodes[a]
        out = []
        for s, c in edges:  # a loop, not tuple(...): see the recursion note at the top
            out.append((s, self.concat(c, b)))
        got = self.make(False, tuple(out))
        if accepts:
            got = self.union(got, b)
        self._concat[key] = got
        return got

    def without_empty_word(self, node: int) -> int:
        accepts, edges = self.nodes[node]
        return self.make(False, edges) if accepts else node

    def without_edge(self, node: int, symbol: int) -> int:
        accepts, edges = self.nodes[node]
        return self.make(accepts, tuple(e for e in edges if e[0] != symbol))
