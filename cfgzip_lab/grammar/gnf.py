# C twin: csrc/gnf_passes.c, csrc/gnf_merge.c (pass for pass: tests/test_gnf_passes.py; docs/design.md),
# csrc/cfg_passes.c (_reachable_rules: tests/test_cfg_passes.py)
"""Greibach normal form in factored form.

A GNF grammar has only productions ``A → a B1…Bn`` (a a byte set, Bi non-start
nonterminals) plus ``S → ε`` when the language holds ε. Classic conversion lists
every variant: ε-removal alone turns ``expr ::= term (ws op ws term)*`` chained
nine levels deep into hundreds of thousands of productions. We never list them:
each nonterminal A owns ONE right-hand-side set ``R_A`` (a finite set of symbol
sequences, see :mod:`words`), and every step is a set operation on those DAGs.

Symbols are ints: nonterminals ``>= 0``; byte classes ("atoms", bytes no terminal
of the grammar tells apart) are ``-1 - k``. Pipeline (each step a pure function
of the previous rule map, recorded with its size for the workbench):

1. *terminal lifting*: every terminal occurrence becomes its own nonterminal
   ``N → atom`` for each atom of its byte set, so terminals never stand in tails;
   a fresh start ``S0 → root`` keeps the start symbol out of tails (``root`` may be
   referenced in bodies). One nonterminal per *occurrence*, not per byte set:
   sharing one ``'i'`` between every keyword lets stack adjacency chain letters of
   different keywords (``i g n i t e d``) and split classes (C-like: 7,492 classes
   shared, 4,001 per occurrence).
2. *useless symbols*: keep generating symbols (a word of generating symbols
   exists; fixpoint), then those reachable from S0.
3. *ε-rules*: NULLABLE fixpoint; ``R_A := opt(R_A) \\ {ε}`` where ``opt`` lets
   each nullable occurrence be present or absent. ``opt`` is memoised per DAG
   node, so a word with k optional symbols costs O(k) nodes, not 2^k words.
   Standard argument (Hopcroft & Ullman, Thm 4.3): L(A) \\ {ε} is unchanged.
4. *unit rules*: ``R_A := (R_A \\ units) ∪ ⋃_{B ∈ unit*(A)} (R_B \\ units)``.
5. *left recursion* (Paull's algorithm on sets): order nonterminals
   topologically by the left-corner graph (SCCs in any order inside), then for
   each A_i substitute leading A_j with j < i, and replace direct recursion
   ``R = A·α ∪ β`` by ``R_A = β ∪ β·Z``, ``R_Z = α ∪ α·Z`` (ε dropped from α:
   ``A → A`` adds nothing). L(A) = β α* is unchanged.
6. *leading substitution*: in reverse order every leading nonterminal already
   starts with atoms; substitute ``R_A := atom-led words ∪ ⋃_B R_B · R_A[B]``,
   then the Z's in creation order (a Z may only lead with an older Z).
7. *merging*: coarsest partition of nonterminals whose per-atom tail sets AND
   stack contexts (below-sets) are equal up to the partition (partition
   refinement / bisimulation). Merged nonterminals derive the same strings
   (induction on string length: each GNF step reads one byte), so merging is
   sound; equal contexts keep stack adjacency as precise as before. Counted-repetition
   families whose items end in one block and whose bounds are equal are merged too
   (:func:`_merge_equivalent`).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

from .._binding import kernel as _kernel
from .cfg import BYTE_BITS, CFG, ByteSet, byte_classes, format_byteset
from .counted import FAMILY_BASE, INPUT_BASE, Family, family_symbol, is_family_symbol, split_family_symbol
from .diagnostics import Diagnostic, GrammarError
from .provenance import Origin, _make_origin, describe_gnf_symbol, describe_origins, origin_at, rules_of
from .words import EMPTY, EPSILON, BudgetExceeded, WordStore

if TYPE_CHECKING:
    from ..deadline import Deadline

PASSES_IN_C = True
"""Whether the normal form's walks over rule sets run in the compiled store's C passes
(``csrc/gnf_passes.c``) when the GNF is built in one: the same nodes under the same ids as these
Python walks, which stay the reference (and run in a WordStore); tests switch this off to compare."""
_DROP = -(1 << 63)  # an edge the C symbol map drops

# CYCLES: a recursive closure (a nested function that calls itself: ``renumber``, ``opt``, ``rename``...)
# holds the cell that holds it, so the function, its cells and all they close over (the word store,
# the memo dicts, a Python store's node tuples) form a reference cycle that only a collection frees:
# 60 MaskBench builds through the Python store left ~1.7 million objects for the collector to sweep.
# Each such closure is set to None after its last use (in a ``finally``), which breaks the cycle, so a
# build leaves no cyclic garbage (tests/test_gnf_cycles.py).


def _passes(store):
    """The compiled store's passes (``_native.Words``), or None: run the Python walks."""
    native = getattr(store, "native", None)
    return native if PASSES_IN_C and native is not None else None


def _memo(store) -> array:
    """A C pass's memo: -1 (not yet) per node of the store as it is."""
    return array("i", [-1]) * len(store)


DEFAULT_MAX_GNF_NODES = 1_000_000
"""Word-store nodes the normal form may create (the memory bound of GNF conversion, about
600 MB at classing's measured ~600 bytes a node with memos). The bundled grammars need at
most 54,848 (c_like), the 552 grammars of XGrammar's test suite and the 40 third-party
grammars far less; a grammar past it gets a :class:`NormalFormTooLarge` naming the step and rule."""


@dataclass
class NormalFormTooLarge(GrammarError):
    """The normal form grew past its node budget (``max_nodes``): a :class:`GrammarError` naming the
    step and the rule, of its own type so that the serving path (``GrammarCache``) can tell a grammar
    too large for cfgzip, which XGrammar itself then serves, from a grammar with errors.
    ``ebnf`` and ``grammar_source``: the EBNF being normalised and where it came from, set by
    :func:`cfgzip_lab.pipeline.compile_grammar` (what XGrammar then compiles, without a second
    conversion of the input)."""

    ebnf: str | None = None
    grammar_source: object | None = None


def atom_symbol(k: int) -> int:
    return -1 - k


def atom_index(symbol: int) -> int:
    return -1 - symbol


class GNFStep:
    """One named step and the grammar's size after it: ``nonterminals``, ``dag_nodes`` and
    ``productions`` (the listed productions the factored rules stand for).

    A step of :func:`to_gnf` counts its sizes when one is first read (:meth:`later`): the word store
    never changes a node, so they are the sizes at that step, and a build nobody asks for them (a
    served schema) does not pay for the counting (~7 passes, ~0.04 ms of a small schema's GNF)."""

    __slots__ = ("name", "seconds", "_sizes", "_count")

    def __init__(self, name: str, nonterminals: int, dag_nodes: int, productions: int, seconds: float) -> None:
        self.name = name
        self.seconds = seconds
        self._sizes: tuple[int, int, int] | None = (nonterminals, dag_nodes, productions)
        self._count: Callable[[], tuple[int, int, int]] | None = None

    @classmethod
    def later(cls, name: str, seconds: float, count: Callable[[], tuple[int, int, int]]) -> GNFStep:
        """A step whose sizes ``count()`` gives when first read."""
        step = cls.__new__(cls)
        step.name, step.seconds, step._sizes, step._count = name, seconds, None, count
        return step

    def resolved(self, store=None) -> GNFStep:
        """This step with its sizes counted (and what it counted them from let go).

        ``store``: a compiled store that holds the normal form's word store's nodes under the same ids
        (classing's, :meth:`~cfgzip_lab.grammar.compiled_words.CompiledWordStore.seeded`), to count in
        instead of a Python :class:`WordStore`: the same sizes, counted in C (Github_hard o21075's
        counted normal form, 386k nodes: its steps' sizes took seconds of Python walks before its first mask).
        """
        if self._sizes is None:
            count = self._count
            if store is not None and isinstance(count, partial) and isinstance(count.args[0], WordStore):
                count = partial(count.func, store, *count.args[1:], **count.keywords)
            self._sizes = count()
            self._count = None
        return self

    @property
    def nonterminals(self) -> int:
        return self.resolved()._sizes[0]

    @property
    def dag_nodes(self) -> int:
        return self.resolved()._sizes[1]

    @property
    def productions(self) -> int:
        return self.resolved()._sizes[2]

    def _key(self) -> tuple:
        return (self.name, self.nonterminals, self.dag_nodes, self.productions, self.seconds)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is GNFStep and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        n, d, p = self.nonterminals, self.dag_nodes, self.productions
        return (
            f"GNFStep(name={self.name!r}, nonterminals={n}, dag_nodes={d}, productions={p}, seconds={self.seconds!r})"
        )


