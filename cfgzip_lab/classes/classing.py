"""TokenClasses: the result of displacement classing, and what every engine consumes."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Class kinds. The BLOCKED class holds tokens no engine may ever allow: dead tokens
# (empty displacement: in no sentence of the grammar), special/added tokens that are
# never generated as text, and padding ids beyond the tokenizer. STOP holds the stop
# tokens (EOS, end-of-turn), allowed exactly when the grammar can end.
NORMAL, STOP, BLOCKED = 0, 1, 2


@dataclass
class TokenClasses:
    """A partition of a vocabulary into classes the grammar cannot tell apart.

    ``class_of[token_id]`` is the class of each id (length = logits size, padding
    included); ``representatives[k]`` is the byte-wise shortest member of class k
    (ties to the lowest id); ``class_kind[k]`` is NORMAL, STOP or BLOCKED.
    """

    class_of: np.ndarray  # int32[V]
    representatives: np.ndarray  # int32[K]
    class_kind: np.ndarray  # uint8[K]
    metadata: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.class_of.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.representatives.shape[0])

    def members(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.class_of == k)
