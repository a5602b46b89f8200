"""The author's session that lasts (issue 35.2) and the Verify button (issue 35, 'What to build' 3).

A kernel restart is a new ``Workbench()`` for the same notebook and state folder: the grammar text,
its file, its input kind, the samples, the tests, the tokenizer and the decoder's prompt come back,
and classes come from the class cache directory. Headless; real XGrammar in its child process."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from toy_vocab import ARITH_TOKENS, SPECIAL_ID, STOP_ID  # noqa: E402

from cfgzip_lab.grammar.testlist import GrammarTest  # noqa: E402
from cfgzip_lab.verify import VerifyReport, verify_engines  # noqa: E402
from cfgzip_lab.widgets.persisted_session import (  # noqa: E402
    SessionState,
    read_state,
    saved_session,
    session_key,
    session_path,
    write_state,
)

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""
RECIPE = 'root ::= "mix " qty\nqty ::= [0-9]+\n'


@pytest.fixture
def notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "recipes.ipynb"))
    return tmp_path / "state"


def workbench(state_dir, **kw):
    from cfgzip_lab.widgets import Workbench

    kw.setdefault("tokenizer", "llama3")
    return Workbench(delay=0, editor="textarea", draft=False, persist=True, state_dir=state_dir, live=False, **kw)


def test_a_restart_brings_back_text_file_kind_samples_tests_tokenizer_and_prompt(checker, tmp_path, notebook):
    grammar = tmp_path / "robot.gbnf"
    grammar.write_text(ROBOT, encoding="utf-8")
    app = workbench(notebook)
    try:
        app.editor.load_file(str(grammar))
        app.editor.kind.value = "ebnf"  # a .gbnf file read as EBNF
        app.editor.text.value = ROBOT + "# edited, not saved\n"
        app.samples.set_samples(["turn left", "go 2\n"])
        app.samples.set_start_rule("command")  # the samples' start rule (issue 35) is kept too
        app.session.set_tests(
            [GrammarTest("go 1"), GrammarTest("go x", "reject", note="no number"), GrammarTest("left", start="turn")]
        )
        app.classes.tokenizer.value = "llama3"
        app.decoder.prompt.value = "A robot's moves:"
        assert app.save_session()
    finally:
        app.close()
    again = workbench(notebook, tokenizer="smollm2")  # a new kernel: nothing but the state folder
    try:
        s = again.session
        assert again is not app
        assert s.text == ROBOT + "# edited, not saved\n" and s.provenance == f"{grammar} (edited)"
        assert s.input_kind == "ebnf" and s.grammar_ok
        assert again.samples.text.value == app.samples.text.value and "turn left" in again.samples.text.value
        assert [(t.text, t.expect, t.note, t.start) for t in s.tests] == [
            ("go 1", "accept", "", ""),
            ("go x", "reject", "no number", ""),
            ("left", "accept", "", "turn"),
        ]
        assert s.samples_start == "command" and again.samples.start_rule.value == "command"
        assert s.tokenizer == "llama3" and again.classes.tokenizer.value == "llama3"
        assert again.decoder.prompt.value == "A robot's moves:" and s.decoder_prompt == "A robot's moves:"
        assert "session restored (robot.gbnf, 3 tests, 2 samples" in again.editor.draft_note.value
        assert [o.passed for o in s.test_outcomes] == [True, True, True]  # the start-up check ran them
    finally:
        again.close()


def test_changes_are_saved_by_themselves_debounced(checker, notebook):
    app = workbench(notebook, text=ROBOT)
    try:
        app.store.delay = 0.3
        app.samples.set_samples(["go 3"])
        app.decoder.prompt.value = "Moves:"
        assert app.store.saves == 0  # debounced: the changes wait for a quiet moment
        deadline = time.monotonic() + 10
        while app.store.saves == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        state, _ = saved_session(app.store.notebook, notebook)
        assert app.store.saves == 1 and state.prompt == "Moves:" and state.samples == "go 3"
        assert not list(notebook.glob("*.tmp"))  # written atomically: no temporary file left
    finally:
        app.close()


def test_two_files_keep_two_sessions(checker, tmp_path, notebook):
    robot, recipe = tmp_path / "robot.ebnf", tmp_path / "recipe.ebnf"
    robot.write_text(ROBOT, encoding="utf-8")
    recipe.write_text(RECIPE, encoding="utf-8")
    app = workbench(notebook)
    try:
        app.editor.load_file(str(robot))
        app.session.set_tests([GrammarTest("go 1")])
        app.samples.set_samples(["turn right"])
        app.editor.load_file(str(recipe))  # no session yet: the panels keep what they show
        app.session.set_tests([GrammarTest("mix 2"), GrammarTest("mix", "prefix")])
        app.samples.set_samples(["mix 10"])
        app.editor.text.value = RECIPE + "# unsaved\n"
        app.editor.load_file(str(robot))  # robot's own session comes back
        assert [t.text for t in app.session.tests] == ["go 1"] and app.samples.text.value.strip() == "turn right"
        assert "session is back (robot.ebnf, 1 test, 1 sample" in app.editor.draft_note.value
        app.editor.load_file(str(recipe))  # recipe's, with its unsaved edit
        assert [t.text for t in app.session.tests] == ["mix 2", "mix"]
        assert app.session.text == RECIPE + "# unsaved\n" and app.session.provenance == f"{recipe} (edited)"
        assert "unsaved edits" in app.editor.draft_note.value
        assert app.editor.text.value == RECIPE + "# unsaved\n"
    finally:
        app.close()
    # a new kernel: the last one (recipe) is where it starts; robot's session is still its own
    for path, tests in ((recipe, ["mix 2", "mix"]), (robot, ["go 1"])):
        state, message = read_state(session_path(notebook, session_key(str(path), "")))
        assert message == "" and [t["text"] for t in state.tests] == tests
    recipe.write_text(RECIPE.replace("mix", "stir"), encoding="utf-8")  # changed on disk since
    again = workbench(notebook)
    try:
        assert again.session.text == RECIPE + "# unsaved\n"  # the session is the author's, as they left it
        again.editor.load_file(str(robot))
        again.editor.load_file(str(recipe))
        assert again.session.text == RECIPE.replace("mix", "stir")  # the file on disk wins…
        assert "changed on disk" in again.editor.draft_note.value
        assert again.editor.undo_load() and again.session.text == RECIPE + "# unsaved\n"  # …the edits one Undo away
        assert (
            again.session.provenance == f"{recipe} (edited)" and "changed on disk" not in again.editor.draft_note.value
        )
        assert [t.text for t in again.session.tests] == ["mix 2", "mix"]
    finally:
        again.close()


def test_a_corrupt_session_is_kept_aside_with_a_clear_message(checker, notebook):
    app = workbench(notebook, text=ROBOT)
    try:
        app.session.set_tests([GrammarTest("go 1")])
    finally:
        app.close()
    path = app.store.notebook_path
    path.write_text('{"text": "root ::= ', encoding="utf-8")  # cut short (a full disk, an editor)
    again = workbench(notebook)
    try:
        note = again.editor.draft_note.value
        assert "could not be read" in note and "kept as" in note and "nothing in it was used" in note
        aside = list(notebook.glob(path.name + ".corrupt-*"))
        assert len(aside) == 1 and aside[0].read_text(encoding="utf-8") == '{"text": "root ::= '
        assert again.session.source == "json"  # started as without one
        again.save_session()
        assert read_state(path)[0].source == "json" and aside[0].exists()  # a new file; the old one stays
    finally:
        again.close()
    for bad, why in (
        ("[1, 2]", "not a workbench session"),
        ('{"text": "x", "tests": [{"text": "a", "expect": "?"}]}', ""),
    ):
        path.write_text(bad, encoding="utf-8")
        state, message = read_state(path)
        assert state is None and "could not be read" in message and why in message and not path.exists()


def test_session_state_round_trips_and_writes_atomically(tmp_path):
    state = SessionState("root ::= [a]\n", source="untitled", samples="a\n-----\naa", tests=[{"text": "a"}], prompt="p")
    path = tmp_path / "s" / "x.json"
    assert write_state(path, state)
    back, message = read_state(path)
    assert message == "" and back == state and json.loads(path.read_text())["version"] == 1
    assert [t.text for t in back.grammar_tests()] == ["a"]
    assert session_key("untitled", "nb") != session_key("untitled", "other") != session_key("json", "nb")
    assert session_key(str(tmp_path / "a.ebnf"), "nb") == session_key(str(tmp_path / "a.ebnf"), "other")


def test_a_restart_reads_classes_from_the_cache_directory(checker, notebook):
    app = workbench(notebook, text=ROBOT)
    try:
        app.run_classing(wait=True)
        assert app.session.classes_source == "classing" and app.session.classes_current
    finally:
        app.close()
    again = workbench(notebook)
    try:
        job = again.session.jobs.get("classing")
        assert job is not None and job.wait(60) and job.status == "done"
        s = again.session
        assert s.classes_current and s.classes_source == "the class cache directory" and "classing" not in s.timings
        assert s.classes.num_classes == app.session.classes.num_classes
    finally:
        again.close()


# -- Verify ------------------------------------------------------------------------------------


@pytest.fixture
def toy_classes(checker):
    """The robot grammar classed over a small hand-made vocabulary (no tokenizer load)."""
    from cfgzip_lab.pipeline import build_classes
    from cfgzip_lab.vocab import vocab_from_bytes
    from cfgzip_lab.widgets.session import WorkbenchSession

    tokens = ARITH_TOKENS[:-2] + [b"", b"", b"go", b"turn", b" left", b"right", b";", b" ", b"go 1", b"9"]
    vocab = vocab_from_bytes(tokens, stop_ids=[STOP_ID], special_ids=[SPECIAL_ID], vocab_size=len(tokens), name="toy")
    s = WorkbenchSession(ROBOT, checker=checker)
    assert s.compile(xgrammar=False)
    s.set_classes(build_classes(s.compiled, vocab).classes, vocab, "classing")
    yield s
    s.close()


def test_verify_says_in_words_what_it_checked(toy_classes):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(toy_classes)
    job = panel.verify(walks=5, wait=True)
    assert job.status == "done"
    report = toy_classes.current("verify")
    assert isinstance(report, VerifyReport) and report.ok and report.walks == 5 and report.steps_checked > 0
    words = panel.verify_words()
    assert words[0].startswith("Lossless: every checked step masks exactly as plain XGrammar")
    assert f"{report.steps_checked:,} steps checked over 5 walks" in words[0]
    assert "Lossless" in panel.verify_output.value and panel.verify_progress.value == 1000
    assert not panel.verify_button.disabled and panel.verify_cancel_button.disabled
    toy_classes.set_text(ROBOT + 'extra ::= "x"\n')  # another grammar: the result says it is old
    toy_classes.compile(xgrammar=False)
    assert panel.verify_words()[0].startswith("Out of date (made for another version of the grammar")


def test_verify_cancel_stops_between_steps_and_says_so(toy_classes):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(toy_classes)

    def cancel_after_two() -> None:
        job = toy_classes.jobs.get("verify")
        if job is not None and job.running and job.done >= 2:
            job.cancel()

    toy_classes.on("job", cancel_after_two)
    job = panel.verify(walks=500, wait=True)
    assert job.status == "cancelled" and job.steps_after_cancel == 0
    report = toy_classes.kept["verify"].value
    assert report.cancelled and report.walks == 2 and report.mismatches == 0
    assert panel.verify_words()[0].startswith("Cancelled after 2 of 500 walks: no mismatch so far")
    assert "cfgzip-warn" in panel.verify_output.value


def test_verify_needs_current_classes(checker):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel
    from cfgzip_lab.widgets.session import WorkbenchSession

    s = WorkbenchSession(ROBOT, checker=checker)
    try:
        s.compile(xgrammar=False)
        panel = ClassesPanel(s)
        panel.verify_button.click()
        assert s.last_error.where == "verify" and "run classing first" in s.last_error.message
    finally:
        s.close()


def test_verify_engines_reports_a_first_mismatch_in_words():
    report = VerifyReport(steps_checked=40, mismatches=2, walks=3, engine="compressed")
    report.first_mismatch = {
        "walk": "walk 1",
        "step": 7,
        "check": "mask",
        "prefix": "go ",
        "plain_only": [{"id": 5}],
        "compressed_only": [],
        "differing_bits": 1,
    }
    words = report.in_words()
    assert words[0].startswith("Not lossless: 2 mismatches — 40 steps checked over 3 walks")
    assert words[1] == (
        "First mismatch: walk 1, step 7, mask check, after 'go ': 1 token(s) differ "
        "(1 allowed only by plain XGrammar, 0 only by the compressed engine)."
    )
    assert verify_engines.__kwdefaults__["cancel"] is None and verify_engines.__kwdefaults__["progress"] is None
