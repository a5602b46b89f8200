"""The default cache directory: each grammar (or JSON Schema, or GBNF file) classed once per machine.

One class cache file (:mod:`cfgzip_lab.cache.format`, format 4: classes, σ_in index, grammar
text and GNF) per *key*: the input's kind and sha256 × the vocabulary fingerprint × the code
version (package version and a digest of the modules that compute what a cache holds, so a
checkout with changed classing never reads caches of the old code). The API
(:class:`cfgzip_lab.cache.grammars.GrammarCache`), the CLI and the workbench read and write it.

Where: ``$CFGZIP_CACHE_DIR`` when set, else ``classes/`` under the folder the tokenizer caches
use (``$CFGZIP_CACHE``, default ``~/.cache/cfgzip_lab``). Bounded: after each write the least
recently used files (by modification time; a read touches its file) are removed until the
folder holds at most ``max_bytes`` (default 1 GiB, ``$CFGZIP_CACHE_MAX_BYTES``). Safe with
several processes: a file is written under a temporary name and renamed into place, so a
reader sees a whole file or none; two writers of one key both leave a whole file. A file that
fails its checks (damage, or a cache another version wrote under the same name) is reported
once per process as a :class:`CacheWarning`, removed and rebuilt by the caller; never an error.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from .. import xgrammar_version
from .._version import __version__

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..native.index import SigmaInIndex
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable
    from .format import CacheContents

__all__ = [
    "CacheKey",
    "CacheWarning",
    "ClassCacheDir",
    "DEFAULT_MAX_BYTES",
    "cached_classes_for",
    "code_version",
    "compiled_key",
    "default_cache_dir",
    "grammar_key",
    "store_classes_for",
]

ENV_DIR = "CFGZIP_CACHE_DIR"
ENV_MAX_BYTES = "CFGZIP_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
"""1 GiB: about 500 C-like grammars with Llama-3 (a file is 0.05-2 MB)."""

# The modules whose code decides what a cache file holds (the GNF, the classes, the index).
_CODE = ("grammar", "classes", "native", "cache/format.py", "cache/index.py", "pipeline.py", "vocab.py")


class CacheWarning(UserWarning):
    """A cache file that could not be used (it is removed and rebuilt)."""


def default_cache_dir() -> Path:
    """``$CFGZIP_CACHE_DIR``, else ``classes/`` beside the tokenizer caches (``$CFGZIP_CACHE`` or
    ``~/.cache/cfgzip_lab``)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    from ..vocab_sources import vocab_cache_dir

    return vocab_cache_dir() / "classes"


def _default_max_bytes() -> int:
    env = os.environ.get(ENV_MAX_BYTES)
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            warnings.warn(
                f"{ENV_MAX_BYTES}={env!r} is not a number of bytes; using {DEFAULT_MAX_BYTES}",
                CacheWarning,
                stacklevel=3,
            )
    return DEFAULT_MAX_BYTES


@cache
def code_version() -> str:
    """The package version, a digest of the modules that compute a cache's contents (about
    1 ms once per process) and the installed XGrammar's version: caches written by other code, or
    under another XGrammar release (which may enforce a grammar differently), are never read."""
    root = Path(__file__).resolve().parents[1]  # the package
    h = hashlib.sha256()
    for name in _CODE:
        part = root / name
        files = sorted(part.rglob("*.py")) if part.is_dir() else [part]
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(f.read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}+xgrammar{xgrammar_version.installed()}"


@dataclass(frozen=True)
class CacheKey:
    """What a cache file is for: the input (its kind and sha256), the vocabulary, the code."""

    kind: str
    input_sha256: str
    vocab_fingerprint: str
    version: str

    @cached_property  # (a frozen dataclass's: written once into its __dict__)
    def digest(self) -> str:
        text = "\0".join((self.kind, self.input_sha256, self.vocab_fingerprint, self.version))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def filename(self) -> str:
        """Readable at a glance: kind, input and vocabulary prefixes, then the full key's digest."""
        return f"{self.kind}-{self.input_sha256[:12]}-{self.vocab_fingerprint[:8]}-{self.digest[:16]}.npz"


