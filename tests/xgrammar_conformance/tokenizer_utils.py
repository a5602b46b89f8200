"""Stand-in for XGrammar's ``tests/python/tokenizer_utils.py``: its tests load hub tokenizers by id.

Nothing here reaches a model hub. A hub id whose vocabulary one of our offline sources reproduces
is mapped to it (``HUB_TO_OFFLINE``) and gets a ``transformers`` fast tokenizer built from that
source's byte-level BPE ranks (the vocabulary, the merges recovered from the ranks as transformers'
``TikTokenConverter`` does, the model's pre-tokenizer split and its special tokens by name). Any
other id skips the test, naming the id and why (``NO_OFFLINE``).
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

import pytest

# The split regexes of the models' tokenizer.json (Llama-3 groups up to 3 digits, Qwen2/3 one).
_LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama-3.1 and later named three of 3.0's reserved slots (quicktok ships 3.0's names).
_LLAMA31_NAMES = ((128_004, "<|finetune_right_pad_id|>"), (128_008, "<|eom_id|>"), (128_010, "<|python_tag|>"))


@dataclass(frozen=True)
class Offline:
    """How to build one hub id's tokenizer from an offline quicktok source."""

    source: str  # quicktok encoding and vocab file
    split: str
    vocab_size: int  # the model config's logits size
    bos: str | None
    eos: str
    renames: tuple[tuple[int, str], ...] = ()
    text_ids: range = range(0)  # added tokens the model writes as text (special=False)


_LLAMA3 = Offline("llama3", _LLAMA3_SPLIT, 128_256, "<|begin_of_text|>", "<|eot_id|>")
_LLAMA31 = Offline("llama3", _LLAMA3_SPLIT, 128_256, "<|begin_of_text|>", "<|eot_id|>", _LLAMA31_NAMES)

# hub id -> offline source with the same vocabulary
HUB_TO_OFFLINE: dict[str, Offline] = {
    "meta-llama/Meta-Llama-3-8B-Instruct": _LLAMA3,
    "meta-llama/Meta-Llama-3.1-8B-Instruct": _LLAMA31,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31,
    "meta-llama/Llama-3.2-1B-Instruct": _LLAMA31,
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": Offline(
        "qwen3", _QWEN_SPLIT, 151_936, None, "<|im_end|>", text_ids=range(151_657, 151_669)
    ),
}

# hub id -> why it has no offline stand-in
NO_OFFLINE: dict[str, str] = {
    "meta-llama/Llama-2-7b-chat-hf": "Llama-2's SentencePiece vocabulary: no offline source ships it",
    "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct": "no offline source ships DeepSeek's vocabulary",
    "deepseek-ai/DeepSeek-V3-0324": "no offline source ships DeepSeek's vocabulary",
    "moonshotai/Kimi-K2-Thinking": "Kimi-K2's tiktoken vocabulary and remote tokenizer code: no offline source",
}


def _offline(model_id: str) -> Offline:
    if model_id not in HUB_TO_OFFLINE:
        why = NO_OFFLINE.get(model_id, "no offline source ships this vocabulary")
        pytest.skip(f"hub tokenizer {model_id}: {why}")
    return HUB_TO_OFFLINE[model_id]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet (each byte as one printable character)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


@cache
def _build(spec: Offline):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from cfgzip_lab.vocab_sources import _SOURCES, read_quicktok_special, read_quicktok_vocab

    data = _SOURCES[spec.source].require() / "data"
    ranks = read_quicktok_vocab(data / f"{spec.source}.vocab")
    rank_of = {b: i for i, b in enumerate(ranks)}
    alphabet = _bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(alphabet[x] for x in b)

    # Merges from ranks (transformers' TikTokenConverter.extract_vocab_merges_from_model): every
    # split of a token into two tokens, ordered by the merged token's rank, then by the parts'.
    merges = []
    for token, rank in rank_of.items():
        local = [
            (rank, rank_of[token[:i]], rank_of[token[i:]], token[:i], token[i:])
            for i in range(1, len(token))
            if token[:i] in rank_of and token[i:] in rank_of
        ]
        merges += sorted(local)
    merges.sort()
    vocab = {text(b): i for i, b in enumerate(ranks)}
    tok = Tokenizer(models.BPE(vocab, [(text(m[3]), text(m[4])) for m in merges], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec.split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if spec.bos is not None:  # Llama-3 prepends <|begin_of_text|> when asked for special tokens
        bos = (spec.bos, len(ranks))
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{bos[0]} $A", pair=f"{bos[0]} $A {bos[0]} $B", special_tokens=[bos]
                ),
            ]
        )
    specials = sorted(read_quicktok_special(data / f"{spec.source}.special"))
    added = [
        AddedToken(dict(spec.renames).get(tid, name), special=tid not in spec.text_ids, normalized=False)
        for tid, name in specials
    ]
    assert [tid for tid, _ in specials] == list(range(len(ranks), len(ranks) + len(specials)))
    tok.add_tokens(added)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=spec.bos, eos_token=spec.eos)


def load_tokenizer(model_id, **kwargs):
    """The offline stand-in of ``model_id``'s tokenizer (a fresh copy), or a skip naming why there is none."""
    return deepcopy(_build(_offline(model_id)))


def load_config(model_id, **kwargs):
    """The parts of ``model_id``'s config the tests read (``vocab_size``), or a skip."""
    return SimpleNamespace(vocab_size=_offline(model_id).vocab_size)
