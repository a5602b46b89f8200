"""cfgzip as a vLLM logits processor, through the real vllm package (the official wheel) on CPU.

vLLM loads our ``vllm.logits_processors`` entry point itself (``build_logitsprocs`` for V1,
``build_custom_logits_processors`` for Model Runner V2) from a real ``VllmConfig`` on a local model
folder (SmolLM2's tokenizer, a tiny Llama config; ``VLLM_TARGET_DEVICE=cpu`` makes the official
wheel take its CPU platform). V1 is driven with real ``BatchUpdate``s (adds, a removal, a swap),
V2 with a real ``RequestState`` and ``LogitsContext``s; the masked logits are compared with what
vLLM's own structured-output path gives: its ``XgrammarBackend`` compiling the same request and
XGrammar's kernel applying that bitmask.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
import xgrammar as xgr
from serving_tools import (
    ARITHMETIC,
    EMAIL,
    LARK_CALL,
    LEGACY_TAG,
    PADDING,
    PERSON,
    TOKEN_BOUNDED,
    TRIGGERED_TAG,
    require,
    smollm2_tokenizer,
)

pytestmark = pytest.mark.slow

REQUESTS = [  # (extra_args["cfgzip"], vLLM's own request type and spec for the same grammar)
    ({"json_schema": PERSON}, "JSON", json.dumps(PERSON)),
    ({"ebnf": ARITHMETIC}, "GRAMMAR", ARITHMETIC),
    ({"regex": EMAIL}, "REGEX", EMAIL),
    ({"structural_tag": TRIGGERED_TAG}, "STRUCTURAL_TAG", json.dumps(TRIGGERED_TAG)),
    (
        {"lark": LARK_CALL},
        "GRAMMAR",
        str(xgr.Grammar.from_lark(LARK_CALL)),
    ),  # vLLM's own Lark reading is not XGrammar's
]
# A structural tag (special tokens kept) whose sentences may end with the stop token's text ("<|im_end|>"
# ends with ">"): from XGrammar 0.2.9 the backend's matcher allows the stop token there and takes it as text.
STOP_TEXT_TAG = {"type": "structural_tag", "format": {"type": "grammar", "grammar": 'root ::= "a" [^\\n]* ">"'}}
PROCESSOR_REQUESTS = [
    *REQUESTS,
    ({"structural_tag": STOP_TEXT_TAG}, "STRUCTURAL_TAG", json.dumps(STOP_TEXT_TAG)),
]


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    require("vllm", "the vLLM logits processor tests need the vllm package")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # the official wheel's CPU platform
    tokenizer = smollm2_tokenizer()
    folder = tmp_path_factory.mktemp("tiny_llama")
    tokenizer.save_pretrained(folder)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(tokenizer) + PADDING,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 512,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (folder / "config.json").write_text(json.dumps(config))
    from vllm.config import ModelConfig, VllmConfig

    return VllmConfig(model_config=ModelConfig(model=str(folder), tokenizer=str(folder)))


@pytest.fixture(scope="module")
def reference(vllm_config):
    """vLLM's own XGrammar structured-output backend on the same model."""
    from vllm.tokenizers import cached_tokenizer_from_config
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    model_config = vllm_config.model_config
    tokenizer = cached_tokenizer_from_config(model_config)
    return XgrammarBackend(vllm_config, tokenizer=tokenizer, vocab_size=model_config.get_vocab_size())


def _params(cfgzip=None, **kw):
    from vllm import SamplingParams

    return SamplingParams(extra_args={"cfgzip": cfgzip} if cfgzip is not None else None, **kw)


def _reference_logits(reference, grammars, logits):
    """vLLM's structured-output masking of ``logits``: each row's XGrammar bitmask, XGrammar's kernel."""
    import xgrammar as xgr

    bitmask = reference.allocate_token_bitmask(logits.shape[0])
    rows = []
    for row, grammar in enumerate(grammars):
        if grammar is not None and not grammar.is_terminated():
            grammar.fill_bitmask(bitmask, row)
            rows.append(row)
    if rows:
        xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows)
    return logits


def _compile(reference, kind, spec):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    return reference.compile_grammar(StructuredOutputOptions[kind], spec)


def _choose(row_logits, rng):
    allowed = torch.isfinite(row_logits).nonzero().flatten().tolist()
    return rng.choice(allowed)


