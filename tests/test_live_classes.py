"""cfgzip_lab.live_classes: the versions, their change ("+12 classes") and when to re-class."""

from __future__ import annotations

import pytest

from cfgzip_lab.live_classes import ClassDelta, ClassHistory, ClassVersion, LivePolicy


def v(sha: str, classes: int, tokenizer: str = "smollm2", seconds: float | None = 0.2) -> ClassVersion:
    return ClassVersion(sha, tokenizer, classes=classes, vocab_size=49152, seconds=seconds)


def test_a_version_s_ratio_is_tokens_per_class():
    assert v("a", 155).ratio == pytest.approx(49152 / 155)
    assert v("a", 0).ratio == 49152  # never a division by zero


@pytest.mark.parametrize(
    "before, after, words",
    [
        (143, 155, "+12 classes (143 → 155), compression 343.7× → 317.1×"),
        (1282, 1200, "-82 classes (1,282 → 1,200), compression 38.3× → 41.0×"),
        (155, 155, "no change (155 classes)"),
    ],
)
def test_delta_before__after__words(before, after, words):
    delta = ClassDelta(v("a", before), v("b", after))
    assert delta.describe() == words and delta.classes == after - before
    assert (delta.ratio > 0) == (after < before) or after == before


def test_history_compares_two_different_grammars():
    h = ClassHistory()
    assert h.delta() is None and h.latest is None
    h.add(v("a", 143))
    assert h.delta() is None  # the first version: nothing to compare with
    h.add(v("b", 150))
    h.add(v("b", 155, seconds=None))  # the same grammar again (a cache hit): replaces, no new version
    assert len(h) == 2 and h.latest.classes == 155 and h.latest.seconds is None
    assert h.delta().classes == 12
    h.add(v("c", 155, tokenizer="llama3"))
    assert h.delta() is None  # another tokenizer: not comparable
    h.add(v("a", 143, tokenizer="llama3"))
    assert h.delta().describe().startswith("-12 classes")
    h.clear()
    assert len(h) == 0 and h.delta() is None


def test_history_keeps_a_bounded_number_of_versions():
    h = ClassHistory(keep=3)
    for i in range(10):
        h.add(v(str(i), 100 + i))
    assert [x.grammar_sha for x in h.versions] == ["7", "8", "9"]


@pytest.mark.parametrize(
    "enabled, grammar_ok, current, busy, last, run, paused, reason",
    [
        (True, True, False, None, None, True, False, ""),
        (True, True, False, None, 0.4, True, False, ""),  # under the budget: live
        (True, True, False, None, 1.3, False, True, "ran past the 1 s budget (the last one took 1.30 s)"),
        (False, True, False, None, None, False, False, "live classes are off"),
        (True, False, False, None, None, False, False, "the grammar has errors"),
        (True, True, True, None, None, False, False, "the classes are current"),
        (True, True, False, "decode", None, False, False, "waiting: decode is running"),
    ],
)
def test_decide_enabled__ok__current__busy__last__run(enabled, grammar_ok, current, busy, last, run, paused, reason):
    decision = LivePolicy(budget_s=1.0).decide(
        enabled=enabled, grammar_ok=grammar_ok, classes_current=current, busy=busy, last_seconds=last
    )
    assert decision.run == run and decision.paused == paused
    assert reason in decision.reason and (decision.reason == "") == run