def grammar_key(text: str, kind: str, vocab: VocabTable) -> CacheKey:
    """The key of grammar input ``text`` of ``kind`` (``ebnf``, ``gbnf``, ``json_schema``) with ``vocab``."""
    from ..classes.classing import grammar_sha256

    return CacheKey(kind, grammar_sha256(text), vocab.fingerprint, code_version())


def compiled_key(compiled: CompiledGrammar, vocab: VocabTable) -> tuple[CacheKey, str]:
    """The key of a compiled grammar as the user gave it (a schema's or GBNF file's own text, else
    the EBNF), and that text."""
    source = compiled.grammar_source
    text = source.text if source is not None and source.text else compiled.text
    kind = source.kind if source is not None else "ebnf"
    return grammar_key(text, kind, vocab), text


def cached_classes_for(
    compiled: CompiledGrammar, vocab: VocabTable, folder: ClassCacheDir | None = None
) -> TokenClasses | None:
    """The cache directory's classes for ``compiled`` and ``vocab``, or None (for a workbench or a
    script that holds its own compiled grammar)."""
    folder = folder or ClassCacheDir()
    key, text = compiled_key(compiled, vocab)
    contents = folder.load(key, vocab, input_text=text)
    if contents is None or contents.metadata.get("grammar_sha256") != compiled.sha256:
        return None
    return contents.classes


def store_classes_for(
    compiled: CompiledGrammar,
    vocab: VocabTable,
    classes: TokenClasses,
    native_index: SigmaInIndex | None = None,
    folder: ClassCacheDir | None = None,
) -> Path | None:
    """Write ``classes`` (and the index, if built) as the cache directory's entry for ``compiled``;
    an entry without an index gets one the first time a native engine is read from it."""
    folder = folder or ClassCacheDir()
    key, _ = compiled_key(compiled, vocab)
    return folder.store(key, compiled, classes, vocab, native_index)


_reported: set[str] = set()
_reported_lock = threading.Lock()


def _report_once(path: Path, message: str) -> None:
    with _reported_lock:
        if str(path) in _reported:
            return
        _reported.add(str(path))
    warnings.warn(message, CacheWarning, stacklevel=4)