@pytest.fixture
def request_state(monkeypatch):
    """Model Runner V2's RequestState on the CPU: vLLM's own buffers, through its fallback for
    platforms without pinned memory (its CPU platform claims UVA, and this CPU torch refuses
    ``pin_memory=True``)."""
    import vllm.v1.worker.gpu.buffer_utils as buffer_utils
    from vllm.v1.worker.gpu.states import RequestState

    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)
    return lambda slots, vocab: RequestState(slots, 64, 64, 0, vocab, torch.device("cpu"))


def test_entry_point_loaded_by_both_runners(vllm_config, request_state):
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker.gpu.sample.logits_processor import build_custom_logits_processors

    from cfgzip_lab.serving.vllm_processor import CfgzipLogitsProcessor

    v1 = build_logitsprocs(vllm_config, torch.device("cpu"), False, False)
    assert any(isinstance(p, CfgzipLogitsProcessor) and not p.v2 for p in v1.non_argmax_invariant)
    states = request_state(4, vllm_config.model_config.get_vocab_size())
    (v2,) = [
        p for p in build_custom_logits_processors(vllm_config, states, False) if isinstance(p, CfgzipLogitsProcessor)
    ]
    assert v2.v2 and v2.vocab_size == vllm_config.model_config.get_vocab_size()


def test_validate_params_refuses_with_the_reason(vllm_config):
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import validate_logits_processors_parameters

    validate_logits_processors_parameters(None, _params())  # no grammar: nothing to check
    validate_logits_processors_parameters(None, _params({"json_schema": PERSON}))
    validate_logits_processors_parameters(None, _params({"ebnf": 'root ::= Token(5) "a"'}))  # token macros are served
    # the OpenAI server's form: vllm_xargs values cannot be objects (its own model refuses them), so JSON text
    from pydantic import ValidationError
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    with pytest.raises(ValidationError):
        CompletionRequest(model="m", prompt="p", vllm_xargs={"cfgzip": {"regex": EMAIL}})
    served = CompletionRequest(model="m", prompt="p", vllm_xargs={"cfgzip": json.dumps({"regex": EMAIL})})
    sampling = served.to_sampling_params(max_tokens=8)
    validate_logits_processors_parameters(None, sampling)
    from cfgzip_lab.serving.vllm_processor import grammar_request_of

    assert grammar_request_of(sampling).kind == "regex"
    for bad, reason in [
        ({"json_schema": PERSON, "ebnf": "x"}, "exactly one"),
        ({"jsonschema": PERSON}, "unknown cfgzip argument"),
        ({"ebnf": 'root ::= "a" | '}, "cfgzip cannot serve this ebnf"),
        ({"ebnf": TOKEN_BOUNDED}, "max_tokens"),
        ({"regex": "(unclosed"}, "invalid regex"),
        ('{"regex": ', "not JSON"),
    ]:
        with pytest.raises(VLLMValidationError, match=reason):
            validate_logits_processors_parameters(None, _params(bad))


def test_v1_batch_updates_masks_equal_vllm_structured_output(vllm_config, reference):
    from vllm.v1.sample.logits_processor import BatchUpdateBuilder, MoveDirectionality

    from cfgzip_lab.serving.vllm_processor import CfgzipLogitsProcessor

    ours = CfgzipLogitsProcessor(vllm_config, torch.device("cpu"), False)
    vocab = ours.vocab_size
    builder = BatchUpdateBuilder()
    outputs, grammars = [], []
    for i, (arg, kind, spec) in enumerate([*PROCESSOR_REQUESTS, (None, None, None)]):  # the last: unconstrained
        outputs.append([])
        grammars.append(_compile(reference, kind, spec) if kind else None)
        builder.added.append((i, _params(arg), [1, 2, 3], outputs[i]))
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    for step in range(24):
        ours.update_state(builder.get_and_reset(len(outputs)))
        logits = torch.randn(len(outputs), vocab, generator=gen)
        mine = ours.apply(logits.clone())
        theirs = _reference_logits(reference, grammars, logits.clone())
        assert torch.equal(mine, theirs), f"step {step}"
        live = [r for r, g in enumerate(grammars) if g is not None and not g.is_terminated()]
        assert (
            all(torch.isinf(theirs[r]).any() for r in live) and not torch.isinf(theirs[len(PROCESSOR_REQUESTS)]).any()
        )
        for row, out in enumerate(outputs):
            if grammars[row] is not None and grammars[row].is_terminated():
                continue
            token = _choose(theirs[row], rng)
            out.append(token)
            if grammars[row] is not None:
                assert grammars[row].accept_tokens(str(row), [token])
        if step == 8:  # a request leaves; a new one (JSON again) takes its row
            builder.removed_append(1)
            outputs[1], grammars[1] = [], _compile(reference, *REQUESTS[0][1:])
            builder.added.append((1, _params(REQUESTS[0][0]), [4], outputs[1]))
        if step == 14:  # the persistent batch swaps two rows
            builder.moved.append((0, 2, MoveDirectionality.SWAP))
            outputs[0], outputs[2] = outputs[2], outputs[0]
            grammars[0], grammars[2] = grammars[2], grammars[0]


