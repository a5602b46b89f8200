"""Class caches: one ``.npz`` with ``class_of``, ``representatives``, ``class_kind`` and JSON metadata.

No pickle: a cache is data people share, and loading it must not run code
(``np.load(..., allow_pickle=False)``). Metadata names the grammar (sha256 of its
text) and the vocabulary (fingerprint) it was built for, so a cache used with
another grammar or tokenizer fails loudly instead of masking wrongly.
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

from ..errors import CfgzipError

FORMAT_VERSION = 2
"""2 adds the native engine's σ_in index (arrays ``native_*``, metadata ``native_*``), optional;
version-1 caches load unchanged (without an index, the native engine builds one on load)."""


class CacheError(CfgzipError, ValueError):
    """A class cache that cannot be used; the message says what is wrong."""


def grammar_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _package_version() -> str:
    from .. import __version__

    return __version__


def save_classes(classes, path, *, grammar_text: str | None = None, vocab=None, native_index=None) -> Path:
    """Write ``classes`` to ``path`` (``.npz`` appended if missing).

    ``grammar_text`` and ``vocab`` (a VocabTable) fill in the fingerprints when the
    metadata does not hold them yet. ``native_index`` (a :class:`cfgzip_lab.native.SigmaInIndex`)
    is stored beside the classes, read back by :func:`cfgzip_lab.native.cache.load_index`.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
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


def load_classes(path, *, grammar_text: str | None = None, vocab=None):
    """Read a cache; with ``grammar_text``/``vocab`` given, refuse one built for others.

    Raises
    ------
    CacheError
        Missing, truncated or corrupt file; a newer format version; or a
        grammar / vocabulary that differs from the one the cache was built for.
    """
    from .classing import TokenClasses

    path = Path(path)
    if not path.is_file():
        raise CacheError(f"class cache {path} does not exist")
    if not zipfile.is_zipfile(path):
        # np.load would try the file as a pickle and suggest allow_pickle: never do that.
        raise CacheError(f"class cache {path} is truncated or not a cfgzip_lab cache (not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ("class_of", "representatives", "class_kind", "metadata")}
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
    classes = TokenClasses(
        class_of=arrays["class_of"].astype(np.int32),
        representatives=arrays["representatives"].astype(np.int32),
        class_kind=arrays["class_kind"].astype(np.uint8),
        metadata=meta,
    )
    _check_consistent(classes, path)
    if grammar_text is not None and meta.get("grammar_sha256") != grammar_sha256(grammar_text):
        raise CacheError(
            f"class cache {path} was built for another grammar "
            f"(cache grammar sha256 {str(meta.get('grammar_sha256'))[:12]}…, this grammar {grammar_sha256(grammar_text)[:12]}…)"
        )
    if vocab is not None:
        if meta.get("vocab_fingerprint") != vocab.fingerprint:
            raise CacheError(
                f"class cache {path} was built for another vocabulary "
                f"(cache: {meta.get('tokenizer', '?')} fingerprint {str(meta.get('vocab_fingerprint'))[:12]}…, "
                f"given: {vocab.name} fingerprint {vocab.fingerprint[:12]}…)"
            )
    return classes


def _check_consistent(classes, path) -> None:
    k = classes.num_classes
    v = classes.vocab_size
    if classes.class_kind.shape != (k,):
        raise CacheError(f"class cache {path} is inconsistent: {k} representatives but {classes.class_kind.shape[0]} class kinds")
    if v and (classes.class_of.min() < 0 or classes.class_of.max() >= k):
        raise CacheError(f"class cache {path} is inconsistent: class ids outside 0..{k - 1}")
    if k and (classes.representatives.min() < 0 or classes.representatives.max() >= v):
        raise CacheError(f"class cache {path} is inconsistent: representatives outside the vocabulary")
    if k and not np.array_equal(classes.class_of[classes.representatives], np.arange(k)):
        raise CacheError(f"class cache {path} is inconsistent: a representative is not in its own class")
    if meta_v := classes.metadata.get("vocab_size"):
        if meta_v != v:
            raise CacheError(f"class cache {path} is inconsistent: metadata says {meta_v} tokens, arrays hold {v}")
