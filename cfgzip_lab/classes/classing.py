# C twin: csrc/classing.c (_walk), csrc/assemble.c (_assemble; tests/test_compiled.py; docs/design.md)
"""TokenClasses: the result of displacement classing, and what every engine consumes.

TokenClasses is also the one home of the classes' identity and checks: :func:`grammar_sha256`
(the grammar a partition was built for), :meth:`TokenClasses.digest` (the arrays),
:meth:`TokenClasses.validate` (is it a partition with representatives?) and
:meth:`TokenClasses.check_fits` (was it built for this grammar and vocabulary?). The
engines, the cache, the logits processors and the workbench call these, never their own.
"""

from __future__ import annotations

import hashlib
import mmap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from .. import xgrammar_version
from .._binding import kernel
from ..errors import CfgzipError
from ..grammar.compiled_words import Unsupported, supports, supports_walk
from ..grammar.gnf import GNF
from ..grammar.token_macros import add_token_paths
from ..grammar.words import EMPTY, BudgetExceeded
from ..vocab import TokenKind
from ..vocab_trie import vocab_trie
from .compiled_displacement import CompiledDisplacer
from .displacement import Displacer
from .limits import (
    DEFAULT_MAX_DAG_NODES,
    ClassingLimitError,
    busiest_rules,
    example_bytes,
    largest_rules,
    limit_message,
)

if TYPE_CHECKING:
    from ..vocab import VocabTable


class ClassKind(IntEnum):
    """What a class is; ``TokenClasses.class_kind`` stores these values as uint8.

    The BLOCKED class holds tokens no engine may ever allow: dead tokens (empty
    displacement: in no sentence of the grammar), special/added tokens that are never
    generated as text, and padding ids beyond the tokenizer. STOP holds the stop tokens
    (EOS, end-of-turn), allowed exactly when the grammar can end. Not
    :class:`cfgzip_lab.vocab.TokenKind`, the kind of a token.
    """

    NORMAL = 0
    STOP = 1
    BLOCKED = 2


# Plain-int spellings of the same values, for per-element numpy code (see
# cfgzip_lab.vocab.NORMAL: numpy is slow to compare a scalar with an IntEnum member).
NORMAL, STOP, BLOCKED = (int(k) for k in ClassKind)
# ClassKind's values are 0, 1, 2, so a range check is the membership test (np.isin took 0.07 ms)
_NUM_KINDS = len(ClassKind)
assert sorted(int(k) for k in ClassKind) == list(range(_NUM_KINDS))

DEFAULT_TOKEN_BUDGET = 200_000  # new DAG nodes one token may create before it falls back


class ClassesError(CfgzipError, ValueError):
    """Classes that are no valid partition, or that were built for another grammar or vocabulary."""