def test_v2_request_states_masks_equal_vllm_structured_output(vllm_config, reference, request_state):
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState

    from cfgzip_lab.serving.vllm_processor import CfgzipLogitsProcessor

    vocab = vllm_config.model_config.get_vocab_size()
    states = request_state(8, vocab)
    ours = CfgzipLogitsProcessor(vllm_config, LogitsProcRequestState.from_request_state(states))
    prompt = [5, 6, 7]
    slots = [6, 3, 0]  # slots are recycled from a free list: not the batch order
    sequences, grammars = {}, {}
    for slot, (arg, kind, spec) in zip(slots, REQUESTS):
        assert ours.add_request(slot, _params(arg))
        states.prompt_len.np[slot] = len(prompt)
        sequences[slot], grammars[slot] = list(prompt), _compile(reference, kind, spec)
    assert not ours.add_request(7, _params())  # no grammar: declined
    ours.apply_staged_writes()
    rng, gen = random.Random(1), torch.Generator().manual_seed(1)

    def step(order):
        ctx = LogitsContext(
            expanded_idx_mapping=torch.tensor(order),
            idx_mapping=torch.tensor(order),
            idx_mapping_np=np.array(order),
            expanded_local_pos=torch.zeros(len(order), dtype=torch.int64),
            input_ids=torch.tensor([sequences[s][-1] for s in order]),
            pos=torch.tensor([len(sequences[s]) - 1 for s in order]),
            seq_lens_upper_bound_np=np.array([len(sequences[s]) for s in order]),
        )
        logits = torch.randn(len(order), vocab, generator=gen)
        mine = ours.apply(logits.clone(), ctx)
        theirs = _reference_logits(reference, [grammars[s] for s in order], logits.clone())
        assert torch.equal(mine, theirs)
        live = [r for r, s in enumerate(order) if not grammars[s].is_terminated()]
        assert live and all(torch.isinf(theirs[r]).any() for r in live)  # masked rows, not left alone
        for row, slot in enumerate(order):
            if not grammars[slot].is_terminated():
                token = _choose(theirs[row], rng)
                sequences[slot].append(token)
                assert grammars[slot].accept_tokens(str(slot), [token])

    for i in range(12):
        step(slots if i % 2 else slots[::-1])  # rows reordered every step
    # preemption: slot 3's request comes back with its output so far as prefill
    states.all_token_ids.gpu[3, : len(sequences[3])] = torch.tensor(sequences[3], dtype=torch.int32)
    assert ours.add_request(3, _params(REQUESTS[1][0]))
    for _ in range(4):
        step(slots)

    # speculative decoding: rows [committed, draft 1, draft 2] per request; draft 1 from the
    # grammar, draft 2 any token (often refused). Row j's mask is the state after drafts 1..j; a
    # row behind a refused draft is left alone (vLLM's structured output leaves it too).
    import xgrammar as xgr

    live = [s for s in slots if not grammars[s].is_terminated()]
    for _ in range(3):
        live = [s for s in live if not grammars[s].is_terminated()]
        if not live:
            break
        order, feed, drafts = [], [], {}
        for slot in live:
            probe = xgr.allocate_token_bitmask(1, vocab)
            grammars[slot].fill_bitmask(probe, 0)
            d1 = _choose(torch.zeros(vocab).masked_fill(~_bits(probe, vocab), float("-inf")), rng)
            drafts[slot] = [d1, rng.randrange(vocab)]
            order += [slot] * 3
            feed += [sequences[slot][-1], *drafts[slot]]
        n = len(order)
        base = {s: len(sequences[s]) - 1 for s in live}
        ctx = LogitsContext(
            expanded_idx_mapping=torch.tensor(order),
            idx_mapping=torch.tensor(live),
            idx_mapping_np=np.array(live),
            expanded_local_pos=torch.tensor([0, 1, 2] * len(live)),
            input_ids=torch.tensor(feed),
            pos=torch.tensor([base[s] + j for s in live for j in range(3)]),
            seq_lens_upper_bound_np=np.array([base[s] + 3 for s in live]),
        )
        logits = torch.randn(n, vocab, generator=gen)
        mine = ours.apply(logits.clone(), ctx)
        bitmask = xgr.allocate_token_bitmask(n, vocab)
        for k, slot in enumerate(live):  # the reference: vLLM's grammar, drafts accepted then rolled back
            grammar, taken = grammars[slot], 0
            grammar.fill_bitmask(bitmask, 3 * k)
            for j, token in enumerate(drafts[slot], start=1):
                if grammar.is_terminated() or not grammar.matcher.accept_token(token):
                    break
                taken += 1
                if not grammar.matcher.is_terminated():
                    grammar.fill_bitmask(bitmask, 3 * k + j)
            if taken:
                grammar.matcher.rollback(taken)
        theirs = logits.clone()
        xgr.apply_token_bitmask_inplace(theirs, bitmask)
        assert torch.equal(mine, theirs)
        for k, slot in enumerate(live):  # draft 1 accepted, plus a bonus token from row 1
            bonus = _choose(theirs[3 * k + 1], rng)
            new = [drafts[slot][0], bonus]
            if not grammars[slot].accept_tokens(str(slot), new):
                new = [drafts[slot][0]]  # draft 1 ended the grammar
            start = len(sequences[slot])
            sequences[slot] += new
            states.all_token_ids.gpu[slot, start : len(sequences[slot])] = torch.tensor(new, dtype=torch.int32)
    step(live or slots[:1])  # the committed tokens are taken from all_token_ids at the next step


