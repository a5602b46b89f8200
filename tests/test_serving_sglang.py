"""cfgzip as an SGLang grammar backend, through the real sglang package on CPU.

The plugin is loaded as SGLang loads plugins (``sglang.srt.plugins.load_plugins`` reads our
``sglang.srt.plugins`` entry point), our backend is made by the function it registered, called
as ``create_grammar_backend`` calls it, and SGLang's own XGrammar backend is made with the
arguments ``create_grammar_backend`` gives it. Both then get the same requests through SGLang's
cache (``get_cached_or_future_value`` / ``set_cache`` / ``copy``) and the same batches through
``allocate_vocab_mask`` / ``fill_vocab_mask_batched`` / ``apply_vocab_mask``, with rollbacks and a
speculative-decoding tree walk; every mask bit over the vocabulary is compared (bits past it in the last word are nobody's:
XGrammar sets them 0 or 1 depending on how it computed the row, ours are 0). A bit that differs
must be one where XGrammar's mask contradicts its own ``accept_token`` (XGrammar 0.2.8 does so
after a JSON string inside a structural tag: 18 bits in one state of this walk), and ours must
say what ``accept_token`` says.

``create_grammar_backend`` itself needs SGLang's published config (``runtime_context.publish``),
and publishing imports ``sglang.srt.configs``, which imports torchvision at module level; PyPI's
torchvision wheels link CUDA torch (``libc10_cuda.so``) and cannot load beside this CPU torch, so
that one test skips here with that reason and runs where torchvision imports.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from serving_tools import (
    LARK_CALL,
    PADDING,
    REFUSED_REQUEST,
    SGLANG_REQUESTS,
    pick,
    require,
    smollm2_tokenizer,
    vocab_bits,
)

pytestmark = pytest.mark.slow

EOS = 2  # SmolLM2's <|im_end|>


@pytest.fixture(scope="module")
def sglang_env():
    require("sglang", "the SGLang grammar backend tests need the sglang package")
    from sglang.srt.plugins import load_plugins

    load_plugins()  # reads the sglang.srt.plugins entry points, as SGLang's launcher and scheduler do
    tokenizer = smollm2_tokenizer()
    return tokenizer, len(tokenizer) + PADDING


@pytest.fixture(scope="module")
def backends(sglang_env):
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
    from sglang.srt.server_args import ServerArgs

    tokenizer, vocab_size = sglang_env
    server_args = ServerArgs(model_path="unused", grammar_backend="cfgzip", device="cpu")
    # create_grammar_backend's two branches, with the arguments it passes (base_grammar_backend.py)
    ours = GRAMMAR_BACKEND_REGISTRY["cfgzip"](server_args, tokenizer, vocab_size, {EOS})
    theirs = XGrammarGrammarBackend(tokenizer, vocab_size=vocab_size, model_eos_token_ids=[EOS], any_whitespace=True)
    return ours, theirs, vocab_size


def _request(backend, key):
    """One request through SGLang's cache, as its GrammarManager does it."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result()
        backend.set_cache(key, value.copy())
    return value


def test_plugin_registers_the_backend_and_its_choice(sglang_env):
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY

    from cfgzip_lab.serving.sglang_backend import create_backend, register

    assert GRAMMAR_BACKEND_REGISTRY["cfgzip"] is create_backend
    register()  # a second load (scheduler process, re-import) adds no second choice
    assert GRAMMAR_BACKEND_CHOICES.count("cfgzip") == 1
    from sglang.srt.server_args import prepare_server_args  # the launcher's own argument parsing

    args = prepare_server_args(["--model-path", "unused", "--grammar-backend", "cfgzip", "--device", "cpu"])
    assert args.grammar_backend == "cfgzip"


def test_create_grammar_backend(sglang_env):
    """SGLang's own create_grammar_backend under --grammar-backend cfgzip (needs a torchvision that imports)."""
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or torchvision's 'operator ... does not exist'
        pytest.skip(
            "SGLang's config publishing imports sglang.srt.configs, which imports torchvision; "
            f"torchvision does not import here ({type(exc).__name__}: {exc}): PyPI's wheels link CUDA torch"
        )
    from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    from cfgzip_lab.serving.sglang_backend import CfgzipGrammarBackend

    tokenizer, vocab_size = sglang_env
    server_args = ServerArgs(model_path="dummy", grammar_backend="cfgzip", device="cpu")
    publish(server_args, role="scheduler")
    assert isinstance(create_grammar_backend(server_args, tokenizer, vocab_size, {EOS}), CfgzipGrammarBackend)


