"""The vocabulary's byte trie in C (``_native.VocabTrie``, ``csrc/vocab_trie.c``), kept with the vocabulary it is built from.

Grammar-independent, as llguidance's token trie is kept apart from its parser: classing walks it
under each grammar's byte classes (:mod:`cfgzip_lab.classes.classing`), and
:attr:`cfgzip_lab.vocab.VocabTable.byte_trie` keeps one per table.
"""

from __future__ import annotations

import numpy as np

from ._binding import kernel as _kernel
from .vocab import TokenKind

__all__ = ["vocab_trie"]

_TRIES: list = []
_TRIES_KEPT = 4


def vocab_trie(token_bytes: list[bytes], kinds: np.ndarray):
    """The vocabulary's NORMAL tokens as a byte trie (``_native.VocabTrie``, ``csrc/vocab_trie.c``), kept per vocabulary.

    Grammar-independent: classing quotients it by each grammar's byte classes as it walks. The last
    few are kept; one is reused when it was built from the same token objects (or equal bytes) and
    kinds (``VocabTrie.same``: 0.2 ms for Llama-3's 128k tokens, where building sorts them).
    """
    kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    if not isinstance(token_bytes, list):
        token_bytes = list(token_bytes)
    for i, trie in enumerate(_TRIES):
        if trie.same(token_bytes, kinds):
            _TRIES.append(_TRIES.pop(i))
            return trie
    trie = _kernel.VocabTrie(token_bytes, kinds, int(TokenKind.NORMAL), int(TokenKind.STOP))
    _TRIES.append(trie)
    del _TRIES[:-_TRIES_KEPT]
    return trie
