"""Live classes in the workbench (issue 18.6), headless: each successful check re-classes by
itself (debounced, cancelled by the next edit, under a time budget that pauses it), and the view
beside the editor shows the count, the compression and "+N classes". Real classing (SmolLM2's
49,152 tokens) of a small grammar: each re-class is ~0.1-0.3 s."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ipywidgets")

from cfgzip_lab.pipeline import build_classes, compile_grammar  # noqa: E402
from cfgzip_lab.vocab_sources import load_vocab  # noqa: E402
from cfgzip_lab.widgets.session import WorkbenchSession  # noqa: E402

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""
ROBOT_STOP = ROBOT.replace('"go" ws number', '"go" ws number | "stop" | "halt" ws number')


def _classes_of(text: str) -> int:
    """The class count a plain classing gives (what live classing must show)."""
    return build_classes(compile_grammar(text), load_vocab("smollm2")).classes.num_classes


@pytest.fixture
def live(checker):
    s = WorkbenchSession(ROBOT, tokenizer="smollm2", checker=checker, live_classes=True)
    s.live_policy.delay_s = 0  # re-class right after the check (the debounce has its own test)
    s.live_policy.budget_s = 30  # the budget has its own test; a loaded CI runner must not pause this one
    yield s
    s.close()
    s.wait(30)


def _live_job(s: WorkbenchSession, *, appears_within: float = 0.0):
    """The session's live job, ended (waiting ``appears_within`` seconds for a debounced start)."""
    deadline = time.monotonic() + appears_within
    while "live classes" not in s.jobs and time.monotonic() < deadline:
        time.sleep(0.02)
    job = s.jobs.get("live classes")
    assert job is not None, s.live_decision
    assert job.wait(60), job
    return job


def test_a_check_re_classes_and_the_view_shows_count_ratio_and_change(live):
    from cfgzip_lab.widgets.live_view import LiveClassesView

    view = LiveClassesView(live)
    live.compile(xgrammar=False)
    job = _live_job(live)
    assert job.status == "done" and live.classes_current and live.classes_source == "live classing"
    first = live.classes.num_classes
    assert first == _classes_of(ROBOT)
    html = view.output.value
    assert f'cfgzip-live-count">{first:,}<' in html and f"{live.classes.compression_ratio:,.1f}×" in html
    assert "since the last version" not in html and "classed in" in html  # the first version

    live.compile(ROBOT_STOP, xgrammar=False)  # an edit that compiles: re-classed by itself
    assert _live_job(live).status == "done" and live.classes_current
    after = live.classes.num_classes
    assert after == _classes_of(ROBOT_STOP) and after != first
    html = view.output.value
    assert f'cfgzip-live-count">{after:,}<' in html
    assert f"{after - first:+,} classes ({first:,} → {after:,})" in html and "since the last version" in html

    live.compile(ROBOT, xgrammar=False)  # the edit undone: from the class cache directory now
    assert _live_job(live).status == "done" and live.classes.num_classes == first
    assert live.classes_source == "the class cache directory"
    html = view.output.value
    assert f"{first - after:+,} classes ({after:,} → {first:,})" in html and "from the class cache directory" in html


def test_an_edit_with_errors_keeps_the_last_classes_marked_earlier(live):
    from cfgzip_lab.widgets.live_view import live_html

    live.compile(xgrammar=False)
    _live_job(live)
    jobs = len(live.jobs)
    assert not live.compile(ROBOT + "oops ::= missing\n", xgrammar=False)
    assert live.jobs["live classes"].status == "done" and len(live.jobs) == jobs  # nothing new started
    html = live_html(live)
    assert "for an earlier version" in html and "re-classed after the next successful check" in html


def test_typing_is_debounced(live):
    live.live_policy.delay_s = 1.0
    live.compile(xgrammar=False)
    live.compile(ROBOT_STOP, xgrammar=False)  # the next keystrokes' check, within the delay
    assert "live classes" not in live.jobs  # not yet: 1 s after the last check
    job = _live_job(live, appears_within=20)
    assert job.grammar_sha == live.compiled.sha256  # the second text's, the first was never classed
    assert [v.grammar_sha for v in live.class_history.versions] == [live.compiled.sha256]


