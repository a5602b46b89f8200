"""The index data every expansion backend reads: built once per :class:`TokenClasses`.

``class_of[t]`` is token ``t``'s class; the packed output has ``ceil(V / 32)`` words, so the
gather index is padded to whole words with class 0, whose bits past ``V`` are then cleared
with ``tail_word_mask`` (XGrammar's format keeps them 0).

The two index arrays (``intp``, 1 MB each for Llama-3) are made on first use: the native engine's
compiled rows read only the sizes (its own tables come from ``class_of`` in C), and copying them
cost 0.35 ms of a JSON Schema's ~2 ms warm start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = ["ExpansionTables"]


@dataclass(frozen=True)
class ExpansionTables:
    """Sizes and index arrays shared by the numpy, torch and Triton backends."""

    vocab_size: int
    num_classes: int
    class_bitmask_size: int
    vocab_bitmask_size: int
    tail_word_mask: int  # as a signed int32 value
    # class_of as given (checked by the Expander), or a function giving it on first need (a sparse
    # map's, TokenClasses.from_sparse: the native engine's compiled rows never need it)
    source: np.ndarray | Callable[[], np.ndarray] = field(repr=False, compare=False)

    def _source(self) -> np.ndarray:
        return self.source() if callable(self.source) else self.source

    @cached_property
    def class_of(self) -> np.ndarray:
        """intp (V,)"""
        return np.ascontiguousarray(self._source(), dtype=np.intp)

    @cached_property
    def index_packed(self) -> np.ndarray:
        """intp (32 * vocab_bitmask_size,), padding → class 0"""
        padded = np.zeros(self.vocab_bitmask_size * 32, dtype=np.intp)
        padded[: self.vocab_size] = self._source()
        return padded

    @staticmethod
    def build(
        class_of: np.ndarray | Callable[[], np.ndarray], num_classes: int, vocab_size: int | None = None
    ) -> ExpansionTables:
        """From a checked ``class_of`` (:class:`~cfgzip_lab.expand.Expander` checks it), or a function
        giving it when first needed with ``vocab_size`` given."""
        if not callable(class_of):
            class_of = np.asarray(class_of)
            vocab_size = int(class_of.shape[0])
        vocab_words = math.ceil(vocab_size / 32)
        tail = vocab_size % 32
        return ExpansionTables(
            vocab_size=vocab_size,
            num_classes=int(num_classes),
            class_bitmask_size=math.ceil(num_classes / 32),
            vocab_bitmask_size=vocab_words,
            tail_word_mask=int(np.int32(-1 if tail == 0 else (1 << tail) - 1)),
            source=class_of,
        )
