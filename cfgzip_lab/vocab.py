"""VocabTable: the exact bytes behind every logit, and what kind of token each id is.

Everything downstream (displacement classing, masks, XGrammar) sees a vocabulary only as
``token_bytes[id]`` -- the bytes that id adds to the text -- plus a kind per id:

- ``NORMAL``: a token the model writes as text (its bytes are non-empty);
- ``STOP``: an end-of-generation token (EOS, end-of-turn): allowed when the grammar can end;
- ``SPECIAL``: a control/added token that is never text (``<|im_start|>``, reserved ids);
- ``PADDING``: a logit no token stands behind (the model's logits are wider than its
  tokenizer, or the tokenizer has a hole).

Only NORMAL tokens have bytes; the others hold ``b""``. That is also what makes the table
safe to hand to XGrammar as a RAW vocabulary: XGrammar treats an empty, non-stop token as
special and never allows it, whereas a special token spelled out (``b"<|im_start|>"``) would
be allowed wherever the grammar allows that literal text.

Token strings are turned into bytes the way the tokenizer's own decoder does, one token at a
time (so the first token keeps its leading space, which a SentencePiece decoder strips):

- byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM): every character stands for one byte through
  GPT-2's byte-to-unicode map (``Ġ`` = space, ``Ċ`` = newline); a token with a character
  outside that map is taken as UTF-8 text, as ``tokenizers``' ByteLevel decoder does;
- byte-fallback SentencePiece (Llama-2, Gemma): ``<0xNN>`` is the byte NN, ``▁`` is a space;
- tiktoken-style rank files (quicktok): raw bytes already.

The registry of offline sources (``load_vocab``, ``available_vocabs``) lives in
``cfgzip_lab.vocab_sources``, one floor up: it builds these tables.

>>> v = vocab_from_bytes([b"a", b"b", b"ab", b""], stop_ids=[3], name="toy", vocab_size=6)
>>> v.vocab_size, v.kinds.tolist(), v.decode(v.encode("abba"))
(6, [0, 0, 0, 1, 3, 3], b'abba')
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import Any

import numpy as np

__all__ = [
    "TokenKind",
    "show_bytes",
    "NORMAL",
    "STOP",
    "SPECIAL",
    "PADDING",
    "KIND_NAMES",
    "VocabTable",
    "vocab_from_bytes",
    "vocab_from_tokenizer",
    "byte_level_decoder",
    "token_string_to_bytes",
]


class TokenKind(IntEnum):
    """What an id of the vocabulary is; ``VocabTable.kinds`` stores these values as uint8.

    Not :class:`cfgzip_lab.classes.classing.ClassKind`, the kind of a class: a SPECIAL
    or PADDING token sits in the BLOCKED class.
    """

    NORMAL = 0
    STOP = 1
    SPECIAL = 2
    PADDING = 3


# The same values as plain ints, for per-element numpy code: numpy compares or stores a
# scalar with an IntEnum member about 400x slower than with an int (12 µs against 30 ns,
# measured on numpy 2 / Python 3.11), which a loop over 128k ids would feel. Whole-array
# comparisons (``kinds == TokenKind.STOP``) are as fast either way.
NORMAL, STOP, SPECIAL, PADDING = (int(k) for k in TokenKind)
KIND_NAMES = tuple(k.name.lower() for k in TokenKind)

_FINGERPRINT_TAG = b"cfgzip-vocab-v1\0"


@dataclass(frozen=True, eq=False, repr=False)
class VocabTable:
    """Bytes and kind of every id of a model's logits.

    Parameters
    ----------
    name : str
        A short name (``"llama3"``, a folder name, a hub id).
    token_bytes : list[bytes]
        ``token_bytes[i]`` is exactly what id ``i`` adds to the text; ``b""`` for every id
        that is not NORMAL. Its length is the logits size V.
    kinds : numpy.ndarray
        uint8[V] of NORMAL, STOP, SPECIAL, PADDING.
    stop_ids : tuple[int, ...]
        The STOP ids, in order of preference (the first is the usual EOS).
    special_tokens : Mapping[str, int]
        Text of every named non-text token (special, stop, added) -> id; for building
        prompts by hand where there is no HF tokenizer. Not part of equality.
    encoder : callable, optional
        ``str -> list[int]``: the source's real tokenizer, without special tokens.
    tokenizer_factory : callable, optional
        Builds the transformers tokenizer on first use of ``hf_tokenizer``.

    Notes
    -----
    Equality and hashing use ``name``, ``stop_ids`` and ``fingerprint``; the tokenizer
    objects are not compared.
    """

    name: str
    token_bytes: list[bytes]
    kinds: np.ndarray
    stop_ids: tuple[int, ...]
    special_tokens: Mapping[str, int] = field(default_factory=dict)
    encoder: Callable[[str], list[int]] | None = None
    tokenizer_factory: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        kinds = np.array(self.kinds, dtype=np.uint8, copy=True)
        kinds.setflags(write=False)
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids))
        if not isinstance(self.token_bytes, list):
            object.__setattr__(self, "token_bytes", list(self.token_bytes))
        self._check()

    def _check(self) -> None:
        n = len(self.token_bytes)
        if self.kinds.shape != (n,):
            raise ValueError(f"kinds has shape {self.kinds.shape}, token_bytes has {n} entries")
        if self.kinds.size and int(self.kinds.max()) > PADDING:
            raise ValueError(f"unknown kind {int(self.kinds.max())}")
        lengths = self._lengths
        normal = self.kinds == NORMAL
        if np.any(lengths[normal] == 0):
            bad = np.flatnonzero(normal & (lengths == 0))[:5].tolist()
            raise ValueError(f"NORMAL tokens must have bytes; empty at ids {bad}")
        if np.any(lengths[~normal] != 0):
            bad = np.flatnonzero(~normal & (lengths != 0))[:5].tolist()
            raise ValueError(f"non-NORMAL tokens must be b''; not at ids {bad}")
        stops = set(np.flatnonzero(self.kinds == STOP).tolist())
        if stops != set(self.stop_ids) or len(self.stop_ids) != len(stops):
            raise ValueError(f"stop_ids {self.stop_ids} differ from the STOP kinds {sorted(stops)}")

    # -- sizes and identity ------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The logits size V (padding included)."""
        return len(self.token_bytes)

    @cached_property
    def _lengths(self) -> np.ndarray:
        return np.fromiter(map(len, self.token_bytes), dtype=np.uint32, count=len(self.token_bytes))

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex over V, every id's bytes (length-prefixed) and the kinds.

        Names, stop order and tokenizer objects do not enter it: two tables with the same
        fingerprint produce the same masks for every grammar.
        """
        h = hashlib.sha256(_FINGERPRINT_TAG)
        h.update(len(self.token_bytes).to_bytes(8, "little"))
        h.update(self._lengths.astype("<u4").tobytes())
        h.update(b"".join(self.token_bytes))
        h.update(self.kinds.tobytes())
        return h.hexdigest()

    @cached_property
    def byte_trie(self):
        """The NORMAL tokens as the compiled classing's byte trie
        (:func:`cfgzip_lab.vocab_trie.vocab_trie`), kept with the table, which does not change
        (its fingerprint is kept the same way): classing then skips the comparison with the token
        objects that ``vocab_trie`` makes to reuse one (~1 MB read, 0.08 ms a grammar with Llama-3).
        None where the compiled kernel is not built."""
        from ._binding import kernel
        from .vocab_trie import vocab_trie

        if kernel is None:
            return None
        return vocab_trie(self.token_bytes, self.kinds)

    def count(self, kind: int) -> int:
        """How many ids have this kind."""
        return int(np.count_nonzero(self.kinds == kind))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VocabTable):
            return NotImplemented
        return (
            self.name == other.name
            and self.stop_ids == other.stop_ids
            and self.vocab_size == other.vocab_size
            and self.fingerprint == other.fingerprint
        )

    def __hash__(self) -> int:
        return hash((self.name, self.fingerprint))

    def __repr__(self) -> str:
        counts = ", ".join(f"{KIND_NAMES[k]}={self.count(k)}" for k in range(4))
        return (
            f"VocabTable(name={self.name!r}, vocab_size={self.vocab_size}, {counts}, "
            f"stop_ids={self.stop_ids}, fingerprint={self.fingerprint[:12]!r})"
        )

    # -- text ------------------------------------------------------------------------

    @cached_property
    def hf_tokenizer(self) -> Any:
        """The transformers tokenizer of this source (built on first use), or None."""
        return self.tokenizer_factory() if self.tokenizer_factory is not None else None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` by the source's own tokenizer, without special tokens.

        Special-token strings in ``text`` are encoded as plain text. A table built from bare
        bytes (``vocab_from_bytes``) has no tokenizer: it encodes greedily, longest token
        first, which is no model's tokenization but always a valid one.
        """
        if self.encoder is not None:
            return list(self.encoder(text))
        if self.tokenizer_factory is not None:
            return list(self.hf_tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
        return self._greedy_encode(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes these ids produce (non-text ids produce nothing)."""
        tb = self.token_bytes
        return b"".join(tb[int(i)] for i in ids)

    def _greedy_encode(self, data: bytes) -> list[int]:
        index, longest = self._greedy_index
        out, pos = [], 0
        while pos < len(data):
            for size in range(min(longest, len(data) - pos), 0, -1):
                tid = index.get(data[pos : pos + size])
                if tid is not None:
                    out.append(tid)
                    pos += size
                    break
            else:
                raise ValueError(f"{self.name}: no token starts with byte {data[pos]:#04x} at offset {pos}")
        return out

    @cached_property
    def _greedy_index(self) -> tuple[dict[bytes, int], int]:
        index: dict[bytes, int] = {}
        for tid in np.flatnonzero(self.kinds == NORMAL).tolist():
            index.setdefault(self.token_bytes[tid], tid)
        return index, max(map(len, index), default=0)

    def to_xgrammar(self) -> Any:
        """An ``xgrammar.TokenizerInfo`` over these exact bytes (RAW vocabulary).

        Non-NORMAL ids are ``b""``, so XGrammar lists every SPECIAL and PADDING id among its
        ``special_token_ids`` and never allows them; the STOP ids are passed explicitly.
        """
        import xgrammar

        return xgrammar.TokenizerInfo(
            self.token_bytes,
            xgrammar.VocabType.RAW,
            vocab_size=self.vocab_size,
            stop_token_ids=list(self.stop_ids),  # [] means none; None would make XGrammar guess by text
        )


# -- building tables --------------------------------------------------------------------


_VISIBLE_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def show_bytes(data: bytes) -> str:
    """A token's bytes as readable text: UTF-8 where it decodes, ``\\xNN`` for the other bytes,
    and ``\\n \\r \\t \\\\`` escaped so that whitespace stays visible."""
    out = []
    for ch in data.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 here
            out.append(f"\\x{code - 0xDC00:02x}")
        else:
            out.append(_VISIBLE_ESCAPES.get(ch, ch))
    return "".join(out)


def _table(
    name: str,
    token_bytes: list[bytes],
    kinds: np.ndarray,
    stop_ids: Sequence[int],
    **extra: Any,
) -> VocabTable:
    """Finish a table: blank every non-NORMAL id, mark stops, keep stop order."""
    stops = tuple(dict.fromkeys(int(i) for i in stop_ids if 0 <= int(i) < len(token_bytes)))
    kinds[list(stops)] = STOP
    for i in np.flatnonzero(kinds != NORMAL).tolist():
        token_bytes[i] = b""
    kinds[[i for i, b in enumerate(token_bytes) if not b and kinds[i] == NORMAL]] = PADDING
    return VocabTable(name, token_bytes, kinds, stops, **extra)


def vocab_from_bytes(
    token_bytes: Sequence[bytes],
    *,
    stop_ids: Iterable[int] = (),
    special_ids: Iterable[int] = (),
    vocab_size: int | None = None,
    name: str,
    encoder: Callable[[str], list[int]] | None = None,
) -> VocabTable:
    """A table from bare bytes, for tests and synthetic vocabularies.

    Ids in ``stop_ids`` are STOP and ids in ``special_ids`` SPECIAL (their bytes are
    dropped); an empty entry listed in neither, and every id from ``len(token_bytes)`` up to
    ``vocab_size``, is PADDING. Ids beyond ``vocab_size`` are dropped.
    """
    size = len(token_bytes) if vocab_size is None else int(vocab_size)
    tb = [bytes(b) for b in token_bytes[:size]] + [b""] * max(0, size - len(token_bytes))
    kinds = np.zeros(size, dtype=np.uint8)
    kinds[len(token_bytes) :] = PADDING
    kinds[[i for i in special_ids if 0 <= i < size]] = SPECIAL
    return _table(name, tb, kinds, list(stop_ids), encoder=encoder)


def byte_level_decoder() -> dict[str, int]:
    """GPT-2's unicode-to-byte map (inverse of ``bytes_to_unicode``): ``"Ġ" -> 0x20``.

    Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, 0x7F-0xA0,
    0xAD) are shifted to U+0100.. in byte order.
    """
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return {c: b for b, c in chars.items()}


_BYTE_DECODER = byte_level_decoder()
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")

BYTE_LEVEL, BYTE_FALLBACK, RAW = "byte_level", "byte_fallback", "raw"


def token_string_to_bytes(token: str | bytes, token_format: str, *, space: str = "\u2581") -> bytes:
    """The bytes of one vocabulary entry, as the tokenizer's decoder produces them.

    ``token_format`` is ``"byte_level"``, ``"byte_fallback"`` (also plain Metaspace
    SentencePiece; ``space`` is its space marker) or ``"raw"`` (UTF-8 of the string).
    """
    if isinstance(token, bytes):
        return token
    if token_format == BYTE_LEVEL:
        try:
            return bytes(map(_BYTE_DECODER.__getitem__, token))
        except KeyError:  # not byte-level spelled (an added token's plain text)
            return token.encode("utf-8")
    if token_format == BYTE_FALLBACK:
        m = _BYTE_PIECE.fullmatch(token)
        if m:
            return bytes([int(m.group(1), 16)])
        return token.replace(space, " ").encode("utf-8")
    return token.encode("utf-8")


def _json_types(node: Any) -> list[dict]:
    """Every dict with a "type" key inside a tokenizers component's JSON."""
    found: list[dict] = []
    if isinstance(node, dict):
        if "type" in node:
            found.append(node)
        for value in node.values():
            found += _json_types(value)
    elif isinstance(node, list):
        for value in node:
            found += _json_types(value)
    return found


def _component_json(component: Any) -> Any:
    if component is None:
        return None
    try:
        return json.loads(component.__getstate__())
    except Exception:  # a component that cannot serialise itself tells us nothing
        return None


def _detect_format(backend: Any, vocab: Mapping[str, int]) -> tuple[str, str]:
    """(token_format, space marker) of a ``tokenizers.Tokenizer``, or of a bare vocab."""
    space = "\u2581"
    if backend is not None:
        parts = _json_types(_component_json(backend.decoder)) + _json_types(_component_json(backend.pre_tokenizer))
        types = {p["type"] for p in parts}
        if "WordPiece" in types or type(backend.model).__name__ == "WordPiece":
            raise ValueError("WordPiece vocabularies ('##' pieces) are not generative; no byte table for them")
        if "ByteLevel" in types:
            return BYTE_LEVEL, space
        for p in parts:
            if p["type"] == "Metaspace":
                space = p.get("replacement", space)
            if p["type"] == "Replace" and p.get("content") == " ":
                space = (p.get("pattern") or {}).get("String", space)
        if "ByteFallback" in types or getattr(backend.model, "byte_fallback", False):
            return BYTE_FALLBACK, space
        if "Metaspace" in types or "Replace" in types:
            return BYTE_FALLBACK, space
    # No decoder that says: judge by the vocabulary itself (as XGrammar does).
    strings = [t for t in vocab if isinstance(t, str)]
    if sum(f"<0x{b:02X}>" in vocab for b in range(256)) >= 128:
        return BYTE_FALLBACK, space
    if sum(c in vocab for c in _BYTE_DECODER) >= 128 and sum(
        all(c in _BYTE_DECODER for c in t) for t in strings
    ) >= 0.99 * len(strings):
        return BYTE_LEVEL, space
    return RAW, space


def vocab_from_tokenizer(
    tokenizer: Any,
    *,
    name: str,
    vocab_size: int | None = None,
    stop_ids: Iterable[int] | None = None,
) -> VocabTable:
    """A table from a Hugging Face tokenizer.

    Parameters
    ----------
    tokenizer
        A ``transformers`` tokenizer (fast or slow) or a bare ``tokenizers.Tokenizer``.
    name : str
        The table's name.
    vocab_size : int, optional
        The model's logits size (``config.vocab_size``). Ids from the tokenizer's size up to
        it are PADDING; tokens at or beyond it are dropped. Default: the tokenizer's size.
    stop_ids : iterable of int, optional
        The stop ids (pass ``generation_config.eos_token_id`` for chat models). Default: the
        tokenizer's ``eos_token_id`` (none for a bare ``tokenizers.Tokenizer``).

    Returns
    -------
    VocabTable
        Special tokens (``special=True`` added tokens, the unknown token) are SPECIAL, the
        stop ids STOP; non-special added tokens (Qwen's ``<think>``) are text.

    Raises
    ------
    ValueError
        For WordPiece vocabularies.
    """
    backend = tokenizer if _is_bare_tokenizers(tokenizer) else getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        vocab = backend.get_vocab(with_added_tokens=True)
        added = backend.get_added_tokens_decoder()
    else:
        vocab = dict(tokenizer.get_vocab())
        added = dict(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    special = {i for i, tok in added.items() if getattr(tok, "special", False)}
    if backend is not None:
        unk = getattr(backend.model, "unk_token", None)
        if isinstance(unk, str) and unk in vocab:
            special.add(vocab[unk])
    if backend is not tokenizer:  # a transformers tokenizer knows its special tokens
        special.update(int(i) for i in getattr(tokenizer, "all_special_ids", ()) if i is not None)
    token_format, space = _detect_format(backend, vocab)

    size = max(vocab.values(), default=-1) + 1
    size = size if vocab_size is None else int(vocab_size)
    token_bytes = [b""] * size
    kinds = np.full(size, PADDING, dtype=np.uint8)
    names: dict[str, int] = {}
    for token, tid in vocab.items():
        if tid >= size:
            continue
        if tid in special:
            kinds[tid] = SPECIAL
            names[token if isinstance(token, str) else token.decode("utf-8", "replace")] = tid
            continue
        kinds[tid] = NORMAL
        token_bytes[tid] = token_string_to_bytes(token, token_format, space=space)
        if tid in added:
            names[str(added[tid].content)] = tid
    if stop_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None) if backend is not tokenizer else None
        stop_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    stop_ids = [int(i) for i in stop_ids]
    wanted = set(stop_ids)
    names.update({t: i for t, i in vocab.items() if i in wanted and isinstance(t, str)})

    extra: dict[str, Any] = {"special_tokens": names}
    if backend is tokenizer:
        extra["encoder"] = _backend_encoder(backend)
    else:
        extra["tokenizer_factory"] = lambda: tokenizer
    return _table(name, token_bytes, kinds, stop_ids, **extra)


def _is_bare_tokenizers(obj: Any) -> bool:
    return type(obj).__module__.startswith("tokenizers") and type(obj).__name__ == "Tokenizer"


def _backend_encoder(backend: Any) -> Callable[[str], list[int]]:
    """``str -> ids`` over a private copy of ``backend`` that reads special-token strings as
    text (the copy is made on first use; the caller's tokenizer is left as it is)."""
    copy: list[Any] = []

    def encode(text: str) -> list[int]:
        if not copy:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(backend.to_str())
            tok.encode_special_tokens = True
            copy.append(tok)
        return copy[0].encode(text, add_special_tokens=False).ids

    return encode
