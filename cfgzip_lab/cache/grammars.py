"""Per-request grammars: a grammar text, GBNF file or JSON Schema (and a vocabulary) to a ready
native matcher in one call, for servers that see a new schema with each request.

::

    import cfgzip_lab as cz

    vocab = cz.load_vocab("llama3")
    matcher = cz.matcher_for('{"type": "object", "properties": {"a": {"type": "integer"}}}', vocab)
    matcher.fill_next_token_bitmask(bitmask)   # the Engine interface (see cfgzip_lab.engine)

:class:`GrammarCache` holds the compiled grammars: an in-process LRU of :class:`ReadyGrammar`
(the grammar's GNF, its classes, the σ_in index and the native engine on them) keyed like the
cache directory (input kind and sha256 × vocabulary fingerprint × code version), in front of
the cache directory (:mod:`cfgzip_lab.cache.directory`), in front of building. So a grammar is
classed once per machine, read from disk once per process, and served from memory after that.
:func:`matcher_for` and :func:`engine_for` use one shared default cache; the transformers
processors and :func:`cfgzip_lab.constrained_generate` go through it too.

Concurrency: requests for one grammar that arrive while it is being built wait for that build
(one build per key, not one per request). The native engine a :class:`ReadyGrammar` holds is
shared by every matcher of that grammar; like :class:`cfgzip_lab.native.NativeEngine` it is not
meant to advance matchers of one grammar from two threads at the same moment.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._gc import gc_paused
from .directory import CacheKey, ClassCacheDir, grammar_key

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..classes.displacement import Displacer
    from ..native.engine import NativeEngine
    from ..native.index import SigmaInIndex
    from ..native.matcher import NativeMatcher
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable

__all__ = ["GrammarCache", "ReadyGrammar", "default_grammar_cache", "engine_for", "matcher_for", "resolve_input"]

WRITE_AFTER_S = 0.005
"""Builds that took less than this (seconds) are not written to the cache directory: reading the
smallest entries back takes 3-5 ms (the archive's members, their digests and checks), writing one
~3 ms, so the disk only slows a schema such as ``{"const": [true]}``, which builds in ~1.5 ms with
Llama-3. Builds past it (the bundled JSON grammar: ~10 ms cold, ~6 ms loaded) are written."""

DEFAULT_BUILD_SECONDS = 30.0
"""The time budget of one grammar's build (front end, classing, index, and the compressed engine's XGrammar
compile of a grammar without a σ_in index, :meth:`~cfgzip_lab.deadline.Deadline.wait_for`) in a
:class:`GrammarCache`:
past it the build stops with :class:`~cfgzip_lab.deadline.BuildBudgetError` instead of keeping a request
waiting. MaskBench's slowest schemas built in 1.6-20 s on a loaded 2-core machine after their counted
families were merged (docs/ttfm_profile.md); a benchmark or server that allows more passes
``build_seconds``."""

DEFAULT_CAPACITY = 32
"""Grammars kept in memory by default. Each holds what its engine needs and no more (measured with
tracemalloc, Llama-3: json 8.8 MB, c_like 14 MB more, built or read from the cache alike), so 32
stay under ~0.5 GB; most of it is per-vocabulary arrays (class ids, expansion tables)."""


@dataclass
class ReadyGrammar:
    """One compiled grammar for one vocabulary: what every request of it shares.

    ``origin`` says where it came from: ``"built"`` (front end and classing now) or ``"disk"``
    (the cache directory: no front end, no classing); ``source`` is where the last
    :meth:`GrammarCache.get` found it (``"memory"`` once it is held). ``seconds`` records the
    stages this process paid for.
    """

    key: CacheKey
    compiled: CompiledGrammar
    classes: TokenClasses
    vocab: VocabTable
    index: SigmaInIndex | None
    index_unavailable: str | None = None
    origin: str = "built"
    source: str = "built"
    seconds: dict[str, float] = field(default_factory=dict)
    displacer: Displacer | None = field(default=None, repr=False)  # classing's, where the engine walks in its store
    #: why every request goes to XGrammar itself, decided while building (a nested root, or a grammar past
    #: cfgzip's size budgets: :mod:`.xgrammar_only`); None: the engine decides from the grammar
    xgrammar_only: str | None = None
    _engine: NativeEngine | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def engine(self) -> NativeEngine:
        """The native engine on these classes (built on first use: milliseconds)."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = self._build_engine()
        return self._engine

    def _build_engine(self) -> NativeEngine:
        from ..native.engine import NativeEngine

        t0 = time.perf_counter()
        with gc_paused():
            engine = NativeEngine(
                self.compiled,
                self.vocab,
                self.classes,
                self.index,
                displacer=self.displacer,
                unavailable=self.index_unavailable,
                xgrammar_only=self.xgrammar_only,
            )
        engine.index_source = "cache" if self.origin == "disk" else "built"
        self.seconds["engine"] = time.perf_counter() - t0
        return engine

    def matcher(self) -> NativeMatcher:
        """A fresh native matcher in the initial state."""
        return self.engine.matcher()


