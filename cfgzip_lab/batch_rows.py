"""What every batch of matchers shares: rows, sizes and a bitmask for all of them.

Kept apart from ``engine.py`` so that the native engine's batch gets it without importing
XGrammar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class MatcherRows:
    """Row ``i`` is ``matchers[i]``; sizes come from the first row (all rows share one vocabulary)."""

    def __init__(self, matchers: Sequence[Any]) -> None:
        if not matchers:
            raise ValueError("a batch needs at least one matcher")
        self.matchers = list(matchers)
        self._first = self.matchers[0]

    @property
    def batch_size(self) -> int:
        return len(self.matchers)

    @property
    def vocab_size(self) -> int:
        return self._first.vocab_size

    @property
    def bitmask_size(self) -> int:
        return self._first.bitmask_size

    def allocate_bitmask(self) -> torch.Tensor:
        return self._first.allocate_bitmask(self.batch_size)

    def _check_batch(self, token_ids: Sequence[int]) -> None:
        if len(token_ids) != self.batch_size:
            raise ValueError(f"expected {self.batch_size} tokens, got {len(token_ids)}")
