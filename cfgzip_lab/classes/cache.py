"""Class caches: one ``.npz`` with ``class_of``, ``representatives``, ``class_kind`` and JSON metadata.

No pickle: a cache is data people share, and loading it must not run code
(``np.load(..., allow_pickle=False)``). Metadata names the grammar (sha256 of its
text) and the vocabulary (fingerprint) it was built for, so a cache used with
another grammar or tokenizer fails loudly instead of masking wrongly.

This module is the only reader and writer of the format: the CLI, the workbench and the
native engine's index loader go through :func:`save_classes`, :func:`load_classes`,
:func:`read_metadata` and :func:`read_optional_arrays`. What makes classes valid, or fit a grammar
and a vocabulary, is TokenClasses' own business (``validate``, ``check_fits``).
"""
from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import numpy as np

from ..errors import CfgzipError
from .classing import ClassesError, TokenClasses, grammar_sha256

FORMAT_VERSION = 2
"""2 adds the native engine's σ_in index (arrays ``native_*``, metadata ``native_*``), optional;
version-1 caches load unchanged (without an index, the native engine builds one on load)."""


class CacheError(CfgzipError, ValueError):
    """A class cache that cannot be used; the message says what is wrong."""


def _package_version() -> str:
    from .. import __version__

    return __version__


def save_classes(classes: TokenClasses, path, *, grammar_text: str | None = None, vocab=None, native_index=None) -> Path:
    """Write ``classes`` to ``path`` (``.npz`` appended if missing).

    ``grammar_text`` and ``vocab`` (a VocabTable) fill in the fingerprints when the
    metadata does not hold them yet. ``native_index`` (a :class:`cfgzip_lab.native.SigmaInIndex`)
    is stored beside the classes, read back by :func:`cfgzip_lab.native.cache.load_index`.
    Classes that are no partition of ``vocab``'s ids, or whose metadata names another grammar
    or vocabulary than the ones given, are refused with :class:`CacheError`: a cache must not lie.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
    # Counts are rewritten below from the arrays; stale ones must not fail the check.
    counted = {k: v for k, v in classes.metadata.items() if k not in ("vocab_size", "classes")}
    try:
        dataclasses.replace(classes, metadata=counted).check_fits(grammar_text, vocab)
    except ClassesError as exc:
        raise CacheError(f"class cache {path} not written: {exc}") from None
    meta = dict(classes.metadata)
    meta["format_version"] = FORMAT_VERSION
    meta["package_version"] = _package_version()
    if grammar_text is not None:
        meta["grammar_sha256"] = grammar_sha256(grammar_text)
    if vocab is not None:
        meta["vocab_fingerprint"] = vocab.fingerprint
        meta.setdefault("tokenizer", vocab.name)
    meta["vocab_size"] = classes.vocab_size
    meta["classes"] = classes.num_classes
    extra = {}
    for key in [k for k in meta if k.startswith("native_")]:  # a loaded cache's index is not carried over
        del meta[key]
    if native_index is not None:
        extra = native_index.to_arrays()
        meta.update(native_index.metadata())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez_compressed(
            fh,
            class_of=classes.class_of.astype(np.int32),
            representatives=classes.representatives.astype(np.int32),
            class_kind=classes.class_kind.astype(np.uint8),
            metadata=np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8),
            **extra,
        )
    return path


def load_classes(path, *, grammar_text: str | None = None, vocab=None) -> TokenClasses:
    """Read a cache; with ``grammar_text``/``vocab`` given, refuse one built for others.

    Raises
    ------
    CacheError
        Missing, truncated or corrupt file; a newer format version; or a
        grammar / vocabulary that differs from the one the cache was built for.
    """
    path = Path(path)
    arrays, meta = _read(path)
    classes = TokenClasses(
        class_of=arrays["class_of"].astype(np.int32),
        representatives=arrays["representatives"].astype(np.int32),
        class_kind=arrays["class_kind"].astype(np.uint8),
        metadata=meta,
    )
    try:
        classes.validate()
    except ClassesError as exc:
        raise CacheError(f"class cache {path} is inconsistent: {exc}") from None
    try:
        classes.check_fits(grammar_text, vocab, strict=True)
    except ClassesError as exc:
        raise CacheError(f"class cache {path}: {exc}") from None
    return classes


def read_metadata(path) -> dict:
    """The JSON metadata of a cache (tokenizer, fingerprints, counts) without building the
    classes; raises :class:`CacheError` as :func:`load_classes` does."""
    return _read(Path(path))[1]


def read_optional_arrays(path, names) -> tuple[dict[str, np.ndarray] | None, dict]:
    """The optional arrays ``names`` of a cache (the native index's ``native_*``; None when
    the cache lacks one) and its metadata; raises :class:`CacheError` for a broken file."""
    arrays, meta = _read(Path(path), optional=tuple(names))
    return arrays["optional"], meta


_REQUIRED = ("class_of", "representatives", "class_kind", "metadata")


def _read(path: Path, optional: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """The required arrays (plus ``"optional"``: the ``optional`` ones, or None when one is
    missing) and the metadata of a cache file, or a :class:`CacheError` naming it."""
    if not path.is_file():
        raise CacheError(f"class cache {path} does not exist")
    if not zipfile.is_zipfile(path):
        # np.load would try the file as a pickle and suggest allow_pickle: never do that.
        raise CacheError(f"class cache {path} is truncated or not a cfgzip_lab cache (not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in _REQUIRED}
            has_optional = bool(optional) and all(k in data.files for k in optional)
            arrays["optional"] = {k: data[k] for k in optional} if has_optional else None
    except KeyError as exc:
        raise CacheError(f"class cache {path} is missing the array {exc.args[0]!r}") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CacheError(f"class cache {path} is truncated or not a cfgzip_lab cache ({exc})") from None
    try:
        meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"class cache {path} has unreadable metadata ({exc})") from None
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CacheError(
            f"class cache {path} has format version {version}, this cfgzip_lab reads up to {FORMAT_VERSION}: "
            "upgrade cfgzip_lab or rebuild the cache"
        )
    return arrays, meta
