"""Honest state in the workbench (issue 21): one draft per notebook that the start-up check never
overwrites, "untitled" once the text is typed over, staleness keyed by the EBNF the engines see,
generated strings re-checked, and "does it pay?" on both bases side by side. Headless; real
XGrammar in its child process."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ipywidgets")

from cfgzip_lab.widgets.drafts import draft_path_for, notebook_key, read_draft  # noqa: E402
from cfgzip_lab.widgets.session import Stamp, WorkbenchSession, typed_over  # noqa: E402

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""

JSON_LIKE = "".join(f'rule{i} ::= "{i}" | rule{i + 1}\n' for i in range(30)) + 'rule30 ::= "end"\n'
SCHEMA = {
    "type": "object",
    "description": "a meeting",
    "properties": {"title": {"type": "string", "description": "what it is about"}, "size": {"type": "integer"}},
    "required": ["title"],
}


@pytest.mark.parametrize(
    "before, after, over",
    [
        ("root ::= [a]\n", "root ::= [ab]\n", False),  # one character typed
        ("root ::= [a]\nx ::= [b]\n", "root ::= [a]\n", False),  # a line deleted
        ("root ::= [a]\n", "r", True),  # select all, type
        ("root ::= [a]\n", "", True),  # select all, delete
        ("root ::= [a]\nx ::= [b]\n", 'command ::= "go"\n', True),  # pasted over
        ("", "root ::= x", False),  # nothing to type over
        # two edits in one update (the browser sends the latest text while one is in flight):
        # a rule typed at the end, then one at the start, no common prefix or suffix left
        (JSON_LIKE, "first ::= x\n" + JSON_LIKE[:-1] + '\nlast ::= "y"', False),
    ],
)
def test_typed_over_is_one_edit_that_replaces_most_of_the_text(before, after, over):
    assert typed_over(before, after) is over


def test_a_typed_over_text_is_untitled_and_not_read_as_the_file_before(checker, tmp_path):
    """A GBNF file loaded, then a DSL typed over it: the label says untitled, the text is read
    as EBNF (not GBNF from the old file name), the summary (the report) says untitled."""
    gbnf = tmp_path / "vllm-sql.gbnf"
    gbnf.write_text('root ::= "SELECT " [a-z]+\n', encoding="utf-8")
    s = WorkbenchSession(checker=checker)
    try:
        s.load_file(gbnf)
        assert s.kind == "gbnf" and s.provenance == str(gbnf)
        s.set_text('root ::= "SELECT " [a-z]+ ";"\n')  # a small edit: still the file, edited
        assert s.provenance == f"{gbnf} (edited)" and s.kind == "gbnf"
        s.set_text("")  # select all, delete: what follows is typed
        s.set_text(ROBOT[:20])
        s.set_text(ROBOT)
        assert s.provenance == "untitled" and not s.edited and s.kind == "ebnf"
        assert s.compile(xgrammar=False) and s.summary()["grammar_source"] == "untitled"
        s.save_file(tmp_path / "robot.ebnf")
        assert s.provenance == str(tmp_path / "robot.ebnf")
    finally:
        s.close()


def test_one_draft_per_notebook_never_overwritten_by_the_start_up_check(checker, tmp_path, monkeypatch):
    """Type, "restart the kernel" (a new app for the same notebook), and the draft is still
    there to restore; another notebook (another clone) has its own draft."""
    from cfgzip_lab.widgets import Workbench

    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "clone-a" / "notebooks" / "workbench.ipynb"))
    first = Workbench(delay=0, editor="textarea")
    try:
        path = first.session.draft_path
        assert path == draft_path_for(notebook_key()) and path.parent == tmp_path / "cache" / "drafts"
        assert read_draft(path) is None  # the start-up check wrote nothing
        first.editor.text.value = ROBOT  # typed (pasted over the default grammar)
        draft = read_draft(path)
        assert (
            draft is not None and draft.text == ROBOT and draft.notebook.endswith("clone-a/notebooks/workbench.ipynb")
        )
        first.editor.load_bundled("xml")  # a load is not typing: the draft stays
        assert read_draft(path).text == ROBOT
    finally:
        first.close()
    again = Workbench(delay=0, editor="textarea")  # the kernel restarted: default grammar, start-up check
    try:
        assert read_draft(path).text == ROBOT  # not overwritten by the start-up check
        assert "a draft of this notebook is on disk" in again.editor.draft_note.value
        assert again.editor.restore_draft() and again.session.text == ROBOT
        assert again.session.provenance == "untitled" and again.session.grammar_ok
        assert "draft restored" in again.editor.draft_note.value
    finally:
        again.close()
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "clone-b" / "notebooks" / "workbench.ipynb"))
    other = Workbench(delay=0, editor="textarea")
    try:
        assert other.session.draft_path != path and other.session.draft() is None
        assert not other.editor.restore_draft() and "no draft" in other.editor.status.value
    finally:
        other.close()


def test_rerunning_the_cell_after_a_browser_reload_shows_the_same_workbench(checker, tmp_path, monkeypatch):
    """Issue 35.2: F5 with the kernel running, then Run All, built an empty workbench (its file,
    tests and samples lost); the notebook's open workbench comes back, everything in it."""
    from cfgzip_lab.grammar.testlist import GrammarTest
    from cfgzip_lab.widgets import Workbench

    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "recipes.ipynb"))
    grammar = tmp_path / "robot.ebnf"
    grammar.write_text(ROBOT, encoding="utf-8")
    app = Workbench(delay=0, editor="textarea")
    try:
        app.editor.load_file(str(grammar))
        app.session.set_tests([GrammarTest("go 1"), GrammarTest("go x", "reject")])
        app.samples.set_samples(["turn left", "go 2"])
        again = Workbench(delay=0, editor="textarea")  # the cell run again after F5
        assert again is app and again.session.provenance == str(grammar)
        assert [t.text for t in again.session.tests] == ["go 1", "go x"]
        assert again.samples.text.value == app.samples.text.value and "turn left" in again.samples.text.value
        other = Workbench(ROBOT, delay=0, editor="textarea", draft=False)  # asked for a text: a new one
        assert other is not app
        other.close()
    finally:
        app.close()
    fresh = Workbench(delay=0, editor="textarea")  # closed: the next one is new, from the saved session
    try:
        assert fresh is not app and fresh.session.provenance == str(grammar)
        assert [t.text for t in fresh.session.tests] == ["go 1", "go x"] and "turn left" in fresh.samples.text.value
    finally:
        fresh.close()


