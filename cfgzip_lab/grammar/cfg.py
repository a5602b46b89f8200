"""The byte-level context-free grammar: terminals are sets of bytes.

XGrammar matches bytes, and tokens are byte strings (partial UTF-8 included), so
every later stage reasons about bytes. A terminal is a :class:`ByteSet`; a
nonterminal is its name. Productions are tuples of symbols; ``()`` is ε.

Token-level macros (``Token(...)``, ``ExcludeToken(...)``, see :mod:`.token_macros`) lower to
*token terminals*: byte sets whose bits from :data:`TOKEN_BASE` on stand for whole tokens
(bit 256: any token the grammar does not name; bit 257 + i: token id i). No byte reaches
them, so every byte-level stage reads them as one more atom that bytes never match.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._binding import kernel

TOKEN_BASE = 256
"""The first bit of a byte set that is no byte: token atoms (:mod:`.token_macros`)."""
BYTE_BITS = (1 << TOKEN_BASE) - 1

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
        # By lowest set bit: a token terminal's bits reach past 2**17 (token ids), and
        # shifting such an int one bit at a time would cost O(n^2).
        bits = self.bits
        while bits:
            low = bits & -bits
            yield low.bit_length() - 1
            bits ^= low

    def __len__(self) -> int:
        return self.bits.bit_count()

    def __or__(self, other: ByteSet) -> ByteSet:
        return ByteSet(self.bits | other.bits)

    def __repr__(self) -> str:
        return f"ByteSet({format_byteset(self)})"


_FORMATTED: dict[int, str] = {}  # bits → text: the normal form names every lifted terminal by it


def format_byteset(s: ByteSet) -> str:
    """Compact text like ``[0-9a-f]`` or ``"x"`` for humans (GNF views, class explanations);
    a token terminal reads ``<token 3|4|other>``."""
    got = _FORMATTED.get(s.bits)
    if got is None:
        if len(_FORMATTED) >= 4096:
            _FORMATTED.clear()
        got = _FORMATTED[s.bits] = _format_byteset(s)
    return got


def _format_byteset(s: ByteSet) -> str:
    if s.bits >> TOKEN_BASE:
        tokens = [
            str(b - TOKEN_BASE - 1) if b > TOKEN_BASE else "other" for b in ByteSet(s.bits >> TOKEN_BASE << TOKEN_BASE)
        ]
        shown = "|".join(tokens[:8]) + (f"|…{len(tokens) - 8} more" if len(tokens) > 8 else "")
        rest = s.bits & BYTE_BITS
        return f"<token {shown}>" + (f"∪{format_byteset(ByteSet(rest))}" if rest else "")
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


BYTE_SETS_IN_C = True
"""Whether :meth:`CFG.byte_sets` walks the productions in C (``csrc/cfg_passes.c``, ``cfg_byte_bits``) where the
kernel is built, returning the CFG's own byte sets (equal sets); the Python comprehension is its reference
(~0.07 ms of a median MaskBench schema's first mask, most of it making and hashing new ByteSets)."""


@dataclass
class CFG:
    """A byte-level CFG. ``rules[name]`` lists the right-hand sides of ``name``.

    ``origins[name]`` says which source construct a nonterminal stands for and
    ``symbol_spans[name][i][j]`` where symbol j of production i is written (both filled by
    the lowering; a CFG made by hand may leave them empty).

    ``tokens`` holds the pseudo-bytes of the token ids the grammar names (:mod:`.token_macros`).

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
    # Token-level macros (.token_macros): the pseudo-bytes of every token id the grammar names,
    # so that each gets an atom even where no terminal takes it.
    tokens: ByteSet = field(default_factory=lambda: ByteSet(0))

    @property
    def num_productions(self) -> int:
        return sum(len(alts) for alts in self.rules.values())

    def byte_sets(self) -> set[ByteSet]:
        if BYTE_SETS_IN_C and kernel is not None and self.rules.__class__ is dict:
            # bits -> the first byte set with them (csrc/cfg_passes.c): the CFG's own objects, not new equal ones
            found = kernel.cfg_byte_bits(self.rules, ByteSet)
            if self.tokens.bits:
                found.setdefault(self.tokens.bits, self.tokens)
            return {s if s.__class__ is ByteSet else ByteSet(b) for b, s in found.items()}
        # By their bits first: a ByteSet hashes through a Python-level __hash__, an int in C.
        bits = {s.bits for alts in self.rules.values() for rhs in alts for s in rhs if isinstance(s, ByteSet)}
        if self.tokens.bits:
            bits.add(self.tokens.bits)
        return {ByteSet(b) for b in bits}

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
    by their smallest byte so the partition is deterministic. Token atoms (bits from
    :data:`TOKEN_BASE` on) present in some set are partitioned the same way and come
    after every byte atom; token bits in no set make no atom.
    """
    # Partition refinement on the sets' bit masks: each set splits every block it cuts (a block is
    # a mask of bytes, or of token bits, that no set seen so far tells apart). The same partition
    # as grouping bytes by their membership signature, 2x faster (no loop over each set's bytes).
    # Sets of one member (a literal's bytes: most sets of a JSON Schema's EBNF) only isolate that member:
    # they are applied together at the end, one pass over the blocks, instead of one pass each.
    every = {s.bits for s in sets}
    tokens = 0
    singles = 0
    for bits in every:
        tokens |= bits
        if bits and not bits & (bits - 1):
            singles |= bits
    tokens = tokens >> TOKEN_BASE << TOKEN_BASE  # token bits in no set make no atom
    blocks = [BYTE_BITS, tokens] if tokens else [BYTE_BITS]
    for bits in every:
        if not bits or not bits & (bits - 1):
            continue
        out = []
        for block in blocks:
            inside = block & bits
            if inside and inside != block:
                out.append(inside)
                out.append(block ^ inside)
            else:
                out.append(block)
        blocks = out
    if singles:
        out = []
        for block in blocks:
            inside = block & singles
            if inside and inside != block:
                out.append(block ^ inside)
            elif inside:  # the block is only members of singles: each its own block
                pass
            else:
                out.append(block)
                continue
            while inside:
                low = inside & -inside
                out.append(low)
                inside ^= low
        blocks = out
    blocks.sort(key=lambda block: block & -block)  # by smallest member
    return [ByteSet(block) for block in blocks]
