"""Jump-forward decoding on the native state: the bytes the grammar forces next, and tokens for them.

XGrammar's contract (``GrammarMatcher::Impl::FindJumpForwardString`` and ``FindJumpForwardTokens``
in ``cpp/grammar_matcher.cc`` of XGrammar 0.2.9, read, not copied):

- the forced string: while the input so far is not a complete sentence, if every way to go on
  reads one and the same byte, that byte is forced; stop at the first position with a choice
  (or with none). The state is left as it was.
- as a Python ``str`` (0.2.9's binding): the longest prefix of whole UTF-8 characters, so the
  string is empty when the forced bytes start inside a character.
- the forced tokens: greedily the longest vocabulary token (neither stop nor special; the smallest
  id among equal byte strings) that spells the next forced bytes and that the matcher accepts;
  the last one is dropped when a longer ordinary token extends it (the model might want that one).

Here "every way to go on reads one byte" is read off the state DAG directly: of the grammar's
byte classes (atoms: bytes no production tells apart), exactly one leads to a non-empty state,
and it holds one byte. A state is the set of every stack the prefix may leave, so this is the
language's own forced continuation, the one XGrammar's parser states give.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..grammar.words import EMPTY
from ..vocab import NORMAL

if TYPE_CHECKING:
    from ..vocab import VocabTable
    from .walk import StateWalker

__all__ = ["MAX_FORCED_BYTES", "ForcedTokenIndex", "forced_bytes", "valid_utf8_prefix"]

MAX_FORCED_BYTES = 1 << 16
"""Stop the forced-byte search here (a grammar cannot force more than its longest literal run,
but a bound keeps a query bounded whatever the grammar)."""


def forced_bytes(walker: StateWalker, state: int, spent: int) -> bytes:
    """The bytes the grammar forces after ``state``, up to the first choice or a complete sentence."""
    members = walker.atom_members
    out = bytearray()
    while len(out) < MAX_FORCED_BYTES and not walker.accepts_stop(state):
        forced = None
        for atom_bytes in members:
            if not atom_bytes:
                continue
            after, _ = walker.run_bytes(state, atom_bytes[:1], spent)
            if after == EMPTY:
                continue
            if forced is not None or len(atom_bytes) != 1:
                return bytes(out)  # a choice: two byte classes, or two bytes of one class
            forced = (atom_bytes, after)
        if forced is None:
            break
        out += forced[0]
        state = forced[1]
    return bytes(out)


def valid_utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` made of whole, valid UTF-8 characters, decoded."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        return data[: err.start].decode("utf-8")


@dataclass(frozen=True)
class ForcedTokenIndex:
    """The ordinary tokens (neither stop nor special) sorted by bytes, for the greedy forced-token match.

    ``sorted_bytes`` holds each distinct byte string once; ``ids[i]`` is the smallest id spelling
    ``sorted_bytes[i]`` (XGrammar picks the smallest id among tokens of equal bytes).
    """

    sorted_bytes: list[bytes]
    ids: list[int]

    @classmethod
    def from_vocab(cls, vocab: VocabTable) -> ForcedTokenIndex:
        first: dict[bytes, int] = {}
        for i in np.flatnonzero(np.asarray(vocab.kinds) == NORMAL).tolist():
            first.setdefault(bytes(vocab.token_bytes[i]), i)
        ordered = sorted(first)
        return cls(ordered, [first[b] for b in ordered])

    def longest_match(self, data: bytes, start: int) -> tuple[int, int, bool]:
        """(token id, length, extended) of the longest token spelling ``data[start:start+length]``;
        id -1 when none does. ``extended``: a longer token starts with the match."""
        best = (-1, 0, False)
        keys = self.sorted_bytes
        for end in range(start + 1, len(data) + 1):
            piece = data[start:end]
            at = bisect.bisect_left(keys, piece)
            if at == len(keys) or not keys[at].startswith(piece):
                break  # no token goes on with these bytes
            if keys[at] == piece:
                longer = at + 1 < len(keys) and keys[at + 1].startswith(piece)
                best = (self.ids[at], len(piece), longer)
        return best