def test_a_draft_keeps_the_input_kind(checker, tmp_path):
    draft = tmp_path / "d.json"
    s = WorkbenchSession(ROBOT, checker=checker, draft_path=draft)
    s.set_input_kind("gbnf")
    s.compile('root ::= "\\x41" [0-9]\n', xgrammar=False)
    assert json.loads(draft.read_text())["kind"] == "gbnf"
    fresh = WorkbenchSession(checker=checker, draft_path=draft)
    assert fresh.restore_draft() and fresh.kind == "gbnf" and fresh.compile(xgrammar=False)
    s.close()
    fresh.close()


def test_staleness_follows_the_ebnf_the_engines_see_not_the_text(checker):
    """Editing a schema's description leaves XGrammar's grammar, hence every result, current;
    changing a property makes them out of date; the stamp is the EBNF's sha256."""
    text = json.dumps(SCHEMA, indent=2)
    s = WorkbenchSession(text, checker=checker)
    try:
        assert s.compile(xgrammar=False) and s.kind == "json_schema"
        assert s.grammar_sha == s.compiled.sha256  # the EBNF's hash, not the schema text's
        kept = s.keep("benchmark", {"rows": []})
        reworded = json.dumps(dict(SCHEMA, description="a meeting, with more words"), indent=2)
        s.set_text(reworded)
        assert s.text != text and s.is_current(kept.stamp) and s.current("benchmark") is not None
        assert s.stale_note(kept.stamp) == ""
        assert s.compile(xgrammar=False) and s.is_current(s.compiled_stamp)
        changed = dict(SCHEMA, properties={**SCHEMA["properties"], "size": {"type": "string"}})
        s.set_text(json.dumps(changed, indent=2))
        assert not s.is_current(kept.stamp) and s.current("benchmark") is None
        assert s.stale_note(kept.stamp).startswith("out of date (made for another version of the grammar")
        s.set_text(text[:-3])  # a broken schema is out of date too, never "current"
        assert not s.is_current(kept.stamp)
        # an EBNF text is its own EBNF: a comment is a change the engines see
        s.set_input_kind("ebnf")
        s.set_text(ROBOT)
        stamp = s.grammar_stamp
        s.set_text(ROBOT + "# note\n")
        assert not s.is_current(stamp) and s.is_current(Stamp(s.sha_for(ROBOT + "# note\n")))
    finally:
        s.close()


def test_generated_strings_are_rechecked_when_the_grammar_changes(checker):
    from cfgzip_lab.widgets.samples import SamplesPanel

    s = WorkbenchSession(ROBOT, checker=checker)
    try:
        s.compile(xgrammar=False)
        panel = SamplesPanel(s)
        generated = panel.generate_samples(6, seed=3)
        assert generated and all(r.ours.kind == "accepted" and r.agree for r in generated)
        with_go = [r.text for r in generated if "go" in r.text]
        assert with_go, [r.text for r in generated]
        s.compile(ROBOT.replace('| "go" ws number', ""), xgrammar=False)  # no more "go"
        again = {r.text: r for r in panel.generated}
        assert set(again) == {r.text for r in generated}  # the same strings, judged again
        for text in with_go:
            assert again[text].ours.kind == "rejected" and again[text].agree, again[text]
        assert "re-checked for the current grammar" in panel.generated_output.value
        assert "rejected" in panel.generated_output.value
        s.compile(ROBOT.replace("ws ::=", "ws :="), xgrammar=False)  # broken: marked, not judged
        assert all(r.xgrammar is None for r in panel.generated)
        assert "generated strings out of date" in panel.generated_output.value
        s.compile(ROBOT, xgrammar=False)
        assert all(r.ours.kind == "accepted" for r in panel.generated)
    finally:
        s.close()
        s.wait(30)


