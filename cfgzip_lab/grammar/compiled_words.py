"""The compiled word store (``csrc/words.c``, ``csrc/store.c``) behind the Python API of :mod:`.words`, its reference.

Classing, the σ_in index build and the native walk all run on one word store per grammar. Where
the compiled kernel is built, that store is a :class:`CompiledWordStore`: a ``_native.Words`` seeded
with the GNF's :class:`~cfgzip_lab.grammar.words.WordStore` nodes (same ids), to which classing,
the index and the walk add theirs in C. The Python API stays: ``nodes`` (a sequence of ``(accepts,
edges)`` tuples, made on access), ``make``, ``union``, ``union_many``, ``union_concats``, ``concat``,
``count``, ``words``, ``reachable``, ``accepts``, ``edges``, ``child``, ``created``, ``limit``;
:class:`~cfgzip_lab.classes.compiled_displacement.CompiledDisplacer` is a
:class:`~cfgzip_lab.classes.displacement.Displacer` over it. So explanations, the limits' messages and the tests read the compiled store as they read the Python one.

Why the compiled store is THE store rather than exporting its nodes into the Python one (as
``classing._walk_parallel`` does for forked workers): exporting costs what the compiled walk saves.
Measured with Llama-3 (``benchmarks/compiled_bench.py --export``): c_like's classing leaves 240k new
nodes; re-interning them into the WordStore took longer than the compiled classing itself, and the
walk's memos (the step memo above all) would not come along.

Same ids as the Python reference: every operation creates its nodes in the order the Python code
does (see ``csrc/words.h``), so a compiled store and a Python store given the same calls hold the same
nodes under the same ids; ``tests/test_compiled.py`` checks this node for node.

The compiled paths are used where the kernel is built (``CFGZIP_NATIVE_KERNEL=0``: never, see
:mod:`cfgzip_lab._binding`) and the GNF has no token atoms (:func:`supports`). Counted-repetition families
(:mod:`cfgzip_lab.grammar.counted`) step in C too: the store packs the symbolic σ_in and σ_out
symbols ``IN(f, lo, hi)`` / ``REL(f, j, lo, hi)`` (Python ints past 2^100) into 64 bits with their
fields in Python's order (:func:`symbol_widths`; a grammar whose counts do not fit takes the Python
step), and converts them back at the Python API. The σ_in index of such a grammar is listed in
Python (its ``IN`` edges), on the same compiled store.

Beside it: the displacer over this store (``classes/compiled_displacement.py``, beside
``classes/displacement.py``) and the vocabulary's byte trie (``vocab_trie.py``).
"""

from __future__ import annotations

from .._binding import kernel as _kernel
from .gnf import GNF
from .words import EMPTY, EPSILON, BudgetExceeded, WordStore

__all__ = [
    "available",
    "supports",
    "supports_walk",
    "symbol_widths",
    "set_grammar",
    "new_word_store",
    "as_word_store",
    "COUNTED_IN_COMPILED_STORE",
    "CompiledWordStore",
    "Unsupported",
]

Unsupported = _kernel.Unsupported if _kernel is not None else RuntimeError
"""Raised by the compiled store where a set operation would recurse deeper than it allows
(``_kernel.MAX_DEPTH``); callers fall back to the Python path."""


def available() -> bool:
    """Whether the compiled word store is built and switched on."""
    return _kernel is not None


TOKEN_BASE = 256
"""The first bit of an atom that is no byte (token-level macros' pseudo-bytes, issue 19)."""


def has_token_atoms(gnf: GNF) -> bool:
    """Whether ``gnf`` has token atoms (``Token(...)``/``ExcludeToken(...)``: atoms holding bits from
    :data:`TOKEN_BASE` on, see :mod:`cfgzip_lab.grammar.token_macros`): a token then also reads as its
    token atom, which only the Python classing, index and walk add."""
    return any(atom.bits >> TOKEN_BASE for atom in gnf.atoms)


def supports_walk(gnf: GNF) -> bool:
    """Whether classing can walk the vocabulary and number the classes in C with ``gnf``'s Python
    displacer stepping (``_kernel.classify_steps``): where it is built. Counted families are fine
    (their steps stay the Python ones), and so are token atoms: the walk gives each token its bytes'
    node and ``token_macros.add_token_paths`` then unions its token atom's in, as the Python path does."""
    return available()


COUNTED_SYMBOL_BITS = _kernel.COUNTED_SYMBOL_BITS if _kernel is not None else 0
"""Bits a packed counted-repetition symbol has for its fields in the compiled store (0: no kernel)."""


def symbol_widths(gnf: GNF) -> tuple[int, int] | None:
    """``(family bits, count bits)`` the compiled store packs ``gnf``'s ``IN(f, lo, hi)`` and
    ``REL(f, j, lo, hi)`` symbols with (``f << 3W | j << 2W | lo << W | hi``, W the count bits:
    every count of a family is in ``0..last``); ``(0, 0)`` without families; None when they do not
    fit (:data:`COUNTED_SYMBOL_BITS`: a bound past ~2^20 with one family, e.g. ``[a-c]{0,2147483647}``),
    or the kernel does not know families: such a GNF takes the Python step."""
    families = getattr(gnf, "families", None) or ()
    if not families:
        return 0, 0
    fbits = max(1, (len(families) - 1).bit_length())
    cbits = max(1, max(f.last for f in families).bit_length())
    if fbits + 3 * cbits > COUNTED_SYMBOL_BITS or len(families) >= 1 << 20:
        return None
    return fbits, cbits


