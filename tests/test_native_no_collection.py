"""A warm native step allocates no object Python's cyclic collector tracks (issue 33, TBM tail).

The collector starts when a tracked object is allocated past the young generation's threshold, so
a mask or a commit that allocates one can host a collection caused by whatever the caller
allocated between masks: MaskBench steps that did took 35 µs to 2.9 ms. Here, with the threshold
set to the current count (the next tracked allocation starts a collection), every memoised
``fill_next_token_bitmask`` and ``accept_token`` along MaskBench instances must start none; the
detector itself is checked on a step that allocates one (``Advancer.accept``'s tuple).
"""

from __future__ import annotations

import gc
import json

import pytest
from kernel_tools import llama3_or_skip
from paths import maskbench_row
from test_native_kernel import needs_kernel

FILES = ["Github_medium---o6271.json", "JsonSchemaStore---anywork-ac-1.1.json"]
"""MaskBench files whose steps hosted collections before (one counted, one plain)."""
STEPS = 24
"""Steps checked per file, along its first instances (each check is a full collection first)."""


def _collections_started(call, *args) -> int:
    """How many collections start inside ``call(*args)`` when the next tracked allocation starts one.

    A full collection first: it empties the free lists too (a tuple taken from one is not counted),
    so any tracked allocation is seen, not only those past a free list."""
    started = [0]

    def count(phase, info):
        if phase == "start":
            started[0] += 1

    keep = []
    old = gc.get_threshold()
    gc.callbacks.append(count)
    try:
        gc.collect()
        young = gc.get_count()[0]
        if young == 0:  # a threshold of 0 turns the collector off: hold one young object
            keep.append([None])
            young = gc.get_count()[0]
        gc.set_threshold(young)
        started[0] = 0
        call(*args)
        return started[0]
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(count)


@needs_kernel
@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_warm_steps_start_no_collection_on_maskbench(name):
    import cfgzip_lab as cz

    if not gc.isenabled():
        pytest.skip("the collector is off in this process")
    row = maskbench_row(name)
    vocab = llama3_or_skip()
    matcher = cz.matcher_for(json.dumps(row["schema"]), vocab, kind="json_schema", cache=False)
    assert matcher._advancer is not None, "the compiled accept step"
    bitmask = matcher.allocate_bitmask(1)
    instances = [list(vocab.encoder(json.dumps(t["data"], indent=None, ensure_ascii=False))) for t in row["tests"]]
    for tokens in instances:  # first visits: memos, rows, the bitmask's view
        matcher.reset()
        for token in tokens:
            matcher.fill_next_token_bitmask(bitmask)
            if not matcher.accept_token(token):
                break
    state = matcher._history[-1]
    assert _collections_started(matcher._advancer.accept, state, instances[0][0], 0) == 1, "the detector"
    steps = 0
    for tokens in instances:
        matcher.reset()
        for token in tokens[: STEPS - steps]:
            assert _collections_started(matcher.fill_next_token_bitmask, bitmask) == 0, (steps, "fill")
            accepted = []
            assert _collections_started(lambda: accepted.append(matcher.accept_token(token))) == 0, (steps, "accept")
            steps += 1
            if not accepted[0]:
                break
    assert steps == STEPS


@needs_kernel
def test_accept_state_is_accept_without_the_tuple():
    """``Advancer.accept_state`` gives ``accept``'s state and, in ``last_created``, its node count."""
    from toy_vocab import JSON_PIECES

    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab import vocab_from_bytes

    vocab = vocab_from_bytes(JSON_PIECES + [b""], stop_ids=[len(JSON_PIECES)], name="accept-state-toy")
    grammar = 'root ::= "[" ("1" | "{}")* "]"'
    states = []
    for use_state in (False, True):
        compiled = compile_grammar(grammar)
        result = build_classes(compiled, vocab)
        engine = build_native_engine(compiled, vocab, result.classes, classing=result)
        advancer = engine.walker._advancer
        assert advancer is not None
        state, spent, seen = engine.walker.initial, 0, []
        for token in [*vocab.encode("[11{}1]"), len(JSON_PIECES), 0]:
            if use_state:
                new, created = advancer.accept_state(state, token, spent), advancer.last_created
            else:
                new, created = advancer.accept(state, token, spent)
            seen.append((new, created))
            if new > 0:
                state, spent = new, spent + created
        states.append(seen)
    assert states[0] == states[1] and any(created for _, created in states[0])
