"""Class set (a Python int) → packed vocabulary bitmask row, memoised by the class set.

The walk gives each state's allowed classes as an int; decoding revisits the same few
hundred class sets over and over (inside identifiers, strings, whitespace), so the packed
row is kept per class set (least recently used out, bounded by bytes) and a repeated set
costs one dict lookup. A new one goes through :class:`cfgzip_lab.expand.Expander` (union
tables for the large classes, a scatter for the small ones: 20–34 µs for 128k tokens).
"""
from __future__ import annotations

import math

import numpy as np

from ..expand import Expander

__all__ = ["RowCache"]


class RowCache:
    """Packed int32 vocabulary rows (XGrammar's layout, bits past V zero) per class set."""

    def __init__(self, expander: Expander, *, memo_bytes: int = 64 << 20) -> None:
        self.expander = expander
        self.num_classes = expander.num_classes
        self.class_words = math.ceil(self.num_classes / 32)
        self.vocab_words = expander.vocab_bitmask_size
        self._limit = max(16, memo_bytes // max(1, 4 * self.vocab_words))
        self._rows: dict[int, np.ndarray] = {}
        self.misses = 0

    def class_row(self, class_set: int) -> np.ndarray:
        """The class set as XGrammar's packed int32 class bitmask ``(ceil(K/32),)``."""
        return np.frombuffer(bytearray(class_set.to_bytes(4 * self.class_words, "little")), dtype=np.int32)

    def vocab_row(self, class_set: int) -> np.ndarray:
        """Read-only packed vocabulary row for ``class_set``."""
        rows = self._rows
        got = rows.pop(class_set, None)
        if got is None:
            self.misses += 1
            got = self.expander.to_vocab_bitmask(self.class_row(class_set)).numpy()
            got.flags.writeable = False
            while len(rows) >= self._limit:
                rows.pop(next(iter(rows)))
        rows[class_set] = got
        return got