class ClassCacheDir:
    """One cache directory: :meth:`load` and :meth:`store` by :class:`CacheKey`, bounded in size.

    Parameters
    ----------
    root : path, optional
        Default :func:`default_cache_dir`.
    max_bytes : int, optional
        Bound on the files' total size (default ``$CFGZIP_CACHE_MAX_BYTES`` or 1 GiB); the
        least recently used go first. 0 keeps nothing but the file just written.
    """

    def __init__(self, root: str | Path | None = None, *, max_bytes: int | None = None) -> None:
        self._root = Path(root).expanduser() if root is not None else None
        self.max_bytes = _default_max_bytes() if max_bytes is None else int(max_bytes)
        self.stats = {"hits": 0, "misses": 0, "writes": 0, "evicted": 0, "corrupt": 0}

    def __repr__(self) -> str:
        return f"ClassCacheDir({str(self.root)!r}, max_bytes={self.max_bytes})"

    @property
    def root(self) -> Path:
        """The folder; without a ``root`` given, :func:`default_cache_dir` as it is now (so a
        process-wide cache follows ``$CFGZIP_CACHE_DIR``)."""
        return self._root if self._root is not None else default_cache_dir()

    def path_for(self, key: CacheKey) -> Path:
        return self.root / key.filename

    def load(self, key: CacheKey, vocab: VocabTable, *, input_text: str | None = None) -> CacheContents | None:
        """The cache file of ``key`` read and checked (classes, grammar, index arrays), or None when
        there is none or it is unusable (then reported once, removed, and the caller rebuilds)."""
        root = self.root
        # the usual miss: one stat of a string path (pathlib's joining and parsing cost more than the
        # stat: ~40 us of a small schema's ~1.5 ms start), no exception made and caught, nothing imported
        if not os.path.exists(os.path.join(root, key.filename)):
            self.stats["misses"] += 1
            return None
        from .format import CacheError, load_cache

        path = root / key.filename
        try:
            contents = load_cache(path, vocab=vocab, input_text=input_text)
        except CacheError as exc:
            if not path.exists():  # none, or removed under us by another process's eviction
                self.stats["misses"] += 1
                return None
            self._discard(path, f"{exc}; removed, it will be rebuilt")
            return None
        if contents.grammar is None or contents.metadata.get("input_sha256") != key.input_sha256:
            self._discard(path, f"class cache {path} is not the entry its name says; removed, it will be rebuilt")
            return None
        self.stats["hits"] += 1
        try:
            os.utime(path)  # least recently *used*: a read counts
        except OSError:
            pass
        return contents

    def store(
        self,
        key: CacheKey,
        compiled: CompiledGrammar,
        classes: TokenClasses,
        vocab: VocabTable,
        native_index: SigmaInIndex | None = None,
    ) -> Path | None:
        """Write the entry of ``key`` (atomically), then bound the folder's size. Returns the file,
        or None when it could not be written (a read-only or full disk: reported once, not raised)."""
        from .format import CacheError, save_classes

        path = self.path_for(key)
        try:
            save_classes(classes, path, vocab=vocab, native_index=native_index, compiled=compiled, compress=False)
        except (OSError, CacheError) as exc:
            _report_once(self.root, f"class cache directory {self.root} not written ({exc})")
            return None
        self.stats["writes"] += 1
        self.evict(keep=path)
        return path

    def entries(self) -> list[Path]:
        """The cache files, least recently used first."""
        found = []
        try:
            scan = list(os.scandir(self.root))
        except OSError:
            return []
        for entry in scan:
            if entry.name.endswith(".npz") and not entry.name.startswith("."):
                try:
                    found.append((entry.stat().st_mtime_ns, entry.name))
                except OSError:
                    continue  # removed meanwhile
        return [self.root / name for _, name in sorted(found)]

    def size(self) -> int:
        total = 0
        for path in self.entries():
            try:
                total += path.stat().st_size
            except OSError:
                pass
        return total

    def evict(self, *, keep: Path | None = None) -> int:
        """Remove least recently used files until the folder holds at most ``max_bytes``; returns
        how many went. Stale temporary files (a writer killed mid-write, older than an hour) go too."""
        self._remove_stale_temporaries()
        sized = []
        for path in self.entries():
            try:
                sized.append((path, path.stat().st_size))
            except OSError:
                continue
        total = sum(size for _, size in sized)
        removed = 0
        for path, size in sized:
            if total <= self.max_bytes:
                break
            if keep is not None and path == keep:
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # another process evicted it first
            except OSError:
                continue
            total -= size
            removed += 1
        self.stats["evicted"] += removed
        return removed

    def clear(self) -> None:
        """Remove every cache file of this folder."""
        for path in self.entries():
            path.unlink(missing_ok=True)

    def _remove_stale_temporaries(self, age_seconds: float = 3600.0) -> None:
        now = time.time()
        try:
            scan = list(os.scandir(self.root))
        except OSError:
            return
        for entry in scan:
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                try:
                    if now - entry.stat().st_mtime > age_seconds:
                        os.unlink(entry.path)
                except OSError:
                    pass

    def _discard(self, path: Path, message: str) -> None:
        self.stats["corrupt"] += 1
        self.stats["misses"] += 1
        _report_once(path, message)
        try:
            path.unlink()
        except OSError:
            pass