def resolve_input(grammar: Any, kind: str = "auto") -> tuple[str, str]:
    """``(text, kind)`` of a grammar input: an EBNF/GBNF text or JSON Schema text, a JSON Schema
    as a dict, or a :class:`~cfgzip_lab.pipeline.CompiledGrammar` (its EBNF text); ``kind``
    ``"auto"`` is resolved as :func:`cfgzip_lab.grammar.sources.detect_kind` does."""
    from ..grammar.sources import KINDS, detect_kind

    if not isinstance(grammar, str):  # (a text, the usual request, needs no pipeline import)
        from ..pipeline import CompiledGrammar

        if isinstance(grammar, CompiledGrammar):
            return grammar.text, "ebnf"
        if isinstance(grammar, (dict, bool)):
            if kind not in ("auto", "json_schema"):
                raise ValueError(f"a JSON Schema given as a {type(grammar).__name__} cannot be read as {kind!r}")
            return json.dumps(grammar), "json_schema"
        raise TypeError(f"a grammar is a text, a JSON Schema dict or a CompiledGrammar, not {type(grammar).__name__}")
    if kind == "auto":
        kind = detect_kind(grammar)
    if kind not in KINDS:
        raise ValueError(f"unknown grammar kind {kind!r}: expected 'auto' or one of {', '.join(KINDS)}")
    return grammar, kind