def test_does_it_pay_shows_both_bases_side_by_side(checker):
    """The decoder's basis and the benchmark's, each labelled, with engine/plain measured on it,
    and the ratio between the two bases for this grammar, never one replacing the other."""
    from cfgzip_lab.widgets.export import build_report
    from cfgzip_lab.widgets.timings import TimingsPanel, basis_ratio, pays

    s = WorkbenchSession(ROBOT, checker=checker, tokenizer="smollm2")
    try:
        s.compile(xgrammar=False)
        assert s.run_classing(wait=True).status == "done"
        panel = TimingsPanel(s)
        s.record_timing("compressed_compile", 0.05)
        s.decoder_stamp = s.stamp
        s.decode_log = [
            {"step": i + 1, "token_id": 1, "plain_s": 400e-6, "compressed_s": 1600e-6, "identical": True}
            for i in range(4)
        ]
        s.emit("decoder")
        (decoder,) = pays(s)
        assert decoder["basis_kind"] == "decoder" and decoder["ratio"] == pytest.approx(4.0)
        assert decoder["tokens"] == "never" and "benchmark basis: not measured yet" in panel.pays.value
        s.keep(
            "benchmark",
            {
                "rows": [
                    {
                        "batch_size": 1,
                        "steps": 8,
                        "plain_us": 100.0,
                        "plain_p90_us": 120.0,
                        "compressed_us": 20.0,
                        "compressed_p90_us": 25.0,
                        "speedup": 5.0,
                        "native_us": None,
                    }
                ],
                "classes": s.classes.num_classes,
                "tokenizer": "smollm2",
                "V": s.vocab.vocab_size,
            },
        )
        panel.refresh()
        verdicts = pays(s)
        assert [v["basis_kind"] for v in verdicts] == ["decoder", "benchmark"]
        bench = verdicts[1]
        assert bench["ratio"] == pytest.approx(0.2) and isinstance(bench["tokens"], int)
        assert basis_ratio(s) == pytest.approx(4.0)
        html = panel.pays.value
        assert "decoder, 4 steps" in html and "benchmark, batch 1" in html
        assert "4.00× plain" in html and "0.20× plain" in html and "never pays" in html and "pays after" in html
        assert "is <b>4.0×</b> the benchmark&#x27;s" in html or "is <b>4.0×</b> the benchmark's" in html
        report = build_report(s)
        assert report["pays_after_tokens"] == {
            "decoder": {"compressed": None},
            "benchmark": {"compressed": bench["tokens"]},
        }
    finally:
        s.close()
        s.wait(30)


@pytest.mark.slow
def test_cancel_stops_within_one_step_20_times_and_rollback_is_reported(checker):
    """Run N, then Cancel, 20 times in a row: each run stops at most one step after the Cancel
    (the step in flight), and the status says so with the measured delay; Rollback moves the
    status with it. SmolLM2 on the CPU, greedy."""
    pytest.importorskip("cfgzip_lab.decode")
    import time

    from cfgzip_lab.widgets.decoder import DecoderPanel

    s = WorkbenchSession(ROBOT, checker=checker, tokenizer="smollm2")
    try:
        s.compile(xgrammar=False)
        panel = DecoderPanel(s, prompt="Robot commands:", top_k=3)
        assert panel.step().token_id is not None
        delays, after = [], []
        for _ in range(20):
            panel.reset()
            job = panel.run_steps(2000)
            deadline = time.monotonic() + 120
            while job.running and job.done < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            panel.cancel()
            assert job.wait(60)
            if job.status == "done":  # a stop token came first: nothing to cancel
                continue
            assert job.status == "cancelled"
            assert job.steps_after_cancel <= 1, (job.done_at_cancel, job.done)
            delays.append(job.stopped_after)
            after.append(job.steps_after_cancel)
            assert f"cancelled at step {len(panel.results)} ({job.steps_after_cancel} step" in panel.status.value
        assert len(delays) >= 15, "the model kept ending before Cancel"
        print(f"Cancel: {len(delays)} runs, steps after Cancel {after}, stopped after max {max(delays) * 1e3:.0f} ms")
        panel.reset()
        panel.step(), panel.step(), panel.step()
        panel.rollback()
        assert "rolled back 1 step: at step 2" in panel.status.value
        panel.rollback(5)
        assert "rolled back 2 steps: at the prompt" in panel.status.value and panel.results == []
        assert "nothing to roll back" in (panel.rollback() or panel.status.value)
    finally:
        s.close()
        s.wait(30)
