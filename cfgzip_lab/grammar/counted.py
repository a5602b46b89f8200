# C twin: csrc/words.h (packed family symbols), csrc/displace.c (member rows; docs/design.md)
"""Counted repetitions ``X{m,n}`` without unrolling: the byte CFG's table entry, the GNF family, symbols.

A JSON Schema's ``maxLength: 131072`` is ``char{0, 131072}`` in XGrammar's EBNF. Unrolled, it
became 131,072 nested rules, as many GNF nonterminals, and a displacement with a pair per
position for every token that can sit inside the string (classing ran past 3 GB). Here a large
repetition stays ONE object at every stage (docs/counted_repetition.md has the whole design):

* byte CFG: ``cfg.counted[K] = Counted(item, min, max)``; ``K`` has no listed productions.
* GNF: ``K`` (= ``R_0``, nothing read yet) is an ordinary nonterminal whose row is
  ``X · F_1 | X`` (per the bounds), and ``F_c`` for ``1 <= c <= max - 1`` is a *family* of
  nonterminals, "c items read, the repetition not empty from here on" (``L(R_c) \\ {ε}``), whose
  rows are computed from the item's row and c, never listed::

      F_c → a · T_X(a) · W_c      for every atom a of the item X, where
      W_c = {F_(c+1)} if c + 1 <= max - 1   ∪   {ε} if c + 1 >= min

  Every ``F_c`` row depends on c only through the two tests in ``W_c``. Concrete members are
  plain ints (:func:`family_symbol`), so the native engine's states stay word sets of ints.
* displacement: a token that starts inside a repetition consumes some ``F_x`` whose x it cannot
  know. It is one *symbolic* pair: x ranges over an interval that the rows it read narrowed
  (:func:`input_symbol`), and what it leaves on top is ``F_(x+j)`` relative to that x
  (:func:`relative_symbol`, which stands for ``F_(x+j) · SEP · IN(f, lo, hi)`` at the bottom
  of σ_out: a relative member is only ever there, see the design doc). So a token of k items
  has O(k) pairs, not one per position, and tokens split into classes only where the bounds
  tell them apart (near ``max``, a token of k items fits only while k items are left).

Symbol ranges (all ints; the ranges cannot meet for any grammar that fits in memory)::

    [0, n)                   plain GNF nonterminals          (n = gnf.num_nonterminals)
    n, (n, 2n]               the displacement's SEP and its plain input symbols
    [FAMILY_BASE, INPUT_BASE)     concrete family members F_c       (f << 32 | c)
    [INPUT_BASE, RELATIVE_BASE)   symbolic σ_in members IN(f, lo, hi)
    [RELATIVE_BASE, ...)          relative σ_out bottoms REL(f, j, lo, hi)
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Counted",
    "Family",
    "COUNTED_THRESHOLD",
    "UNBOUNDED",
    "FAMILY_BASE",
    "INPUT_BASE",
    "RELATIVE_BASE",
    "family_symbol",
    "is_family_symbol",
    "split_family_symbol",
    "family_of_symbol",
    "input_symbol",
    "is_input_symbol",
    "split_input_symbol",
    "relative_symbol",
    "is_relative_symbol",
    "split_relative_symbol",
]

COUNTED_THRESHOLD = 16
"""Repetitions whose upper bound (or, unbounded, lower bound) exceeds this are counted, not
unrolled. Below it unrolling is cheap and keeps the partitions earlier releases computed."""

UNBOUNDED = (1 << 32) - 1
"""Shown as ∞: no interval reaches it (unbounded families saturate at ``Family.last``)."""

_C_BITS = 32
FAMILY_BASE = 1 << 48
INPUT_BASE = 1 << 100
RELATIVE_BASE = 1 << 120
_MASK32 = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class Counted:
    """A counted repetition in the byte CFG: ``item{min,max}`` (``max`` None: unbounded).

    ``item`` is a nonterminal name; the counted nonterminal derives the concatenations of
    ``min`` to ``max`` strings of ``item``.
    """

    item: str
    min: int
    max: int | None

    def __str__(self) -> str:
        return f"{self.item}{{{self.min},{'' if self.max is None else self.max}}}"


@dataclass(frozen=True, slots=True)
class Family:
    """A GNF family ``F_c`` (1 <= c <= max - 1): ``c`` items of ``item`` read, more to come.

    ``item`` is the GNF nonterminal of the repeated item (its ε-free language); ``min`` is
    the effective lower bound (0 when the item is nullable: ``X{m,n}`` with ε ∈ L(X) is
    ``(X \\ ε){0,n}``); ``head`` is the GNF nonterminal ``R_0`` of the repetition (the counted
    nonterminal of the byte CFG), ``name`` its byte-CFG name (for views).
    """

    name: str
    item: int
    min: int
    max: int | None
    head: int = -1
    origins: tuple = field(default=(), compare=False)

    @property
    def last(self) -> int:
        """The largest count a member has: ``max - 1``; unbounded, ``max(min - 1, 1)``.

        Without an upper bound every ``F_c`` with ``c + 1 >= min`` derives the same language
        (``X+``): those members are one symbol, ``F_last``, whose row pushes itself. So the
        counts a stack can hold are ``1..last`` either way, and unbounded families saturate.
        """
        return self.max - 1 if self.max is not None else max(self.min - 1, 1)

    def continues(self, c: int) -> bool:
        """May ``F_c`` be followed by another item (does a successor exist)?"""
        return self.max is None or c + 1 <= self.max - 1

    def successor(self, c: int) -> int:
        """The count after one more item from ``F_c`` (saturating when unbounded)."""
        return c + 1 if self.max is not None else min(c + 1, self.last)

    def stops(self, c: int) -> bool:
        """May the repetition end right after the item read from ``F_c``?"""
        return c + 1 >= self.min

    def __str__(self) -> str:
        return f"{self.name}{{{self.min},{'' if self.max is None else self.max}}}"


def family_symbol(family: int, count: int) -> int:
    """The concrete member ``F_count`` of family ``family``."""
    return FAMILY_BASE + (family << _C_BITS) + count


def is_family_symbol(symbol: int) -> bool:
    return FAMILY_BASE <= symbol < INPUT_BASE


def split_family_symbol(symbol: int) -> tuple[int, int]:
    """(family, count) of a concrete member."""
    v = symbol - FAMILY_BASE
    return v >> _C_BITS, v & _MASK32


def family_of_symbol(symbol: int) -> int | None:
    """The family a member, σ_in member or relative σ_out bottom belongs to; None for any other symbol."""
    if is_relative_symbol(symbol):
        return split_relative_symbol(symbol)[0]
    if is_input_symbol(symbol):
        return split_input_symbol(symbol)[0]
    if is_family_symbol(symbol):
        return split_family_symbol(symbol)[0]
    return None


def input_symbol(family: int, lo: int, hi: int) -> int:
    """σ_in symbol: some ``F_x`` of ``family`` with ``lo <= x <= hi`` was consumed."""
    return INPUT_BASE + (family << 64) + (lo << 32) + hi


def is_input_symbol(symbol: int) -> bool:
    return INPUT_BASE <= symbol < RELATIVE_BASE


def split_input_symbol(symbol: int) -> tuple[int, int, int]:
    """(family, lo, hi) of a symbolic σ_in member."""
    v = symbol - INPUT_BASE
    return v >> 64, (v >> 32) & _MASK32, v & _MASK32


def relative_symbol(family: int, offset: int, lo: int, hi: int) -> int:
    """σ_out bottom ``F_(x+offset) · SEP · IN(family, lo, hi)`` as one symbol."""
    return RELATIVE_BASE + (family << 96) + (offset << 64) + (lo << 32) + hi


def is_relative_symbol(symbol: int) -> bool:
    return symbol >= RELATIVE_BASE


def split_relative_symbol(symbol: int) -> tuple[int, int, int, int]:
    """(family, offset, lo, hi) of a relative σ_out bottom."""
    v = symbol - RELATIVE_BASE
    return v >> 96, (v >> 64) & _MASK32, (v >> 32) & _MASK32, v & _MASK32
