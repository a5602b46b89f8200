"""cfgzip_lab: token-space compression (CFGzip) of grammar-constrained decoding.

Grammar text → byte CFG → factored GNF → displacement classes → XGrammar over
class representatives → one gather back to the vocabulary. Lossless by
construction and checked against plain XGrammar by :func:`verify_lossless`.

Everything a user needs is importable from here (as lark's ``__init__`` names its API);
the submodules are the implementation::

    import cfgzip_lab as cz

    grammar = cz.compile_grammar(text)                  # GrammarError: line, column, message
    vocab = cz.load_vocab("llama3")                      # offline tokenizer registry
    classes = cz.build_classes(grammar, vocab).classes   # displacement classes
    cz.save_classes(classes, "json.npz", grammar_text=text, vocab=vocab)
    engines = cz.compile_engines(text, vocab, classes)   # plain XGrammar and compressed
    processor = cz.CompressedLogitsProcessor(engines)    # for transformers' generate

Names are imported on first use, so ``import cfgzip_lab`` stays cheap (no torch,
transformers or xgrammar until an engine, a processor or a model is asked for).
Every error raised on bad input is a :class:`CfgzipError`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# name → module that defines it (relative to this package)
_API: dict[str, str] = {
    # grammars
    "compile_grammar": ".pipeline",
    "CompiledGrammar": ".pipeline",
    "resolve_grammar": ".pipeline",
    "bundled_grammars": ".bundled",
    "bundled_samples": ".bundled",
    # vocabularies
    "load_vocab": ".vocab_sources",
    "available_vocabs": ".vocab_sources",
    "VocabTable": ".vocab",
    "TokenKind": ".vocab",
    "vocab_from_tokenizer": ".vocab",
    "vocab_from_bytes": ".vocab",
    # classes and their cache
    "build_classes": ".pipeline",
    "TokenClasses": ".classes.classing",
    "ClassKind": ".classes.classing",
    "grammar_sha256": ".classes.classing",
    "save_classes": ".cache.format",
    "load_classes": ".cache.format",
    "read_metadata": ".cache.format",
    # a ready native matcher per request, cached in memory and on disk
    "matcher_for": ".cache.grammars",
    "engine_for": ".cache.grammars",
    "GrammarCache": ".cache.grammars",
    "ReadyGrammar": ".cache.grammars",
    # engines, expansion, the lossless check
    "compile_engines": ".engine",
    "CompiledEngines": ".engine",
    "PlainMatcher": ".engine",
    "CompressedMatcher": ".engine",
    "BatchMatcher": ".engine",
    "Expander": ".expand",
    "verify_lossless": ".verify",
    "VerifyReport": ".verify",
    # transformers integration
    "GrammarLogitsProcessor": ".hf",
    "PlainLogitsProcessor": ".hf",
    "CompressedLogitsProcessor": ".hf",
    "NativeLogitsProcessor": ".hf",
    "constrained_generate": ".hf",
    "constrained_generate_batch": ".hf",
    "GenerationResult": ".hf",
    "load_model": ".hf",
    "vocab_for": ".hf",
    "Stepper": ".decode",
    # errors
    "CfgzipError": ".errors",
    "GrammarError": ".grammar.diagnostics",
    "GrammarCompileError": ".engine",
    "UnknownVocabError": ".vocab_sources",
    "VocabLoadError": ".vocab_sources",
    "ClassesError": ".classes.classing",
    "CacheError": ".cache.format",
    "ModelLoadError": ".hf.models",
    "BuildBudgetError": ".deadline",
}

# Spelled out (not derived from _API) so linters and readers see the list; tests/test_api.py
# checks that both name the same things.
__all__ = [
    "__version__",
    "compile_grammar",
    "CompiledGrammar",
    "resolve_grammar",
    "bundled_grammars",
    "bundled_samples",
    "load_vocab",
    "available_vocabs",
    "VocabTable",
    "TokenKind",
    "vocab_from_tokenizer",
    "vocab_from_bytes",
    "build_classes",
    "TokenClasses",
    "ClassKind",
    "grammar_sha256",
    "save_classes",
    "load_classes",
    "read_metadata",
    "matcher_for",
    "engine_for",
    "GrammarCache",
    "ReadyGrammar",
    "compile_engines",
    "CompiledEngines",
    "PlainMatcher",
    "CompressedMatcher",
    "BatchMatcher",
    "Expander",
    "verify_lossless",
    "VerifyReport",
    "GrammarLogitsProcessor",
    "PlainLogitsProcessor",
    "CompressedLogitsProcessor",
    "NativeLogitsProcessor",
    "constrained_generate",
    "constrained_generate_batch",
    "GenerationResult",
    "load_model",
    "vocab_for",
    "Stepper",
    "CfgzipError",
    "GrammarError",
    "GrammarCompileError",
    "UnknownVocabError",
    "VocabLoadError",
    "ClassesError",
    "CacheError",
    "ModelLoadError",
    "BuildBudgetError",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # next time a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ does it lazily
    from .bundled import bundled_grammars, bundled_samples
    from .cache.format import load_classes, read_metadata, save_classes
    from .cache.grammars import GrammarCache, ReadyGrammar, engine_for, matcher_for
    from .classes.classing import ClassKind, TokenClasses, grammar_sha256
    from .deadline import BuildBudgetError
    from .decode import Stepper
    from .engine import BatchMatcher, CompiledEngines, CompressedMatcher, PlainMatcher, compile_engines
    from .errors import (
        CacheError,
        CfgzipError,
        ClassesError,
        GrammarCompileError,
        GrammarError,
        ModelLoadError,
        UnknownVocabError,
        VocabLoadError,
    )
    from .expand import Expander
    from .hf import (
        CompressedLogitsProcessor,
        GenerationResult,
        GrammarLogitsProcessor,
        NativeLogitsProcessor,
        PlainLogitsProcessor,
        constrained_generate,
        constrained_generate_batch,
        load_model,
        vocab_for,
    )
    from .pipeline import CompiledGrammar, build_classes, compile_grammar, resolve_grammar
    from .verify import VerifyReport, verify_lossless
    from .vocab import TokenKind, VocabTable, vocab_from_bytes, vocab_from_tokenizer
    from .vocab_sources import available_vocabs, load_vocab
