"""How XGrammar's lookahead reads a character class, and which tokens it reads otherwise than its matcher.

XGrammar compiles a repetition past 128 into rules that carry lookahead assertions made of the repeated
class (``r_repeat_1 ::= [cls] (= [cls] [cls] ... )``, 127 copies). At compile time a token that ends
such a rule mid-token is put in the mask when the rest of it passes the assertion
(``IsTokenPassLookaheadAssertion`` in ``grammar_compiler.cc``), and the assertion reads a class byte by
byte in the Earley parser (``EarleyParser::AdvanceCharacterClass``), not through the class's automaton
that the matcher runs. That reading differs from the matcher's in three ways:

- an ASCII byte is compared with each range's bounds cut to their low byte, so ``\\u0f20-\\u0f33`` takes
  ``(`` and a space, and ``a-\\u0100`` takes nothing;
- a first byte is taken when the code points it may start, overlong forms included, meet the class:
  ``\\xe0`` stands for U+0000..U+0FFF, so ``[a-z ]`` takes it though no code point of the class starts
  with it; a negated class takes every first byte;
- a negated class takes every continuation byte and checks only the finished code point.

So the mask may hold a token the matcher refuses (`` \\xe0`` in ``[a-z ]{1,200}`` between quotes, 2,420
tokens such as `` {`` in MaskBench Github_hard o79409's name pattern), or miss one it accepts. Whether a
class can show it depends on the vocabulary: :func:`misread_tokens` lists the tokens that, after at least
one code point of the class, go on with bytes the two readings take differently. Where there is none (a
JSON string's ``[^"\\\\\\r\\n]`` with Llama-3's vocabulary), XGrammar's masks stay the language's.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["ClassReading", "LOOKAHEAD_COPIES", "lenient_reads", "exact_reads", "misread_tokens"]

#: how many copies of the class XGrammar's such assertions hold at least; a token that reads them all is
#: left to the matcher (the assertion's "rule finished" case makes it uncertain, not accepted)
LOOKAHEAD_COPIES = 127

_FIRST_BYTE_BITS = {2: 0x1F, 3: 0x0F, 4: 0x07}
# code points a valid sequence of n bytes may stand for (surrogates excluded)
_VALID = {1: ((0, 0x7F),), 2: ((0x80, 0x7FF),), 3: ((0x800, 0xD7FF), (0xE000, 0xFFFF)), 4: ((0x10000, 0x10FFFF),)}
# first bytes whose later bytes the lenient reading checks otherwise than a strict decoder (overlong,
# surrogate and past-U+10FFFF forms) and first bytes no valid sequence starts with
_SPECIAL_FIRST = frozenset({0xC0, 0xC1, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xF6, 0xF7})


@dataclass(frozen=True)
class ClassReading:
    """A character class as XGrammar holds it: inclusive code-point ranges, and whether it is negated."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def contains(self, cp: int) -> bool:
        """Whether the class (negation applied) holds code point ``cp``."""
        return self._listed(cp) != self.negated

    def meets(self, lo: int, hi: int) -> bool:
        """Whether the class holds some code point in ``[lo, hi]``."""
        starts, ends = self._merged
        at = bisect.bisect_right(ends, lo - 1)  # the first merged range ending at lo or later
        if not self.negated:
            return at < len(starts) and starts[at] <= hi
        # negated: some code point of [lo, hi] outside every listed range
        return at >= len(starts) or starts[at] > lo or ends[at] < hi

    def _listed(self, cp: int) -> bool:
        starts, ends = self._merged
        at = bisect.bisect_right(starts, cp) - 1
        return at >= 0 and cp <= ends[at]

    def _ascii_listed_cut(self, ch: int) -> bool:
        """XGrammar's ASCII test: each range's bounds cut to their low byte."""
        return bool(self._ascii_cut >> ch & 1)

    @functools.cached_property
    def _merged(self) -> tuple[list[int], list[int]]:
        """The listed ranges sorted and merged (touching ones joined): starts and ends."""
        starts: list[int] = []
        ends: list[int] = []
        for a, b in sorted(self.ranges):
            if starts and a <= ends[-1] + 1:
                ends[-1] = max(ends[-1], b)
            else:
                starts.append(a)
                ends.append(b)
        return starts, ends

    @functools.cached_property
    def _ascii_cut(self) -> int:
        """Bit ``ch`` set where XGrammar's ASCII test takes byte ``ch`` as listed."""
        return sum(1 << ch for ch in range(0x80) if any((a & 0xFF) <= ch <= (b & 0xFF) for a, b in self.ranges))


def lenient_reads(cls: ClassReading, data: bytes) -> bool | None:
    """Whether XGrammar's lookahead takes all of ``data`` as copies of ``cls`` (the last one may stop
    inside a code point); None where the assertion's :data:`LOOKAHEAD_COPIES` copies are all read inside
    ``data`` (then XGrammar leaves the token to its matcher: no misreading can show)."""
    left = partial = copies = 0
    for ch in data:
        if copies >= LOOKAHEAD_COPIES:
            return None
        if left:
            if ch & 0xC0 != 0x80:
                return False
            partial, left = (partial << 6) | (ch & 0x3F), left - 1
            if left == 0:
                if cls._listed(partial) == cls.negated:
                    return False
                copies += 1
            elif not cls.negated and not cls.meets(partial << 6 * left, (partial << 6 * left) | ((1 << 6 * left) - 1)):
                return False
            continue
        if ch >= 0x80:
            n = 2 if 0xC0 <= ch <= 0xDF else 3 if 0xE0 <= ch <= 0xEF else 4 if 0xF0 <= ch <= 0xF7 else 0
            if n == 0:
                return False
            partial, left = ch & _FIRST_BYTE_BITS[n], n - 1
            lo = partial << 6 * left
            if not cls.negated and not cls.meets(lo, lo | ((1 << 6 * left) - 1)):
                return False
            continue
        if cls._ascii_listed_cut(ch) == cls.negated:
            return False
        copies += 1
    return True