class GrammarCache:
    """Compiled grammars per (input, vocabulary), least recently used out, over a cache directory.

    Parameters
    ----------
    capacity : int
        Grammars kept in memory (their engines included).
    cache_dir : ClassCacheDir, path, True, False or None
        The on-disk cache: None or True the default directory (:func:`cfgzip_lab.cache.directory.default_cache_dir`,
        ``$CFGZIP_CACHE_DIR``), a path another folder, False none (build in memory only).
    workers : int
        Processes for classing a new grammar (1: this thread only, safe in any server).
    write_after : float
        A build that took less than this many seconds is not written to the cache directory
        (default :data:`WRITE_AFTER_S`, as it is when the cache is made: such a grammar builds
        faster than it would load); 0 writes every build.
    build_seconds : float or None
        The time budget of one build (default :data:`DEFAULT_BUILD_SECONDS`; None: none): past it,
        :class:`~cfgzip_lab.deadline.BuildBudgetError` names the stage it stopped in. It depends on
        the machine and its load (the size budgets do not): a grammar near it may pass on one run
        and not on another. With a budget, a grammar that XGrammar serves has that XGrammar compile made in
        the build, not on its first request: within the budget where the compressed engine serves it (no
        σ_in index; past it, the compile goes on in a background thread and its result is kept), and
        whatever it takes where XGrammar serves it alone (a nested root, past a size budget, an empty
        language), which XGrammar would serve after the same compile.

    Examples
    --------
    >>> grammars = GrammarCache(capacity=16)                      # doctest: +SKIP
    >>> matcher = grammars.matcher(schema_text, vocab)            # a NativeMatcher
    >>> grammars.get(schema_text, vocab).source                   # 'memory' the second time
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        *,
        cache_dir: ClassCacheDir | str | Path | bool | None = None,
        workers: int = 1,
        write_after: float | None = None,
        build_seconds: float | None = DEFAULT_BUILD_SECONDS,
    ) -> None:
        if capacity < 1:
            raise ValueError("a GrammarCache holds at least one grammar")
        if build_seconds is not None and not build_seconds > 0:
            raise ValueError(f"build_seconds is a positive number of seconds or None, not {build_seconds!r}")
        self.build_seconds = build_seconds
        self.capacity = int(capacity)
        if cache_dir is None or cache_dir is True:
            self.disk: ClassCacheDir | None = ClassCacheDir()
        elif cache_dir is False:
            self.disk = None
        elif isinstance(cache_dir, ClassCacheDir):
            self.disk = cache_dir
        else:
            self.disk = ClassCacheDir(cache_dir)
        self.workers = workers
        self.write_after = WRITE_AFTER_S if write_after is None else float(write_after)
        self._entries: OrderedDict[CacheKey, ReadyGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[CacheKey, threading.Lock] = {}
        self.stats = {"memory": 0, "disk": 0, "built": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"GrammarCache({len(self)}/{self.capacity} grammars, disk={self.disk!r})"

    def key(self, grammar: Any, vocab: VocabTable | str, *, kind: str = "auto") -> CacheKey:
        """The key ``grammar`` (and ``vocab``) is cached under."""
        text, kind = resolve_input(grammar, kind)
        return grammar_key(text, kind, _vocab(vocab))

    def get(self, grammar: Any, vocab: VocabTable | str, *, kind: str = "auto") -> ReadyGrammar:
        """The :class:`ReadyGrammar` of ``grammar`` with ``vocab``: from memory, else from the
        cache directory, else built (and written there, unless it built in under ``write_after``).

        Raises
        ------
        CfgzipError
            For a grammar with errors (:class:`~cfgzip_lab.GrammarError`, with line and column), or a
            build past ``build_seconds`` (:class:`~cfgzip_lab.deadline.BuildBudgetError`). A grammar past
            the normal form's or classing's size budget is not refused: XGrammar itself serves it
            (:mod:`.xgrammar_only`, the reason in ``engine.unavailable``), as it serves a nested root.
        """
        text, kind = resolve_input(grammar, kind)
        vocab = _vocab(vocab)
        key = grammar_key(text, kind, vocab)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one build per key; later callers wait for it and find it in memory
            hit = self._lookup(key)
            if hit is not None:
                return hit
            try:
                with gc_paused():  # see cfgzip_lab._gc: a full pass mid-build took 0.13 s of a 20 ms schema
                    ready = self._from_disk(key, text, vocab) or self._build(key, text, kind, vocab)
                with self._lock:  # in memory before the key's lock goes: no second build can start
                    self._entries[key] = ready
                    self._entries.move_to_end(key)
                    while len(self._entries) > self.capacity:
                        self._entries.popitem(last=False)
                    self.stats[ready.source] += 1
            finally:
                with self._lock:
                    self._building.pop(key, None)
            return ready

    def engine(self, grammar: Any, vocab: VocabTable | str, *, kind: str = "auto") -> NativeEngine:
        """The shared native engine of ``grammar`` (see :meth:`get`)."""
        return self.get(grammar, vocab, kind=kind).engine

    def matcher(self, grammar: Any, vocab: VocabTable | str, *, kind: str = "auto") -> NativeMatcher:
        """A fresh native matcher for ``grammar`` (see :meth:`get`)."""
        return self.get(grammar, vocab, kind=kind).matcher()

    def classes(self, grammar: Any, vocab: VocabTable | str, *, kind: str = "auto") -> TokenClasses:
        """The displacement classes of ``vocab`` under ``grammar`` (see :meth:`get`)."""
        return self.get(grammar, vocab, kind=kind).classes

    def clear(self) -> None:
        """Forget every grammar held in memory (the cache directory keeps its files)."""
        with self._lock:
            self._entries.clear()

    # -- the three sources -------------------------------------------------------------------
    def _lookup(self, key: CacheKey) -> ReadyGrammar | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            self.stats["memory"] += 1
        hit.source = "memory"
        return hit

    def _from_disk(self, key: CacheKey, text: str, vocab: VocabTable) -> ReadyGrammar | None:
        if self.disk is None:
            return None
        t0 = time.perf_counter()
        contents = self.disk.load(key, vocab, input_text=text)
        if contents is None:
            return None
        from .index import index_or_build

        index, unavailable, built = index_or_build(contents, contents.grammar.gnf, vocab)
        if built:  # an entry written without its index (the workbench's): complete it once
            self.disk.store(key, contents.grammar, contents.classes, vocab, index)
        ready = ReadyGrammar(
            key, contents.grammar, contents.classes, vocab, index, unavailable, origin="disk", source="disk"
        )
        ready.seconds["load"] = time.perf_counter() - t0
        return ready

    def _build(self, key: CacheKey, text: str, kind: str, vocab: VocabTable) -> ReadyGrammar:
        from ..classes.limits import ClassingLimitError
        from ..deadline import Deadline
        from ..grammar.gnf import NormalFormTooLarge
        from ..native.index import SigmaInIndex, build_index_or_reason
        from ..pipeline import ServedByXGrammar, build_classes, compile_grammar
        from .xgrammar_only import xgrammar_only_grammar

        deadline = Deadline(self.build_seconds) if self.build_seconds is not None else None
        t0 = time.perf_counter()
        try:
            # a nested root or a class past 128 XGrammar's lookahead misreads in this vocabulary is served by XGrammar
            # itself, decided before any normal form
            compiled = compile_grammar(text, kind=kind, deadline=deadline, stop_where_xgrammar_serves=True, vocab=vocab)
        except ServedByXGrammar as found:
            ready = xgrammar_only_grammar(key, found.ebnf, found.grammar_source, vocab, found.reason, t0)
            return _compiled_by_xgrammar(ready, deadline)
        except NormalFormTooLarge as error:
            ready = xgrammar_only_grammar(key, error.ebnf, error.grammar_source, vocab, _budget_reason(error), t0)
            return _compiled_by_xgrammar(ready, deadline)
        t1 = time.perf_counter()
        try:
            if deadline is None:
                result = build_classes(compiled, vocab, workers=self.workers)
            else:
                deadline.check("the front end (after the normal form)")
                try:
                    result = build_classes(compiled, vocab, workers=self.workers, cancel=deadline.passed)
                except InterruptedError:
                    raise deadline.error("classing") from None
                deadline.check("classing (done)")
        except ClassingLimitError as error:
            reason = _budget_reason(error)
            ready = xgrammar_only_grammar(key, compiled.text, compiled.grammar_source, vocab, reason, t0)
            return _compiled_by_xgrammar(ready, deadline)
        t2 = time.perf_counter()
        # (no nested root here: compile_grammar stopped at one)
        index, unavailable = build_index_or_reason(
            compiled.gnf, result.classes, vocab.token_bytes, rep_nodes=result.rep_nodes, displacer=result.displacer
        )
        if index is None and deadline is not None:
            # Every request will be served by the compressed engine, whose XGrammar compile (on the first
            # request, kept by cfgzip_lab.engine) is then part of getting ready: made now, within the budget
            # (aerleon's took 62 s, past its 45 s MaskBench budget after a build of ~25 s).
            from ..engine import compile_engines

            deadline.wait_for(
                lambda: compile_engines(compiled.text, vocab, result.classes).compressed_grammar,
                "the compressed engine (XGrammar's compile)",
            )
        t3 = time.perf_counter()
        classes = result.classes
        seconds = {"front_end": t1 - t0, "classes": t2 - t1, "index": t3 - t2}
        if self.disk is not None and t3 - t0 >= self.write_after:
            t4 = time.perf_counter()
            self.disk.store(key, compiled, classes, vocab, index)
            seconds["write"] = time.perf_counter() - t4
        kept, displacer = _kept_grammar(compiled, result.displacer)
        # the Python build's lists: to arrays (the compiled one has them)
        if index is not None and not index.arrays_only:
            index = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
        ready = ReadyGrammar(key, kept, classes, vocab, index, unavailable, displacer=displacer)
        ready.seconds.update(seconds, compact=time.perf_counter() - t3 - seconds.get("write", 0.0))
        return ready


def _compiled_by_xgrammar(ready: ReadyGrammar, deadline) -> ReadyGrammar:
    """``ready`` (served by XGrammar itself over the whole vocabulary), with that XGrammar compile (made on
    the first request, kept by :mod:`cfgzip_lab.engine`) made now where the build has a budget: it is the
    rest of getting ready, so a benchmark's time to first mask and a server's build both hold it.

    It is not held to cfgzip's budget: XGrammar would serve this grammar after the same compile, so refusing
    it for XGrammar's own time would refuse a request XGrammar serves (MaskBench Github_hard o79409's took
    over 30 s on a loaded 2-core machine, wp_8's 30 s at load 9). The compressed engine's compile of a
    grammar without a σ_in index is cfgzip's own way of serving it, and is held to the budget
    (:meth:`GrammarCache._build`)."""
    if deadline is not None:
        from ..engine import compile_engines

        _ = compile_engines(ready.compiled.text, ready.vocab).plain_grammar  # compiled now, kept by engine
    return ready


def _budget_reason(error: Exception) -> str:
    """``engine.unavailable`` of a grammar past a size budget of cfgzip's, served by XGrammar itself."""
    return f"past cfgzip's size budget, served by XGrammar itself: {error}"


