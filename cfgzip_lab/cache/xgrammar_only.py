"""A :class:`~.grammars.ReadyGrammar` whose every request XGrammar itself serves, over the whole vocabulary.

The serving path (:class:`~.grammars.GrammarCache`) hands a grammar to XGrammar's own matcher where
cfgzip's engines cannot or should not serve it, and decides so as early as it can:

- a root rule nested with input after it (:mod:`cfgzip_lab.grammar.nested_root`): XGrammar's masks leave
  the language there, so no walk of cfgzip's reproduces them. Found in the parsed grammar, before the byte
  CFG, the normal form and classing, which would be built for nothing (MaskBench Github_easy o58637: its
  normal form, classing and engine took ~9 ms of a ~14 ms XGrammar compile);
- a grammar past the normal form's node budget (:class:`~cfgzip_lab.grammar.gnf.NormalFormTooLarge`) or
  classing's memory cap (:class:`~cfgzip_lab.classes.limits.ClassingLimitError`), which XGrammar may
  still compile (MaskBench JsonSchemaStore service-schema: 134,218 normal-form rows, XGrammar ~20 s).
  Refusing it would refuse a request XGrammar serves; served here, its masks are XGrammar's by
  construction and ``engine.unavailable`` says which budget it passed;
- a JSON Schema whose language is empty (a rule that never ends: MaskBench Github_medium o74424, where every
  object requires itself). XGrammar compiles and serves it, and no output completes; ``compile_grammar``
  names the rules as errors, as it does for any grammar.

The explicit build APIs (``compile_grammar``, ``build_classes``) still raise: only the serving path
falls back. Nothing of such a grammar is written to the cache directory (there are no classes to keep).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .grammars import ReadyGrammar

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..grammar.sources import GrammarSource
    from ..vocab import VocabTable
    from .directory import CacheKey

__all__ = ["no_classes", "xgrammar_only_grammar"]


def xgrammar_only_grammar(
    key: CacheKey, ebnf: str, grammar_source: GrammarSource | None, vocab: VocabTable, reason: str, t0: float
) -> ReadyGrammar:
    """The ready grammar of ``ebnf`` served by XGrammar itself, ``reason`` in its engine's ``unavailable``.

    Parameters
    ----------
    key : CacheKey
        The cache key it is kept under.
    ebnf : str
        The EBNF XGrammar compiles (compiled on the first request, as the native engine's fallback does).
    grammar_source : GrammarSource or None
        The user's input it was converted from.
    vocab : VocabTable
    reason : str
        Why XGrammar serves it.
    t0 : float
        When the build began (``time.perf_counter``), for ``seconds["front_end"]``.
    """
    from ..pipeline import LoadedGrammar

    compiled = LoadedGrammar(ebnf, None, grammar_source)  # no normal form: nothing of cfgzip's walks it
    ready = ReadyGrammar(key, compiled, no_classes(vocab, reason), vocab, None, reason, xgrammar_only=reason)
    ready.seconds["front_end"] = time.perf_counter() - t0
    return ready


def no_classes(vocab: VocabTable, reason: str) -> TokenClasses:
    """Every id in one BLOCKED class: the placeholder partition of an engine that never reads it (XGrammar
    serves every request over the whole vocabulary), made in O(1) (a sparse map,
    :meth:`TokenClasses.from_sparse`). ``metadata["xgrammar_only"]`` holds ``reason``, and the compressed
    engine refuses such classes (:class:`cfgzip_lab.engine.CompiledEngines`): they are no partition of
    the grammar's, and would block every token."""
    from ..classes.classing import ClassKind, TokenClasses

    none = np.zeros(0, dtype=np.int32)
    kinds = np.array([ClassKind.BLOCKED], dtype=np.uint8)
    return TokenClasses.from_sparse(
        vocab.vocab_size, none, none, np.zeros(1, dtype=np.int32), kinds, metadata={"xgrammar_only": reason}
    )