def grammar_sha256(text: str) -> str:
    """The identity of a grammar text (UTF-8 bytes, hex sha256): classes record the grammar
    they were built for by it, and compiled engines are cached by it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class TokenClasses:
    """A partition of a vocabulary into classes the grammar cannot tell apart.

    ``class_of[token_id]`` is the class of each id (length = logits size, padding
    included); ``representatives[k]`` is the byte-wise shortest member of class k
    (ties to the lowest id); ``class_kind[k]`` is a :class:`ClassKind` value.
    ``metadata`` holds counts, fingerprints and timings (see :mod:`.cache`).
    """

    class_of: np.ndarray  # int32[V]
    representatives: np.ndarray  # int32[K]
    class_kind: np.ndarray  # uint8[K]
    metadata: dict = field(default_factory=dict)

    @classmethod
    def from_sparse(
        cls,
        vocab_size: int,
        ids: np.ndarray,
        classes: np.ndarray,
        representatives: np.ndarray,
        class_kind: np.ndarray,
        metadata: dict | None = None,
    ) -> TokenClasses:
        """Classes given as the ids outside class 0 (ascending) and their classes, every other id of
        ``vocab_size`` in class 0: a small grammar's classing, whose ~128k ids are almost all BLOCKED.
        ``class_of`` is made when first read (read-only, on pages of its own); the native engine reads
        the sparse map itself (:meth:`sparse_map`) and never makes it: first-touch memory costs ~3 us a
        4-KB page on this VM, and a schema with whitespace loops wrote ~100 of Llama-3's 125."""
        made = cls.__new__(cls)
        made.representatives, made.class_kind, made.metadata = representatives, class_kind, metadata or {}
        made._sparse = (int(vocab_size), ids, classes)
        return made

    def __getattr__(self, name: str):
        # Reached only for an attribute the instance lacks: the class map of from_sparse, made on first read.
        sparse = self.__dict__.get("_sparse")
        if name != "class_of" or sparse is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        v, ids, classes = sparse
        dense = zeroed(v, np.int32)
        dense[ids] = classes
        dense.flags.writeable = False  # the sparse map stays true of it (sparse_map)
        self.__dict__["class_of"] = dense
        return dense

    def sparse_map(self) -> tuple[int, np.ndarray, np.ndarray] | None:
        """``(vocab_size, ids, classes)`` of classes made :meth:`from_sparse` whose ``class_of``, if it
        was made, is unchanged (still read-only); None otherwise."""
        sparse = self.__dict__.get("_sparse")
        dense = self.__dict__.get("class_of")
        if sparse is None or (dense is not None and dense.flags.writeable):
            return None
        return sparse

    @property
    def vocab_size(self) -> int:
        sparse = self.__dict__.get("_sparse")
        if sparse is not None and "class_of" not in self.__dict__:
            return sparse[0]
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
        hits = np.flatnonzero(self.class_kind == ClassKind.BLOCKED)
        return int(hits[0]) if hits.size else None

    def stop_class(self) -> int | None:
        hits = np.flatnonzero(self.class_kind == ClassKind.STOP)
        return int(hits[0]) if hits.size else None

    def digest(self) -> str:
        """sha256 over ``class_of``, ``representatives`` and ``class_kind`` (shapes included),
        as int32, int32 and uint8: what a compiled engine depends on, and what a cache
        records to notice a changed byte in its arrays."""
        h = hashlib.sha256()
        for array, dtype in (
            (self.class_of, np.int32),
            (self.representatives, np.int32),
            (self.class_kind, np.uint8),
        ):
            a = np.ascontiguousarray(array, dtype=dtype)
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()

    def validate(self, vocab_size: int | None = None, *, representatives: bool = True, class_ids: bool = True) -> None:
        """Raise :class:`ClassesError` unless the arrays form a partition with representatives.

        Checked: one-dimensional integer arrays; ``class_kind`` has one entry per class, each
        NORMAL, STOP or BLOCKED; every ``class_of`` id is a class; every representative is a
        token of its own class; the metadata's ``vocab_size`` / ``classes`` counts (when
        present) match the arrays; and, with ``vocab_size`` given, the classes cover exactly
        that many ids. Anything else would mask wrong tokens without any error from XGrammar.
        ``representatives=False`` skips the representatives: expansion reads only ``class_of``
        and ``class_kind``, and its tables may be built for any class map (empty classes too).
        ``class_ids=False`` leaves ``class_of``'s range to a caller that checks it in a pass over the
        array it makes anyway (the compiled expansion tables, :class:`~cfgzip_lab.native.rows.RowCache`:
        the same message), where this one would read Llama-3's 512 KB once more (~0.03-0.09 ms).
        """
        sparse = self.sparse_map() if "class_of" not in self.__dict__ else None
        if sparse is None:
            class_of = np.asarray(self.class_of)
            v, arrays = class_of.shape[0], [("class_of", class_of)]
        else:  # the map as its listed ids and their classes (class 0 elsewhere): checked without making it
            v, ids, class_of = sparse[0], np.asarray(sparse[1]), np.asarray(sparse[2])
            arrays = [("class_of", class_of), ("class_of's ids", ids)]
        reps, kinds = np.asarray(self.representatives), np.asarray(self.class_kind)
        for name, a in arrays + [("representatives", reps), ("class_kind", kinds)]:
            if a.ndim != 1 or a.dtype.kind not in _INTEGER_KINDS:
                raise ClassesError(f"{name} must be a one-dimensional integer array (it is {a.dtype}{list(a.shape)})")
        k = reps.shape[0]
        if sparse is not None and (
            ids.shape != class_of.shape or (ids.size and (ids[0] < 0 or ids[-1] >= v or (ids[1:] <= ids[:-1]).any()))
        ):
            raise ClassesError("class_of's listed ids must be ascending ids of the vocabulary, one class each")
        if vocab_size is not None and v != vocab_size:
            raise ClassesError(f"classes cover {v} ids but the vocabulary has {vocab_size}")
        if kinds.shape != (k,):
            raise ClassesError(f"class_kind has {kinds.shape[0]} entries for {k} classes")
        if v and (k == 0 or (class_ids and class_of.size and _largest_unsigned(class_of) >= k)):
            raise ClassesError(CLASS_IDS_OUTSIDE.format(k=k))
        if k and _largest_unsigned(kinds) >= _NUM_KINDS:
            raise ClassesError("class_kind has values other than NORMAL, STOP, BLOCKED")
        if representatives and k and _largest_unsigned(reps) >= v:
            raise ClassesError("representatives[k] must be a member of class k")
        if representatives and k:
            if sparse is None:
                of_reps = class_of[reps]
            else:  # each representative's class: its listed entry's, else 0
                at = np.minimum(np.searchsorted(ids, reps), max(ids.size - 1, 0))
                of_reps = np.where(ids[at] == reps, class_of[at], 0) if ids.size else np.zeros(k, np.int64)
            if not np.array_equal(of_reps, np.arange(k)):
                raise ClassesError("representatives[k] must be a member of class k")
        for key, actual in (("vocab_size", v), ("classes", k)):
            said = self.metadata.get(key)
            if said is not None and said != actual:
                raise ClassesError(f"metadata says {key} {said}, the arrays hold {actual}")

    def check_fits(self, grammar_text: str | None, vocab: VocabTable | None, *, strict: bool = False) -> None:
        """Raise :class:`ClassesError` unless these classes fit ``grammar_text`` and ``vocab``.

        The metadata's grammar sha256 and vocabulary fingerprint against the given ones (either
        may be None: not checked; a fingerprint names what differs, so it goes first), then
        :meth:`validate` against ``vocab.vocab_size``.
        Classes built for another grammar would mask wrongly without any error from XGrammar.
        Classes made by hand carry no fingerprints and pass, unless ``strict`` (a cache file
        must say what it was built for). Classes made under another XGrammar release than the
        installed one are refused too (a file that does not say is from 0.2.8, the only release
        before cfgzip_lab recorded it).
        """
        meta = self.metadata
        if grammar_text is not None:
            sha, given = meta.get("grammar_sha256"), grammar_sha256(grammar_text)
            if sha is None and strict:
                raise ClassesError("the classes do not say which grammar they were built for (no grammar_sha256)")
            if sha is not None and sha != given:
                raise ClassesError(
                    f"the classes were built for another grammar (theirs: sha256 {str(sha)[:12]}…, given: {given[:12]}…)"
                )
        if vocab is not None:
            fp = meta.get("vocab_fingerprint")
            if fp is None and strict:
                raise ClassesError("the classes do not say which vocabulary they were built for (no vocab_fingerprint)")
            if fp is not None and fp != vocab.fingerprint:
                raise ClassesError(
                    f"the classes were built for another vocabulary (theirs: {meta.get('tokenizer', '?')} fingerprint "
                    f"{str(fp)[:12]}…, given: {vocab.name} fingerprint {vocab.fingerprint[:12]}…)"
                )
        made = meta.get("xgrammar_version")
        if made is None and strict:
            made = "0.2.8"  # cache files from before the version was recorded: 0.2.8 was the only one then
        if made is not None and xgrammar_version.parse(str(made)) != xgrammar_version.installed_tuple():
            raise ClassesError(
                f"the classes were built under XGrammar {made} and the installed XGrammar is "
                f"{xgrammar_version.installed()}: "
                "releases can enforce a grammar differently, so classes are rebuilt, never reused across them"
            )
        self.validate(None if vocab is None else vocab.vocab_size)


