"""Random sentences of a grammar: what "valid" looks like, for an author testing a grammar.

Sentences are drawn from the byte CFG (the language XGrammar enforces, see
:mod:`.lower`), so every one is a sentence of the grammar by construction; the tests
feed them to XGrammar's own matcher on the bundled and third-party grammars.

Bounded and seeded: a derivation picks productions at random until it is ``max_depth``
nonterminals deep or the output reaches ``max_length`` bytes; from then on every
nonterminal takes its shortest way out (the production with the least shortest
completion, a fixpoint computed once). The result may pass ``max_length`` by those
shortest completions, never by more. Token terminals (``Token(...)``, :mod:`.token_macros`)
are no text: sentences are the grammar's text-only ones, as XGrammar's ``accept_string`` reads
them. A character class prefers printable ASCII when it
has some (``printable=0.9``), so that samples stay readable; any member may still be drawn.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .cfg import BYTE_BITS, CFG, TOKEN_BASE, ByteSet

__all__ = ["Sentence", "generate", "shortest_lengths"]

_PRINTABLE = ByteSet.range(0x20, 0x7E).bits | (1 << 0x0A)


@dataclass(frozen=True, slots=True)
class Sentence:
    """One generated sentence: its bytes, and its text (invalid UTF-8 shown as U+FFFD)."""

    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def shortest_lengths(cfg: CFG) -> dict[str, float]:
    """Length in bytes of the shortest string each nonterminal derives (inf: none)."""
    return _shortest(cfg)[0]


def _shortest(cfg: CFG) -> tuple[dict[str, float], dict[str, int]]:
    """Shortest lengths and, per nonterminal, the production that last improved it. A fixpoint::

        len[A] := inf for every A
        repeat until nothing changes:
            for every A → X1…Xn:  if Σ len[Xi] < len[A] (a byte set counts 1):
                len[A] := Σ len[Xi];  way_out[A] := that production

    ``way_out`` is well founded (following it always terminates): the symbols of A's last
    improving production had reached their final lengths before it, or A would have
    improved again. Picking any production of least length instead can loop
    (``A → B``, ``B → A | ""`` tie at length 0).
    """
    best = {name: math.inf for name in cfg.rules}
    way_out: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for name, alts in cfg.rules.items():
            counted = cfg.counted.get(name)
            if counted is not None:  # item{min,max}: min copies of the item's shortest string
                total = 0 if counted.min == 0 else counted.min * best.get(counted.item, math.inf)
                if total < best[name]:
                    best[name], way_out[name] = total, 0
                    changed = True
                continue
            for i, rhs in enumerate(alts):
                total = sum(_byte_length(s) if isinstance(s, ByteSet) else best.get(s, math.inf) for s in rhs)
                if total < best[name]:
                    best[name], way_out[name] = total, i
                    changed = True
    return best, way_out


def _byte_length(s: ByteSet) -> float:
    """A terminal's length: 1 byte, or never: the dead terminal of a dead end matches nothing, and a
    token terminal (``Token(...)``, bits from 256 on) is no text (XGrammar's ``accept_string``
    never takes one either)."""
    return 1 if s.bits & BYTE_BITS else math.inf


def _pick_byte(s: ByteSet, rng: random.Random, printable: float) -> int:
    readable = s.bits & _PRINTABLE
    pool = ByteSet(readable) if readable and rng.random() < printable else s
    values = list(pool)
    return values[rng.randrange(len(values))]


def generate(
    cfg: CFG,
    count: int = 5,
    *,
    seed: int = 0,
    max_depth: int = 12,
    max_length: int = 200,
    printable: float = 0.9,
) -> list[Sentence]:
    """``count`` random sentences of ``cfg`` (seeded: the same arguments give the same sentences).

    Raises ValueError when the language is empty (no sentence exists).
    """
    best, way_out = _shortest(cfg)
    if best.get(cfg.start, math.inf) == math.inf:
        if cfg.tokens.bits or any(s.bits >> TOKEN_BASE for s in cfg.byte_sets()):
            raise ValueError(
                "every sentence of this grammar takes a whole token by its id (Token/ExcludeToken): "
                "there is no text-only sentence to generate"
            )
        raise ValueError("the grammar's language is empty: no sentence can be generated")
    finite = {
        name: [
            i
            for i, rhs in enumerate(alts)
            if all(_byte_length(s) < math.inf if isinstance(s, ByteSet) else best[s] < math.inf for s in rhs)
        ]
        for name, alts in cfg.rules.items()
    }
    # A character class that needs several bytes is a helper with one production per UTF-8
    # length: its one-byte production, where it has printable bytes, is preferred as well.
    ascii_alts = {}
    for name, alts in cfg.rules.items():
        origin = cfg.origins.get(name)
        if origin is not None and origin.kind == "character class":
            hits = [i for i, rhs in enumerate(alts) if len(rhs) == 1 and isinstance(rhs[0], ByteSet)]
            hits = [i for i in hits if cfg.rules[name][i][0].bits & _PRINTABLE]
            if hits:
                ascii_alts[name] = hits
    rng = random.Random(seed)
    return [_one(cfg, finite, way_out, ascii_alts, rng, max_depth, max_length, printable) for _ in range(count)]


def _one(
    cfg: CFG,
    finite: dict[str, list[int]],
    way_out: dict[str, int],
    ascii_alts: dict[str, list[int]],
    rng: random.Random,
    max_depth: int,
    max_length: int,
    printable: float,
) -> Sentence:
    out = bytearray()

    def finite_item(counted) -> bool:
        return bool(finite.get(counted.item)) or counted.item in cfg.counted

    # Leftmost derivation with an explicit stack of (symbol, depth): no recursion limit.
    stack: list[tuple[object, int]] = [(cfg.start, 0)]
    while stack:
        symbol, depth = stack.pop()
        if isinstance(symbol, ByteSet):
            out.append(_pick_byte(symbol, rng, printable))
            continue
        name = str(symbol)
        counted = cfg.counted.get(name)
        if counted is not None:
            # A count between the bounds, few beyond the lower one (as a star takes few turns).
            count = counted.min
            if depth < max_depth and len(out) < max_length and finite_item(counted):
                top = counted.min + 3 if counted.max is None else min(counted.max, counted.min + 3)
                count = rng.randint(counted.min, top)
            stack.extend([(counted.item, depth + 1)] * count)
            continue
        if depth >= max_depth or len(out) >= max_length:
            choice = way_out[name]
        else:
            pool = finite[name]
            if name in ascii_alts and rng.random() < printable:
                pool = ascii_alts[name]
            choice = rng.choice(pool)
        rhs = cfg.rules[name][choice]
        stack.extend((s, depth + 1) for s in reversed(rhs))
    return Sentence(bytes(out))
