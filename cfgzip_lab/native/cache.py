"""The σ_in index in the class cache: read it back, or build it when the cache has none.

Cache format 2 (:mod:`cfgzip_lab.classes.cache`) stores the index beside the classes as
``native_*`` arrays and metadata. The index's trie symbols are GNF nonterminal ids, so it is
used only when its GNF digest matches the grammar's normal form as compiled now; a format-1
cache, a cache written without an index, or one whose digest no longer matches gets a freshly
built index (the representatives run through the displacer: K tokens, not the vocabulary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .engine import NativeEngine, build_native_engine
from .index import NativeIndexError, SigmaInIndex, gnf_digest

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable

__all__ = ["load_index", "native_engine_from_cache"]

_ARRAYS = ("native_edges", "native_bits_indptr", "native_bits_classes", "native_unindexed")


def load_index(path, gnf, classes: TokenClasses) -> SigmaInIndex | None:
    """The index stored in the cache at ``path``, or None when it has none that fits ``gnf`` and ``classes``.

    Read through :func:`cfgzip_lab.classes.cache.read_optional_arrays` (the format's one
    reader; no pickle); the classes themselves are loaded and checked by
    :func:`cfgzip_lab.classes.cache.load_classes`.
    """
    from ..classes.cache import CacheError, read_optional_arrays

    try:
        arrays, meta = read_optional_arrays(path, _ARRAYS)
    except CacheError:
        return None
    if arrays is None:
        return None
    if meta.get("native_gnf_digest") != gnf_digest(gnf) or meta.get("native_num_classes") != classes.num_classes:
        return None
    try:
        return SigmaInIndex.from_arrays(arrays, meta)
    except (NativeIndexError, KeyError, ValueError):
        return None


def native_engine_from_cache(
    path, compiled: CompiledGrammar, vocab: VocabTable, classes: TokenClasses | None = None, **kw
) -> NativeEngine:
    """A native engine from a class cache: its stored index when it fits, else one built now.

    ``classes`` defaults to the cache's (loaded and checked against the grammar and vocabulary).
    ``engine.index_source`` says which: ``"cache"`` or ``"built"``.
    """
    from ..classes.cache import load_classes

    if classes is None:
        classes = load_classes(path, grammar_text=compiled.text, vocab=vocab)
    index = load_index(path, compiled.gnf, classes)
    engine = build_native_engine(compiled, vocab, classes, index=index, **kw)
    engine.index_source = "cache" if index is not None else "built"
    return engine