def _bits(bitmask, vocab):
    from serving_tools import vocab_bits

    return torch.from_numpy(vocab_bits(bitmask, vocab)[0].astype(bool))


# ---- cfgzip as vLLM's structured-output backend (CFGZIP_VLLM_BACKEND=1) -----------------------------


@pytest.fixture(scope="module")
def backend(vllm_config, reference):
    from cfgzip_lab.serving.vllm_backend import CfgzipBackend

    return CfgzipBackend(vllm_config, tokenizer=reference.tokenizer, vocab_size=reference.vocab_size)


def _bits_of(grammar, backend, row=1):
    """The grammar's mask as bits over the vocabulary, filled into row ``row`` of a 2-row bitmask."""
    from serving_tools import vocab_bits

    bitmask = backend.allocate_token_bitmask(2)
    grammar.fill_bitmask(bitmask, row)
    return vocab_bits(bitmask, backend.vocab_size)[row]


@pytest.mark.parametrize("disable_any_whitespace", [False, True])
def test_structured_output_backend_equals_xgrammar_backend_with_drafts(backend, reference, disable_any_whitespace):
    """Every request kind vLLM's XGrammar backend takes (JSON, JSON object, EBNF, Lark, regex, choice,
    structural tag in both forms), with and without whitespace (compact separators), both backends along one walk: the bitmask row at every step, vLLM's draft
    checks (validate_tokens on a draft whose later tokens the grammar refuses), accept_tokens of
    the verified part and rollback of a rejected one, as the scheduler calls them."""
    requests = [(kind, spec) for _, kind, spec in REQUESTS] + [
        ("JSON_OBJECT", ""),
        ("CHOICE", json.dumps(["definitely yes", "probably not", "maybe later"])),
        ("GRAMMAR", LARK_CALL),  # vLLM reads Lark in the grammar field itself (grammar_is_likely_lark)
        ("STRUCTURAL_TAG", json.dumps(LEGACY_TAG)),  # the older form, which vLLM converts itself
        ("GRAMMAR", 'start: "a" /[^\\n]*/ ">"'),  # Lark (special tokens kept): "<|im_end|>" as text may end it
    ]
    for b in (backend, reference):
        b.disable_any_whitespace = disable_any_whitespace
    try:
        for kind, spec in requests:
            mine, theirs = _compile(backend, kind, spec), _compile(reference, kind, spec)
            rng = random.Random(f"{kind} {spec[:40]} {disable_any_whitespace}")  # str seeds are stable
            steps = 0
            for step in range(30):
                assert mine.is_terminated() == theirs.is_terminated(), (kind, step)
                if theirs.is_terminated():
                    break
                want = _bits_of(theirs, reference)
                assert np.array_equal(_bits_of(mine, backend), want), (kind, step)
                allowed = np.flatnonzero(want)
                normal = [int(t) for t in allowed if t != 2] or [int(t) for t in allowed]
                token = rng.choice(normal) if step < 20 or len(normal) == len(allowed) else 2
                refused = int(np.flatnonzero(want == 0)[0])
                draft = [token, refused, token]
                assert mine.validate_tokens(draft) == theirs.validate_tokens(draft), (kind, step)
                assert np.array_equal(_bits_of(mine, backend), want), "validate_tokens moved the state"
                if step % 4 == 3:  # a rejected draft: accepted, then rolled back
                    assert mine.accept_tokens("r", [token]) and theirs.accept_tokens("r", [token])
                    mine.rollback(1)
                    theirs.rollback(1)
                assert mine.accept_tokens("r", [token]) == theirs.accept_tokens("r", [token]) is True
                assert mine.num_processed_tokens == theirs.num_processed_tokens
                steps += 1
            assert steps >= 2, kind  # "{}" then the stop token is a whole JSON object
            mine.reset()
            theirs.reset()
            assert np.array_equal(_bits_of(mine, backend), _bits_of(theirs, reference)), (kind, "reset")
    finally:
        for b in (backend, reference):
            b.disable_any_whitespace = False  # vLLM's default


