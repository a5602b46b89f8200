"""The σ_in index in the class cache: read it back, or build it when the cache has none.

Cache format 2 (:mod:`cfgzip_lab.cache.format`) stores the index beside the classes as
``native_*`` arrays and metadata. The index's trie symbols are GNF nonterminal ids, so it is
used only when its GNF digest matches the normal form it is used with; a format-1 cache, a
cache written without an index, or one whose digest no longer matches gets a freshly built
index (the representatives run through the displacer: K tokens, not the vocabulary).

From format 4 a cache also holds the grammar's GNF, so :func:`native_engine_from_cache` needs
neither the front end nor classing: one read of the file, the GNF and the index taken from
their arrays (the index's lists are built only if the Python walk runs; see
:class:`~.index.SigmaInIndex`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..native.engine import NativeEngine, build_native_engine
from ..native.index import NativeIndexError, SigmaInIndex, gnf_digest

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable
    from .format import CacheContents

__all__ = ["load_index", "index_from_contents", "index_or_build", "native_engine_from_cache"]

_ARRAYS = ("native_edges", "native_bits_indptr", "native_bits_classes", "native_unindexed")
_FAMILY_EDGES = "native_family_edges"
"""Stored beside them (index format 2); without it every counted-repetition edge was missing, the trie
failed its tree check and each load rebuilt the index and wrote the cache file again (a maxItems: 20
schema's warm start: 15.9 ms, ~3 ms of them the rebuild and ~2 ms the write)."""


def load_index(path, gnf, classes: TokenClasses) -> SigmaInIndex | None:
    """The index stored in the cache at ``path``, or None when it has none that fits ``gnf`` and ``classes``.

    Read through :func:`cfgzip_lab.cache.format.read_optional_arrays` (the format's one
    reader; no pickle); the classes themselves are loaded and checked by
    :func:`cfgzip_lab.cache.format.load_classes`.
    """
    from .format import CacheError, read_optional_arrays

    try:
        arrays, meta = read_optional_arrays(path, _ARRAYS + (_FAMILY_EDGES,))
        if arrays is None:  # an index without counted-repetition edges
            arrays, meta = read_optional_arrays(path, _ARRAYS)
    except CacheError:
        return None
    return _index_from(arrays, meta, gnf, classes)


def index_from_contents(contents: CacheContents, gnf, classes: TokenClasses | None = None) -> SigmaInIndex | None:
    """The index of a cache read by :func:`cfgzip_lab.cache.format.load_cache`, or None when it has
    none that fits ``gnf`` and ``classes`` (default: the cache's)."""
    arrays = {name: contents.arrays[name] for name in _ARRAYS if name in contents.arrays}
    if len(arrays) != len(_ARRAYS):
        return None
    if _FAMILY_EDGES in contents.arrays:
        arrays[_FAMILY_EDGES] = contents.arrays[_FAMILY_EDGES]
    return _index_from(arrays, contents.metadata, gnf, classes if classes is not None else contents.classes)


def index_or_build(contents: CacheContents, gnf, vocab: VocabTable) -> tuple[SigmaInIndex | None, str | None, bool]:
    """``(index, unavailable, built)`` for a cache read by ``load_cache``: its stored index when it
    fits ``gnf``, else one built now from the representatives (K tokens; ``built`` True, so the
    caller may write the entry again whole); ``unavailable`` says why there is none (too large
    to list, as stored or found now)."""
    from ..native.index import build_index_or_reason

    index = index_from_contents(contents, gnf)
    unavailable = contents.metadata.get("index_unavailable")
    if index is not None or unavailable:
        return index, unavailable, False
    return *build_index_or_reason(gnf, contents.classes, vocab.token_bytes), True


def _index_from(arrays, meta: dict, gnf, classes: TokenClasses) -> SigmaInIndex | None:
    if arrays is None:
        return None
    if meta.get("native_gnf_digest") != gnf_digest(gnf) or meta.get("native_num_classes") != classes.num_classes:
        return None
    try:
        return SigmaInIndex.from_arrays(arrays, meta)
    except (NativeIndexError, KeyError, ValueError):
        return None


def native_engine_from_cache(
    path,
    compiled: CompiledGrammar | None = None,
    vocab: VocabTable | None = None,
    classes: TokenClasses | None = None,
    **kw,
) -> NativeEngine:
    """A native engine from a class cache: its stored index when it fits, else one built now.

    ``compiled`` defaults to the grammar the cache stores (format 4: its GNF, no front end; a
    cache without one is a :class:`~cfgzip_lab.cache.format.CacheError`); given, the cache
    must have been built for its text. ``classes`` defaults to the cache's (checked against the
    grammar and ``vocab``, which is required). ``engine.index_source`` says where the index came
    from: ``"cache"`` or ``"built"``.
    """
    from .format import CacheError, load_cache

    if vocab is None:
        raise TypeError("native_engine_from_cache needs the vocabulary the cache was built for")
    contents = load_cache(path, grammar_text=compiled.text if compiled is not None else None, vocab=vocab)
    if compiled is None:
        if contents.grammar is None:
            raise CacheError(f"class cache {path} holds no grammar this version reads: give the compiled grammar")
        compiled = contents.grammar
    if classes is None:
        classes = contents.classes
    index = index_from_contents(contents, compiled.gnf, classes)
    engine = build_native_engine(compiled, vocab, classes, index=index, **kw)
    engine.index_source = "cache" if index is not None else "built"
    return engine