def zeroed(n: int, dtype) -> np.ndarray:
    """``n`` zeros of ``dtype`` on pages of their own that nothing has written (an anonymous private
    mapping): a page is given memory only when written, and reading one never written maps the
    kernel's one zero page (a sparse class map made dense writes only its listed ids' pages, ~6 of 125
    for a one-literal schema with Llama-3, where a 512 KB array the process had not held took ~126 fresh
    4-KB pages). np.zeros where there is no such mapping (or for a small array)."""
    size = n * np.dtype(dtype).itemsize
    if size < 1 << 16 or not hasattr(mmap, "MAP_PRIVATE"):
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE), dtype=dtype)


_INTEGER_KINDS = "iu"  # numpy's signed and unsigned integers (np.integer; a bool array is not one)

CLASS_IDS_OUTSIDE = "class_of has ids outside [0, {k})"
"""The message for a class map naming a class it does not have (:meth:`TokenClasses.validate`, and the
compiled expansion tables' own check, :class:`~cfgzip_lab.native.rows.RowCache`)."""


def _largest_unsigned(ids: np.ndarray) -> int:
    """The largest of ``ids`` read as unsigned, where a negative id is past every id of a range
    [0, n): one pass for both ends of the check (Llama-3's 128k class ids: 2 -> 1 reductions,
    ~0.03 ms a grammar)."""
    if ids.dtype.kind == "i":
        ids = ids.view(np.dtype(f"u{ids.dtype.itemsize}"))
    return int(ids.max())


