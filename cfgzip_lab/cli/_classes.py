"""Where a command's classes come from: ``--classes FILE``, the cache directory, or classing now.

``compress``, ``verify`` and ``bench`` read the cache directory (:mod:`cfgzip_lab.cache.directory`)
unless ``--no-cache`` is given, and write what they build there (classes, σ_in index, GNF), so
a grammar or schema is classed once per machine, whichever command or the API met it first.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._common import UsageError

if TYPE_CHECKING:
    from ..cache.directory import CacheKey, ClassCacheDir
    from ..classes.classing import ClassingResult, TokenClasses
    from ..native.engine import NativeEngine
    from ..native.index import SigmaInIndex
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable

__all__ = [
    "ClassesFor",
    "add_cache_flag",
    "args_native_engine",
    "cache_dir_of",
    "cache_key_of",
    "classes_for",
    "engine_inputs",
    "native_engine_for",
]


@dataclass
class ClassesFor:
    """A command's classes and what came with them.

    ``source``: ``"file"`` (``--classes``), ``"cache"`` (the cache directory) or ``"built"``;
    ``seconds`` the load or the classing + index time; ``index`` the σ_in index when the cache
    directory had one or it was built now (``index_unavailable`` says why there is none);
    ``classing`` the classing result when built now (its displacer serves the native engine).
    """

    classes: TokenClasses
    source: str
    seconds: float
    index: SigmaInIndex | None = None
    index_unavailable: str | None = None
    classing: ClassingResult | None = None
    path: str | None = None


def add_cache_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the class cache directory ($CFGZIP_CACHE_DIR, default ~/.cache/cfgzip_lab/classes)",
    )
    return parser


def cache_dir_of(args: argparse.Namespace) -> ClassCacheDir | None:
    """The cache directory, or None with ``--no-cache``."""
    if getattr(args, "no_cache", False):
        return None
    from ..cache.directory import ClassCacheDir

    return ClassCacheDir()


def cache_key_of(compiled: CompiledGrammar, vocab: VocabTable) -> tuple[CacheKey, str]:
    """The cache key of the grammar as the user gave it (a schema or GBNF file's own text), and that text."""
    from ..cache.directory import compiled_key

    return compiled_key(compiled, vocab)


def classes_for(
    args: argparse.Namespace,
    compiled: CompiledGrammar,
    vocab: VocabTable,
    *,
    budget: int | None = None,
    workers: int = 1,
    progress=None,
    options: dict | None = None,
) -> ClassesFor:
    """The classes of ``compiled`` over ``vocab``: ``--classes`` (checked against both), else the
    cache directory's entry, else built now with the σ_in index and written to the directory.
    A ``budget`` other than the default skips the directory (its classes may differ); ``options``
    go to :func:`cfgzip_lab.build_classes` (the memory bound, which changes no classes)."""
    from ..classes.classing import DEFAULT_TOKEN_BUDGET

    started = time.perf_counter()
    if getattr(args, "classes", None):
        from ..cache.format import CacheError, load_classes

        try:
            classes = load_classes(args.classes, grammar_text=compiled.text, vocab=vocab)
        except CacheError as exc:
            raise UsageError(str(exc)) from None
        return ClassesFor(classes, "file", time.perf_counter() - started, path=str(args.classes))
    budget = DEFAULT_TOKEN_BUDGET if budget is None else budget
    disk = cache_dir_of(args) if budget == DEFAULT_TOKEN_BUDGET else None
    key, text = cache_key_of(compiled, vocab)
    if disk is not None:
        from ..cache.index import index_or_build

        contents = disk.load(key, vocab, input_text=text)
        if contents is not None and contents.metadata.get("grammar_sha256") == compiled.sha256:
            index, unavailable, built = index_or_build(contents, compiled.gnf, vocab)
            if built:  # an entry written without its index (the workbench's): complete it once
                disk.store(key, compiled, contents.classes, vocab, index)
            return ClassesFor(
                contents.classes,
                "cache",
                time.perf_counter() - started,
                index,
                unavailable,
                path=str(disk.path_for(key)),
            )
    from .._gc import gc_paused
    from ..native.index import build_index_or_reason
    from ..pipeline import build_classes

    with gc_paused():  # see cfgzip_lab._gc: the collector's passes over classing's nodes free nothing
        result = build_classes(compiled, vocab, budget=budget, progress=progress, workers=workers, **(options or {}))
        index, unavailable = build_index_or_reason(  # read off the classing result: c_like with Llama-3 ~0.3 s
            compiled.gnf, result.classes, vocab.token_bytes, rep_nodes=result.rep_nodes, displacer=result.displacer
        )
    seconds = time.perf_counter() - started
    path = None
    if disk is not None:
        written = disk.store(key, compiled, result.classes, vocab, index)
        path = str(written) if written is not None else None
    return ClassesFor(result.classes, "built", seconds, index, unavailable, result, path)


def native_engine_for(
    args: argparse.Namespace, compiled: CompiledGrammar, vocab: VocabTable, got: ClassesFor, engines=None
) -> NativeEngine:
    """The native engine on ``got``'s classes: the index that came with them, the ``--classes``
    file's when it has one that fits, else built now."""
    from ..native import build_native_engine

    if got.source == "file":
        from ..cache.index import native_engine_from_cache

        return native_engine_from_cache(args.classes, compiled, vocab, got.classes, xgrammar_engines=engines)
    engine = build_native_engine(
        compiled, vocab, got.classes, classing=got.classing, index=got.index, xgrammar_engines=engines
    )
    engine.index_source = {"cache": "cache", "built": "built"}[got.source] if got.index is not None else "built"
    return engine


def engine_inputs(args: argparse.Namespace) -> tuple:
    """Grammar, vocabulary, classes and documents of an engine command (``verify``, ``bench``):
    ``(path, compiled, vocab, classes, docs, source)``, ``source`` "docs" or "samples"; the classes
    come from ``--classes``, the cache directory or a classing now (kept in ``args.classes_for``).

    Raises
    ------
    UsageError
        For every bad input, XGrammar's refusal of the grammar included.
    """
    from ..bench import sample_docs
    from ..engine import GrammarCompileError, probe_xgrammar
    from ._common import classing_options, load_vocab, read_docs, read_grammar_arguments

    path, compiled = read_grammar_arguments(args)
    try:
        probe_xgrammar(compiled.text)
    except GrammarCompileError as exc:
        raise UsageError(f"XGrammar refuses grammar {path}: {exc}") from None
    vocab = load_vocab(args.tokenizer)
    docs = read_docs(args.docs)
    source = "docs"
    if not args.docs:
        docs, source = sample_docs(path), "samples"
    # --classes, the cache directory, or built (under --max-dag-nodes)
    args.classes_for = classes_for(args, compiled, vocab, options=classing_options(args))
    return path, compiled, vocab, args.classes_for.classes, docs, source


def args_native_engine(args: argparse.Namespace, compiled, vocab, classes, engines=None) -> NativeEngine:
    """The native engine of :func:`engine_inputs`' classes: the σ_in index that came with them (the
    --classes file's or the cache directory's) when it fits, else built now."""
    return native_engine_for(args, compiled, vocab, args.classes_for, engines)