COMPACT_FROM_BYTES = 1 << 20
"""A built grammar whose compiled word store holds more than this (bytes) is kept in memory over a
store of its GNF's nodes alone; a smaller one keeps the store classing left, memos and all, and the
engine walks on in it with classing's displacer (a small schema's store holds 120-300 KB, and the copy
of a second store took ~0.1 ms of its ~1.5 ms start with Llama-3)."""


def _kept_grammar(compiled: CompiledGrammar, displacer: Displacer) -> tuple[CompiledGrammar, Displacer | None]:
    """What a :class:`ReadyGrammar` keeps of a build: ``compiled`` as a
    :class:`~cfgzip_lab.pipeline.LoadedGrammar` (no syntax tree), over a store of its GNF's nodes
    alone where classing's store is large (c_like with Llama-3: 17 MB held instead of 198 MB, for 30
    ms of copying) or a Python one, else over classing's compiled store with the displacer that
    stepped in it (the engine's walk starts from its memos)."""
    from ..classes.compiled_displacement import CompiledDisplacer
    from ..pipeline import LoadedGrammar

    gnf = compiled.gnf
    native = getattr(gnf.store, "native", None)
    small = native is not None and native.stats()["bytes"] <= COMPACT_FROM_BYTES
    if small and isinstance(displacer, CompiledDisplacer):
        return LoadedGrammar(compiled.text, gnf, compiled.grammar_source, compiled.seconds), displacer
    from ..grammar.gnf_arrays import compact_gnf

    # a normal form built in a Python WordStore (counted repetitions with compiled_words.COUNTED_IN_COMPILED_STORE
    # off) whose classing ran in a compiled store seeded with its nodes: the steps' sizes are counted there, in C
    seeded = displacer.store if native is None and isinstance(displacer, CompiledDisplacer) else None
    return LoadedGrammar(compiled.text, compact_gnf(gnf, seeded), compiled.grammar_source, compiled.seconds), None


