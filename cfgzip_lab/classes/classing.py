"""TokenClasses: the result of displacement classing, and what every engine consumes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..grammar.gnf import GNF
from ..grammar.words import EMPTY, BudgetExceeded
from .displacement import Displacer

# Class kinds. The BLOCKED class holds tokens no engine may ever allow: dead tokens
# (empty displacement: in no sentence of the grammar), special/added tokens that are
# never generated as text, and padding ids beyond the tokenizer. STOP holds the stop
# tokens (EOS, end-of-turn), allowed exactly when the grammar can end.
NORMAL, STOP, BLOCKED = 0, 1, 2

# Vocabulary token kinds (cfgzip_lab.vocab uses the same numbers).
_TOKEN_NORMAL, _TOKEN_STOP = 0, 1

DEFAULT_TOKEN_BUDGET = 200_000  # new DAG nodes one token may create before it falls back


@dataclass
class TokenClasses:
    """A partition of a vocabulary into classes the grammar cannot tell apart.

    ``class_of[token_id]`` is the class of each id (length = logits size, padding
    included); ``representatives[k]`` is the byte-wise shortest member of class k
    (ties to the lowest id); ``class_kind[k]`` is NORMAL, STOP or BLOCKED.
    ``metadata`` holds counts, fingerprints and timings (see :mod:`.cache`).
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

    @property
    def compression_ratio(self) -> float:
        return self.vocab_size / max(1, self.num_classes)

    def members(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.class_of == k)

    def class_sizes(self) -> np.ndarray:
        return np.bincount(self.class_of, minlength=self.num_classes)

    def blocked_class(self) -> int | None:
        hits = np.flatnonzero(self.class_kind == BLOCKED)
        return int(hits[0]) if hits.size else None

    def stop_class(self) -> int | None:
        hits = np.flatnonzero(self.class_kind == STOP)
        return int(hits[0]) if hits.size else None

    def save(self, path, **kw) -> None:
        from .cache import save_classes

        save_classes(self, path, **kw)

    @staticmethod
    def load(path, **kw) -> "TokenClasses":
        from .cache import load_classes

        return load_classes(path, **kw)


@dataclass
class ClassingResult:
    classes: TokenClasses
    displacer: Displacer
    token_node: np.ndarray  # int64[V]: the displacement node of each normal token (-1 otherwise)


def compute_classes(
    gnf: GNF,
    token_bytes: list[bytes],
    kinds: np.ndarray,
    *,
    budget: int = DEFAULT_TOKEN_BUDGET,
    progress: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> ClassingResult:
    """Partition a vocabulary by displacement (exact; see :mod:`.displacement`).

    Tokens are walked as a trie over byte classes: token byte strings are mapped
    to byte-class strings, de-duplicated and sorted, and each one resumes from the
    configuration set of its longest common prefix with the previous one.

    ``budget`` bounds the new DAG nodes one token may create; a token past it is
    put in a class of its own (sound: a singleton never merges anything) and
    counted in ``metadata["fallback_singletons"]``. ``progress(done, total)`` is
    called now and then; ``cancel()`` returning True stops with ``InterruptedError``.
    """
    started = time.perf_counter()
    displacer = Displacer(gnf)
    store = displacer.store
    vocab_size = len(token_bytes)
    kinds = np.asarray(kinds)
    node_of = np.full(vocab_size, -1, dtype=np.int64)

    by_atoms: dict[bytes, list[int]] = {}
    table = displacer.atom_table
    for tid, data in enumerate(token_bytes):
        if kinds[tid] == _TOKEN_NORMAL and data:
            by_atoms.setdefault(data.translate(table), []).append(tid)
    keys = sorted(by_atoms)
    fallback: list[int] = []
    path = [displacer.initial]
    previous = b""
    step = displacer.step
    for i, key in enumerate(keys):
        if progress is not None and i % 2048 == 0:
            progress(i, len(keys))
            if cancel is not None and cancel():
                raise InterruptedError("classing cancelled")
        common = 0
        limit = min(len(key), len(previous))
        while common < limit and key[common] == previous[common]:
            common += 1
        del path[common + 1:]
        node = path[-1]
        store.limit = store.created + budget
        try:
            for atom in key[common:]:
                if node != EMPTY:
                    node = step(node, atom)
                path.append(node)
        except BudgetExceeded:
            fallback.extend(by_atoms[key])
            node = -2
            path.append(-2)  # never resumed from: the next key recomputes past `common`
            del path[common + 1:]
        finally:
            store.limit = float("inf")
        previous = key if node != -2 else b""
        if node != -2:
            node_of[by_atoms[key]] = node
    if progress is not None:
        progress(len(keys), len(keys))

    classes = _assemble(token_bytes, kinds, node_of, fallback)
    classes.metadata.update(
        {
            "fallback_singletons": len(fallback),
            "classing_seconds": round(time.perf_counter() - started, 4),
            "distinct_byte_class_strings": len(keys),
            "byte_classes": len(gnf.atoms),
            "dag_nodes": len(store),
        }
    )
    return ClassingResult(classes, displacer, node_of)


def _assemble(token_bytes: list[bytes], kinds: np.ndarray, node_of: np.ndarray, fallback: list[int]) -> TokenClasses:
    """Number the classes deterministically: BLOCKED, STOP, then by representative id."""
    vocab_size = len(token_bytes)
    fallback_set = set(fallback)
    groups: dict[int, list[int]] = {}
    blocked: list[int] = []
    stops: list[int] = []
    dead = 0
    for tid in range(vocab_size):
        kind = kinds[tid]
        if kind == _TOKEN_STOP:
            stops.append(tid)
        elif kind != _TOKEN_NORMAL or not token_bytes[tid]:
            blocked.append(tid)
        elif tid in fallback_set:
            groups[-3 - tid] = [tid]
        elif node_of[tid] == EMPTY:
            blocked.append(tid)
            dead += 1
        else:
            groups.setdefault(int(node_of[tid]), []).append(tid)

    def representative(members: list[int]) -> int:
        return min(members, key=lambda t: (len(token_bytes[t]), t))

    ordered: list[tuple[int, list[int]]] = []
    if blocked:
        # Prefer a dead text token as the blocked representative: every engine
        # rejects it on its own, with no special-token handling involved.
        dead_members = [t for t in blocked if kinds[t] == _TOKEN_NORMAL and token_bytes[t]]
        ordered.append((BLOCKED, [representative(dead_members) if dead_members else min(blocked)] + blocked))
    if stops:
        ordered.append((STOP, [representative(stops)] + stops))
    normal = sorted(((representative(m), m) for m in groups.values()), key=lambda x: x[0])
    ordered += [(NORMAL, [rep] + members) for rep, members in normal]

    class_of = np.empty(vocab_size, dtype=np.int32)
    reps = np.empty(len(ordered), dtype=np.int32)
    kinds_out = np.empty(len(ordered), dtype=np.uint8)
    for k, (kind, (rep, *members)) in enumerate(ordered):
        class_of[members] = k
        reps[k] = rep
        kinds_out[k] = kind
    metadata = {
        "vocab_size": vocab_size,
        "classes": len(ordered),
        "dead_tokens": dead,
        "stop_tokens": len(stops),
        "blocked_tokens": len(blocked),
        "special_tokens": int(np.count_nonzero((kinds != _TOKEN_NORMAL) & (kinds != _TOKEN_STOP))),
    }
    return TokenClasses(class_of, reps, kinds_out, metadata)