def test_structured_output_backend_fails_only_the_refused_request(backend, reference):
    with pytest.raises(ValueError, match="max_tokens"):
        _compile(backend, "GRAMMAR", TOKEN_BOUNDED)
    _compile(reference, "GRAMMAR", TOKEN_BOUNDED)  # XGrammar serves it; cfgzip says why it cannot
    with pytest.raises(ValueError, match="invalid regex"):
        _compile(backend, "REGEX", "(unclosed")
    assert not _compile(backend, "REGEX", "[0-9]{2}").is_terminated()  # and goes on serving


def test_general_plugin_patches_only_when_asked_and_only_its_vllm(vllm_config, monkeypatch):
    """vLLM's own plugin loader runs our entry point; without CFGZIP_VLLM_BACKEND nothing changes,
    with it the structured-output manager builds cfgzip's backend for 'xgrammar' requests, and a
    vLLM it was not written against is refused at start-up."""
    import vllm
    import vllm.v1.structured_output as manager
    from vllm.plugins import load_general_plugins

    import cfgzip_lab.serving.vllm_backend as ours

    original = manager.XgrammarBackend
    monkeypatch.setattr(manager, "XgrammarBackend", original)  # restored after the test
    monkeypatch.delenv(ours.ENV, raising=False)
    ours.register()
    assert manager.XgrammarBackend is original
    monkeypatch.setenv(ours.ENV, "1")
    monkeypatch.setattr(vllm, "__version__", "0.40.0")
    with pytest.raises(RuntimeError, match="vLLM 0.40.0"):
        ours.register()
    assert manager.XgrammarBackend is original
    monkeypatch.undo()
    monkeypatch.setattr(manager, "XgrammarBackend", original)
    monkeypatch.setenv(ours.ENV, "1")
    import vllm.plugins

    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False, raising=False)
    load_general_plugins()  # reads the vllm.general_plugins entry points, as every vLLM process does
    assert manager.XgrammarBackend is ours.CfgzipBackend
    from vllm.v1.structured_output import StructuredOutputManager

    structured = StructuredOutputManager(vllm_config)
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request

    params = _params(structured_outputs=StructuredOutputsParams(regex=EMAIL))
    params.structured_outputs._backend = "xgrammar"
    request = Request("r", prompt_token_ids=[1], sampling_params=params, pooling_params=None)
    structured.grammar_init(request)
    future = request.structured_output_request._grammar  # a Future where vLLM compiles on its thread pool
    if hasattr(future, "result"):
        future.result(timeout=60)
    grammar = request.structured_output_request.grammar
    assert isinstance(structured.backend, ours.CfgzipBackend)
    assert isinstance(grammar, ours.CfgzipStructuredGrammar)