class ClassingResult:
    """The classes, the displacer whose store holds the tokens' displacement nodes, and those nodes.

    ``token_node`` (int64[V]): the displacement node of each NORMAL token with bytes (-1 for the
    others and for fallback tokens; the empty set for dead ones). ``rep_nodes`` (int64[K]): that of
    each class's representative, all the σ_in index reads of it. The compiled walk keeps its tokens'
    nodes as ranges and never writes ``token_node``: it is made from the classes on first access
    (``nodes_of``), where the index needs ``rep_nodes`` alone (Llama-3: a 1 MB array not written, ~0.13 ms
    of a small schema's ~0.3 ms classing; written token by token at random ids it was ~0.25 ms of a
    median MaskBench schema's).
    """

    __slots__ = ("classes", "displacer", "_token_node", "_rep_nodes", "_nodes_of")

    def __init__(
        self,
        classes: TokenClasses,
        displacer: Displacer,
        token_node: np.ndarray | None = None,
        *,
        rep_nodes: np.ndarray | None = None,
        nodes_of: Callable[[], np.ndarray] | None = None,
    ) -> None:
        if token_node is None and (nodes_of is None or rep_nodes is None):
            raise ValueError("a classing result needs its token nodes, or rep_nodes and nodes_of")
        self.classes = classes
        self.displacer = displacer
        self._token_node = token_node
        self._rep_nodes = rep_nodes
        self._nodes_of = nodes_of

    @property
    def token_node(self) -> np.ndarray:
        if self._token_node is None:
            self._token_node = self._nodes_of()
            self._nodes_of = None
        return self._token_node

    @property
    def rep_nodes(self) -> np.ndarray:
        if self._rep_nodes is None:
            self._rep_nodes = self._token_node[np.asarray(self.classes.representatives, dtype=np.int64)]
        return self._rep_nodes

    def __repr__(self) -> str:
        return f"ClassingResult({self.classes.num_classes} classes, {type(self.displacer).__name__})"


