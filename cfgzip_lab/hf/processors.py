"""Grammar logits processors for transformers, over the per-request grammar cache.

:class:`PlainLogitsProcessor` and :class:`CompressedLogitsProcessor` are transformers
``LogitsProcessor`` objects with one interface, over XGrammar on the whole vocabulary
(the oracle) and over the K class representatives (CFGzip). Both mask ``scores`` in
place for any batch size; same masks, hence byte-identical generations under one seed.

Classes and native engines come from :func:`cfgzip_lab.cache.grammars.default_grammar_cache`
(memory, then the cache directory, then built), so a grammar is classed once per machine.
A grammar may be XGrammar EBNF, GBNF or a JSON Schema text (:func:`grammar_text_of` gives the
EBNF the engines compile).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from transformers import LogitsProcessor

from ..classes.classing import grammar_sha256
from ..engine import BatchMatcher, CompiledEngines, Engine, compile_engines
from ..vocab import TokenKind, VocabTable

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..pipeline import CompiledGrammar

__all__ = [
    "EngineKind",
    "GrammarLogitsProcessor",
    "PlainLogitsProcessor",
    "CompressedLogitsProcessor",
    "NativeLogitsProcessor",
    "cached_native_engine",
    "cached_classes",
    "clear_classes_cache",
    "grammar_text_of",
]

EngineKind = Literal["plain", "compressed", "native"]


# ---------------------------------------------------------------------------------------
# Grammars and classes, from the grammar cache
# ---------------------------------------------------------------------------------------
_classes_lock = threading.Lock()


def grammar_text_of(grammar: str | CompiledGrammar) -> str:
    """The EBNF text of a grammar given as text (EBNF, or a JSON Schema: XGrammar's EBNF for it)
    or as a :class:`pipeline.CompiledGrammar`."""
    if not isinstance(grammar, str):
        return grammar.text
    from ..grammar.sources import detect_kind, to_ebnf

    return grammar if detect_kind(grammar) == "ebnf" else to_ebnf(grammar).ebnf


def cached_classes(grammar: str | CompiledGrammar, vocab: VocabTable) -> TokenClasses:
    """Displacement classes of ``vocab`` under ``grammar``, built once per machine: through
    :func:`cfgzip_lab.cache.grammars.default_grammar_cache` (in memory, then the cache directory)."""
    from ..cache.grammars import default_grammar_cache

    return default_grammar_cache().classes(grammar, vocab)


def clear_classes_cache() -> None:
    """Forget every grammar held in memory (the default grammar cache's, and the native engines
    built on given classes); the cache directory keeps its files."""
    from ..cache.grammars import default_grammar_cache

    default_grammar_cache().clear()
    with _classes_lock:
        _NATIVE.clear()


_NATIVE: dict[tuple[str, str, str], object] = {}


def cached_native_engine(grammar: str | CompiledGrammar, vocab: VocabTable, classes: TokenClasses | None = None):
    """The native engine (:mod:`cfgzip_lab.native`) of ``grammar`` and ``classes``, built once per process.

    Without ``classes``, the default grammar cache's engine (:func:`cfgzip_lab.engine_for`: from
    memory, the cache directory, or built). With them, keyed by (grammar sha256, vocabulary
    fingerprint, classes digest); building compiles the grammar to GNF and the σ_in index.
    """
    from ..native import build_native_engine
    from ..pipeline import compile_grammar

    if classes is None:
        from ..cache.grammars import default_grammar_cache

        return default_grammar_cache().engine(grammar, vocab)
    text = grammar_text_of(grammar)
    classes.check_fits(text, vocab)
    key = (grammar_sha256(text), vocab.fingerprint, classes.digest())
    with _classes_lock:
        hit = _NATIVE.get(key)
    if hit is not None:
        return hit
    # A fresh compilation even when a CompiledGrammar is given: the engine then owns its word
    # store, which classing in another thread (the workbench) never touches (the store's node
    # budget is per store, not per thread).
    compiled = compile_grammar(text)
    engine = build_native_engine(compiled, vocab, classes, xgrammar_engines=compile_engines(text, vocab, classes))
    with _classes_lock:
        return _NATIVE.setdefault(key, engine)


def _engines_for(
    grammar: str | CompiledGrammar, vocab: VocabTable, classes: TokenClasses | None, need_classes: bool
) -> CompiledEngines:
    if classes is None and need_classes:
        from ..cache.grammars import default_grammar_cache

        ready = default_grammar_cache().get(grammar, vocab)
        text, classes = ready.compiled.text, ready.classes
    else:
        text = grammar_text_of(grammar)
    if classes is not None:
        classes.check_fits(text, vocab)
    return compile_engines(text, vocab, classes)


# ---------------------------------------------------------------------------------------
# Logits processors
# ---------------------------------------------------------------------------------------
class GrammarLogitsProcessor(LogitsProcessor):
    """Masks ``scores`` in place with a grammar; one matcher per batch row.

    transformers calls a processor once per generated position with all ids so far
    (prompt included) and the next-token scores ``(B, V)``. The first call only records the
    prompt length; each later call first feeds every live row its last token, then fills
    and applies the masks. A row whose last token was a stop token is finished: its scores
    are left alone (``generate`` pads it anyway, and an all ``-inf`` row would make sampling
    fail). When the grammar has ended but no stop token was chosen yet, XGrammar's mask
    allows only the stop tokens, so the row ends next.

    One processor serves one ``generate`` call; :meth:`reset` makes it reusable.
    ``mask_seconds[i]`` is the wall time of step ``i``'s fill + apply (expansion included
    for the compressed engine); ``steps`` counts calls.
    """

    kind: EngineKind

    def __init__(self, engines: CompiledEngines | None, vocab: VocabTable | None = None) -> None:
        self.engines = engines
        self.vocab = vocab if vocab is not None else engines.vocab
        self._is_stop = np.asarray(self.vocab.kinds) == TokenKind.STOP
        self.reset()

    def _new_engine(self) -> Engine:
        return self.engines.plain() if self.kind == "plain" else self.engines.compressed()

    def reset(self) -> None:
        """Forget the batch: the next call starts a new generation."""
        self._engines: list[Engine] = []
        self._batch: BatchMatcher | None = None
        self._bitmask: torch.Tensor | None = None
        self._seen_len: int | None = None
        self.finished: list[bool] = []
        self.mask_seconds: list[float] = []
        self.steps = 0

    @property
    def batch_size(self) -> int:
        return len(self._engines)

    def _start(self, batch_size: int, width: int) -> None:
        if width != self.vocab.vocab_size:
            raise ValueError(
                f"scores have {width} columns but vocabulary {self.vocab.name!r} has {self.vocab.vocab_size} ids"
            )
        self._engines = [self._new_engine() for _ in range(batch_size)]
        self._batch = BatchMatcher(self._engines) if batch_size > 1 else None
        self._bitmask = self._engines[0].allocate_bitmask(batch_size)
        self.finished = [False] * batch_size

    def _accept_last(self, last: list[int]) -> None:
        live = [i for i, done in enumerate(self.finished) if not done]
        if self._batch is not None and len(live) > 1:
            ok = self._batch.accept_tokens([last[i] if i in live else -1 for i in range(self.batch_size)])
        else:
            ok = [i in live and self._engines[i].accept_token(last[i]) for i in range(self.batch_size)]
        for i in live:
            if not ok[i]:
                raise RuntimeError(
                    f"row {i}: the grammar rejects token {last[i]} ({self.vocab.token_bytes[last[i]]!r}); "
                    "was the mask applied, and is this processor used for one generation only?"
                )
            if self._is_stop[last[i]] or self._engines[i].is_terminated():
                self.finished[i] = True

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        batch_size, length = input_ids.shape
        if self._seen_len is None:
            self._start(batch_size, scores.shape[-1])
        else:
            if length != self._seen_len + 1 or batch_size != self.batch_size:
                raise RuntimeError(
                    "this processor is in the middle of another generation; call reset() between generate calls"
                )
            self._accept_last(input_ids[:, -1].tolist())
        self._seen_len = length
        self.steps += 1
        t0 = time.perf_counter()
        if self._fill():
            self._engines[0].apply_bitmask_inplace(scores, self._bitmask)
        self.mask_seconds.append(time.perf_counter() - t0)
        return scores

    def _fill(self) -> bool:
        """Fill the live rows' masks into the bitmask (finished rows: all allowed); False if none is live.

        Separate from ``__call__`` so that :class:`~cfgzip_lab.hf.overlap.OverlappedLogitsProcessor`
        can run it (with :meth:`_accept_last`) on a worker thread while the model runs.
        """
        live = [i for i, done in enumerate(self.finished) if not done]
        if not live:
            return False
        bitmask = self._bitmask
        assert bitmask is not None
        if len(live) < self.batch_size:
            bitmask.fill_(-1)  # finished rows: all allowed, i.e. scores untouched
        if self._batch is None:
            self._engines[0].fill_next_token_bitmask(bitmask, 0)
        else:
            self._batch.fill_next_token_bitmask(bitmask, None if len(live) == self.batch_size else live)
        return True


class PlainLogitsProcessor(GrammarLogitsProcessor):
    """XGrammar over the whole vocabulary (the oracle).

    >>> proc = PlainLogitsProcessor(json_text, vocab)                    # doctest: +SKIP
    >>> model.generate(**inputs, logits_processor=LogitsProcessorList([proc]))
    """

    kind: EngineKind = "plain"

    def __init__(self, grammar: str | CompiledGrammar | CompiledEngines, vocab: VocabTable | None = None) -> None:
        if not isinstance(grammar, CompiledEngines):
            if vocab is None:
                raise TypeError("a grammar needs its vocabulary table")
            grammar = _engines_for(grammar, vocab, None, need_classes=False)
        super().__init__(grammar)


class CompressedLogitsProcessor(GrammarLogitsProcessor):
    """XGrammar over the K class representatives, expanded to the vocabulary (CFGzip).

    ``classes`` default: built from the grammar and cached in-process (:func:`cached_classes`).
    """

    kind: EngineKind = "compressed"

    def __init__(
        self,
        grammar: str | CompiledGrammar | CompiledEngines,
        vocab: VocabTable | None = None,
        classes: TokenClasses | None = None,
    ) -> None:
        if not isinstance(grammar, CompiledEngines):
            if vocab is None:
                raise TypeError("a grammar needs its vocabulary table")
            grammar = _engines_for(grammar, vocab, classes, need_classes=True)
        elif grammar.classes is None:
            raise ValueError("compressed processors need engines compiled with TokenClasses")
        super().__init__(grammar)


class NativeLogitsProcessor(GrammarLogitsProcessor):
    """The native displacement engine (:mod:`cfgzip_lab.native`): masks from the classes'
    displacements, no XGrammar at decode time (a request past the state budget falls back to
    the compressed engine on its own).

    ``grammar`` may be a :class:`cfgzip_lab.native.NativeEngine`; otherwise one comes from
    :func:`cached_native_engine` (without ``classes``: the grammar cache, so from the cache
    directory when the grammar was classed before). No XGrammar is compiled for it:
    ``engines`` is the engine's own XGrammar engines if it has some, else None.
    """

    kind: EngineKind = "native"

    def __init__(self, grammar, vocab: VocabTable | None = None, classes: TokenClasses | None = None) -> None:
        from ..native import NativeEngine

        if isinstance(grammar, NativeEngine):
            native = grammar
        else:
            if vocab is None:
                raise TypeError("a grammar needs its vocabulary table")
            native = cached_native_engine(grammar, vocab, classes)
        self.native = native
        super().__init__(native.xgrammar_engines, native.vocab)

    def _new_engine(self):
        return self.native.matcher()

    def _start(self, batch_size: int, width: int) -> None:
        super()._start(batch_size, width)
        if batch_size > 1:
            from ..native import DisplacementBatchMatcher

            self._batch = DisplacementBatchMatcher(self._engines)