def _classing_until_cancelled(calls: list):
    """A stand-in for build_classes that runs until its cancel flag trips (as classing polls it):
    what a long classing looks like, whatever the machine's or the compiled kernel's speed."""

    def build(compiled, vocab, *, progress=None, cancel=None, **_):
        calls.append(time.perf_counter())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            progress(0, 1)
            if cancel():
                raise InterruptedError("classing cancelled")
            time.sleep(0.005)
        raise AssertionError("never cancelled")

    return build


def test_an_edit_cancels_the_re_class_under_way(live, monkeypatch):
    from cfgzip_lab.widgets import session as session_module

    calls: list[float] = []
    monkeypatch.setattr(session_module, "build_classes", _classing_until_cancelled(calls))
    live.use_class_cache = False
    live.compile(xgrammar=False)
    running = live.jobs["live classes"]
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls and running.running  # classing under way
    live.set_text(ROBOT_STOP)  # the next keystroke
    assert running.wait(10) and running.status == "cancelled" and running.stopped_after < 1.0
    assert live.classes is None and not (live.live_decision and live.live_decision.paused)  # not over budget


def test_past_the_budget_the_job_stops_itself_and_live_classes_pause(live, monkeypatch):
    from cfgzip_lab.widgets import session as session_module
    from cfgzip_lab.widgets.live_view import LiveClassesView

    view = LiveClassesView(live)
    live.use_class_cache = False
    live.live_policy.budget_s = 0.2
    with monkeypatch.context() as m:
        m.setattr(session_module, "build_classes", _classing_until_cancelled([]))
        live.compile(xgrammar=False)
        job = _live_job(live)
    assert job.status == "done" and job.result is None and live.classes is None  # stopped by its deadline
    assert 0.2 < live.live_last_seconds < 2.0, live.live_last_seconds
    assert live.live_decision.paused and "ran past the 0.2 s budget" in live.live_decision.reason
    assert "cfgzip-warn" in view.output.value and "budget" in view.output.value
    live.compile(ROBOT_STOP, xgrammar=False)  # the next edit: not even started
    assert live.jobs["live classes"] is job and live.live_decision.paused
    live.live_policy.budget_s = 30
    view.toggle.value = False  # the box, as a click sets it
    assert not live.live_enabled and "live classes are off" in view.output.value
    view.toggle.value = True  # on again: the pause is forgotten and this version is classed (for real)
    assert _live_job(live).status == "done" and live.classes_current and not live.live_decision.paused
    assert live.classes.num_classes == _classes_of(ROBOT_STOP)


def test_a_real_classing_over_the_budget_pauses_too(live):
    """Whether classing stops at its deadline (it polls the flag every 2,048 strings) or finishes
    first (a compiled classing of a small grammar), a run past the budget pauses live classing."""
    live.use_class_cache = False
    live.live_policy.budget_s = 0.0
    live.compile(xgrammar=False)
    job = _live_job(live)
    assert job.status == "done" and live.live_decision.paused and live.live_last_seconds > 0
    assert (job.result is None) == (live.classes is None)  # cut: no classes; finished: kept, and paused


def test_a_manual_classing_or_decode_run_is_not_shared_with_a_re_class(live):
    release = threading.Event()
    busy = live.start_job("decode", lambda job: release.wait(30))
    try:
        live.compile(xgrammar=False)
        assert "live classes" not in live.jobs and live.live_decision.reason == "waiting: decode is running"
    finally:
        release.set()
        busy.wait(10)
    assert live.live_reclass() is not None  # free again


def test_sessions_and_apps_differ_in_the_default(checker, monkeypatch):
    from cfgzip_lab.widgets import Workbench
    from cfgzip_lab.widgets import session as session_module

    monkeypatch.setattr(session_module, "default_checker", lambda: checker)  # no second XGrammar child

    s = WorkbenchSession(ROBOT, tokenizer="smollm2", checker=checker)
    try:
        s.compile(xgrammar=False)
        assert not s.live_enabled and "live classes" not in s.jobs  # a script's session: off
    finally:
        s.close()
    app = Workbench(ROBOT, delay=0, draft=False, editor="textarea")
    try:
        assert app.session.live_enabled and app.editor.live.toggle.value
        job = _live_job(app.session, appears_within=20)  # the start-up check re-classes too, after the debounce
        assert job.status == "done" and app.session.classes_current
        assert "classes" in app.editor.live.output.value
        app.set_live_classes(False)
        assert not app.session.live_enabled and not app.editor.live.toggle.value
    finally:
        app.close()
        app.session.wait(30)