def test_mixed_batches_equal_xgrammar_backend_word_for_word(backends):
    """Five requests of five grammars decode in one batch; every step's batch mask, both backends."""
    ours, theirs, vocab_size = backends
    rows_ours = [_request(ours, key) for key in SGLANG_REQUESTS]
    rows_theirs = [_request(theirs, key) for key in SGLANG_REQUESTS]
    assert ours.engines.stats["builds"] == len(SGLANG_REQUESTS)
    again = _request(ours, SGLANG_REQUESTS[0])  # SGLang's cache: a copy, same engine, nothing rebuilt
    assert again.engine is rows_ours[0].engine and again is not rows_ours[0]
    assert ours.engines.stats["builds"] == len(SGLANG_REQUESTS)

    rngs = [random.Random(i) for i in range(len(rows_ours))]
    logits_gen = torch.Generator().manual_seed(0)
    steps, disagreements = 0, []
    for step in range(40):
        live = [i for i, g in enumerate(rows_theirs) if not g.is_terminated()]
        assert live == [i for i, g in enumerate(rows_ours) if not g.is_terminated()]
        if not live:
            break
        masks = []
        for rows in (rows_ours, rows_theirs):
            from sglang.srt.constrained.base_grammar_backend import GrammarRow

            first = rows[live[0]]
            mask = first.allocate_vocab_mask(vocab_size=vocab_size, batch_size=len(rows), device="cpu")
            first.fill_vocab_mask_batched([GrammarRow(row=i, grammar=rows[i]) for i in live], mask)
            masks.append(first.move_vocab_mask(mask, "cpu"))
        bits_ours, bits_theirs = vocab_bits(masks[0], vocab_size), vocab_bits(masks[1], vocab_size)
        for row, token in zip(*np.nonzero(bits_ours != bits_theirs)):
            # Only where XGrammar's own accept_token contradicts its mask (an XGrammar 0.2.8 bug: a
            # string's lookahead `(=[ \n\r\t]* [,}\]:])` refuses a token that accept_token takes);
            # the native engine follows the language there, as `cfgzip-lab verify` arbitrates.
            matcher = rows_theirs[row].matcher
            accepted = matcher.accept_token(int(token))
            if accepted:
                matcher.rollback(1)
            assert accepted == bool(bits_ours[row, token]), f"step {step}, row {row}, token {token}"
            disagreements.append((step, int(row), int(token)))
        steps += 1
        if step % 10 == 9:  # the masked logits too, through each backend's apply
            logits = torch.randn(len(rows_ours), vocab_size, generator=logits_gen)
            mine, ref = logits.clone(), logits.clone()
            rows_ours[live[0]].apply_vocab_mask(mine, masks[0])
            rows_theirs[live[0]].apply_vocab_mask(ref, masks[0])  # our mask through their apply
            assert torch.equal(mine, ref)
        for i in live:
            token = pick(masks[1][i].numpy(), vocab_size, rngs[i], {EOS}, stop_after=25, step=step)
            assert token is not None
            rows_ours[i].accept_token(token)
            rows_theirs[i].accept_token(token)
            if step % 7 == 6 and not rows_theirs[i].is_terminated():  # speculative decoding's rollback
                rows_ours[i].rollback(1)
                rows_theirs[i].rollback(1)
                rows_ours[i].accept_token(token)
                rows_theirs[i].accept_token(token)
    assert steps >= 20
    assert len(disagreements) < vocab_size // 100, disagreements[:5]  # rare, and each one arbitrated
    ended = [g.is_terminated() for g in rows_theirs]
    assert ended == [g.is_terminated() for g in rows_ours] and any(ended)  # some walks reached a stop token