def _vocab(vocab: VocabTable | str) -> VocabTable:
    if isinstance(vocab, str):
        from ..vocab_sources import load_vocab

        return load_vocab(vocab)
    return vocab


_default: GrammarCache | None = None
_default_lock = threading.Lock()


def default_grammar_cache() -> GrammarCache:
    """The process's shared :class:`GrammarCache` (default capacity, default cache directory)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = GrammarCache()
    return _default


def _cache_of(cache: GrammarCache | bool | None) -> GrammarCache:
    if isinstance(cache, GrammarCache):
        return cache
    if cache is False:
        return GrammarCache(1, cache_dir=False)  # nothing kept: built for this call alone
    return default_grammar_cache()


def engine_for(
    grammar: Any, vocab: VocabTable | str, *, kind: str = "auto", cache: GrammarCache | bool | None = None
) -> NativeEngine:
    """The native engine of ``grammar`` with ``vocab`` (shared by every request of the grammar).

    Parameters
    ----------
    grammar : str, dict or CompiledGrammar
        XGrammar EBNF, llama.cpp GBNF or a JSON Schema (text or dict).
    vocab : VocabTable or str
        The vocabulary (or a registered tokenizer name, loaded once).
    kind : {"auto", "ebnf", "gbnf", "json_schema"}
        How to read a text; ``auto``: a leading ``{`` is a JSON Schema, anything else EBNF.
    cache : GrammarCache, bool or None
        None or True: the shared default cache (memory and the cache directory); a
        :class:`GrammarCache`: that one; False: build now, keep nothing, write nothing.
    """
    return _cache_of(cache).engine(grammar, vocab, kind=kind)


def matcher_for(
    grammar: Any, vocab: VocabTable | str, *, kind: str = "auto", cache: GrammarCache | bool | None = None
) -> NativeMatcher:
    """A fresh native matcher for ``grammar`` with ``vocab``: XGrammar's matcher interface
    (``fill_next_token_bitmask``, ``accept_token``, ``rollback``, ``is_terminated``...), masks
    bit-identical to plain XGrammar's. Arguments as :func:`engine_for`."""
    return _cache_of(cache).matcher(grammar, vocab, kind=kind)