def supports(gnf: GNF) -> bool:
    """Whether the compiled paths can run ``gnf``: built, no token atoms (a token's displacement then
    unions its token atom's, issue 19) and counted-repetition families whose symbols fit the store
    (:func:`symbol_widths`): the Python path runs the others."""
    return available() and not has_token_atoms(gnf) and symbol_widths(gnf) is not None


def _families(gnf: GNF) -> list[tuple[int, int, int]]:
    """``gnf.families`` as ``Words.grammar`` reads them: (item, min, max), max -1 when unbounded."""
    return [(f.item, f.min, -1 if f.max is None else f.max) for f in getattr(gnf, "families", None) or ()]


def set_grammar(native, gnf: GNF) -> int:
    """The grammar's tables (and families) set in a compiled store; the displacer's initial node."""
    families = _families(gnf)
    if families:
        return native.grammar(gnf.table, len(gnf.atoms), gnf.start, families)
    return native.grammar(gnf.table, len(gnf.atoms), gnf.start)


class CompiledWordStore:
    """:class:`~cfgzip_lab.grammar.words.WordStore`'s API over a compiled store.

    The queries that only read nodes (``count``, ``words``, ``reachable``...) are WordStore's own
    functions over :attr:`nodes`; construction and the set algebra run in C.
    """

    def __init__(self, native) -> None:
        self.native = native
        self.nodes = native  # a sequence of (accepts, ((symbol, child), ...)), made on access
        self._count: dict[int, int] = {EMPTY: 0, EPSILON: 1}

    @classmethod
    def seeded(cls, store: WordStore, widths: tuple[int, int] = (0, 0)) -> CompiledWordStore:
        """A compiled store holding ``store``'s nodes under the same ids (``store`` is not changed);
        ``widths``: :func:`symbol_widths` of the grammar whose counted-repetition symbols it holds."""
        if widths != (0, 0):
            return cls(_kernel.Words(store.nodes, store.created, BudgetExceeded, widths))
        return cls(_kernel.Words(store.nodes, store.created, BudgetExceeded))

    def __len__(self) -> int:
        return len(self.native)

    @property
    def created(self) -> int:
        return self.native.created

    @property
    def limit(self):
        return self.native.limit

    @limit.setter
    def limit(self, value) -> None:
        self.native.limit = value

    def make(self, accepts: bool, edges) -> int:
        return self.native.make(accepts, edges)

    def union(self, a: int, b: int) -> int:
        return self.native.union(a, b)

    def union_many(self, nodes) -> int:
        return self.native.union_many(nodes)

    def union_concats(self, terms) -> int:
        return self.native.union_concats(terms)

    def concat(self, a: int, b: int) -> int:
        return self.native.concat(a, b)

    def accepts(self, node: int) -> bool:
        return self.native.accepts(node)

    def edges(self, node: int):
        return self.native.edges(node)

    def child(self, node: int, symbol: int) -> int:
        return self.native.child(node, symbol)

    def count(self, node: int) -> int:
        """WordStore.count: counted in C (memoised per node); past 64 bits with Python's ints."""
        got = self.native.count(node)
        return WordStore.count(self, node) if got is None else got

    def reachable(self, roots) -> set[int]:
        """WordStore.reachable, walked in C (the normal form's size after each step and its merging
        budget ask for it: 5 ms a call on a JSON Schema's GNF through ``nodes``)."""
        return self.native.reachable(roots)

    def stats(self) -> dict:
        """Nodes, edges, memo entries, steps and the bytes the arrays hold."""
        return self.native.stats()

    # WordStore's own code for what only reads nodes or composes the operations above.
    make_edges = WordStore.make_edges
    word = WordStore.word
    words = WordStore.words
    union_all = WordStore.union_all
    without_empty_word = WordStore.without_empty_word
    without_edge = WordStore.without_edge


COUNTED_IN_COMPILED_STORE = True
"""Whether a grammar with counted repetitions has its normal form built in the compiled store (its passes in
C, ``gnf.PASSES_IN_C``) like any other; False: in a WordStore (the Python walks), as before. The same nodes
under the same ids either way (``tests/test_counted.py`` compares both); the GNF's store holds only concrete
members ``F_c`` (below 2^61), and classing sets the packed σ_in / σ_out widths (:func:`set_grammar`)."""


def new_word_store(counted: bool = False, tokens: bool = False) -> WordStore | CompiledWordStore:
    """A fresh, empty word store for a normal form: compiled where the kernel is built (the same nodes
    under the same ids as a WordStore; the GNF's set algebra runs in C, and classing, the index and the
    walk continue in the same store), a WordStore where it is not or for a grammar with token atoms
    (``tokens``: classing runs in Python, :func:`supports`), or with counted repetitions (``counted``)
    where :data:`COUNTED_IN_COMPILED_STORE` is off. A counted grammar whose packed symbols turn out not to
    fit (:func:`symbol_widths`) is moved to a WordStore after its normal form (:func:`as_word_store`).
    Measured (c_like, CPU time): to_gnf 0.35 s in a WordStore, 0.18 s in a compiled store."""
    if (counted and not COUNTED_IN_COMPILED_STORE) or tokens or not available():
        return WordStore()
    return CompiledWordStore.seeded(WordStore())


def as_word_store(store: CompiledWordStore) -> WordStore:
    """A WordStore holding ``store``'s nodes under the same ids (its ``created`` too), for a normal form
    whose counted-repetition symbols do not fit the compiled store (:func:`symbol_widths`: the Python
    step runs it). Its memos start empty: a set operation met again makes the nodes it made before, which
    the store holds, so later nodes get the ids they get in a normal form built in a WordStore."""
    out = WordStore()
    nodes = store.nodes
    out.adopt([nodes[i] for i in range(2, len(store))])
    out.created = store.created
    return out