def compute_classes(
    gnf: GNF,
    token_bytes: list[bytes],
    kinds: np.ndarray,
    *,
    budget: int = DEFAULT_TOKEN_BUDGET,
    progress: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    workers: int = 1,
    max_dag_nodes: int = DEFAULT_MAX_DAG_NODES,
    compiled: bool | None = None,
    trie=None,
) -> ClassingResult:
    """Partition a vocabulary by displacement (exact; see :mod:`.displacement`).

    Tokens are walked as a trie over byte classes: token byte strings are mapped
    to byte-class strings, de-duplicated and sorted, and each one resumes from the
    configuration set of its longest common prefix with the previous one.

    ``budget`` bounds the new DAG nodes one token may create; a token past it is
    put in a class of its own (sound: a singleton never merges anything) and
    counted in ``metadata["fallback_singletons"]``. ``max_dag_nodes`` caps the whole DAG
    (the memory bound, see :mod:`.limits`): past it classing stops with
    :class:`~.limits.ClassingLimitError`, naming the token and the rules on its stacks.
    ``progress(done, total)`` is
    called now and then; ``cancel()`` returning True stops with ``InterruptedError``.

    ``workers > 1`` splits the sorted strings into that many runs (cut where the
    first byte class changes, so prefixes stay shared) and walks them in forked
    processes (POSIX only; call it from a process without other busy threads, e.g.
    the CLI). Each worker sends back the DAG nodes it created, children first, and
    the parent interns them again: interning is canonical, so equal sets get equal
    ids across workers and the partition is exactly the one-process partition.

    ``compiled`` (default: where the kernel is built and the GNF has no token atoms and no
    counted families past the compiled symbols, :func:`cfgzip_lab.grammar.compiled_words.supports`) runs the walk, the store and the
    numbering in C (``csrc/classing.c``, ``csrc/assemble.c``), in this process whatever ``workers`` says: the same
    nodes under the same ids, the same classes (tested against this Python path), and the
    result's displacer is a :class:`~cfgzip_lab.classes.compiled_displacement.CompiledDisplacer` whose store
    holds ``token_node``'s ids. ``compiled=False`` runs the Python reference. By default a GNF
    with counted families whose counts pass the compiled symbols, or with token atoms, takes the
    compiled walk and numbering with the Python displacer's step (:func:`_classify_steps`): the
    Python nodes, ids and classes.

    ``trie``: the compiled walks' byte trie of exactly these tokens and kinds
    (:attr:`cfgzip_lab.vocab.VocabTable.byte_trie`), else found or built by
    :func:`cfgzip_lab.vocab_trie.vocab_trie`.
    """
    started = time.perf_counter()
    steps_only = False
    if compiled is None or compiled:
        if compiled is None:
            compiled = supports(gnf)
            steps_only = not compiled and supports_walk(gnf)
        elif not supports(gnf):
            raise RuntimeError(
                "compiled classing needs the compiled kernel and a GNF without token atoms or counted "
                "repetitions past the compiled symbols (grammar.compiled_words.supports)"
            )
    if compiled:
        result = _classify_compiled(gnf, token_bytes, kinds, budget, progress, cancel, max_dag_nodes, trie)
        if result is not None:
            result.classes.metadata["classing_seconds"] = round(time.perf_counter() - started, 4)
            return result
    if steps_only:
        result = _classify_steps(gnf, token_bytes, kinds, budget, progress, cancel, max_dag_nodes, trie)
        result.classes.metadata["classing_seconds"] = round(time.perf_counter() - started, 4)
        return result
    displacer = Displacer(gnf)
    store = displacer.store
    vocab_size = len(token_bytes)
    kinds = np.asarray(kinds)
    node_of = np.full(vocab_size, -1, dtype=np.int64)

    by_atoms: dict[bytes, list[int]] = {}
    table = displacer.atom_table
    # kinds as Python ints: numpy is slow to compare a scalar with an enum member
    for tid, (data, kind) in enumerate(zip(token_bytes, kinds.tolist())):
        if kind == TokenKind.NORMAL and data:
            by_atoms.setdefault(data.translate(table), []).append(tid)
    keys = sorted(by_atoms)
    runs = _split_runs(keys, workers) if _can_fork() else [keys]
    if len(runs) > 1:
        if progress is not None:
            progress(0, len(keys))
        node_by_key, fallback_keys = _walk_parallel(displacer, runs, budget, max_dag_nodes)
    else:
        node_by_key, fallback_keys = _walk(displacer, keys, budget, progress, cancel, max_dag_nodes)
    if progress is not None:
        progress(len(keys), len(keys))
    for key, node in node_by_key.items():
        node_of[by_atoms[key]] = node
    fallback = [tid for key in fallback_keys for tid in by_atoms[key]]
    # Token(...)/ExcludeToken(...): a token is also read whole, Δ(t) ∪= Δ(its token atom).
    token_paths = add_token_paths(displacer, token_bytes, kinds, node_of)

    classes = _assemble(token_bytes, kinds, node_of, fallback)
    classes.metadata.update(
        {
            "fallback_singletons": len(fallback),
            "classing_seconds": round(time.perf_counter() - started, 4),
            "distinct_byte_class_strings": len(keys),
            "byte_classes": len(gnf.atoms),
            "dag_nodes": len(store),
            "workers": len(runs),
        }
    )
    if token_paths is not None:
        classes.metadata["named_token_ids"] = len(token_paths.atoms.named)
    return ClassingResult(classes, displacer, node_of)


def _classify_compiled(
    gnf, token_bytes, kinds, budget, progress, cancel, max_nodes, trie=None
) -> ClassingResult | None:
    """:func:`compute_classes` in C: the vocabulary's byte trie (kept per vocabulary) walked in the
    order of the sorted byte-class strings (``_walk``'s order, its budgets and fallbacks), then
    ``_assemble``'s numbering over arrays. None where the store would recurse deeper than it
    allows (the caller runs the Python path)."""
    kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    vocab_size = len(token_bytes)
    trie = trie if trie is not None else vocab_trie(token_bytes, kinds)
    displacer = CompiledDisplacer(gnf)
    store = displacer.store
    node_of = np.empty(vocab_size, dtype=np.int64)  # written by the walk, unless it keeps its ranges (lazy)
    fallback = np.zeros(vocab_size, dtype=np.uint8)
    try:
        # lazy: node_of left to the ranges the walk keeps (unless it gives them up: see csrc/classing.c)
        walk = store.native.classify(
            trie, displacer.atom_table, displacer.initial, budget, max_nodes, node_of, fallback, progress, cancel, True
        )
    except Unsupported:
        return None
    return _compiled_walk_result(gnf, displacer, trie, kinds, node_of, fallback, walk, progress, max_nodes, lazy=True)


