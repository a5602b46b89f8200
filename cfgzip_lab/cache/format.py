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

Format 4 makes a cache all a fresh process needs, so loading rebuilds nothing: beside the
classes (and the native engine's σ_in index, format 2) it stores the grammar's EBNF text
(``grammar_ebnf``) and its normal form (``gnf_*`` arrays and the JSON document ``gnf_doc``, laid
out by :mod:`cfgzip_lab.grammar.gnf_arrays`, which has its own layout version), and says what
input they came from (``input_kind``, ``input_sha256``: a JSON Schema's or GBNF file's own text).
:func:`load_cache` reads everything in one pass and returns the GNF as a
:class:`cfgzip_lab.pipeline.LoadedGrammar`. Every part beyond the classes is optional: a cache
without it (older formats, or written without) loads its classes, and the rest is rebuilt from
the grammar text; a GNF stored in another layout version is rebuilt too, never misread.

Files are written to a temporary name beside the target and renamed over it (atomic on POSIX),
so a reader never sees half a file, whichever of two writers finishes last.

This module is the only reader and writer of the format: the CLI, the workbench, the cache
directory (:mod:`cfgzip_lab.cache.directory`) and the native engine's index loader go through
:func:`save_classes`, :func:`load_classes`, :func:`load_cache`, :func:`read_metadata` and
:func:`read_optional_arrays`. What makes classes valid, or fit a grammar and a vocabulary, is
TokenClasses' own business (``validate``, ``check_fits``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
import secrets
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import xgrammar_version
from .._version import __version__
from ..classes.classing import ClassesError, TokenClasses, grammar_sha256
from ..errors import CfgzipError

if TYPE_CHECKING:
    from ..pipeline import CompiledGrammar, LoadedGrammar

FORMAT_VERSION = 4
"""2 adds the native engine's σ_in index (arrays ``native_*``, metadata ``native_*``), optional;
3 adds ``arrays_sha256`` and ``metadata_sha256`` (required from 3 on); 4 adds the grammar text
and its GNF (``grammar_ebnf``, ``gnf_*``, ``gnf_doc``; metadata ``gnf_format``, ``input_kind``,
``input_sha256``), optional. Version-1 to -3 caches load unchanged (what they lack is rebuilt:
the GNF from the text, the index from the representatives)."""

_REQUIRED = ("class_of", "representatives", "class_kind", "metadata")
_DIGEST_KEYS = ("arrays_sha256", "metadata_sha256")
_GRAMMAR_KEYS = ("gnf_format", "input_kind", "input_sha256")
"""Metadata of the grammar section: dropped when a loaded cache is written again without it."""


class CacheError(CfgzipError, ValueError):
    """A class cache that cannot be used; the message says what is wrong."""


def _package_version() -> str:
    return __version__


def save_classes(
    classes: TokenClasses,
    path,
    *,
    grammar_text: str | None = None,
    vocab=None,
    native_index=None,
    compiled: CompiledGrammar | None = None,
    compress: bool = True,
) -> Path:
    """Write ``classes`` to ``path`` (``.npz`` appended if missing), atomically.

    ``grammar_text`` and ``vocab`` (a VocabTable) fill in the fingerprints when the
    metadata does not hold them yet. ``native_index`` (a :class:`cfgzip_lab.native.SigmaInIndex`)
    is stored beside the classes, read back by :func:`cfgzip_lab.cache.index.load_index`.
    ``compiled`` (the :class:`cfgzip_lab.pipeline.CompiledGrammar` the classes were built for;
    its text is the grammar text) stores the EBNF text and the GNF, so :func:`load_cache`
    needs no front end. Classes that are no partition of ``vocab``'s ids, or whose metadata
    names another grammar or vocabulary than the ones given, are refused with
    :class:`CacheError`: a cache must not lie. ``compress=False`` stores the arrays as they are
    (the cache directory's files: 3-4x larger, and a load skips inflating them, c_like with
    Llama-3 ~10 ms of a ~50 ms load); either reads back the same.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
    if compiled is not None:
        if grammar_text is not None and grammar_text != compiled.text:
            raise CacheError(f"class cache {path} not written: grammar_text is not the compiled grammar's text")
        grammar_text = compiled.text
    # Counts are rewritten below from the arrays; stale ones must not fail the check.
    counted = {k: v for k, v in classes.metadata.items() if k not in ("vocab_size", "classes")}
    try:
        dataclasses.replace(classes, metadata=counted).check_fits(grammar_text, vocab)
    except ClassesError as exc:
        raise CacheError(f"class cache {path} not written: {exc}") from None
    meta = dict(classes.metadata)
    meta["format_version"] = FORMAT_VERSION
    meta["package_version"] = _package_version()
    meta["xgrammar_version"] = xgrammar_version.installed()
    if grammar_text is not None:
        meta["grammar_sha256"] = grammar_sha256(grammar_text)
    if vocab is not None:
        meta["vocab_fingerprint"] = vocab.fingerprint
        meta.setdefault("tokenizer", vocab.name)
    meta["vocab_size"] = classes.vocab_size
    meta["classes"] = classes.num_classes
    extra = {}
    for key in [k for k in meta if k.startswith("native_") or k in _GRAMMAR_KEYS]:
        del meta[key]  # a loaded cache's index and grammar are not carried over
    if native_index is not None:
        extra = native_index.to_arrays()
        meta.update(native_index.metadata())
    if compiled is not None:
        extra.update(_grammar_arrays(compiled))
        meta.update(_grammar_metadata(compiled))
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
    # A temporary name in the same folder, renamed over the target: readers see the old file or
    # the new one, never a part, and two writers of one path both leave a whole file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("wb") as fh:
            (np.savez_compressed if compress else np.savez)(
                fh, metadata=np.frombuffer(_canonical(meta), dtype=np.uint8), **arrays
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _grammar_arrays(compiled: CompiledGrammar) -> dict[str, np.ndarray]:
    from ..grammar.gnf_arrays import gnf_to_arrays

    arrays, doc = gnf_to_arrays(compiled.gnf)
    arrays["gnf_doc"] = np.frombuffer(json.dumps(doc).encode("utf-8"), dtype=np.uint8)
    arrays["grammar_ebnf"] = np.frombuffer(compiled.text.encode("utf-8"), dtype=np.uint8)
    return arrays


def _grammar_metadata(compiled: CompiledGrammar) -> dict:
    from ..grammar.gnf_arrays import GNF_FORMAT

    source = compiled.grammar_source
    return {
        "gnf_format": GNF_FORMAT,
        "input_kind": source.kind if source is not None else "ebnf",
        "input_sha256": compiled.input_sha256,
    }


@dataclass
class CacheContents:
    """Everything one cache file holds, read and checked in one pass (:func:`load_cache`).

    ``grammar`` is the stored grammar text with its GNF (a :class:`~cfgzip_lab.pipeline.LoadedGrammar`),
    None when the cache holds none in a layout this version reads (the GNF must then be compiled
    from the text); ``arrays`` holds every array beyond the classes (the native index's
    ``native_*`` among them, read by :func:`cfgzip_lab.cache.index.index_from_contents`).
    """

    path: Path
    classes: TokenClasses
    metadata: dict
    arrays: dict[str, np.ndarray]
    grammar: LoadedGrammar | None

    @property
    def input_sha256(self) -> str | None:
        return self.metadata.get("input_sha256")

    @property
    def input_kind(self) -> str | None:
        return self.metadata.get("input_kind")


def load_cache(path, *, grammar_text: str | None = None, vocab=None, input_text: str | None = None) -> CacheContents:
    """Read a whole cache: the classes (checked as :func:`load_classes` checks them), the stored
    grammar text and GNF when present, and every other array.

    ``input_text`` (the schema or GBNF text the cache was built from, when known) becomes the
    loaded grammar's ``grammar_source.text``; a cache that says it was built from another input
    is refused.

    Raises
    ------
    CacheError
        As :func:`load_classes`; also for a stored grammar text the classes were not built for,
        an ``input_text`` other than the cache's input, and a stored GNF that does not read back.
    """
    path = Path(path)
    arrays, meta = _read(path, everything=True)
    classes = _classes_of(path, arrays, meta, grammar_text, vocab)
    rest = arrays["rest"]
    if input_text is not None and meta.get("input_sha256") not in (None, grammar_sha256(input_text)):
        raise CacheError(f"class cache {path} was built from another grammar input (input_sha256 differs)")
    grammar = None
    if "grammar_ebnf" in rest:
        try:
            text = rest["grammar_ebnf"].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            raise CacheError(f"class cache {path} has an unreadable grammar text") from None
        if meta.get("grammar_sha256") != grammar_sha256(text):
            raise CacheError(f"class cache {path} is inconsistent: its classes were not built for its grammar text")
        grammar = _loaded_grammar(path, text, rest, meta, input_text)
    return CacheContents(path, classes, meta, rest, grammar)


def _loaded_grammar(path: Path, text: str, arrays: dict, meta: dict, input_text: str | None) -> LoadedGrammar | None:
    from ..grammar.gnf_arrays import GNF_FORMAT, GNFArraysError, gnf_from_arrays
    from ..grammar.sources import GrammarSource
    from ..pipeline import LoadedGrammar

    if meta.get("gnf_format") != GNF_FORMAT or "gnf_doc" not in arrays:
        return None  # another layout (or none): the caller compiles the text
    try:
        doc = json.loads(arrays["gnf_doc"].tobytes().decode("utf-8"))
        gnf = gnf_from_arrays(arrays, doc)
    except (UnicodeDecodeError, json.JSONDecodeError, GNFArraysError) as exc:
        raise CacheError(f"class cache {path} has a GNF that does not read back ({exc})") from None
    kind = meta.get("input_kind") if isinstance(meta.get("input_kind"), str) else "ebnf"
    source = GrammarSource(text, kind, [], input_text if input_text is not None else text, None)
    return LoadedGrammar(text, gnf, source)


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
    return _classes_of(path, arrays, meta, grammar_text, vocab)


def _classes_of(path: Path, arrays: dict, meta: dict, grammar_text: str | None, vocab) -> TokenClasses:
    """The checked classes of a read cache (see :func:`load_classes`)."""
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


def _read(path: Path, optional: tuple[str, ...] = (), *, everything: bool = False) -> tuple[dict, dict]:
    """The required arrays (plus ``"optional"``: the ``optional`` ones, or None when one is
    missing; with ``everything``, ``"rest"``: every other array) and the metadata of a cache
    file, checked against its digests; or a :class:`CacheError` naming the file and what is
    wrong with it."""
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
    if everything:
        result["rest"] = {name: a for name, a in arrays.items() if name not in _REQUIRED}
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


_NPY_HEADER = re.compile(
    rb"\{'descr': '([<>|=]?[biuf][1248])', 'fortran_order': (False|True), 'shape': \(((?:[0-9]+, )*[0-9]+,?)?\), \} *\n"
)
"""The header numpy writes (``np.lib.format.write_array``), read without ``ast.literal_eval``: ~25 µs an
entry less, 0.5 ms of a JSON Schema's ~2 ms warm start; any other header goes to numpy's own parser."""
_DTYPES: dict[bytes, np.dtype] = {}


def _npy_header(fh, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` entry open in ``fh``, read up to its data."""
    magic = fh.read(8)
    if len(magic) == 8 and magic[:6] == b"\x93NUMPY" and magic[6] in (1, 2) and magic[7] == 0:
        size_bytes = 2 if magic[6] == 1 else 4
        raw = fh.read(size_bytes)
        if len(raw) == size_bytes:
            header = fh.read(int.from_bytes(raw, "little"))
            got = _NPY_HEADER.fullmatch(header)
            if got is not None:
                descr, fortran, dims = got.groups()
                dtype = _DTYPES.get(descr)
                if dtype is None:
                    dtype = _DTYPES.setdefault(descr, np.dtype(descr.decode("ascii")))
                shape = tuple(int(d) for d in dims.split(b",") if d.strip()) if dims else ()
                return shape, fortran == b"True", dtype
            rest = io.BytesIO(magic + raw + header)  # numpy's parser decides (and names what is wrong)
        else:
            rest = io.BytesIO(magic + raw)
    else:
        rest = io.BytesIO(magic)
    version = np.lib.format.read_magic(rest)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(rest)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(rest)
    raise _Damaged(f"{info.filename}: .npy version {version}")


def _read_npy(fh, info: zipfile.ZipInfo) -> np.ndarray:
    shape, fortran, dtype = _npy_header(fh, info)
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