def _strict_length(first: int) -> int:
    """The length of the strict UTF-8 sequence ``first`` begins (0: no valid sequence begins with it)."""
    if first < 0x80:
        return 1
    return 2 if 0xC2 <= first <= 0xDF else 3 if 0xE0 <= first <= 0xEF else 4 if 0xF0 <= first <= 0xF4 else 0


def exact_reads(cls: ClassReading, data: bytes) -> bool:
    """Whether ``data`` is code points of ``cls`` in strict UTF-8, the last one possibly cut short where
    some code point of the class completes it (what the class's automaton, and so the matcher, takes)."""
    at = 0
    while at < len(data):
        ch = data[at]
        n = _strict_length(ch)
        if n == 0:
            return False
        piece = data[at : at + n]
        if any(b & 0xC0 != 0x80 for b in piece[1:]):
            return False
        value = ch & (_FIRST_BYTE_BITS.get(n, 0x7F))
        for b in piece[1:]:
            value = (value << 6) | (b & 0x3F)
        left = n - len(piece)
        lo, hi = value << 6 * left, (value << 6 * left) | ((1 << 6 * left) - 1)
        spans = [(max(lo, a), min(hi, b)) for a, b in _VALID[n] if max(lo, a) <= min(hi, b)]
        if not spans:  # overlong, surrogate or past U+10FFFF
            return False
        if left:  # the token stops inside a code point: some completion must be in the class
            return any(cls.meets(a, b) for a, b in spans)
        if not cls.contains(value):
            return False
        at += n
    return True


def _suspect_bytes(cls: ClassReading) -> np.ndarray:
    """The bytes a token must hold for the two readings to differ on it (a superset)."""
    suspect = np.zeros(256, bool)
    for ch in range(0x80):
        suspect[ch] = (cls._ascii_listed_cut(ch) != cls.negated) != cls.contains(ch)
    if cls.negated and any(b >= 0x80 for _, b in cls.ranges):
        suspect[0x80:] = True  # a negated class takes continuation bytes unchecked: any may differ
        return suspect
    for ch in range(0x80, 0x100):  # a first byte the two readings take differently, alone or as a lead
        suspect[ch] = ch not in _SPECIAL_FIRST and lenient_reads(cls, bytes([ch])) != exact_reads(cls, bytes([ch]))
    return suspect


_FLAT: dict[str, tuple[tuple[bytes, ...], np.ndarray, np.ndarray, np.ndarray]] = {}
_FOUND: dict[tuple[ClassReading, str], tuple[int, ...]] = {}


def _flat(vocab) -> tuple[tuple[bytes, ...], np.ndarray, np.ndarray, np.ndarray]:
    """The vocabulary's tokens, their bytes end to end, the token each byte belongs to, and the tokens every
    class must look at (:func:`_odd_utf8`), once per vocabulary."""
    got = _FLAT.get(vocab.fingerprint)
    if got is None:
        tokens = tuple(vocab.token_bytes)
        lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
        flat = np.frombuffer(b"".join(tokens), np.uint8)
        odd = np.array([i for i, t in enumerate(tokens) if _odd_utf8(t)], np.int64)
        got = tokens, flat, np.repeat(np.arange(len(tokens)), lengths), odd
        if len(_FLAT) >= 4:
            _FLAT.clear()
        _FLAT[vocab.fingerprint] = got
    return got


def _odd_utf8(token: bytes) -> bool:
    """Whether ``token`` holds bytes that are not strict UTF-8 after its first code point (overlong,
    surrogate, past U+10FFFF, a stray continuation), or ends inside a code point begun by one of
    :data:`_SPECIAL_FIRST`: the only places where a first byte read alike by both readings can still lead
    them apart (elsewhere the lenient reading's ranges are the strict ones)."""
    try:
        token.decode("utf-8")
        return False
    except UnicodeDecodeError as error:
        if error.reason != "unexpected end of data":
            return True
        return token[error.start] in _SPECIAL_FIRST


def misread_tokens(cls: ClassReading, vocab) -> tuple[int, ...]:
    """The ids of ``vocab``'s tokens that begin with at least one code point of ``cls`` and go on with bytes
    XGrammar's lookahead reads otherwise than its matcher (:func:`lenient_reads` against :func:`exact_reads`,
    at every code-point boundary after the first). Remembered per class and vocabulary."""
    key = (cls, vocab.fingerprint)
    found = _FOUND.get(key)
    if found is None:
        tokens, flat, owner, odd = _flat(vocab)
        candidates = np.union1d(owner[_suspect_bytes(cls)[flat]], odd)
        found = tuple(t for t in candidates.tolist() if _misread(cls, tokens[t]))
        if len(_FOUND) >= 256:
            _FOUND.clear()
        _FOUND[key] = found
    return found


def _misread(cls: ClassReading, token: bytes) -> bool:
    at = 0
    while at < len(token):  # a code point of the class, read exactly, then the rest by both readings
        step = _exact_step(cls, token, at)
        if step == 0:
            return False
        at += step
        rest = token[at:]
        lenient = lenient_reads(cls, rest) if rest else None
        if lenient is not None and lenient != exact_reads(cls, rest):
            return True
    return False


def _exact_step(cls: ClassReading, token: bytes, at: int) -> int:
    """The length of the whole code point of ``cls`` at ``at`` (0 where there is none)."""
    n = _strict_length(token[at])
    piece = token[at : at + n]
    return n if n and len(piece) == n and exact_reads(cls, piece) else 0