def _classify_steps(gnf, token_bytes, kinds, budget, progress, cancel, max_nodes, trie=None) -> ClassingResult:
    """:func:`compute_classes` with the compiled trie walk and numbering (``csrc/classing.c``:
    ``classify_steps``, ``assemble``) and the Python :class:`Displacer`'s own step, for a GNF the
    compiled step does not run (counted families past its packed symbols; token atoms, whose
    paths join each token's node before the numbering, as on the Python path: ``Token(42)`` with
    Llama-3, 226 -> ~10 ms): the same steps in the same order as
    :func:`_walk` (so the same nodes under the same ids), without the per-token Python bookkeeping
    that is most of the Python path there (a schema with ``maxItems: 40``, Llama-3: 16 steps per
    thousand tokens; the by-atoms dictionary, the sorted keys and the numbering took 0.4 s)."""
    kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    vocab_size = len(token_bytes)
    trie = trie if trie is not None else vocab_trie(token_bytes, kinds)
    displacer = Displacer(gnf)
    store, step = displacer.store, displacer.step
    node_of = np.empty(vocab_size, dtype=np.int64)  # every entry written by the walk (walk_prefill)
    fallback = np.zeros(vocab_size, dtype=np.uint8)

    def step_of_key(node: int, atom: int, fresh: bool) -> int:
        # _walk's body: a key's budget set before its first step; -1: past it, -2: past the run's cap
        if fresh:
            store.limit = min(store.created + budget, max_nodes)
        try:
            return step(node, atom)
        except BudgetExceeded:
            return -2 if store.created > max_nodes else -1

    try:
        walk = kernel.classify_steps(
            trie,
            displacer.atom_table,
            displacer.num_atoms,
            displacer.initial,
            node_of,
            fallback,
            progress,
            cancel,
            step_of_key,
        )
    finally:
        store.limit = float("inf")
    return _compiled_walk_result(gnf, displacer, trie, kinds, node_of, fallback, walk, progress, max_nodes, token_bytes)


def _compiled_walk_result(
    gnf, displacer, trie, kinds, node_of, fallback, walk, progress, max_nodes, token_bytes=None, lazy=False
):
    """What both compiled trie walks end with: the walk's outcome (cancelled, the run's cap as
    :func:`_walk` raises it) and ``csrc/assemble.c``'s ``assemble`` numbering, as a :class:`ClassingResult`.
    ``walk``: what ``classify`` and ``classify_steps`` return, ``(keys, strings, status, skipped,
    scanned, fallen, ranges)``.
    With ``token_bytes`` (the Python step's walk), a GNF's token atoms first join each token's
    node as on the Python path (``add_token_paths``: the same unions in the same order).
    ``ranges`` (the walk's tokens with a live node, where it kept them) let the numbering read those
    tokens alone; token paths change nodes after the walk, so they take the pass over every token.
    ``lazy``: the walk wrote ``node_of`` only where it gave up its ranges (classify's ``lazy``); with
    its ranges kept, the result's ``token_node`` is made from the classes when first read."""

    keys, _, status, skipped, scanned, fallen, ranges = walk
    store = displacer.store
    if status == "cancelled":
        raise InterruptedError("classing cancelled")
    if status is not None:  # ("limit", key, node): the run's cap, as _walk raises it
        _, key, node = status
        rules = busiest_rules(store, node, gnf) or largest_rules(gnf)
        raise ClassingLimitError(limit_message(max_nodes, example_bytes(gnf, key), rules))
    if progress is not None:
        progress(trie.info()["eligible"], trie.info()["eligible"])
    token_paths = add_token_paths(displacer, token_bytes, kinds, node_of) if token_bytes is not None else None
    args = (trie, kinds, node_of, fallback)
    numbering = (int(TokenKind.NORMAL), int(TokenKind.STOP), len(store))
    got = class_of = None
    if ranges is not None and token_paths is None:  # the numbering from the ranges, no map made (from_sparse)
        got = kernel.assemble(*args, None, *numbering, ranges)
        if got is None:  # most tokens in the ranges: the map written whole from them (node_of not read)
            class_of = np.empty(len(node_of), dtype=np.int32)
            got = kernel.assemble(*args, class_of, *numbering, ranges)
    if got is None:  # the pass over every token, into a map
        class_of = np.empty(len(node_of), dtype=np.int32)
        got = kernel.assemble(*args, class_of, *numbering)
    reps, kinds_out, dead, blocked, rep_nodes, ids, listed_classes = got
    reps = np.frombuffer(reps, dtype=np.int32).copy()
    kinds_out = np.frombuffer(kinds_out, dtype=np.uint8).copy()
    metadata = _assembled_metadata(trie.info(), len(reps), dead, blocked)
    if class_of is None:
        ids, listed_classes = np.frombuffer(ids, dtype=np.int32), np.frombuffer(listed_classes, dtype=np.int32)
        classes = TokenClasses.from_sparse(len(node_of), ids, listed_classes, reps, kinds_out, metadata)
    else:
        classes = TokenClasses(class_of, reps, kinds_out, metadata)
    classes.metadata.update(
        {
            "fallback_singletons": fallen,  # (the walk's count of the tokens it flagged in `fallback`)
            # the walk's own statistics (the Python path's distinct_byte_class_strings counts every
            # string; this walk skips the subtrees a configuration set loops through, see csrc/classing.c)
            "byte_class_strings_walked": keys,
            "tokens_skipped": skipped,
            "tokens_scanned": scanned,  # of those, numbered by a preorder scan from the step memo (csrc/classing.c walk_scan)
            "byte_classes": len(gnf.atoms),
            "dag_nodes": len(store),
            "workers": 1,
        }
    )
    if token_paths is not None:
        classes.metadata["named_token_ids"] = len(token_paths.atoms.named)
    rep_nodes = np.frombuffer(rep_nodes, dtype=np.int64).copy()
    if not lazy or ranges is None:  # node_of written whole
        return ClassingResult(classes, displacer, node_of, rep_nodes=rep_nodes)

    def nodes_of() -> np.ndarray:
        # what a lazy walk that kept its ranges did not write: from the classes (one class per node)
        kernel.token_nodes(trie, classes.class_of, classes.class_kind, rep_nodes, node_of)
        return node_of

    return ClassingResult(classes, displacer, rep_nodes=rep_nodes, nodes_of=nodes_of)


