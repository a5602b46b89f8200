"""XGrammar's rejection runs over the sorted vocabulary, and the tokens that keep them.

Why XGrammar is not vocabulary-independent (read in ``cpp/tokenizer_info.cc`` and
``cpp/grammar_compiler.cc`` of mlc-ai/xgrammar, the same since its Earley parser, b943feac,
July 2025; checked on 0.2.8 and 0.2.9 by ``tests/test_xgrammar_runs.py``): ``TokenizerInfo``
sorts the decoded vocabulary (stop and special tokens left out) and gives each sorted
position ``i`` a "trie subtree" ``[i, end[i])``, built with a stack::

    for i, token in enumerate(sorted_tokens):
        while stack and token.find(sorted_tokens[stack.top]) == npos:   # substring, not prefix
            end[stack.pop()] = i
        stack.push(i)
    every position left on the stack ends at len(sorted_tokens)

When the mask is built (the compile-time token mask cache and the run-time check of
uncertain tokens) a token that is rejected rejects every later token of its subtree
unchecked. Were the test ``startswith`` this would be exact: the tokens right after ``t`` that
start with ``t`` fail where ``t`` failed. The test is ``find``, so the run of ``t`` also takes
the tokens that follow it in sorted order and hold ``t`` *elsewhere*: ``"ine"`` rejected
rejects ``"inline"`` when no token sorted between them (``"inf"``, ``"ing"``...) breaks the run.
Such a run depends on which tokens lie in between, hence on the vocabulary.

The compressed engine lists the representatives (and the shadow prefixes) only, so a run
that the full vocabulary breaks can reach further there: on JSONSchemaBench's htmlhint
schema and Llama-3, ``"ine"`` and ``"inline"`` were both representatives and nothing sorted
between them, and the compressed mask refused ``inline`` after ``{"`` (issue 31). The
other way round, a run of the full vocabulary can take a representative spuriously (Llama-3
has 11 such pairs, e.g. ``"luk"`` → ``"luluk"``): plain XGrammar then refuses it whenever the
owner of the run is refused, and the compressed list must hold that owner too.

:func:`run_fences` returns the full-vocabulary tokens that, listed with the others, make
every run over the listed tokens equal the full vocabulary's run cut to them:

1. for each listed ``u``, the first listed token after ``u``'s full run must not contain
   ``u``; where it does, the token that ends the run in the full vocabulary is listed;
2. each listed ``x`` that lies in the full run of a token ``u`` it does not start with
   brings ``u`` (then 1. applies to ``u``);

repeated until nothing is added. The fences are listed after the shadow prefixes: nobody
samples them and their bits are never read.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .vocab import TokenKind, VocabTable

__all__ = ["SortedRuns", "xgrammar_run_ends", "sorted_runs", "run_fences"]


def xgrammar_run_ends(sorted_tokens: Sequence[bytes]) -> np.ndarray:
    """XGrammar's ``trie_subtree_nodes_range``: position ``i`` rejects ``[i, ends[i])`` with it.

    ``sorted_tokens`` sorted bytewise, as XGrammar sorts its decoded vocabulary.

    >>> xgrammar_run_ends([b"ine", b"inline"]).tolist()   # "ine" occurs in "inline"
    [2, 2]
    >>> xgrammar_run_ends([b"ine", b"inf", b"inline"]).tolist()
    [1, 2, 3]
    """
    ends = [len(sorted_tokens)] * len(sorted_tokens)
    stack: list[bytes] = []
    at: list[int] = []
    for i, token in enumerate(sorted_tokens):
        while stack and stack[-1] not in token:
            stack.pop()
            ends[at.pop()] = i
        stack.append(token)
        at.append(i)
    return np.array(ends, dtype=np.int64)


@dataclass(frozen=True)
class SortedRuns:
    """A vocabulary as XGrammar sorts it, with each token's run.

    ``tokens``: the bytes of every id XGrammar can allow (NORMAL kinds), sorted, duplicates
    kept; ``ends``: :func:`xgrammar_run_ends` of them; ``position``: the first sorted
    position of each distinct token; ``spurious_owners``: for each token lying in the run of
    a token it does not start with, those tokens.
    """

    tokens: list[bytes]
    ends: np.ndarray
    position: dict[bytes, int]
    spurious_owners: dict[bytes, list[bytes]]

    @classmethod
    def of(cls, token_bytes: Iterable[bytes]) -> SortedRuns:
        tokens = sorted(token_bytes)
        ends = xgrammar_run_ends(tokens)
        position = {token: i for i, token in reversed(list(enumerate(tokens)))}  # the first of duplicates
        # A run starts with the tokens that start with its owner (sorted together); a run
        # whose last token does not start with it holds tokens spuriously, at its end.
        owners: dict[bytes, list[bytes]] = {}
        for i in np.flatnonzero(ends > np.arange(len(tokens)) + 1).tolist():
            owner = tokens[i]
            if tokens[int(ends[i]) - 1].startswith(owner):
                continue
            for j in range(int(ends[i]) - 1, i, -1):
                if tokens[j].startswith(owner):
                    break
                owners.setdefault(tokens[j], []).append(owner)
        return cls(tokens, ends, position, owners)


_CACHE_LIMIT = 4
_cache_lock = threading.Lock()
_cache: OrderedDict[str, SortedRuns] = OrderedDict()


def sorted_runs(vocab: VocabTable) -> SortedRuns:
    """:class:`SortedRuns` of ``vocab``'s NORMAL tokens, cached by fingerprint (~0.5 s for Llama-3)."""
    key = vocab.fingerprint
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    kinds = np.asarray(vocab.kinds)
    runs = SortedRuns.of(bytes(vocab.token_bytes[i]) for i in np.flatnonzero(kinds == TokenKind.NORMAL).tolist())
    with _cache_lock:
        _cache[key] = runs
        while len(_cache) > _CACHE_LIMIT:
            _cache.popitem(last=False)
    return runs


def run_fences(runs: SortedRuns, listed: Iterable[bytes]) -> list[bytes]:
    """Tokens of ``runs`` to list beside ``listed`` so that XGrammar's runs over them all equal
    its runs over the whole vocabulary, cut to them (the module doc's rules 1 and 2).

    Returns the added tokens, sorted; none of them is in ``listed``. Tokens of ``listed``
    that ``runs`` does not hold are ignored.

    >>> runs = SortedRuns.of([b"ine", b"inf", b"inline"])
    >>> run_fences(runs, [b"ine", b"inline"])   # "inf" ends the run of "ine" before "inline"
    [b'inf']
    >>> run_fences(SortedRuns.of([b"luk", b"luluk", b"lum"]), [b"luluk"])   # the run of "luk" takes "luluk"
    [b'luk']
    """
    kept = {token for token in listed if token in runs.position}
    added: set[bytes] = set()
    todo = sorted(kept, key=runs.position.__getitem__)
    while todo:
        new: set[bytes] = set()
        for x in todo:
            for owner in runs.spurious_owners.get(x, ()):
                if owner not in kept:
                    new.add(owner)
        positions = sorted(runs.position[t] for t in kept | new)
        for u in sorted(kept | new, key=runs.position.__getitem__):
            end = int(runs.ends[runs.position[u]])
            after = bisect.bisect_left(positions, end)
            if after < len(positions) and u in runs.tokens[positions[after]]:
                fence = runs.tokens[end]
                if fence not in kept:
                    new.add(fence)
        new -= kept
        kept |= new
        added |= new
        todo = sorted(new, key=runs.position.__getitem__)
    return sorted(added)