@dataclass
class GNF:
    """A factored GNF grammar: ``table[A][atom]`` is the set of tails of ``A → atom · tail``."""

    names: list[str]
    start: int
    accepts_empty: bool
    atoms: list[ByteSet]
    atom_of: list[int]  # byte value → atom index
    table: list[dict[int, int]]  # nonterminal → {atom index: tail node}
    store: WordStore
    steps: list[GNFStep] = field(default_factory=list)
    # Provenance (see :mod:`.provenance`): per nonterminal, the source constructs it stands
    # for (several after merging) and the byte-CFG / lifting names it was merged from.
    origins: list[tuple[Origin, ...]] = field(default_factory=list)
    merged_from: list[tuple[str, ...]] = field(default_factory=list)
    #: The dead terminal's atom (grammar.dead_ends): the last atom, with no byte, or -1.
    dead_atom: int = -1
    # Counted repetitions (see :mod:`.counted`): family f's members F_c are the symbols
    # ``family_symbol(f, c)``; their rows are computed from the item's row (:meth:`row`).
    families: list[Family] = field(default_factory=list)
    _family_rows: dict[int, dict[int, int]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_nonterminals(self) -> int:
        """Plain nonterminals (ids ``0..n-1``); family members are not counted, see :attr:`families`."""
        return len(self.names)

    def row(self, symbol: int) -> dict[int, int]:
        """``{atom: tail node}`` of a plain nonterminal or a family member ``F_c``.

        A member's row is ``T_X(a) · W_c`` (:mod:`.counted`), made on first use and memoised
        (bounded: the memo is dropped whole past 100,000 members, it only holds derived data).
        """
        if symbol < len(self.table):
            return self.table[symbol]
        got = self._family_rows.get(symbol)
        if got is None:
            f, c = split_family_symbol(symbol)
            family = self.families[f]
            store = self.store
            rest = EMPTY
            if family.continues(c):
                rest = store.word((family_symbol(f, family.successor(c)),))
            if family.stops(c):
                rest = store.union(rest, EPSILON)
            got = {atom: store.concat(tail, rest) for atom, tail in self.table[family.item].items()}
            if len(self._family_rows) >= 100_000:
                self._family_rows.clear()
            self._family_rows[symbol] = got
        return got

    def symbol_name(self, symbol: int) -> str:
        """A readable name: the nonterminal's name, or ``name[c]`` for a family member."""
        if symbol < len(self.names):
            return self.names[symbol]
        if is_family_symbol(symbol):
            f, c = split_family_symbol(symbol)
            return f"{self.families[f].name}[{c}]"
        return f"#{symbol}"

    def describe_symbol(self, symbol: int | str) -> str:
        """What GNF nonterminal ``symbol`` (an id) stands for in the grammar text, for an author."""
        return describe_gnf_symbol(self, symbol)

    def rules_of(self, symbol: int) -> tuple[str, ...]:
        """The source rules GNF nonterminal ``symbol`` was made from."""
        return rules_of(self.origins[symbol]) if symbol < len(self.origins) else ()

    @property
    def dag_nodes(self) -> int:
        return _dag_nodes(self.store, self.table)

    @property
    def num_productions(self) -> int:
        """Listed productions ``A → [bytes] B1..Bn``, atoms with equal tail sets merged.

        A family counts the productions of its rule schema ``F_c → a T_X(a) W_c`` once per
        choice in ``W_c`` (continue, stop), not once per member: it is never listed.
        """
        return _num_productions(self.store, self.table, self.families, self.accepts_empty)

    def productions(self, limit: int | None = None):
        """Yield ``(A, ByteSet, (B1, ..., Bn))`` with names; for views and small tests."""
        produced = 0
        for a, row in enumerate(self.table):
            by_tail: dict[int, int] = {}
            for atom, tail in row.items():
                by_tail[tail] = by_tail.get(tail, 0) | self.atoms[atom].bits
            for tail, bits in by_tail.items():
                for word in self.store.words(tail):
                    yield self.names[a], ByteSet(bits), tuple(self.symbol_name(s) for s in word)
                    produced += 1
                    if limit is not None and produced >= limit:
                        return

    def to_text(self, limit: int = 200) -> str:
        lines = [f"{a} -> {format_byteset(s)} {' '.join(w)}".rstrip() for a, s, w in self.productions(limit)]
        if self.accepts_empty:
            lines.insert(0, f"{self.names[self.start]} -> ε")
        for family in self.families:
            more = "" if family.max is None else f" (c + 1 <= {family.max - 1})"
            lines.append(
                f"{family.name}[c] -> {self.names[family.item]}-row {family.name}[c+1]{more}"
                + (
                    f" | {self.names[family.item]}-row (c + 1 >= {family.min})"
                    if family.min > 0
                    else f" | {self.names[family.item]}-row"
                )
                + f"   for 1 <= c <= {'∞' if family.max is None else family.max - 1}"
            )
        return "\n".join(lines)

    def accepts(self, data: bytes, *, prefix: bool = False) -> bool:
        """Run the GNF pushdown automaton on ``data`` (the set of stacks is one word set).

        With ``prefix=True`` answers whether ``data`` is a prefix of some sentence.
        """
        stacks = self.store.word((self.start,))
        if not data:
            return prefix or self.accepts_empty
        for byte in data:
            stacks = self.step_stacks(stacks, byte)
            if stacks == EMPTY:
                return False
        return prefix or self.store.accepts(stacks)

    def step_stacks(self, stacks: int, byte: int) -> int:
        """The set of stacks (a word-set node, top first) after reading ``byte``: every stack
        whose top has a production on the byte's atom, with that production's tail pushed."""
        store, atom = self.store, self.atom_of[byte]
        nxt = EMPTY
        for top, below in store.edges(stacks):
            tail = self.row(top).get(atom)
            if tail is not None:
                nxt = store.union(nxt, store.concat(tail, below))
        return nxt


class _LaterOrigins:
    """:attr:`GNF.origins` not made yet: ``make()`` makes them when the attribute is first read.

    Only explanations and diagnostics read a GNF's provenance; the normal form of a served schema hands
    them to nobody before its first mask, and making them (an :class:`Origin` per lifted terminal
    occurrence, with its line, column and excerpt, then each merged nonterminal's list without repeats) was
    ~0.3 ms of a median MaskBench schema's ~3.7 ms compile. The list read is the one made eagerly before:
    the same origins, in the same order, the same objects for the same occurrence."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], list]) -> None:
        self.make = make


def _get_origins(gnf: GNF) -> list[tuple[Origin, ...]]:
    got = gnf.__dict__["_origins"]
    if got.__class__ is _LaterOrigins:
        got = gnf.__dict__["_origins"] = got.make()
    return got


def _set_origins(gnf: GNF, value) -> None:
    gnf.__dict__["_origins"] = value


# The dataclass field ``origins`` read and written through a property: a ``_LaterOrigins`` given to the
# constructor (``_to_gnf``) is made on first read; __eq__, repr and dataclasses.replace read it too.
GNF.origins = property(_get_origins, _set_origins, doc="Per nonterminal, the source constructs it stands for.")


def _unread_origins(gnf: GNF):
    """``gnf.origins`` as stored: a :class:`_LaterOrigins` where nobody has read them yet (for a copy of
    the GNF that keeps them unmade, :func:`~.gnf_arrays.compact_gnf`)."""
    return gnf.__dict__["_origins"]


def _dag_nodes(store: WordStore, table: list[dict[int, int]]) -> int:
    """:attr:`GNF.dag_nodes` of a table in a store."""
    native = _passes(store)
    if native is not None:
        return native.reachable_count([t for row in table for t in row.values()])
    return len(store.reachable(t for row in table for t in row.values()))


def _num_productions(store: WordStore, table: list[dict[int, int]], families, accepts_empty: bool) -> int:
    """:attr:`GNF.num_productions` of a table in a store."""
    native = _passes(store)
    got = None
    if native is not None:  # (None past 64 bits: the loop)
        got = native.count_sum([tail for row in table for tail in set(row.values())])
    total = 0
    if got is not None:
        total = got
    else:
        for row in table:
            for tail in set(row.values()):
                total += store.count(tail)
    for family in families:
        choices = 1 + int(family.min < (family.max or 1 << 62))
        total += choices * sum(store.count(t) for t in set(table[family.item].values()))
    return total + int(accepts_empty)


class _Rules:
    """Mutable rule map used while converting; owns names and symbol bookkeeping."""

    def __init__(self, store: WordStore, atoms: list[ByteSet]):
        self.store = store
        self.atoms = atoms
        self.names: list[str] = []
        # provenance, parallel to names; a lifted terminal occurrence has a key for its Origin (_made_origins)
        self.origins: list[tuple] = []
        self.rhs: dict[int, int] = {}
        self.z_ids: set[int] = set()  # nonterminals made by left-recursion removal
        # Counted repetitions: head nonterminal K → (item nonterminal, min, max, byte-CFG name)
        # until ε-removal; then the families, indexed as in the family symbols (.counted).
        self.counted: dict[int, tuple[int, int, int | None, str]] = {}
        self.families: list[tuple[int, int, int, int | None, str]] = []  # (head, item, min, max, name)
        self.current: int | None = None  # the nonterminal a step is working on (budget errors name it)
        self.text = ""  # the grammar text the lifted terminals' origins point into (_made_origins)

    def add(self, name: str, rhs: int = EMPTY, origins: tuple[Origin, ...] = ()) -> int:
        self.names.append(name)
        self.origins.append(origins)
        nt = len(self.names) - 1
        self.rhs[nt] = rhs
        return nt

    def symbols_of(self, node: int, memo: dict[int, frozenset]) -> frozenset:
        got = memo.get(node)
        if got is None:
            acc = set()
            for s, c in self.store.edges(node):
                acc.add(s)
                acc |= self.symbols_of(c, memo)
            got = memo[node] = frozenset(acc)
        return got


def _rules_size(store: WordStore, roots: list[int]) -> tuple[int, int, int]:
    """The size of the rule sets ``roots`` (a step's :class:`_Rules`): nonterminals, DAG nodes, listed productions."""
    native = _passes(store)
    if native is not None:  # the same sizes, counted in C
        total = native.count_sum(roots)
        if total is not None:  # (None: some count past 64 bits, the loop below)
            return len(roots), native.reachable_count(roots), total
    nodes = store.reachable(roots)
    count = getattr(store, "native", store).count  # (the compiled count; None past 64 bits)
    total = 0
    for r in roots:
        got = count(r)
        total += store.count(r) if got is None else got
    return len(roots), len(nodes), total


class _Partition(NamedTuple):
    """What the terminal lifting reads of a grammar's byte sets: :func:`_atoms_of`, kept by the sets."""

    atoms: tuple[ByteSet, ...]
    atom_of: tuple[int, ...]  # byte value → atom index
    atom_at: dict[int, int]  # an atom's smallest bit → its index
    representatives: int  # the atoms' smallest bits
    shapes: dict[int, tuple[tuple[tuple[int, int], ...], str]]  # a set's bits → (its atoms' edges, its name)


_ATOMS: dict[frozenset[int], _Partition] = {}
_ATOMS_KEPT = 1024


def _atoms_of(byte_sets: set[ByteSet]) -> tuple[list[ByteSet], list[int]]:
    """:func:`~.cfg.byte_classes` of the sets and each byte's atom, kept by the sets' bits (the
    partition depends on them alone; a grammar compiled again has the same ones)."""
    kept = _partition(byte_sets)
    return list(kept.atoms), list(kept.atom_of)


def _partition(byte_sets: set[ByteSet]) -> _Partition:
    """The byte sets' :class:`_Partition`, made once per distinct sets (a never-seen JSON Schema's
    {const: [true, i]} often has the digits of one seen before: 32 partitions for 200 of them)."""
    key = frozenset(s.bits for s in byte_sets)
    kept = _ATOMS.get(key)
    if kept is None:
        # byte_classes and each byte's atom in C where the passes run there (byte sets only, no token atom):
        # most never-seen schemas have a partition of their own (167 of the 200 median MaskBench files)
        got = _kernel.byte_atoms(key) if PASSES_IN_C and hasattr(_kernel, "byte_atoms") else None
        if got is not None:
            atoms, atom_of = [_byte_set(b) for b in got[0]], list(got[1])
        else:
            atoms, atom_of = _atoms_and_bytes(byte_sets)
        atom_at = {a.bits & -a.bits: k for k, a in enumerate(atoms) if a.bits}
        if len(_ATOMS) >= _ATOMS_KEPT:
            _ATOMS.clear()  # derived data only: dropped whole
        kept = _ATOMS[key] = _Partition(tuple(atoms), tuple(atom_of), atom_at, sum(atom_at), {})
    return kept


def _atoms_and_bytes(byte_sets: set[ByteSet]) -> tuple[list[ByteSet], list[int]]:
    """:func:`~.cfg.byte_classes` of the sets and each byte's atom (the reference of ``byte_atoms``)."""
    atoms = byte_classes(byte_sets)
    # Bytes in the largest atom are set at once; only the others' bytes are walked (0042: 256 -> 56).
    widest = max(range(len(atoms)), key=lambda k: (atoms[k].bits & BYTE_BITS).bit_count(), default=0)
    atom_of = [widest] * 256
    for k, a in enumerate(atoms):
        bits = a.bits & BYTE_BITS if k != widest else 0  # token atoms (.token_macros) have no byte
        while bits:
            low = bits & -bits
            atom_of[low.bit_length() - 1] = k
            bits ^= low
    return atoms, atom_of


def _byte_set(bits: int) -> ByteSet:
    """The ByteSet of ``bits``, kept (a frozen dataclass is slow to make; the same sets recur from grammar to
    grammar)."""
    got = _BYTE_SETS.get(bits)
    if got is None:
        if len(_BYTE_SETS) >= _ATOMS_KEPT * 4:
            _BYTE_SETS.clear()  # (immutable values, dropped whole)
        got = _BYTE_SETS[bits] = ByteSet(bits)
    return got


_BYTE_SETS: dict[int, ByteSet] = {}


def _lift_terminals(
    cfg: CFG,
    store: WordStore,
    per_occurrence: bool = False,
    byte_sets: set[ByteSet] | None = None,
    deadline: Deadline | None = None,
) -> tuple[_Rules, int, list[int]]:
    """Build the initial rule sets; every byte set becomes a nonterminal over atoms (``byte_sets``:
    ``cfg.byte_sets()``, where the caller has them; ``deadline``: the build's, checked per rule)."""
    byte_sets = cfg.byte_sets() if byte_sets is None else byte_sets
    partition = _partition(byte_sets)
    atoms, atom_of = list(partition.atoms), list(partition.atom_of)
    if ByteSet(0) in byte_sets:
        # The dead terminal (grammar.dead_ends.DEAD): an atom of its own that no byte maps to,
        # so the paths through a dead end survive the normal form and no token ever takes one.
        atoms.append(ByteSet(0))
    rules = _Rules(store, atoms)
    rules.text = cfg.text
    # Only the rules the start reaches are lifted: the first useless-symbol pass would drop the
    # others anyway, and they are most of a JSON Schema's EBNF (XGrammar prints its basic_* rules
    # whether the schema uses them or not: 127 lifted nonterminals for 6 kept on a typical schema).
    # The survivors keep their relative order, so the GNF is the same (atoms still come from the
    # whole byte CFG).
    live = _reachable_rules(cfg)
    ids: dict[str, int] = {}
    names, rule_origins, rule_sets, cfg_origins = rules.names, rules.origins, rules.rhs, cfg.origins
    for name in cfg.rules:  # rules.add(name, origins=_cfg_origins(cfg, name)), inlined
        if name in live:
            origin = cfg_origins.get(name)
            ids[name] = nt = len(names)
            names.append(name)
            rule_origins.append((origin,) if origin is not None else (Origin(name.split("@", 1)[0], "rule"),))
            rule_sets[nt] = EMPTY
    start_origin = _make_origin(cfg.start, "start", None, None, None, "")  # Origin(cfg.start, "start")
    start = rules.add("S0", store.word((ids[cfg.start],)), (start_origin,))
    lifted: dict[int, int] = {}
    shapes: dict[int, tuple[int, str]] = {}

    origins: dict[tuple, Origin] = {}  # (rule, span) → its Origin: a literal's bytes share one
    atom_at, representatives = partition.atom_at, partition.representatives  # an atom's smallest bit → atom
    kept_shapes = partition.shapes
    native = _passes(store)
    word = native.word if native is not None else store.word
    union_all = native.union_all if native is not None else store.union_all
    make = native.make if native is not None else store.make

    def shape_of(s: ByteSet) -> tuple[int, str]:
        """The rule set over atoms of byte set ``s`` (made in the store) and its name."""
        bits = s.bits
        edges = kept_shapes.get(bits)  # (the partition's: the same for every grammar with it)
        if edges is None and bits and not bits & (bits - 1) and bits <= BYTE_BITS:
            # One byte (most of a schema's sets: its literals' bytes) is an atom of its own (no set splits an
            # atom), so its one edge is that atom's: what the walk below gives, without it.
            edges = kept_shapes[bits] = (((atom_symbol(atom_of[bits.bit_length() - 1]), EPSILON),), format_byteset(s))
        if edges is None:
            if s.bits:
                # The atoms a set holds, in atom order: an atom is in it iff its smallest bit is (no
                # set splits an atom), and atoms are ordered by their smallest bits.
                members, bits = [], s.bits & representatives
                while bits:
                    low = bits & -bits
                    members.append(atom_at[low])
                    bits ^= low
            else:
                members = [len(atoms) - 1]
            # (members ascend, so their atom symbols -1 - k in descending order are the edges sorted)
            edges = kept_shapes[s.bits] = (tuple([(-1 - k, EPSILON) for k in reversed(members)]), format_byteset(s))
        return make(False, edges[0]), edges[1]

    def symbol(s, owner: str, span) -> int:
        if s.__class__ is str:
            return ids[s]
        # The terminal occurrence's origin: where it is written, in the rule that holds it.
        origin = origins.get((owner, span))
        if origin is None:
            rule = cfg.origins[owner].rule if owner in cfg.origins else owner
            origin = origins[owner, span] = origin_at(rule, "terminal", span, cfg.text)
        nt = None if per_occurrence else lifted.get(s.bits)
        if nt is None:
            shape = shapes.get(s.bits)  # (rule set, name) per byte set: occurrences repeat them
            if shape is None:
                shape = shapes[s.bits] = shape_of(s)
            names.append(shape[1])  # rules.add, inlined: one nonterminal per occurrence
            rule_origins.append((origin,))
            nt = lifted[s.bits] = len(names) - 1
            rule_sets[nt] = shape[0]
        elif origin not in rules.origins[nt]:
            rules.origins[nt] += (origin,)
        return nt

    for name, counted in cfg.counted.items():
        if name not in live:
            continue
        # A placeholder with K's NULLABLE and GENERATING behaviour ({X}, plus ε when min is 0);
        # the family replaces it right after ε-removal (_install_families).
        k, item = ids[name], ids[counted.item]
        rules.counted[k] = (item, counted.min, counted.max, name)
        rules.rhs[k] = store.union(store.word((item,)), EPSILON) if counted.min == 0 else store.word((item,))
    counted_rules = cfg.counted
    if per_occurrence and native is not None and _plain_dicts(cfg, live):
        # The loop below (one nonterminal per terminal occurrence) in one C call (csrc/gnf_passes.c,
        # lift_all): the same nodes, names, origins and rule sets in the same order; a shape the partition
        # keeps is made there as shape_of makes it, and a new one made and kept there too (~86 rules and ~40
        # new shapes a median JSON Schema; shape_of stays for the dead atom and token atoms).
        native.lift_all(
            cfg.rules,
            counted_rules,
            live,
            cfg.symbol_spans,
            cfg_origins,
            ids,
            shapes,
            shape_of,
            kept_shapes,
            names,
            rule_origins,
            rule_sets,
            deadline,
            representatives,
            bytes(atom_of),  # (byte atoms' indices: under 256)
            format_byteset,
        )
        return rules, start, atom_of
    for name, alts in cfg.rules.items():
        if deadline is not None:  # ~0.1 µs a rule, against ~15 µs to lift one (a large regex: 40,000 rules)
            deadline.check("the normal form (terminal lifting)")
        if name in counted_rules or name not in live:
            continue
        spans = cfg.symbol_spans.get(name, [])
        words = []
        if not per_occurrence:
            for i, rhs in enumerate(alts):
                at = spans[i] if i < len(spans) and len(spans[i]) == len(rhs) else (None,) * len(rhs)
                words.append(word([symbol(s, name, sp) for s, sp in zip(rhs, at)]))
            rules.rhs[ids[name]] = union_all(words)
            continue
        # symbol(), inlined for one nonterminal per terminal occurrence (the same nonterminals and order): most
        # of the lifting's time was that call per symbol. An occurrence's origin is left unmade: the key
        # (rule name, source rule, span) stands for origin_at(source rule, "terminal", span, text), made when the
        # GNF's origins are first read (_LaterOrigins); one key per span of a rule, as one Origin was.
        rule = cfg_origins[name].rule if name in cfg_origins else name
        if native is not None:  # the same loop in C (csrc/gnf_passes.c), the same nodes, names and keys
            rules.rhs[ids[name]] = native.lift_rule(
                alts, spans, ids, shapes, shape_of, names, rule_origins, rule_sets, name, rule
            )
            continue
        singles: dict = {}  # span → ((name, rule, span),) in this rule: one for all a literal's bytes
        for i, rhs in enumerate(alts):
            at = spans[i] if i < len(spans) and len(spans[i]) == len(rhs) else (None,) * len(rhs)
            out = []
            for s, span in zip(rhs, at):
                if s.__class__ is str:
                    out.append(ids[s])
                    continue
                single = singles.get(span)
                if single is None:
                    single = singles[span] = ((name, rule, span),)
                shape = shapes.get(s.bits)
                if shape is None:
                    shape = shapes[s.bits] = shape_of(s)
                nt = len(names)
                out.append(nt)
                names.append(shape[1])
                rule_origins.append(single)
                rule_sets[nt] = shape[0]
            words.append(word(out))
        rules.rhs[ids[name]] = union_all(words)
    return rules, start, atom_of


def _plain_dicts(cfg: CFG, live) -> bool:
    """Whether the byte CFG's maps are plain dicts (and ``live`` a set), as the lifting's C loop reads them."""
    maps = (cfg.rules, cfg.counted, cfg.symbol_spans, cfg.origins)
    return live.__class__ is set and all(m.__class__ is dict for m in maps)


def _reachable_rules(cfg: CFG) -> set[str]:
    """The byte CFG's nonterminals reachable from its start (through counted items too); in C
    (``csrc/cfg_passes.c``) where the other passes run there (:data:`PASSES_IN_C`), this walk its reference."""
    if PASSES_IN_C and _kernel is not None and cfg.rules.__class__ is dict and cfg.counted.__class__ is dict:
        return _kernel.cfg_reachable(cfg.rules, cfg.counted, cfg.start)
    live, todo = {cfg.start}, [cfg.start]
    rules, counted = cfg.rules, cfg.counted
    while todo:
        name = todo.pop()
        item = counted.get(name)
        if item is not None and item.item not in live:
            live.add(item.item)
            todo.append(item.item)
        for rhs in rules.get(name, ()):
            for s in rhs:
                if s.__class__ is str and s not in live:
                    live.add(s)
                    todo.append(s)
    return live


def _cfg_origins(cfg: CFG, name: str) -> tuple[Origin, ...]:
    origin = cfg.origins.get(name)
    return (origin,) if origin is not None else (Origin(name.split("@", 1)[0], "rule"),)


def _closure(rules: _Rules, generating: bool) -> set[int]:
    """Least fixpoint: nonterminals whose rule set has a word all of whose symbols count, where a
    symbol counts when it is a nonterminal found so far, or (``generating``) an atom or a family
    member. GENERATING and NULLABLE are both of this shape.

    Rounds of a memoised search until nothing changes; a node found to hold such a word keeps it in
    later rounds (``found`` only grows), so a round only searches again where the last one failed.
    (A worklist over reverse edges, linear in theory, measured 5x slower on c_like: building its
    indexes costs more than the two or three rounds.)"""
    native = _passes(rules.store)
    if native is not None:  # (a family member counts as generating there too: a symbol past 2^48)
        return set(native.closure(list(rules.rhs), list(rules.rhs.values()), len(rules.names), generating))
    nodes = rules.store.nodes
    found: set[int] = set()
    holds: set[int] = {EPSILON}  # nodes known to hold a word of counting symbols, across rounds
    changed = True
    while changed:
        changed = False
        fails: set[int] = set()  # nodes that hold none, as far as this round knows

        def has_word(node: int) -> bool:
            if node in holds:
                return True
            if node in fails:
                return False
            accepts, edges = nodes[node]
            got = accepts
            for s, c in edges:  # a loop, not any(...): recursion must not pass through C
                if got:
                    break
                got = (s in found or (generating and (s < 0 or FAMILY_BASE <= s < INPUT_BASE))) and has_word(c)
            (holds if got else fails).add(node)
            return got

        try:
            for a, r in rules.rhs.items():
                if a not in found and has_word(r):
                    found.add(a)
                    changed = True
        finally:
            has_word = None  # see CYCLES
    return found


def _remove_useless(rules: _Rules, start: int) -> None:
    store = rules.store
    native = _passes(store)
    # a family member names its item (REACHABLE below): the C walks read family f's as items[f]
    items = [item for _, item, _, _, _ in rules.families]
    if native is not None:
        # One C call where nothing needs restricting (most passes): GENERATING, then REACHABLE, the
        # nonterminals kept in order; None where the walk below has more to do.
        kept = native.useless(list(rules.rhs), list(rules.rhs.values()), len(rules.names), start, items)
        if kept is not None:
            if len(kept) < len(rules.rhs):
                rhs = rules.rhs
                rules.rhs = {a: rhs[a] for a in kept}
            return
    # GENERATING: a nonterminal with a word of atoms and generating nonterminals. A family
    # member is generating: a family exists only for a generating item (_install_families).
    generating = _closure(rules, True)
    restricted: dict[int, int] = {}

    # Restricting rebuilds every rule set; after the first pass it rarely changes anything, so
    # it runs only when some rule set names a nonterminal that is not generating.
    # (Most passes find every nonterminal generating: then there is nothing to look for.)
    if len(generating) < len(rules.rhs) and any(
        s >= 0 and not is_family_symbol(s) and s not in generating
        for s in (native.symbols if native is not None else partial(_symbols_named, store))(list(rules.rhs.values()))
    ):
        restricted_rhs = {}

        def restrict(node: int) -> int:
            got = restricted.get(node)
            if got is None:
                accepts, edges = store.nodes[node]
                got = store.make_edges(
                    accepts, {s: restrict(c) for s, c in edges if s < 0 or s in generating or is_family_symbol(s)}
                )
                restricted[node] = got
            return got

        if native is not None:
            keep = array("q", (a if a in generating else _DROP for a in range(len(rules.names))))
            memo = _memo(store)
        try:
            for a, r in rules.rhs.items():
                if a in generating:
                    rules.current = a
                    restricted_rhs[a] = restrict(r) if native is None else native.map_symbols((r,), keep, memo)[0]
        finally:
            restrict = None  # see CYCLES
        rules.rhs = restricted_rhs
    else:
        rules.rhs = {a: r for a, r in rules.rhs.items() if a in generating}
    if start not in rules.rhs:
        rules.rhs[start] = EMPTY  # empty language: keep the start, nothing else
    # REACHABLE, one walk over the rule sets' DAG nodes (each node once, whatever its depth:
    # a set of symbols per node cost O(nodes × symbols) on long chains of rules).
    if native is not None:
        roots = [-1] * len(rules.names)
        for a, r in rules.rhs.items():
            roots[a] = r
        reachable = set(native.reach(roots, start, items))
        rules.rhs = {a: r for a, r in rules.rhs.items() if a in reachable}
        return
    seen: set[int] = set()
    reachable, frontier = {start}, [start]
    while frontier:
        stack = [rules.rhs[frontier.pop()]]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for s, c in store.nodes[node][1]:
                if is_family_symbol(s):  # a member's rows are its item's: the item stays
                    s = rules.families[split_family_symbol(s)[0]][1]
                if s >= 0 and s not in reachable:
                    reachable.add(s)
                    frontier.append(s)
                stack.append(c)
    rules.rhs = {a: r for a, r in rules.rhs.items() if a in reachable}


def _symbols_named(store: WordStore, roots) -> set[int]:
    """Every symbol on an edge of the DAGs below ``roots`` (each node visited once)."""
    seen: set[int] = set()
    named: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for s, c in store.nodes[node][1]:
            named.add(s)
            stack.append(c)
    return named


def _remove_epsilon(rules: _Rules, start: int) -> tuple[bool, set[int]]:
    store = rules.store
    # NULLABLE: a nonterminal with a word of nullable nonterminals only.
    nullable = _closure(rules, False)

    removed = {}
    native = _passes(store)  # (before _install_families: no family member in a rule set yet)
    if native is not None:
        marks = bytearray(len(rules.names))
        for a in nullable:
            marks[a] = 1
        memo = _memo(store)
        # the loop below in one C call (the same nodes, in order)
        nts, at = list(rules.rhs), array("q", [-1])
        try:
            got = native.epsilon_free(nts, list(rules.rhs.values()), marks, memo, at)
        finally:
            if at[0] >= 0:
                rules.current = at[0]
        rules.rhs = dict(zip(nts, got))
        return start in nullable, nullable
    opt_memo: dict[int, int] = {}

    def opt(node: int) -> int:
        # Every word with any subset of its nullable occurrences deleted.
        got = opt_memo.get(node)
        if got is None:
            accepts, edges = store.nodes[node]
            out = []
            for s, c in edges:  # a loop, not tuple(...): recursion must not pass through C
                out.append((s, opt(c)))
            got = store.make(accepts, tuple(out))
            for s, c in edges:
                if s in nullable:
                    got = store.union(got, opt(c))
            opt_memo[node] = got
        return got

    try:
        for a, r in rules.rhs.items():
            rules.current = a
            removed[a] = store.without_empty_word(opt(r))
    finally:
        opt = None  # see CYCLES
    rules.rhs = removed
    return start in nullable, nullable


def _install_families(rules: _Rules, nullable: set[int]) -> None:
    """Give each counted repetition ``K = X{m,n}`` its real, ε-free rule set and its family.

    After ε-removal X stands for ``L(X) \\ ε`` and K's occurrences are optional where K is
    nullable, so K's rule set is ``L(K) \\ ε``: ``X · F_1`` (more items may follow) and ``X``
    (the repetition may end after one item). A nullable X makes the lower bound 0:
    ``X{m,n} = (X \\ ε){0,n}`` when ε ∈ L(X). See :mod:`.counted`.
    """
    store = rules.store
    for k, (item, low, high, name) in sorted(rules.counted.items()):
        if k not in rules.rhs:
            continue  # useless (unreachable) or only ε
        if item not in rules.rhs:
            rules.rhs[k] = EMPTY  # the item derives nothing: K is ε only, already optional
            continue
        low = 0 if item in nullable else low
        if high is not None and high <= 1:  # X{m,1}: just X (never counted in practice)
            rules.rhs[k] = store.word((item,))
            continue
        f = len(rules.families)
        rules.families.append((k, item, low, high, name))
        rhs = store.word((item, family_symbol(f, 1)))
        if low <= 1:
            rhs = store.union(rhs, store.word((item,)))
        rules.rhs[k] = rhs


def _remove_units(rules: _Rules) -> None:
    store = rules.store
    native = _passes(store)  # (a family member never leads a rule set's word: never a unit)
    if native is not None:  # the same walk in C, the same nodes
        nts, at = list(rules.rhs), array("q", [-1])
        try:
            got = native.remove_units(nts, list(rules.rhs.values()), len(rules.names), at)
        finally:
            if at[0] >= 0:
                rules.current = at[0]
        rules.rhs = dict(zip(nts, got))
        return
    units: dict[int, set[int]] = {}
    proper: dict[int, int] = {}
    for a, r in rules.rhs.items():
        accepts, edges = store.nodes[r]
        units[a] = {s for s, c in edges if s >= 0 and store.accepts(c)}
        if not units[a]:  # no nonterminal edge to a set holding ε: the set is its own proper part
            proper[a] = r
            continue
        proper[a] = store.make(
            accepts,
            tuple(
                (s, store.without_empty_word(c)) if s >= 0 else (s, c)
                for s, c in edges
                if not (s >= 0 and c == EPSILON)
            ),
        )
    for a in rules.rhs:
        if not units[a]:  # (the union of its proper part alone: itself)
            rules.rhs[a] = proper[a]
            continue
        rules.current = a
        closure, frontier = {a}, [a]
        while frontier:
            for b in units[frontier.pop()]:
                if b not in closure:
                    closure.add(b)
                    frontier.append(b)
        rules.rhs[a] = store.union_all(proper[b] for b in sorted(closure))


def _left_corner_order(rules: _Rules) -> list[int]:
    """Nonterminals so that a rule's leading nonterminals come later, except inside SCCs (Tarjan)."""
    store = rules.store
    native = _passes(store)
    if native is not None:
        nts = sorted(rules.rhs)
        return native.left_corner_order(nts, [rules.rhs[a] for a in nts], len(rules.names))
    graph = {a: [s for s, _ in store.edges(r) if s >= 0] for a, r in rules.rhs.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    sccs: list[list[int]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            succ = graph[v]
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    # Tarjan emits sinks first; sources first is what Paull's substitution wants.
    return [a for comp in reversed(sccs) for a in comp]


def _substitute_leading(store: WordStore, node: int, rhs: dict[int, int], which) -> int:
    accepts, edges = store.nodes[node]
    if not any(which(s) for s, _ in edges):  # nothing to substitute: the same set (no node made)
        return node
    kept = store.make(accepts, tuple((s, c) for s, c in edges if not which(s)))
    return store.union_all([kept] + [store.concat(rhs[s], c) for s, c in edges if which(s)])


def _remove_left_recursion(rules: _Rules) -> list[int]:
    store = rules.store
    order = _left_corner_order(rules)
    zs: list[int] = []
    native = _passes(store)
    work = None
    if native is not None:
        # The nonterminals with a leading edge on themselves or on an earlier one, found in C: the loop
        # below leaves the others as they are (no node made, their rule sets unchanged until their turn).
        rhs = rules.rhs
        work = native.left_work(order, [rhs[a] for a in order], len(rules.names))
        if not any(work):  # (most JSON Schemas: no left recursion, nothing earlier leads)
            if order:
                rules.current = order[-1]  # (where the walk leaves it)
            return order
    pos = {a: i for i, a in enumerate(order)}
    for i, a in enumerate(order):
        if work is not None and not work[i]:
            continue
        rules.current = a
        while True:
            edges = store.edges(rules.rhs[a])
            lower = [s for s, _ in edges if s >= 0 and s in pos and pos[s] < i]
            if not lower:
                break
            first = min(lower, key=pos.__getitem__)
            rules.rhs[a] = _substitute_leading(store, rules.rhs[a], rules.rhs, lambda s, f=first: s == f)
        if all(s != a for s, _ in edges):  # not directly left-recursive: α is ∅ and β the set itself
            continue
        alpha = store.without_empty_word(store.child(rules.rhs[a], a))
        beta = store.without_edge(rules.rhs[a], a)
        if alpha != EMPTY:
            origins = _made_origins(rules.text)(rules.origins[a])  # (a rule's: made already)
            z = rules.add(f"{rules.names[a]}'", origins=tuple(o.with_kind("left recursion") for o in origins))
            zword = store.word((z,))
            rules.rhs[a] = store.union(beta, store.concat(beta, zword))
            rules.rhs[z] = store.union(alpha, store.concat(alpha, zword))
            zs.append(z)
            rules.z_ids.add(z)
        else:
            rules.rhs[a] = beta
    if work is not None and order:
        rules.current = order[-1]  # (where the walk leaves it)
    return order + zs


def _substitute_all_leading(rules: _Rules, order: list[int]) -> None:
    store = rules.store
    # Original nonterminals from the back (their leading symbols come later in the
    # order and are done already), then the Z's in creation order.
    rhs, z_ids = rules.rhs, rules.z_ids
    if z_ids:
        originals = [a for a in order if a in rhs and a not in z_ids]
        zs = [a for a in order if a in rhs and a in z_ids]
    else:  # (no left recursion removed: most grammars)
        originals, zs = [a for a in order if a in rhs], []
    native = _passes(store)
    if native is not None:  # the same walk in C, the same nodes
        seq, at = originals[::-1] + zs, array("q", [-1])
        roots = [-1] * len(rules.names)
        for a, r in rules.rhs.items():
            roots[a] = r
        try:
            got = native.substitute_leading(seq, roots, at)
        finally:
            if at[0] >= 0:
                rules.current = at[0]
        rules.rhs.update(zip(seq, got))
        return
    for a in originals[::-1] + zs:
        rules.current = a
        rules.rhs[a] = _substitute_leading(store, rules.rhs[a], rules.rhs, lambda s: s >= 0)
        edges = store.edges(rules.rhs[a])  # sorted by symbol: atoms (< 0) only iff the last is one
        assert not edges or edges[-1][0] < 0, "leading substitution left a nonterminal"


BOTTOM = -1  # ⊥, the empty rest of the stack


def stack_below(
    table: list[dict[int, int]], store: WordStore, start: int, family_items: list[int] | tuple[int, ...] = ()
) -> list[set[int]]:
    """Stack adjacency, directly-below form: ``B ∈ below[A]`` when some reachable
    stack may hold B right under A (BOTTOM for the empty rest). A fixpoint::

        below[S] ∋ ⊥
        for every production A → a B1…Bk:   below[Bi] ∋ B(i+1)   (i < k)
                                             below[Bk] ⊇ below[A]

    Family f (``family_items[f]`` its item X) is ONE entry, index ``n + f``, for all its
    members: ``F_(c+1)`` takes the place of ``F_c``, so every member sees the same stacks.
    Its productions are read as ``F → a T_X(a) F`` and ``F → a T_X(a)`` (both choices, for
    every member: an over-approximation, which can only keep backtracks the exact relation
    would drop — never drop one it keeps).
    """
    n = len(table)
    native = _passes(store) if not family_items else None
    if native is not None:
        got = native.below_sets_of([list(row.values()) for row in table], start, BOTTOM)
        if got is not None:  # (None: past the C walk's memory bound)
            return got
    below: list[set[int]] = [set() for _ in range(n + len(family_items))]
    below[start].add(BOTTOM)
    lasts_memo: dict[int, frozenset[int]] = {}

    def key(s: int) -> int:
        return s if s < n else n + split_family_symbol(s)[0]

    def lasts(node: int) -> frozenset[int]:
        # Symbols that end some word of the tail set.
        got = lasts_memo.get(node)
        if got is None:
            acc: set[int] = set()
            for s, c in store.edges(node):
                if store.accepts(c):
                    acc.add(key(s))
                acc |= lasts(c)
            got = lasts_memo[node] = frozenset(acc)
        return got

    for node in store.reachable(t for row in table for t in row.values()):
        for s, c in store.edges(node):
            for s2, _ in store.edges(c):
                below[key(s)].add(key(s2))
    ends: list[set[int]] = [set() for _ in range(n + len(family_items))]
    try:
        for a, row in enumerate(table):
            for t in set(row.values()):
                ends[a] |= lasts(t)
        for f, item in enumerate(family_items):
            me = n + f
            ends[me].add(me)  # F → a T_X(a) F, with ε ∈ T_X(a): the member is the whole tail
            for t in set(table[item].values()):
                item_lasts = lasts(t)
                ends[me] |= item_lasts  # F → a T_X(a): the item's last symbols end the tail
                for b in item_lasts:
                    below[b].add(me)  # F → a T_X(a) F: the next member sits under them
    finally:
        lasts = None  # see CYCLES
    changed = True
    while changed:
        changed = False
        for a in range(n + len(family_items)):
            for b in ends[a]:
                if not below[a] <= below[b]:
                    below[b] |= below[a]
                    changed = True
    return below


MERGE_BUDGET_BASE, MERGE_BUDGET_PER_NODE = 100_000, 30
"""Store nodes merging may create: this base plus this many per node of the tails it renames.
The bundled grammars need under 3 per node (c_like: 13,246 for 4,457). A long chain converges
one position per round (a 4,000-byte literal took past a million nodes): such a grammar is left
unmerged, which is always sound (merging only makes classes coarser)."""


def _merge_within_budget(
    store: WordStore,
    table: list[dict[int, int]],
    start: int,
    family_items: list[int] = (),
    family_bounds: list[tuple[int, int | None]] = (),
    deadline: Deadline | None = None,
) -> tuple[list[int], list[dict[int, int]], list[int]] | None:
    """:func:`_merge_equivalent`, or None when it would create more nodes than its budget."""
    outer = store.limit
    native = _passes(store)
    if native is not None:
        nodes = native.reachable_count(list(chain.from_iterable(map(dict.values, table))))
    else:
        nodes = len(store.reachable(t for row in table for t in row.values()))
    store.limit = min(outer, store.created + MERGE_BUDGET_BASE + MERGE_BUDGET_PER_NODE * nodes)
    try:
        return _merge_equivalent(store, table, start, family_items, family_bounds, deadline)
    except BudgetExceeded:
        if store.created > outer:
            raise  # the normal form's own budget: the caller's error
        return None
    finally:
        store.limit = outer


def _merge_families_in_c(
    store: WordStore,
    table: list[dict[int, int]],
    start: int,
    family_items: list[int],
    family_bounds: list[tuple[int, int | None]],
) -> tuple[list[int], list[dict[int, int]], list[int]] | None:
    """:func:`_merge_equivalent` with counted-repetition families, in C (``Words.merge_table``), or None.

    In a compiled store (where the pipeline builds a counted grammar's normal form,
    :data:`~cfgzip_lab.grammar.compiled_words.COUNTED_IN_COMPILED_STORE`) it runs there. A normal form built
    in a Python :class:`WordStore` (that switch off) had its merging as most of its time (Github_medium
    o9802: ~0.9 s of 1.4): there a compiled store seeded with the WordStore's nodes (the same ids) runs the same rounds
    and makes the same nodes in the same order, and the nodes it made are then interned in the
    WordStore in that order, so the WordStore ends as the Python walk leaves it, node for node (also
    where the merge stops at its node budget: the nodes made until then are kept, then the error
    raised). None where the kernel is not built, the C passes are switched off (:data:`PASSES_IN_C`),
    or past the C stack adjacency's memory bound: the caller takes the Python walk.
    """
    native = _passes(store)
    scratch = None
    if native is None:
        # the kernel's store itself, not compiled_words (which imports this module: an import circle)
        from .._binding import kernel

        if not PASSES_IN_C or kernel is None or not isinstance(store, WordStore):
            return None
        scratch = native = kernel.Words(store.nodes, store.created, BudgetExceeded)
        scratch.limit = store.limit
    bounds = [(low, -1 if high is None else high) for low, high in family_bounds]
    try:
        got = native.merge_table(table, start, list(family_items), bounds)
    finally:
        if scratch is not None:
            _adopt_nodes(store, scratch)
    return got


def _adopt_nodes(store: WordStore, scratch) -> None:
    """Intern ``scratch``'s nodes past ``store``'s in ``store``, in id order (the same ids: each was new
    in a store that held ``store``'s nodes), outside ``store``'s budget (``scratch`` raised past it where
    it was passed): :meth:`WordStore.adopt`, which refuses a node ``store`` held already."""
    store.adopt([scratch[node] for node in range(len(store), len(scratch))])


def _merge_equivalent(
    store: WordStore,
    table: list[dict[int, int]],
    start: int,
    family_items: list[int] = (),
    family_bounds: list[tuple[int, int | None]] = (),
    deadline: Deadline | None = None,
) -> tuple[list[int], list[dict[int, int]], list[int]]:
    """Coarsest partition with equal tails AND equal below-sets up to the partition.

    Merging language-equal nonterminals is always sound, but merging two with
    different stack contexts would blur the adjacency relation that restricts
    displacement backtracks, and so split token classes (measured: the C-like
    grammar went from 4,016 to 7,492 classes when keyword letters were merged).
    Requiring equal below-sets keeps adjacency chains exactly as precise.

    Counted-repetition families (``family_items[f]`` the item X of family f) are merged too,
    with ``family_bounds[f] = (min, max)``: two families whose items are in one block and whose
    bounds are equal have language-equal members (``F_c`` depends only on X's row and the
    bounds, :mod:`.counted`), so their member symbols are renamed to one family's, the first's,
    and nonterminals whose tails differed only by them merge. Families are merged without
    asking for equal contexts: a family's context is already shared through its item (every
    last symbol of X has every family over X below it, :func:`stack_below`), and a JSON
    Schema has one family per string property (Github_medium o9802: 460 families, 76 distinct;
    its classing walked each of them for every string byte). Without ``family_bounds`` every
    family stays its own. Members of one family are never merged with each other.

    Returns (block_of, merged table, family_of): ``family_of[f]`` the merged family's index
    (numbered by first appearance), the merged table's member symbols renamed to it.
    """
    native = _passes(store) if not family_items else None
    if native is not None:
        # The whole refinement in C, reading the table's dicts and making the merged rows' dicts (as
        # below): the same rounds, the same nodes in the same order; None past the stack adjacency's
        # memory bound (then the walk below).
        got = native.merge_table(table, start)
        if got is not None:
            return (*got, [])
    if family_items and family_bounds:
        got = _merge_families_in_c(store, table, start, family_items, family_bounds)
        if got is not None:
            return got
    below = stack_below(table, store, start, family_items)
    n = len(table)
    block = [0] * n
    keys: dict = {}
    for a in range(n):
        block[a] = keys.setdefault((a == start, tuple(sorted(table[a]))), len(keys))
    # Families: family_rep[f] is the first family with f's item block and bounds (f itself
    # without bounds); the renamed tails name members by it (family_to, the final numbering at the end).
    bounds = list(family_bounds) if family_bounds else [(f,) for f in range(len(family_items))]

    def family_reps() -> list[int]:
        first: dict = {}
        return [first.setdefault((block[x], bounds[f]), f) for f, x in enumerate(family_items)]

    family_rep = family_reps()
    family_to = family_rep
    # Refinement rounds are incremental: a block that splits keeps its id for its first part,
    # so only the nonterminals moved to new blocks change, and only the renamed tails that
    # read one of them (and their ancestors) are computed again. (xgrammar-tests' parser L989,
    # 128 nullable `[0-9]*` in a row, needs 131 rounds: renaming everything every round took
    # 9.6 s of its 9.8 s normal form.) The rounds are the same as renaming all every time.
    parents: dict[int, list[int]] = {}
    by_symbol: dict[int, list[int]] = {}  # a nonterminal a, or a family f as ~f: the nodes with an edge on it
    for node in store.reachable(t for row in table for t in row.values()):
        for s, c in store.nodes[node][1]:
            parents.setdefault(c, []).append(node)
            if s < n:
                by_symbol.setdefault(s, []).append(node)
            elif FAMILY_BASE <= s < INPUT_BASE:
                by_symbol.setdefault(~split_family_symbol(s)[0], []).append(node)
    memo: dict[int, int] = {EPSILON: EPSILON}
    nodes, make, union = store.nodes, store.make, store.union
    if native is not None:  # the C pass renames through ``block`` itself, kept as an int64 array
        block = array("q", block)
        cmemo = _memo(store)

    def rename(node: int) -> int:
        got = memo.get(node)
        if got is None:
            accepts, edges = nodes[node]
            out = []
            for s, c in edges:  # a loop: recursion must not pass through C (see words.py)
                if s < n:
                    s = block[s]
                elif FAMILY_BASE <= s < INPUT_BASE:  # a member F_c: its merged family's
                    f, count = split_family_symbol(s)
                    s = family_symbol(family_to[f], count)
                out.append((s, rename(c)))
            if len({b for b, _ in out}) == len(out):  # no two edges into one block (most nodes)
                out.sort()
                got = make(accepts, tuple(out))
            else:  # the children of edges into one block united, in edge order
                merged: dict[int, int] = {}
                for b, rc in out:
                    merged[b] = union(merged.get(b, EMPTY), rc)
                got = make(accepts, tuple(sorted(merged.items())))
            memo[node] = got
        return got

    try:
        owners: dict[int, list[int]] = {}  # tail node → the nonterminals whose rows hold it
        for a, row in enumerate(table):
            for t in set(row.values()):
                owners.setdefault(t, []).append(a)
        context_users: dict[int, list[int]] = {}  # nonterminal (family f: n + f) → those with it in their below-set
        for a in range(n):
            for b in below[a]:
                if b >= 0:
                    context_users.setdefault(b, []).append(a)

        # A signature's two halves are kept apart and each made again only where it can have changed: the
        # context where a nonterminal of its below-set moved, the renamed tails where one of them went
        # stale (the other tails' renamings are memo hits, so the nodes made and their order are the same).
        # Re-signing both halves of every affected nonterminal spent most of the merge's time on memo
        # hits and below-sets that had not changed (a counted MaskBench schema, Github_medium o9914:
        # merging 10 s of its 16 s normal form).
        contexts: list = [None] * n
        tails: list = [None] * n

        def signature(a: int, context: bool = True, tail: bool = True) -> tuple:
            if context:
                contexts[a] = frozenset(
                    block[b] if 0 <= b < n else b if b < 0 else ("family", family_rep[b - n]) for b in below[a]
                )
            if tail:
                row = table[a]
                if native is not None:
                    tails[a] = tuple(sorted(zip(row, native.map_symbols(list(row.values()), block, cmemo))))
                else:
                    tails[a] = tuple(sorted((atom, rename(t)) for atom, t in row.items()))
            return (contexts[a], tails[a])

        # Only the nonterminals whose signature can have changed (a moved nonterminal in their tails
        # or their context) are signed again, and only their blocks regrouped: a chain of 5,000
        # rules took 5,000 rounds over every nonterminal before.
        sig = [signature(a) for a in range(n)]
        members_of: dict[int, list[int]] = {}
        for a in range(n):
            members_of.setdefault(block[a], []).append(a)
        touched = set(members_of)
        next_id = len(keys)
        while True:
            moved: list[int] = []
            for b in sorted(touched):
                parts: dict = {}
                for a in members_of[b]:
                    parts.setdefault(sig[a], []).append(a)
                if len(parts) == 1:
                    continue
                groups = list(parts.values())
                members_of[b] = groups[0]  # the first part (in nonterminal order) keeps the id
                for members in groups[1:]:
                    for a in members:
                        block[a] = next_id
                    members_of[next_id] = members
                    moved.extend(members)
                    next_id += 1
            if not moved:
                break
            if deadline is not None:
                deadline.check("the normal form (merging)")
            if family_items:  # a moved item can move its families to another representative
                reps = family_reps()
                refamilied = [f for f in range(len(reps)) if reps[f] != family_rep[f]]
                family_rep[:] = reps  # (family_to is family_rep until the end)
            else:
                refamilied = []
            stale = [node for a in moved for node in by_symbol.get(a, ())]
            stale += [node for f in refamilied for node in by_symbol.get(~f, ())]
            seen: set[int] = set()
            affected: set[int] = set()  # whose renamed tails can have changed
            while stale:
                node = stale.pop()
                if node in seen:
                    continue
                seen.add(node)
                memo.pop(node, None)
                if native is not None:
                    cmemo[node] = -1
                affected.update(owners.get(node, ()))
                stale.extend(parents.get(node, ()))
            in_context: set[int] = set()  # whose context can have changed
            for a in moved:
                in_context.update(context_users.get(a, ()))
            for f in refamilied:
                in_context.update(context_users.get(n + f, ()))
            for a in sorted(affected | in_context):  # in nonterminal order (the renamed tails' nodes are made in it)
                sig[a] = signature(a, a in in_context, a in affected)
            touched = {block[a] for a in affected | in_context}
        # Blocks numbered by first appearance in nonterminal order (the numbering GNF ids keep).
        order: dict[int, int] = {}
        block = [order.setdefault(b, len(order)) for b in block]
        to_block = array("q", block)
        family_order: dict[int, int] = {}
        family_of = [family_order.setdefault(r, len(family_order)) for r in family_rep]
        family_to = family_of
        memo.clear()
        memo[EPSILON] = EPSILON
        merged_table: list[dict[int, int]] = [dict() for _ in range(len(set(block)))]
        if native is not None:
            cmemo = _memo(store)
            for a in range(n):
                merged_table[block[a]] = dict(
                    zip(table[a], native.map_symbols(list(table[a].values()), to_block, cmemo))
                )
            return block, merged_table, family_of
        for a in range(n):
            merged_table[block[a]] = {atom: rename(t) for atom, t in table[a].items()}
        return block, merged_table, family_of
    finally:
        rename = None  # see CYCLES


def to_gnf(
    cfg: CFG,
    *,
    lift_per_occurrence: bool = True,
    merge: bool = True,
    max_nodes: int = DEFAULT_MAX_GNF_NODES,
    store: WordStore | None = None,
    byte_sets: set[ByteSet] | None = None,
    deadline: Deadline | None = None,
) -> GNF:
    """Convert a byte-level CFG to factored GNF; ``GNF.steps`` records each step's size.

    ``lift_per_occurrence=False`` (one lifted nonterminal per distinct byte set) and
    ``merge=False`` exist for ablations: both give the same language, and more classes.

    Raises
    ------
    NormalFormTooLarge
        A :class:`GrammarError`, when the normal form would need more than ``max_nodes`` word-store nodes: the
        message names the step and the source rule it was working on, at that rule's line.
    BuildBudgetError
        Past ``deadline`` (a :class:`~cfgzip_lab.deadline.Deadline`, checked after each step and
        each round of merging), naming the step.

    ``store``: an empty store to build in (default a new :class:`WordStore`; the pipeline passes the
    compiled one where it is built, :func:`cfgzip_lab.grammar.compiled_words.new_word_store`). ``byte_sets``:
    ``cfg.byte_sets()``, where the caller has them (the pipeline reads them to choose the store).
    """
    store = WordStore() if store is None else store
    store.limit = max_nodes
    progress = {"step": "terminal lifting", "rules": None, "deadline": deadline}
    try:
        return _to_gnf(cfg, store, lift_per_occurrence, merge, progress, byte_sets)
    except BudgetExceeded:
        raise _too_large(cfg, progress, max_nodes) from None
    finally:
        store.limit = float("inf")


def _too_large(cfg: CFG, progress: dict, max_nodes: int) -> NormalFormTooLarge:
    """The error for a normal form past its node budget, pointing at the rule being worked on."""
    rules: _Rules | None = progress["rules"]
    origins = ()
    current = None if rules is None else rules.current
    if rules is not None and current is None and rules.rhs:
        # no rule in hand: the one whose rule set is largest so far
        current = max(rules.rhs, key=lambda a: rules.store.count(rules.rhs[a]))
    if rules is not None and current is not None and current < len(rules.origins):
        origins = _made_origins(cfg.text)(rules.origins[current])
    where = describe_origins(origins) if origins else "the grammar"
    message = (
        f"the normal form grew past {max_nodes:,} nodes (about {max_nodes * 600 / 2**20:,.0f} MB) in step "
        f"'{progress['step']}' while working on {where}: deeply nested optional or nullable parts, long "
        "chains of left-recursive rules and literals of tens of thousands of bytes do this; simplify that rule, "
        "or raise max_gnf_nodes"
    )
    origin = next((o for o in origins if o.span is not None), None)
    if origin is None and cfg.start in cfg.origins:
        origin = cfg.origins[cfg.start]
    line, column = (origin.line or 1, origin.column or 1) if origin is not None else (1, 1)
    span = origin.span if origin is not None else None
    return NormalFormTooLarge([Diagnostic(line, column, message, span=span)], text=cfg.text or None)


def _to_gnf(cfg: CFG, store: WordStore, lift_per_occurrence: bool, merge: bool, progress: dict, byte_sets=None) -> GNF:
    steps: list[GNFStep] = []
    clock = time.perf_counter()
    deadline = progress.get("deadline")

    def record(name: str, rules: _Rules, following: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        # the sizes counted when read (GNFStep.later): the store keeps these rule sets' nodes as they are
        steps.append(GNFStep.later(name, now - clock, partial(_rules_size, store, list(rules.rhs.values()))))
        clock = now
        progress["step"], progress["rules"] = following, rules
        rules.current = None
        if deadline is not None:
            deadline.check(f"the normal form (after {name})")

    steps.append(GNFStep("byte CFG", len(cfg.rules), 0, cfg.num_productions, 0.0))
    rules, start, atom_of = _lift_terminals(cfg, store, lift_per_occurrence, byte_sets, deadline)
    record("terminal lifting", rules, "useless symbols")
    _remove_useless(rules, start)
    record("useless symbols", rules, "ε-rules")
    accepts_empty, nullable = _remove_epsilon(rules, start)
    _install_families(rules, nullable)
    record("ε-rules", rules, "unit rules")
    _remove_useless(rules, start)
    _remove_units(rules)
    _remove_useless(rules, start)
    record("unit rules", rules, "left recursion")
    order = _remove_left_recursion(rules)
    record("left recursion", rules, "leading substitution")
    _substitute_all_leading(rules, order)
    _remove_useless(rules, start)
    record("leading substitution", rules, "merging")

    # Dense renumbering, then the per-atom table.
    live = sorted(rules.rhs)  # the start first, then the others in order
    live.remove(start)
    live.insert(0, start)
    dense = {a: i for i, a in enumerate(live)}
    native = _passes(store)
    if native is None:
        memo: dict[int, int] = {}

        def renumber(node: int) -> int:
            got = memo.get(node)
            if got is None:
                accepts, edges = store.nodes[node]
                out = []
                for s, c in edges:  # a loop: recursion must not pass through C (see words.py)
                    # family members keep their symbols (they name a family, not a rule id)
                    out.append((dense.get(s, s), renumber(c)))
                out.sort()
                got = memo[node] = store.make(accepts, tuple(out))
            return got

        try:
            table = [{atom_index(s): renumber(c) for s, c in store.edges(rules.rhs[a])} for a in live]
        finally:
            renumber = None  # see CYCLES
    else:  # the same walk in C: the rows' tails in row order, one call (members, past len(to), kept)
        to = array("q", range(len(rules.names)))
        for a, i in dense.items():
            to[a] = i
        table = native.atom_rows([rules.rhs[a] for a in live], to, _memo(store))  # the rows made in C too
    family_items = [dense[item] for _, item, _, _, _ in rules.families]
    family_of = list(range(len(family_items)))  # each family its own, unless merging merges some
    merged_name = "merging"
    if merge:
        family_bounds = [(low, high) for _, _, low, high, _ in rules.families]
        merged = _merge_within_budget(store, table, 0, family_items, family_bounds, deadline)
        if merged is None:
            merged_name = "merging (skipped: past its budget)"
            block = list(range(len(table)))
        else:
            block, table, family_of = merged
    else:
        block = list(range(len(table)))
    # Per block: the first member's name, the members' names (their origins: _block_origins, when read).
    nblocks = len(table)
    names_by_block: list = [None] * nblocks
    members_by_block: list = [None] * nblocks
    all_names = rules.names
    for a, b in zip(live, block):
        name = all_names[a]
        if names_by_block[b] is None:
            names_by_block[b] = name
            members_by_block[b] = [name]
        else:
            members_by_block[b].append(name)
    made = _made_origins(cfg.text)
    # Per merged family: the first member family's name, item, bounds and head, every member's origins.
    families: list[Family | None] = [None] * (max(family_of) + 1 if family_of else 0)
    for (head, item, low, high, name), f in zip(rules.families, family_of):
        if families[f] is None:
            families[f] = Family(
                name=name,
                item=block[dense[item]],
                min=low,
                max=high,
                head=block[dense[head]] if head in dense else -1,
                origins=made(rules.origins[head]),
            )
        else:
            origins = tuple(dict.fromkeys(families[f].origins + made(rules.origins[head])))
            families[f] = replace(families[f], origins=origins)
    gnf = GNF(
        dead_atom=len(rules.atoms) - 1 if rules.atoms and not rules.atoms[-1].bits else -1,
        names=names_by_block,
        start=block[0],
        accepts_empty=accepts_empty,
        atoms=rules.atoms,
        atom_of=atom_of,
        table=table,
        store=store,
        steps=steps,
        origins=_LaterOrigins(partial(_block_origins, live, block, nblocks, rules.origins, made)),
        merged_from=[tuple(m) for m in members_by_block],
        families=families,
    )
    now = time.perf_counter()
    sizes = partial(_final_sizes, store, gnf.table, gnf.families, gnf.accepts_empty, gnf.num_nonterminals)
    steps.append(GNFStep.later(merged_name, now - clock, sizes))
    return gnf


def _made_origins(text: str) -> Callable[[tuple], tuple[Origin, ...]]:
    """A function that gives a nonterminal's origins with every lifted terminal's made: the key
    ``(name, rule, span)`` of :func:`_lift_terminals` becomes ``origin_at(rule, "terminal", span, text)``, one
    Origin per key (the objects the lifting made eagerly before, shared as they were)."""
    memo: dict[tuple, Origin] = {}

    def made(origins: tuple) -> tuple[Origin, ...]:
        for o in origins:
            if o.__class__ is tuple:
                break
        else:
            return origins  # (made already: a rule's, the start's, a left recursion's)
        out = []
        for o in origins:
            if o.__class__ is tuple:
                got = memo.get(o)
                if got is None:
                    got = memo[o] = origin_at(o[1], "terminal", o[2], text)
                o = got
            out.append(o)
        return tuple(out)

    return made


def _block_origins(live: list[int], block: list[int], nblocks: int, origins: list[tuple], made) -> list:
    """:attr:`GNF.origins`: per block (a merged nonterminal), its members' origins in order, each once."""
    by_block: list = [()] * nblocks
    for a, b in zip(live, block):
        by_block[b] += made(origins[a])
    return [o if len(o) < 2 else tuple(dict.fromkeys(o)) for o in by_block]


def _final_sizes(store, table, families, accepts_empty: bool, nonterminals: int) -> tuple[int, int, int]:
    return nonterminals, _dag_nodes(store, table), _num_productions(store, table, families, accepts_empty)


def is_gnf(g) -> bool:
    """True for a :class:`GNF`, or for a listed CFG whose productions are all ``A → a B1..Bn``
    with the start symbol only on the left (``S → ε`` allowed)."""
    if isinstance(g, GNF):
        tails = g.store.reachable(t for row in g.table for t in row.values())
        return all(s >= 0 and s != g.start for n in tails for s, _ in g.store.edges(n))
    if isinstance(g, CFG):
        for name, alts in g.rules.items():
            for rhs in alts:
                if not rhs:
                    if name != g.start:
                        return False
                    continue
                if not isinstance(rhs[0], ByteSet):
                    return False
                if any(not isinstance(s, str) or s == g.start for s in rhs[1:]):
                    return False
        return True
    raise TypeError(f"is_gnf expects a GNF or CFG, not {type(g).__name__}")