def _assembled_metadata(vocab_counts: dict, num_classes: int, dead: int, blocked: int) -> dict:
    """The counts :func:`_assemble` records, the vocabulary's from its trie (``VocabTrie.info``:
    counted once per vocabulary, where two comparisons over Llama-3's kinds took 0.06 ms a grammar)."""
    size, normal, stop = vocab_counts["tokens"], vocab_counts["normal"], vocab_counts["stop"]
    return {
        "vocab_size": size,
        "classes": num_classes,
        "dead_tokens": dead,
        "stop_tokens": stop,
        "blocked_tokens": blocked,
        "special_tokens": size - normal - stop,
    }


def _walk(
    displacer: Displacer,
    keys: list[bytes],
    budget: int,
    progress=None,
    cancel=None,
    max_nodes: int = DEFAULT_MAX_DAG_NODES,
) -> tuple[dict[bytes, int], list[bytes]]:
    """Displacement node of every sorted byte-class string; strings past the budget apart.

    Raises :class:`ClassingLimitError` when the DAG would grow past ``max_nodes``."""
    store = displacer.store
    node_by_key: dict[bytes, int] = {}
    fallback: list[bytes] = []
    path = [displacer.initial]
    previous = b""
    step = displacer.step
    for i, key in enumerate(keys):
        if i % 2048 == 0:  # before keys 0, 2048, ... as the compiled walk (csrc/classing.c, walk_report)
            if progress is not None:
                progress(i, len(keys))
            if cancel is not None and cancel():
                raise InterruptedError("classing cancelled")
        common = 0
        limit = min(len(key), len(previous))
        while common < limit and key[common] == previous[common]:
            common += 1
        del path[common + 1 :]
        node = path[-1]
        store.limit = min(store.created + budget, max_nodes)
        try:
            for atom in key[common:]:
                if node != EMPTY:
                    node = step(node, atom)
                path.append(node)
        except BudgetExceeded:
            if store.created > max_nodes:  # the run's cap, not this token's budget
                store.limit = float("inf")
                rules = busiest_rules(store, node, displacer.gnf) or largest_rules(displacer.gnf)
                raise ClassingLimitError(limit_message(max_nodes, example_bytes(displacer.gnf, key), rules)) from None
            fallback.append(key)
            del path[common + 1 :]  # never resumed from: the next key recomputes past `common`
            previous = b""
            continue
        finally:
            store.limit = float("inf")
        previous = key
        node_by_key[key] = node
    return node_by_key, fallback


