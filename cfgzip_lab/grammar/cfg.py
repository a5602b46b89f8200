"""The byte-level context-free grammar: terminals are sets of bytes.

XGrammar matches bytes, and tokens are byte strings (partial UTF-8 included), so
every later stage reasons about bytes. A terminal is a :class:`ByteSet`; a
nonterminal is its name. Productions are tuples of symbols; ``()`` is ε.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .counted import Counted
    from .provenance import Origin
    from .tree import Span


@dataclass(frozen=True, slots=True)
class ByteSet:
    """A set of byte values 0..255, stored as a 256-bit integer mask (cheap to hash and union)."""

    bits: int

    @staticmethod
    def of(values: Iterable[int]) -> ByteSet:
        bits = 0
        for v in values:
            bits |= 1 << v
        return ByteSet(bits)

    @staticmethod
    def range(lo: int, hi: int) -> ByteSet:
        """Inclusive range ``lo..hi``."""
        return ByteSet(((1 << (hi - lo + 1)) - 1) << lo)

    def __contains__(self, byte: int) -> bool:
        return bool(self.bits >> byte & 1)

    def __iter__(self) -> Iterator[int]:
        bits, b = self.bits, 0
        while bits:
            if bits & 1:
                yield b
            bits >>= 1
            b += 1

    def __len__(self) -> int:
        return self.bits.bit_count()

    def __or__(self, other: ByteSet) -> ByteSet:
        return ByteSet(self.bits | other.bits)

    def __repr__(self) -> str:
        return f"ByteSet({format_byteset(self)})"


def format_byteset(s: ByteSet) -> str:
    """Compact text like ``[0-9a-f]`` or ``"x"`` for humans (GNF views, class explanations)."""
    values = list(s)
    if len(values) == 1:
        return repr(bytes(values))[1:]
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        lo, hi = _show_byte(values[i]), _show_byte(values[j])
        parts.append(lo if i == j else f"{lo}{hi}" if j == i + 1 else f"{lo}-{hi}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def _show_byte(b: int) -> str:
    c = chr(b)
    if 0x21 <= b <= 0x7E and c not in "\\]-^[":
        return c
    return f"\\x{b:02x}"


Symbol = str | ByteSet
Production = tuple[Symbol, ...]


@dataclass
class CFG:
    """A byte-level CFG. ``rules[name]`` lists the right-hand sides of ``name``.

    ``origins[name]`` says which source construct a nonterminal stands for and
    ``symbol_spans[name][i][j]`` where symbol j of production i is written (both filled by
    the lowering; a CFG made by hand may leave them empty).

    ``counted[name]`` marks a counted repetition ``item{min,max}`` with a large bound
    (:mod:`.counted`): such a nonterminal has no listed productions (``rules[name]`` is
    empty), every stage reads its meaning from here instead of n copies of a rule.
    """

    start: str
    rules: dict[str, list[Production]] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)
    symbol_spans: dict[str, list[tuple[Span | None, ...]]] = field(default_factory=dict)
    text: str = ""  # the grammar text the spans point into
    counted: dict[str, Counted] = field(default_factory=dict)

    @property
    def num_productions(self) -> int:
        return sum(len(alts) for alts in self.rules.values())

    def byte_sets(self) -> set[ByteSet]:
        return {s for alts in self.rules.values() for rhs in alts for s in rhs if isinstance(s, ByteSet)}

    def describe_symbol(self, name: str) -> str:
        """What nonterminal ``name`` stands for in the grammar text (``expr@3`` → the repetition in rule expr)."""
        from .provenance import describe_cfg_symbol

        return describe_cfg_symbol(self, name)

    def to_text(self) -> str:
        """Readable listing, one production per line."""
        lines = []
        for name, alts in self.rules.items():
            if name in self.counted:
                lines.append(f"{name} -> {self.counted[name]}")
            for rhs in alts:
                body = " ".join(format_byteset(s) if isinstance(s, ByteSet) else s for s in rhs) or "ε"
                lines.append(f"{name} -> {body}")
        return "\n".join(lines)


def byte_classes(sets: Iterable[ByteSet]) -> list[ByteSet]:
    """Partition 0..255 into atoms that no given set splits ("bytes the grammar cannot tell apart").

    Bytes in no set at all form one atom too (they match nothing). Atoms are ordered
    by their smallest byte so the partition is deterministic.
    """
    signature: dict[int, int] = {b: 0 for b in range(256)}
    for i, s in enumerate(sorted(set(sets), key=lambda s: s.bits)):
        for b in s:
            signature[b] |= 1 << i
    groups: dict[int, list[int]] = {}
    for b in range(256):
        groups.setdefault(signature[b], []).append(b)
    return sorted((ByteSet.of(bs) for bs in groups.values()), key=lambda s: min(s))