def test_speculative_tree_walk_reads_our_bits(backends):
    """SGLang's traverse_tree pattern (spec_utils.py, which imports torchvision here, so it is
    driven by hand): fill a slice row per tree node, read a draft token's bit, accept, recurse,
    roll back. Drafts include a token the grammar refuses."""
    ours, theirs, vocab_size = backends
    key = SGLANG_REQUESTS[0]
    g_ours, g_theirs = _request(ours, key), _request(theirs, key)
    ids = [int(i) for i in _ids('{"name": 5, "age"')]  # drafts: the 5 does not fit (name is a string)
    masks = []
    for grammar in (g_ours, g_theirs):
        bitmask = grammar.allocate_vocab_mask(vocab_size, 4 + len(ids), "cpu")
        view = bitmask[2 : 2 + len(ids)]  # a slice of a bigger mask, as traverse_tree gets it
        accepted = 0
        for pos, token in enumerate(ids):
            grammar.fill_vocab_mask(view, pos)
            row = view[pos]
            if not (int(row[token // 32]) >> (token % 32)) & 1:
                break
            grammar.accept_token(token)
            accepted += 1
        grammar.rollback(accepted)
        masks.append((bitmask.clone(), accepted))
    assert masks[0][1] == masks[1][1] < len(ids)
    assert np.array_equal(vocab_bits(masks[0][0], vocab_size), vocab_bits(masks[1][0], vocab_size))


def _ids(text: str) -> list[int]:
    from cfgzip_lab.vocab_sources import load_vocab

    return load_vocab("smollm2").hf_tokenizer.encode(text, add_special_tokens=False)


def test_refused_request_fails_with_reason_and_backend_keeps_serving(backends):
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    ours, theirs, vocab_size = backends
    refused = _request(ours, REFUSED_REQUEST)
    assert isinstance(refused, InvalidGrammarObject)
    assert "max_tokens" in refused.error_message, refused.error_message
    assert not isinstance(_request(theirs, REFUSED_REQUEST), InvalidGrammarObject)  # XGrammar serves it
    again, hit = ours.get_cached_or_future_value(REFUSED_REQUEST, False)  # cached: aborted at once
    assert hit and isinstance(again, InvalidGrammarObject)
    bad = _request(ours, ("ebnf", 'root ::= "a" | '))
    assert isinstance(bad, InvalidGrammarObject) and bad.error_message
    bad_schema = _request(ours, ("json", "{not json"))
    assert isinstance(bad_schema, InvalidGrammarObject)
    grammar = _request(ours, ("regex", "[0-9]{2}"))  # the backend still serves
    mask = grammar.allocate_vocab_mask(vocab_size, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    allowed = np.flatnonzero(np.unpackbits(mask.numpy().view(np.uint8), bitorder="little")[:vocab_size])
    assert allowed.size > 0


def test_a_lark_grammar_in_the_ebnf_field_masks_as_xgrammar_reads_it(backends):
    """SGLang has no Lark field, so a Lark grammar arrives in the ebnf field; ours reads it with
    XGrammar's ``Grammar.from_lark``, so every mask along a walk equals SGLang's XGrammar backend
    given the EBNF XGrammar makes of it (that backend cannot read Lark itself)."""
    import xgrammar as xgr

    ours, theirs, vocab_size = backends
    mine = _request(ours, ("ebnf", LARK_CALL))
    ref = _request(theirs, ("ebnf", str(xgr.Grammar.from_lark(LARK_CALL))))
    rng, steps = random.Random(7), 0
    for step in range(30):
        masks = []
        for grammar in (mine, ref):
            mask = grammar.allocate_vocab_mask(vocab_size=vocab_size, batch_size=1, device="cpu")
            grammar.fill_vocab_mask(mask, 0)
            masks.append(mask)
        assert np.array_equal(vocab_bits(masks[0], vocab_size), vocab_bits(masks[1], vocab_size)), f"step {step}"
        token = pick(masks[1][0].numpy(), vocab_size, rng, {EOS}, stop_after=12, step=step)
        assert token is not None
        mine.accept_token(token)
        ref.accept_token(token)
        steps += 1
        assert mine.is_terminated() == ref.is_terminated()
        if ref.is_terminated():
            break
    assert steps >= 4 and ref.is_terminated()  # the walk wrote a whole call and stopped


def test_jump_forward_writes_what_xgrammars_backend_writes(backends):
    """SGLang's jump-forward protocol (try_jump_forward → jump_forward_str_state →
    jump_and_retokenize), both backends along the same walk: the forced text at every step, and
    after the retokenised jump both accept the same tokens."""
    ours, theirs, vocab_size = backends
    key = SGLANG_REQUESTS[0]  # a schema: '{"name": ' and the like are forced
    mine, ref = _request(ours, key), _request(theirs, key)
    tokenizer = smollm2_tokenizer()
    jumped = []
    rng = random.Random(3)
    for step in range(12):
        helpers = (mine.try_jump_forward(tokenizer), ref.try_jump_forward(tokenizer))
        assert (helpers[0] is None) == (helpers[1] is None), f"step {step}"
        if helpers[1] is not None:
            text, state = mine.jump_forward_str_state(helpers[0])
            assert (text, state) == ref.jump_forward_str_state(helpers[1])
            jumped.append(text)
            old = list(mine.accepted_tokens)  # as SGLang: the output so far, then retokenised with the text
            new = old + [int(i) for i in _ids(text)]
            for grammar in (mine, ref):
                grammar.jump_and_retokenize(old, new, state)
            assert mine.accepted_tokens == new
        if ref.is_terminated():
            break
        mask = ref.allocate_vocab_mask(vocab_size, 1, "cpu")
        ref.fill_vocab_mask(mask, 0)
        mine_mask = mine.allocate_vocab_mask(vocab_size, 1, "cpu")
        mine.fill_vocab_mask(mine_mask, 0)
        assert np.array_equal(vocab_bits(mask, vocab_size), vocab_bits(mine_mask, vocab_size)), f"step {step}"
        token = pick(mask[0].numpy(), vocab_size, rng, {EOS}, stop_after=10, step=step)
        mine.accept_token(token)
        ref.accept_token(token)
    assert jumped[:1] == ["{"], jumped  # the schema's opening brace is forced (whitespace may follow it)