def _split_runs(keys: list[bytes], workers: int) -> list[list[bytes]]:
    """``workers`` contiguous runs of about equal size, cut where the first byte class changes."""
    if workers <= 1 or len(keys) < 4096:
        return [keys]
    runs, start = [], 0
    for w in range(1, workers):
        cut = max(start, len(keys) * w // workers)
        while 0 < cut < len(keys) and keys[cut][:1] == keys[cut - 1][:1]:
            cut += 1
        runs.append(keys[start:cut])
        start = cut
    runs.append(keys[start:])
    return [r for r in runs if r]


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


_FORKED: tuple[Displacer, int, int] | None = None  # what forked workers inherit


def _walk_in_worker(keys: list[bytes]):
    displacer, budget, max_nodes = _FORKED
    store = displacer.store
    base = len(store)  # nodes below this id exist, with the same ids, in the parent
    node_by_key, fallback = _walk(displacer, keys, budget, max_nodes=max_nodes)
    # Export the new nodes reachable from the results, children before parents.
    order: dict[int, int] = {}
    exported: list[tuple[bool, tuple[tuple[int, int], ...]]] = []

    def ref(node: int) -> int:  # parent-side reference: an old id, or -1 - export index
        return node if node < base else -1 - order[node]

    for root in set(node_by_key.values()):
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if node < base or (node in order and not done):
                continue
            accepts, edges = store.nodes[node]
            if done:
                if node not in order:
                    order[node] = len(exported)
                    exported.append((accepts, tuple((s, ref(c)) for s, c in edges)))
                continue
            stack.append((node, True))
            stack.extend((c, False) for _, c in edges if c >= base and c not in order)
    return exported, {key: ref(node) for key, node in node_by_key.items()}, fallback


def _walk_parallel(
    displacer: Displacer, runs: list[list[bytes]], budget: int, max_nodes: int = DEFAULT_MAX_DAG_NODES
) -> tuple[dict[bytes, int], list[bytes]]:
    import multiprocessing

    global _FORKED
    _FORKED = (displacer, budget, max_nodes)
    try:
        with multiprocessing.get_context("fork").Pool(len(runs)) as pool:
            results = pool.map(_walk_in_worker, runs)
    finally:
        _FORKED = None
    store = displacer.store
    node_by_key: dict[bytes, int] = {}
    fallback: list[bytes] = []
    for exported, refs, run_fallback in results:
        ids: list[int] = []

        def resolve(r: int) -> int:
            return r if r >= 0 else ids[-1 - r]

        for accepts, edges in exported:
            ids.append(store.make(accepts, tuple((s, resolve(c)) for s, c in edges)))
        node_by_key.update((key, resolve(r)) for key, r in refs.items())
        fallback.extend(run_fallback)
    return node_by_key, fallback


def _assemble(token_bytes: list[bytes], kinds: np.ndarray, node_of: np.ndarray, fallback: list[int]) -> TokenClasses:
    """Number the classes deterministically: BLOCKED, STOP, then by representative id."""
    vocab_size = len(token_bytes)
    fallback_set = set(fallback)
    groups: dict[int, list[int]] = {}
    blocked: list[int] = []
    stops: list[int] = []
    dead = 0
    kind_of = np.asarray(kinds).tolist()  # Python ints: numpy is slow to compare a scalar with an enum member
    for tid in range(vocab_size):
        kind = kind_of[tid]
        if kind == TokenKind.STOP:
            stops.append(tid)
        elif kind != TokenKind.NORMAL or not token_bytes[tid]:
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

    ordered: list[tuple[ClassKind, list[int]]] = []
    if blocked:
        # Prefer a dead text token as the blocked representative: every engine
        # rejects it on its own, with no special-token handling involved.
        dead_members = [t for t in blocked if kind_of[t] == TokenKind.NORMAL and token_bytes[t]]
        ordered.append((ClassKind.BLOCKED, [representative(dead_members) if dead_members else min(blocked)] + blocked))
    if stops:
        ordered.append((ClassKind.STOP, [representative(stops)] + stops))
    normal = sorted(((representative(m), m) for m in groups.values()), key=lambda x: x[0])
    ordered += [(ClassKind.NORMAL, [rep] + members) for rep, members in normal]

    class_of = np.empty(vocab_size, dtype=np.int32)
    reps = np.empty(len(ordered), dtype=np.int32)
    kinds_out = np.empty(len(ordered), dtype=np.uint8)
    for k, (kind, (rep, *members)) in enumerate(ordered):
        class_of[members] = k
        reps[k] = rep
        kinds_out[k] = int(kind)
    metadata = {
        "vocab_size": vocab_size,
        "classes": len(ordered),
        "dead_tokens": dead,
        "stop_tokens": len(stops),
        "blocked_tokens": len(blocked),
        "special_tokens": int(np.count_nonzero((kinds != TokenKind.NORMAL) & (kinds != TokenKind.STOP))),
    }
    return TokenClasses(class_of, reps, kinds_out, metadata)
