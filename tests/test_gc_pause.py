"""Every public build path runs with the cyclic collector paused (cfgzip_lab._gc): in a process that
holds torch's and XGrammar's ~220,000 objects a full collection costs ~100-270 ms, and one landing in
a 2 ms schema build was the tail of time-to-first-mask (issue 33). With the collector's threshold at
1, any allocation outside a pause triggers a collection, so each build below would be seen paying one."""

from __future__ import annotations

import gc
import sys

import pytest

from cfgzip_lab._gc import _SPLICES
from cfgzip_lab.engine import compile_engines
from cfgzip_lab.native.engine import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

GRAMMAR = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | "\\"" [a-z]* "\\""\n'


BUILDS = (compile_grammar, build_classes, build_native_engine, compile_engines)
_CODES = {getattr(f, "__wrapped__", f).__code__: getattr(f, "__wrapped__", f).__name__ for f in BUILDS}


def _builds_on_the_stack() -> list[str]:
    frame, found = sys._getframe(1), []
    while frame is not None:
        if frame.f_code in _CODES:
            found.append(_CODES[frame.f_code])
        frame = frame.f_back
    return found


@pytest.fixture()
def collections_seen():
    """Collections that start while the test body runs, with the collector eager (threshold 1):
    (generation, the builds on the stack when it started)."""
    seen: list[tuple[int, list[str]]] = []

    def note(phase, info):
        if phase == "start":
            seen.append((info["generation"], _builds_on_the_stack()))

    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*before)
        if not was_enabled:
            gc.disable()


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes([b"[", b"]", b",", b"1", b"23", b'"', b'"a', b"ab", b"x", b""], stop_ids=[9], name="toy")


def test_the_probe_sees_a_collection_inside_a_function_it_watches(collections_seen, monkeypatch) -> None:
    def compile_grammar_unpaused():
        return [[i] for i in range(100)]  # tracked allocations, no pause: the eager collector runs

    monkeypatch.setitem(_CODES, compile_grammar_unpaused.__code__, "compile_grammar_unpaused")
    compile_grammar_unpaused()
    assert any(builds == ["compile_grammar_unpaused"] for _, builds in collections_seen), collections_seen


def test_no_build_pays_a_collection(collections_seen, toy) -> None:
    grammar = compile_grammar(GRAMMAR)
    result = build_classes(grammar, toy)
    engine = build_native_engine(grammar, toy, result.classes, classing=result)
    engines = compile_engines(grammar.text, toy, result.classes)
    assert collections_seen, "the eager collector ran between the builds"
    inside = [(generation, builds) for generation, builds in collections_seen if builds]
    assert inside == [], inside
    assert engine.vocab_size == engines.plain().vocab_size == toy.vocab_size
    assert gc.isenabled()  # the collector is back after the last build


@pytest.fixture()
def lazy_collector():
    """The collector on, with thresholds no test body reaches: an object stays in the generation it was put in."""
    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.enable()
    gc.set_threshold(1_000_000, 1_000, 1_000)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not was_enabled:
            gc.disable()


@pytest.mark.skipif(not _SPLICES, reason="a free-threaded interpreter: nothing promoted (cfgzip_lab._gc)")
def test_what_a_build_leaves_alive_is_in_the_oldest_generation(lazy_collector, toy) -> None:
    # not traversed by the young collection the build's allocations would start (cfgzip_lab._gc)
    grammar = compile_grammar(GRAMMAR)
    result = build_classes(grammar, toy)
    assert any(o is grammar for o in gc.get_objects(generation=2))
    assert any(o is result for o in gc.get_objects(generation=2))
    assert not any(o is grammar for o in gc.get_objects(generation=0))
    made_after = [[1]]  # the collector works as before past the build
    assert any(o is made_after for o in gc.get_objects(generation=0))


def test_objects_the_process_froze_stay_frozen(lazy_collector) -> None:
    frozen_here = [[2]]
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        grammar = compile_grammar(GRAMMAR)
        # the build moved nothing: an unfreeze would have given the process's frozen objects back
        assert not any(o is frozen_here for o in gc.get_objects())
        assert any(o is grammar for o in gc.get_objects(generation=0))  # promoted by no one: left young
    finally:
        gc.unfreeze()
