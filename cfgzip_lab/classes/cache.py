"""Class caches: one ``.npz`` with ``class_of``, ``representatives``, ``class_kind`` and JSON metadata.

No pickle: a cache is data people share, and loading it must not run code (each ``.npy``
entry is read by hand: plain integer, float or bool dtypes only, never objects). Metadata
names the grammar (sha256 of its text) and the vocabulary (fingerprint) it was built for,
so a cache used with another grammar or tokenizer fails loudly instead of masking wrongly.

A damaged file is a :class:`CacheError` naming it, never a traceback and never classes
that load wrong. The zip layer catches most damage (CRC-32 of every entry, deflate
errors); format 3 adds what it cannot: ``arrays_sha256`` (every array's name, dtype,
shape and bytes) and ``metadata_sha256`` (the rest of the metadata as canonical JSON),
so arrays swapped, reshaped or rewritten with a fresh CRC, and edited metadata, are
refused too. ``tests/test_cache_fuzz.py`` truncates, flips, swaps and edits caches to
hold that line: flipping 3 random bytes of a JSON × Llama-3 cache 300 times ended in a
``zlib.error`` traceback 47 times before format 3, and in a CacheError or the intact
classes every time since. The checksums guard against damage, not against someone who
recomputes them: a cache holds no code to run either way.

This module is the only reader and writer of the format: the CLI, the workbench and the
native engine's index loader go through :func:`save_classes`, :func:`load_classes`,
:func:`read_metadata` and :func:`read_optional_arrays`. What makes classes valid, or fit a grammar
and a vocabulary, is TokenClasses' own business (``validate``, ``check_fits``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import CfgzipError
from .classing import ClassesError, TokenClasses, grammar_sha256

FORMAT_VERSION = 3
"""2 adds the native engine's σ_in index (arrays ``native_*``, metadata ``native_*``), optional;
3 adds ``arrays_sha256`` and ``metadata_sha256`` (required from 3 on). Version-1 and -2 caches
load unchanged (without an index, the native engine builds one on load)."""

_REQUIRED = ("class_of", "representatives", "class_kind", "metadata")
_DIGEST_KEYS = ("arrays_sha256", "metadata_sha256")


class CacheError(CfgzipError, ValueError):
    """A class cache that cannot be used; the message says what is wrong."""


def _package_version() -> str:
    from .. import __version__

    return __version__


def save_classes(
    classes: TokenClasses, path, *, grammar_text: str | None = None, vocab=None, native_index=None
) -> Path:
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
    arrays = {
        "class_of": np.ascontiguousarray(classes.class_of, dtype=np.int32),
        "representatives": np.ascontiguousarray(classes.representatives, dtype=np.int32),
        "class_kind": np.ascontiguousarray(classes.class_kind, dtype=np.uint8),
        **{name: np.ascontiguousarray(array) for name, array in extra.items()},
    }
    for key in _DIGEST_KEYS:  # a loaded cache's digests describe another file
        meta.pop(key, None)
    meta["arrays_sha256"] = _arrays_sha256(arrays)
    meta["metadata_sha256"] = _metadata_sha256(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez_compressed(fh, metadata=np.frombuffer(_canonical(meta), dtype=np.uint8), **arrays)
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
    stored = TokenClasses(arrays["class_of"], arrays["representatives"], arrays["class_kind"], meta)
    try:
        stored.validate()  # before the casts below, which would hide a float or out-of-range array
    except ClassesError as exc:
        raise CacheError(f"class cache {path} is inconsistent: {exc}") from None
    classes = TokenClasses(
        class_of=stored.class_of.astype(np.int32),
        representatives=stored.representatives.astype(np.int32),
        class_kind=stored.class_kind.astype(np.uint8),
        metadata=meta,
    )
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


def _read(path: Path, optional: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """The required arrays (plus ``"optional"``: the ``optional`` ones, or None when one is
    missing) and the metadata of a cache file, checked against its digests; or a
    :class:`CacheError` naming the file and what is wrong with it."""
    if not path.is_file():
        raise CacheError(f"class cache {path} does not exist")
    if not zipfile.is_zipfile(path):
        # np.load would try the file as a pickle and suggest allow_pickle: never do that.
        raise CacheError(f"class cache {path} is truncated or not a cfgzip_lab cache (not an .npz archive)")
    try:
        arrays = _read_entries(path)
    except _Damaged as exc:
        raise CacheError(f"class cache {path} is truncated or corrupt ({exc})") from None
    missing = [name for name in _REQUIRED if name not in arrays]
    if missing:
        raise CacheError(f"class cache {path} is missing the array {missing[0]!r}")
    try:
        meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"class cache {path} has unreadable metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise CacheError(f"class cache {path} has unreadable metadata (a JSON {type(meta).__name__}, not an object)")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise CacheError(
            f"class cache {path} has format version {version}, this cfgzip_lab reads up to {FORMAT_VERSION}: "
            "upgrade cfgzip_lab or rebuild the cache"
        )
    if version >= 3:
        _check_digests(path, arrays, meta)
    result: dict = {name: arrays[name] for name in _REQUIRED}
    result["optional"] = {name: arrays[name] for name in optional} if all(n in arrays for n in optional) else None
    return result, meta


def _check_digests(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    said = [meta.get(key) for key in _DIGEST_KEYS]
    if not all(isinstance(s, str) for s in said):
        raise CacheError(f"class cache {path} is inconsistent: format {meta['format_version']} needs {_DIGEST_KEYS}")
    if said[1] != _metadata_sha256(meta):
        raise CacheError(
            f"class cache {path} is inconsistent: its metadata does not match metadata_sha256 (damaged or edited)"
        )
    if said[0] != _arrays_sha256({k: v for k, v in arrays.items() if k != "metadata"}):
        raise CacheError(
            f"class cache {path} is inconsistent: its arrays do not match arrays_sha256 (damaged or edited)"
        )


class _Damaged(Exception):
    """A zip or ``.npy`` entry that cannot be read; the message says which and why."""


# What zipfile, zlib and numpy's header parser raise on damaged bytes (found by
# tests/test_cache_fuzz.py); anything else is a bug and keeps its traceback.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    KeyError,
    IndexError,
    struct.error,
    UnicodeDecodeError,
    NotImplementedError,
    RuntimeError,
    OverflowError,
    SyntaxError,
    TypeError,
)


def _read_entries(path: Path) -> dict[str, np.ndarray]:
    """Every ``NAME.npy`` entry of the archive as an array, read by hand: the header's dtype
    must be a plain number type, its shape must account for exactly the entry's size, and
    zipfile checks each entry's CRC-32 as it reaches the end."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy") or info.filename[:-4] in arrays:
                    raise _Damaged(f"unexpected entry {info.filename!r}")
                with archive.open(info) as fh:
                    arrays[info.filename[:-4]] = _read_npy(fh, info)
    except _Damaged:
        raise
    except _ZIP_ERRORS as exc:
        raise _Damaged(f"{type(exc).__name__}: {exc}") from None
    return arrays


def _read_npy(fh, info: zipfile.ZipInfo) -> np.ndarray:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise _Damaged(f"{info.filename}: .npy version {version}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise _Damaged(f"{info.filename}: dtype {dtype} is not a plain number type")
    count = math.prod(shape)
    if fh.tell() + count * dtype.itemsize != info.file_size:
        raise _Damaged(f"{info.filename}: the header's shape {shape} does not fit the entry's {info.file_size} bytes")
    data = fh.read()  # raises BadZipFile on a CRC mismatch
    if len(data) != count * dtype.itemsize:
        raise _Damaged(f"{info.filename}: {len(data)} bytes where {count * dtype.itemsize} were expected")
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")


def _canonical(meta: dict) -> bytes:
    return json.dumps(meta, sort_keys=True).encode("utf-8")


def _metadata_sha256(meta: dict) -> str:
    """sha256 of the metadata without its own digest, as canonical JSON (sorted keys)."""
    return hashlib.sha256(_canonical({k: v for k, v in meta.items() if k != "metadata_sha256"})).hexdigest()


def _arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over every array, by name: name, dtype, shape and C-order bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()
