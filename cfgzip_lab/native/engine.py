"""NativeEngine: one grammar + vocabulary + classes, ready to hand out native matchers.

Holds what every request of a grammar shares: the GNF and its word store, the σ_in index,
the state walker with its memos, the row cache, and (built on first need) the compressed
XGrammar engines that serve a request past the state budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .._gc import gc_paused
from ..classes.classing import TokenClasses
from ..classes.compiled_displacement import make_displacer
from ..classes.displacement import Displacer
from ..expand import Expander
from ..grammar.words import EMPTY
from .index import MAX_SIGMA_IN_WORDS, IndexTooLarge, SigmaInIndex, build_index
from .jump_forward import ForcedTokenIndex
from .matcher import DisplacementBatchMatcher, DisplacementMatcher
from .rows import RowCache, kernel_available
from .stop_policy import SIGNAL_ONLY, StopPolicy
from .walk import DEFAULT_LIMITS, StateWalker, WalkLimits

if TYPE_CHECKING:
    from ..classes.classing import ClassingResult
    from ..engine import CompiledEngines, CompressedMatcher, PlainMatcher
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable

__all__ = ["NativeEngine", "build_native_engine"]

_CAPTURE_HEADER = re.compile(r"^[^\S\n]*[\w.-]+[^\S\n]*\[[^\]\n]*capture", re.MULTILINE)


@dataclass
class NativeEngine:
    """Shared state of the native engine for one grammar, vocabulary and partition.

    ``fallbacks`` counts requests handed to the compressed XGrammar engine because their
    state grew past ``limits`` (see :mod:`.walk`). ``index`` None (with ``unavailable`` saying
    why: the σ_in sets were too large to list, :class:`.index.IndexTooLarge`) serves every
    request through the compressed engine, each counted in ``fallbacks``.
    """

    compiled: CompiledGrammar
    vocab: VocabTable
    classes: TokenClasses
    index: SigmaInIndex | None
    limits: WalkLimits = DEFAULT_LIMITS
    expander: Expander | None = None
    xgrammar_engines: CompiledEngines | None = None
    displacer: Displacer | None = None
    unavailable: str | None = None
    #: why every request goes to XGrammar itself where the build decided so (a nested root found before the
    #: normal form, a grammar past a size budget: :mod:`cfgzip_lab.cache.xgrammar_only`); None: decided here
    xgrammar_only: str | None = None
    fallbacks: int = field(default=0, init=False)
    index_source: str = field(default="given", init=False)  # "built" now, "given", or "cache"
    _text_memo: dict[tuple[int, bytes], bool] = field(default_factory=dict, init=False, repr=False)
    use_filler: bool = field(default=True, init=False)  # see `filler`

    def __post_init__(self) -> None:
        from ..pipeline import xgrammar_serves_reason

        nested = (
            self.xgrammar_only if self.xgrammar_only is not None else xgrammar_serves_reason(self.compiled, self.vocab)
        )
        self.xgrammar_fallback = nested is not None
        if nested is not None:  # XGrammar's masks are not the language's: every request to XGrammar itself
            self.index, self.unavailable = None, nested
        if self.index is not None and not self.index.fits_gnf(self.compiled.gnf):
            raise ValueError("the native index was built for another normal form of the grammar")
        if self.index is not None and self.index.num_classes != self.classes.num_classes:
            raise ValueError(
                f"the native index covers {self.index.num_classes} classes, the partition has {self.classes.num_classes}"
            )
        if self.classes.vocab_size != self.vocab.vocab_size:
            raise ValueError(
                f"classes cover {self.classes.vocab_size} ids but vocabulary {self.vocab.name!r} has {self.vocab.vocab_size}"
            )
        self.vocab_size = self.vocab.vocab_size
        self.walker = None
        if self.index is not None:
            self.walker = StateWalker(
                self.compiled.gnf, self.classes, self.vocab.token_bytes, self.index, self.limits, self.displacer
            )
        elif self.unavailable is None:
            self.unavailable = "no σ_in index"
        # The compiled rows check the map's class ids in their own pass over it (RowCache; an int32 map,
        # which they read as it is, or a sparse one, whose listed ids alone they read: a small grammar's
        # map is then never made), so the expander made here for them leaves that to them.
        compiled_rows = kernel_available()
        sparse = self.classes.sparse_map() if compiled_rows else None
        checked = compiled_rows and (sparse is not None or np.asarray(self.classes.class_of).dtype == np.int32)
        self.expander = self.expander or Expander(self.classes, class_ids_checked=checked)
        self.rows = RowCache(
            self.expander,
            None if sparse is not None else self.classes.class_of,
            class_kind=self.classes.class_kind,
            sparse=sparse,
        )

    @cached_property
    def class_of(self) -> list[int]:
        """Each token's class as a list (list indexing: ~3x numpy's), for the Python accept step and
        :meth:`DisplacementMatcher.native_id`; made on first use (1 ms for Llama-3's 128k ids, which
        the compiled accept step never needs)."""
        return np.asarray(self.classes.class_of).tolist()

    @cached_property
    def class_kind(self) -> list[int]:
        return np.asarray(self.classes.class_kind).tolist()

    @cached_property
    def has_captures(self) -> bool:
        """Whether a rule header of the grammar's EBNF names a capture attribute (``name[capture] ::=``,
        ``stop_capture``...; the front end drops them). Read from the text, not from the front end's
        warnings, which a schema's or structural tag's origin may hide: a false positive only makes
        ``get_captures`` refuse."""
        return _CAPTURE_HEADER.search(self.compiled.text) is not None

    @cached_property
    def forced_token_index(self) -> ForcedTokenIndex:
        """The ordinary tokens sorted by bytes, for ``find_jump_forward_tokens`` (made on first use)."""
        return ForcedTokenIndex.from_vocab(self.vocab)

    def matcher(self, stop_policy: StopPolicy = SIGNAL_ONLY) -> DisplacementMatcher:
        """A fresh matcher in the initial state (``stop_policy``: how it reads a stop id, see :mod:`.stop_policy`)."""
        return DisplacementMatcher(self, stop_policy)

    def text_completes(self, state: int, text: bytes, spent: int) -> bool:
        """Whether ``text`` read as bytes after ``state`` completes the grammar (a stop id's text, see
        :mod:`.stop_policy`). Memoised per (state, text): states are shared by every request.

        Raises
        ------
        StateBudgetExceeded
            The bytes would grow the state past the walk's budgets (``spent``: the request's nodes so far).
        """
        key = (state, text)
        got = self._text_memo.get(key)
        if got is None:
            new, _ = self.walker.run_bytes(state, text, spent)
            got = new != EMPTY and self.walker.accepts_stop(new)
            if len(self._text_memo) >= self.limits.memo_entries:
                self._text_memo.clear()
            self._text_memo[key] = got
        return got

    def batch(self, batch_size: int) -> DisplacementBatchMatcher:
        return DisplacementBatchMatcher([self.matcher() for _ in range(batch_size)])

    def fallback_matcher(self) -> CompressedMatcher | PlainMatcher:
        """A compressed XGrammar matcher (compiled on first use) for a request past the budget; XGrammar
        over the whole vocabulary where the compressed engine is refused (a nested root,
        :mod:`~cfgzip_lab.grammar.nested_root`)."""
        if self.xgrammar_fallback:
            return self.plain_matcher()
        if self.xgrammar_engines is None:
            from ..engine import compile_engines

            self.xgrammar_engines = compile_engines(self.compiled.text, self.vocab, self.classes)
        return self.xgrammar_engines.compressed()

    def plain_matcher(self) -> PlainMatcher:
        """XGrammar over the whole vocabulary (compiled on first use): the referee for what the state
        DAG cannot say (the forced string of a grammar with Token(...) macros, whose ids the
        compressed engine does not keep)."""
        if self.xgrammar_engines is None:
            from ..engine import compile_engines

            # XGrammar alone serves (xgrammar_fallback): no compressed engine, so no classes to check and digest
            classes = None if self.xgrammar_fallback else self.classes
            self.xgrammar_engines = compile_engines(self.compiled.text, self.vocab, classes)
        return self.xgrammar_engines.plain()

    def _filler_stats(self) -> dict:
        filler = self.__dict__.get("filler")  # made by a matcher, never by asking for stats
        if filler is None:
            return {}
        from .._binding import kernel

        keys = ("fill_state_hits", "fill_set_hits", "fill_rows_made", "fill_drops")
        return dict(zip(keys, kernel.filler_stats(filler)))

    @cached_property
    def filler(self):
        """The compiled fill of a state's mask (``csrc/fill.c``: trie walk, row memo and near rows in one
        call, no Python int per class set), or None where the Python path serves: no compiled store or
        trie walk, classes the index leaves to a run of their representative, Python rows, or no
        vocabulary.
        ``use_filler = False`` on the engine before the first matcher keeps the Python path (the
        reference it is tested against)."""
        w, rows = self.walker, self.rows
        near = getattr(rows, "_near", None)
        if not self.use_filler or w is None or w._trie is None or w._native is None or w._unindexed or near is None:
            return None
        if rows.vocab_words < 1 or w.num_classes < 1:  # an empty vocabulary (XGrammar's tests make one)
            return None
        from .._binding import kernel

        return kernel.filler_new(
            w._trie, w._native, near._capsule, w.num_classes, rows.vocab_words, w.stop_class, min(rows._limit, 4096)
        )  # at most 4,096 rows (Llama-3's 64 MB): a tiny vocabulary's row bound would size tables of millions

    def stats(self) -> dict:
        if self.walker is None:
            return {
                "fallbacks": self.fallbacks,
                "trie_nodes": 0,
                "index_build_seconds": 0.0,
                "index_source": self.index_source,
                "unavailable": self.unavailable,
            }
        return {
            "fallbacks": self.fallbacks,
            "trie_nodes": self.index.num_nodes,
            "index_build_seconds": self.index.build_seconds,
            "index_source": self.index_source,
            "store_nodes": len(self.walker.store),
            "row_cache_misses": self.rows.misses,
            "compiled_rows": self.rows.compiled,
            **self._filler_stats(),
            **self.walker.stats,
        }


@gc_paused()  # a build never pays a full collection (cfgzip_lab._gc)
def build_native_engine(
    compiled: CompiledGrammar,
    vocab: VocabTable,
    classes: TokenClasses,
    *,
    classing: ClassingResult | None = None,
    index: SigmaInIndex | None = None,
    limits: WalkLimits = DEFAULT_LIMITS,
    xgrammar_engines: CompiledEngines | None = None,
    max_index_words: int = MAX_SIGMA_IN_WORDS,
) -> NativeEngine:
    """The native engine for ``compiled`` and ``classes``; builds the σ_in index unless given.

    An index whose σ_in sets are too large to list (more than ``max_index_words`` words, see
    :mod:`.index`) leaves the engine without one: it then serves every request through the
    compressed XGrammar engine (``engine.unavailable`` says why; each request is counted).

    ``classing`` (the result that produced ``classes``) lends its displacement nodes and
    displacer, so the index is read off them; without it the representatives are run again.
    """
    displacer = classing.displacer if classing is not None else make_displacer(compiled.gnf)
    source = "given" if index is not None else "built"
    unavailable = None
    if index is None:
        try:
            index = build_index(
                compiled.gnf,
                classes,
                vocab.token_bytes,
                rep_nodes=classing.rep_nodes if classing is not None else None,
                displacer=displacer,
                max_words=max_index_words,
            )
        except IndexTooLarge as exc:
            unavailable = str(exc)
    engine = NativeEngine(
        compiled,
        vocab,
        classes,
        index,
        limits,
        xgrammar_engines=xgrammar_engines,
        displacer=displacer,
        unavailable=unavailable,
    )
    engine.index_source = source
    return engine
