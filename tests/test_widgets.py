"""Headless tests of the workbench: build each panel, set values, call the method behind each
button, assert on the session and on the figures' data. No browser, no kernel."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from cfgzip_lab.pipeline import bundled_grammars  # noqa: E402
from cfgzip_lab.widgets._format import fmt_seconds  # noqa: E402
from cfgzip_lab.widgets.session import Stamp, WorkbenchError, WorkbenchSession  # noqa: E402

# A JSON grammar of its own, so that edits to grammars/json.ebnf do not move these tests.
JSON_TEXT = r"""# JSON (the test's own copy)
root ::= object | array
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws (member (ws "," ws member)* ws)? "}"
member ::= string ws ":" ws value
array ::= "[" ws (value (ws "," ws value)* ws)? "]"
string ::= "\"" char* "\""
char ::= [^"\\\0-\x1f] | "\\" escape
escape ::= ["\\/bfnrt] | "u" hex hex hex hex
hex ::= [0-9A-Fa-f]
number ::= "-"? integer fraction? exponent?
integer ::= "0" | [1-9] [0-9]*
fraction ::= "." [0-9]+
exponent ::= [eE] [+-]? [0-9]+
ws ::= [ \n\r\t]*
"""
BROKEN_JSON = JSON_TEXT.replace("root ::= object | array", "root ::= object | arrey")
CRASHING = "root ::= (y{2,3}){2}\ny ::= root\n"  # segfaults xgrammar 0.2.8 when compiled


@pytest.fixture
def session(checker):
    s = WorkbenchSession(JSON_TEXT, source="json", tokenizer="llama3", checker=checker)
    yield s
    s.close()
    s.wait(30)


@pytest.fixture(scope="module")
def classed(checker):
    """One session with json + llama3 classes, shared by the read-only class tests."""
    s = WorkbenchSession(JSON_TEXT, source="json", tokenizer="llama3", checker=checker)
    s.compile(xgrammar=False)
    job = s.run_classing(wait=True)
    assert job.status == "done", s.errors
    return s


# --------------------------------------------------------------------------- core stays pure


def test_core_imports_no_widgets_or_plotly():
    code = (
        "import sys, cfgzip_lab, cfgzip_lab.pipeline, cfgzip_lab.engine, cfgzip_lab.expand, cfgzip_lab.vocab, "
        "cfgzip_lab.cache.format, cfgzip_lab.widgets.session\n"
        "bad = [m for m in ('ipywidgets', 'plotly') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------- XGrammar child


def test_xgrammar_child_reports_errors_with_position(checker):
    verdict = checker.check('root ::= "a" | b\n')
    assert not verdict.ok and not verdict.crashed
    assert (verdict.line, verdict.column) == (1, 16)
    assert "not defined" in verdict.message


def test_xgrammar_crash_stays_in_the_child(checker):
    verdict = checker.check(CRASHING)
    assert verdict.crashed and not verdict.ok
    # the child's end in words: the signal that killed it (XGrammar 0.2.8 segfaults here) or its exit status
    assert verdict.message in {"SIGSEGV", "SIGABRT", "SIGBUS"} or verdict.message.startswith("exit status")
    # the next request gets a fresh child
    assert checker.check(JSON_TEXT).ok


def test_a_repeated_check_reports_the_compile_time_not_the_cache_hit(checker):
    """The child reuses its last compile for the same text; the time shown stays the compile's."""
    text = JSON_TEXT + "\n# checked twice\n"
    first, again = checker.check(text), checker.check(text)
    assert first.ok and again.ok
    assert again.seconds == first.seconds > 1e-4


def test_xgrammar_child_matches_samples(checker):
    verdict = checker.check(JSON_TEXT, [b'{"a": 1}', b'{"a": ', b'{"a" x'])
    assert [(m.accepted_bytes, m.complete) for m in verdict.samples] == [(8, True), (6, False), (5, False)]


# ------------------------------------------------------------------------------------- editor


def test_editor_shows_diagnostic_with_line_and_caret(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    editor = EditorPanel(session, delay=0)
    editor.set_text(BROKEN_JSON)
    assert not session.grammar_ok
    (diag,) = [d for d in session.diagnostics if d.severity == "error"]
    line = BROKEN_JSON.splitlines().index("root ::= object | arrey") + 1
    assert (diag.line, diag.column) == (line, 19)
    assert f"line {line}, column 19" in editor.diagnostics.value
    assert f'data-line="{line}"' in editor.diagnostics.value
    assert "^</pre>" in editor.diagnostics.value  # the caret excerpt
    assert "error" in editor.status.value
    # XGrammar's verdict arrives beside ours and agrees
    session.jobs["xgrammar"].wait(60)
    assert session.xgrammar is not None and not session.xgrammar.ok
    assert "agrees" in editor.xgrammar.value and f"line {line}" in editor.xgrammar.value
    # fixing it
    editor.set_text(JSON_TEXT)
    assert session.grammar_ok and editor.diagnostics.value == ""
    assert "compiles" in editor.status.value


def test_editor_quick_fix_button_applies_did_you_mean(session):
    """Issue 35, quick fixes: "did you mean 'array'?" has a Fix button; its action rewrites the
    name, checks at once and leaves no error."""
    from cfgzip_lab.widgets.editor import EditorPanel

    editor = EditorPanel(session, delay=0.3)
    editor.set_text(BROKEN_JSON)
    editor.flush()
    fixes = editor.quick_fixes()
    ((index, fix),) = fixes.items()
    assert fix.label == "replace 'arrey' with 'array'"
    assert f'data-action="fix" data-arg="{index}"' in editor.diagnostics.value
    assert "Fix: replace &#x27;arrey&#x27; with &#x27;array&#x27;" in editor.diagnostics.value
    editor.set_text(BROKEN_JSON + "\n# typed after the check\n")
    with pytest.raises(WorkbenchError, match="changed since it was checked"):
        editor.apply_fix(index)
    editor.flush()
    editor.diagnostics.click_action("fix", str(index))  # what the button sends
    assert "root ::= object | array" in editor.text.value and session.checked_text == editor.text.value
    assert session.grammar_ok and not editor.pending and editor.quick_fixes() == {}
    with pytest.raises(WorkbenchError, match="no quick fix"):
        editor.apply_fix(0)


def test_editor_debounces_and_flush(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    checks = []
    session.on("grammar", lambda: checks.append(session.checked_text))
    editor = EditorPanel(session, delay=0.3)
    for i in range(5):
        editor.set_text(JSON_TEXT + f"\n# edit {i}\n")
    assert editor.pending and checks == []
    assert session.text.endswith("# edit 4\n")  # the text is kept at once, before any check
    time.sleep(0.8)
    assert len(checks) == 1 and checks[0].endswith("# edit 4\n")
    editor.set_text(BROKEN_JSON)
    editor.flush()
    assert not editor.pending and len(checks) == 2 and not session.grammar_ok


def test_editor_never_loses_text(session, tmp_path):
    from cfgzip_lab.widgets.editor import EditorPanel

    editor = EditorPanel(session, delay=0)
    mine = BROKEN_JSON + "\n# my work\n"
    editor.set_text(mine)
    assert session.text == mine  # a failed check keeps it
    editor.load_bundled("xml")
    assert session.text.startswith("#") and "xml" in session.source
    assert editor.text.value == session.text  # the text area follows a load
    assert editor.undo_load()
    assert editor.text.value == mine and session.text == mine
    # save and load a file
    path = tmp_path / "g.ebnf"
    editor.save_file(str(path))
    assert path.read_text(encoding="utf-8") == mine
    editor.load_bundled("json")
    editor.load_file(str(path))
    assert editor.text.value == mine


def test_editor_draft_survives(checker, tmp_path):
    draft = tmp_path / "draft.ebnf"
    s = WorkbenchSession(JSON_TEXT, checker=checker, draft_path=draft)
    s.compile('root ::= "x"  # typed\n', xgrammar=False)
    fresh = WorkbenchSession(JSON_TEXT, checker=checker, draft_path=draft)
    assert fresh.restore_draft() and fresh.text == 'root ::= "x"  # typed\n'


def test_crashing_grammar_does_not_kill_the_kernel(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    editor = EditorPanel(session, delay=0)
    editor.set_text(CRASHING)
    session.jobs["xgrammar"].wait(60)
    assert session.xgrammar.crashed
    assert "crashed" in editor.xgrammar.value
    assert not session.xgrammar_ok()  # what the decoder asks before compiling in-process


# ------------------------------------------------------------------------------------ samples


def test_samples_panel_verdicts(session):
    from cfgzip_lab.widgets.samples import SamplesPanel, split_samples

    session.compile(xgrammar=False)
    panel = SamplesPanel(session)
    bundled = panel.load_bundled_samples("json")
    assert len(split_samples(panel.text.value)) == len(bundled) >= 3
    panel.set_samples(['{"a": [1, 2.5e3, "x"]}', '{"a": ', '{"a": 1,,}', "[tru", "x"])
    results = panel.check_samples()
    kinds = [r.ours.kind for r in results]
    assert kinds == ["accepted", "prefix", "rejected", "prefix", "rejected"]
    assert all(r.agree for r in results), [(r.ours, r.xgrammar) for r in results]
    assert (results[2].ours.line, results[2].ours.column) == (1, 9)
    assert "rejected at line 1, column 9" in panel.output.value
    assert "valid prefix" in panel.output.value


def test_samples_multiline_position(session):
    from cfgzip_lab.widgets.samples import gnf_verdict

    session.compile(xgrammar=False)
    v = gnf_verdict(session.compiled.gnf, '{\n  "é": 1,\n  "b": ]\n}'.encode())
    assert v.kind == "rejected" and (v.line, v.column) == (3, 8)


# ---------------------------------------------------------------------------------- structure


def test_structure_panel_table_and_chart(session):
    from cfgzip_lab.widgets.structure import StructurePanel

    session.compile(xgrammar=False)
    panel = StructurePanel(session)
    steps = session.compiled.gnf.steps
    assert list(panel.figure.data[1].x) == [s.name for s in steps]
    assert list(panel.figure.data[1].y) == [s.productions for s in steps]
    assert "GNF productions" in panel.stats.value and steps[-1].name in panel.steps.value
    assert panel.preview.value.strip()
    session.compile(BROKEN_JSON, xgrammar=False)
    assert list(panel.figure.data[1].y) == [] and "does not compile" in panel.stats.value


# ------------------------------------------------------------------------------------ classes


def test_classing_json_llama3(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    classes = classed.classes
    assert classed.classes_current and classes.vocab_size == 128_256
    assert 50 < classes.num_classes < 5000
    assert f"{classes.num_classes:,}" in panel.summary.value and "compression" in panel.summary.value
    assert "dead" in panel.summary.value and "special" in panel.summary.value
    assert sum(panel.histogram.data[0].y) == classes.num_classes
    assert "Largest classes" in panel.largest_table.value
    # One classing time everywhere: the progress label shows the session's number, the
    # vocabulary load apart (the job did both).
    classing = fmt_seconds(classed.timings["classing"])
    assert panel.progress_label.value.startswith(f"done: classing {classing}")
    assert "vocabulary load" in panel.progress_label.value and f"classing took {classing}" in panel.summary.value


def test_class_search_text_id_and_why(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    vocab, classes = classed.vocab, classed.classes
    (hit,) = panel.search('","')
    tid = hit["token_id"]
    assert vocab.token_bytes[tid] == b'","'
    assert hit["class"] == classes.class_of[tid]
    assert hit["representative"] == classes.representatives[hit["class"]]
    assert hit["num_pairs"] > 0 and hit["pairs"]
    assert "consumes" in panel.search_output.value and "→" in panel.search_output.value
    # the same class by id, and every member has the same displacement
    (by_id,) = panel.search(str(tid))
    assert by_id["class"] == hit["class"]
    displacer = classed.displacer()
    nodes = {displacer.of_bytes(vocab.token_bytes[t]) for t in classes.members(hit["class"])[:50]}
    assert len(nodes) == 1
    # a stop token and a dead one explain themselves
    (stop,) = panel.search(str(vocab.stop_ids[0]))
    assert "stop token" in stop["why"]
    blocked = classes.blocked_class()
    dead_id = next(int(t) for t in classes.members(blocked) if vocab.token_bytes[t])
    (dead,) = panel.search(str(dead_id))
    assert dead["class_kind"] == "blocked" and "dead" in dead["why"]
    # text that is no single token: each of its tokens
    several = panel.search("true false")
    assert len(several) >= 2 and "tokenizes as" in panel.search_output.value


def test_classing_cancel(session):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    session.compile(xgrammar=False)
    panel = ClassesPanel(session)

    def cancel_on_progress():
        job = session.jobs.get("classing")
        if job is not None and job.total > 0 and job.running:
            panel.cancel()

    session.on("job", cancel_on_progress)
    job = panel.run_classing()
    assert job.wait(120)
    assert job.status == "cancelled" and session.classes is None
    assert panel.progress.bar_style == "warning" and not panel.run_button.disabled


def test_worker_error_is_shown_in_the_panel(session, monkeypatch):
    from cfgzip_lab.widgets import session as session_module
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    session.compile(xgrammar=False)
    panel = ClassesPanel(session)

    def broken(*args, **kwargs):
        raise RuntimeError("boom in the worker")

    monkeypatch.setattr(session_module, "build_classes", broken)
    job = panel.run_classing(wait=True)
    assert job.status == "failed" and "boom in the worker" in job.error.message
    assert "boom in the worker" in panel.error_box.value and "traceback" in panel.error_box.value
    assert panel.progress.bar_style == "danger"


def test_classing_refuses_a_broken_grammar(session):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(session)
    session.set_text(BROKEN_JSON)
    panel._handler("classing", panel.run_classing)()  # what the button does
    assert "fix them first" in panel.error_box.value and "line" in panel.error_box.value


def test_size_histogram_buckets():
    from cfgzip_lab.widgets.classes_panel import size_histogram

    labels, counts = size_histogram(np.array([1, 1, 2, 3, 4, 9]))
    assert labels == ["1", "2–3", "4–7", "8–15"] and counts == [2, 2, 1, 1]


# ------------------------------------------------------------------------------------- export


def test_export_cache_report_and_load(classed, tmp_path):
    from cfgzip_lab.widgets.export import ExportPanel

    panel = ExportPanel(classed, folder=tmp_path)
    path = panel.export_cache("classes.npz")  # relative: inside the export folder
    assert path == tmp_path / "classes.npz" and path.exists()
    assert (tmp_path / "classes.ebnf").read_text(encoding="utf-8") == classed.text  # the grammar beside it
    assert "Use it in your code" in panel.snippet.value and str(path.resolve()) in panel.snippet.value
    assert "A cat as JSON" not in panel.snippet.value  # no decoder: a prompt that names no grammar
    classed.decoder_prompt = "Robot commands:"  # what the Decoder tab's prompt sets (issue 35.7)
    panel.export_cache("classes.npz")
    assert "tokenizer(&quot;Robot commands:&quot;" in panel.snippet.value  # the snippet is HTML-escaped
    before = classed.classes
    loaded = panel.load_cache(path)
    assert np.array_equal(loaded.class_of, before.class_of) and classed.classes_current
    report_path = panel.export_report(tmp_path / "report.json")
    report = json.loads(report_path.read_text())
    assert report["grammar_sha256"] == classed.compiled.sha256
    assert report["tokenizer"] == "llama3" and report["classes"] == before.num_classes
    assert report["dead_tokens"] == before.metadata["dead_tokens"]
    assert "compile_gnf" in report["timings_seconds"] and "classing" in report["timings_seconds"]
    from cfgzip_lab import xgrammar_version

    assert report["xgrammar_version"] == xgrammar_version.installed()  # the release that made the masks
    assert report["grammar_source"] == "json"  # the provenance the status line shows
    assert report["timings_seconds"]["classing"] == pytest.approx(
        report["classes_metadata"]["classing_seconds"], abs=1e-4
    )


def test_exports_default_to_a_git_ignored_folder(checker):
    from cfgzip_lab.widgets.export import ExportPanel, default_export_dir

    folder = default_export_dir()
    repo = Path(__file__).resolve().parents[1]
    assert folder == repo / "exports"
    panel = ExportPanel(WorkbenchSession("root ::= [a]\n", checker=checker))
    assert panel._resolve(panel.cache_path.value).parent == folder
    for name in ("cfgzip_classes.npz", "cfgzip_classes.ebnf", "cfgzip_report.json"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(folder / name)], cwd=repo)
        assert ignored.returncode == 0, name


def test_load_cache_for_another_grammar_fails_clearly(classed, checker, tmp_path):
    from cfgzip_lab.widgets.export import ExportPanel

    path = ExportPanel(classed).export_cache(tmp_path / "c.npz")
    other = WorkbenchSession(bundled_grammars()["xml"].read_text(encoding="utf-8"), checker=checker, tokenizer="llama3")
    other.compile(xgrammar=False)
    panel = ExportPanel(other)
    panel._handler("load cache", lambda: panel.load_cache(path))()
    assert "another grammar" in panel.error_box.value and other.classes is None


# ------------------------------------------------------------------------------------ timings


def test_timings_panel_from_decode_log(session):
    from cfgzip_lab.widgets.timings import TimingsPanel, step_summary

    panel = TimingsPanel(session)
    assert "no decode steps" in panel.summary.value
    session.decode_log = [
        {"step": i + 1, "token_id": 1, "plain_s": 4e-4, "compressed_s": 1e-4, "identical": True} for i in range(5)
    ]
    session.emit("decoder")
    assert list(panel.line.data[0].y) == pytest.approx([400.0] * 5)
    assert list(panel.hist.data[1].x) == pytest.approx([100.0] * 5)
    summary = step_summary(session)
    assert summary["speedup_median"] == pytest.approx(4.0) and summary["masks_identical"] == 5
    assert "4.00×" in panel.summary.value
    assert panel.hist.layout.xaxis.type == "log" and panel.line.layout.yaxis.type == "log"


def test_timings_axis_covers_every_series_and_shows_p90(session):
    """Plain masks of 420 ms and CFGzip masks of 7 µs on one chart: the log axis holds both,
    and the summary and table give median and p90 of each."""
    from cfgzip_lab.widgets.timings import WHY_TIMES_DIFFER, TimingsPanel, step_summary

    panel = TimingsPanel(session)
    plain = [50e-6] * 8 + [0.42, 0.40]
    session.decode_log = [
        {"step": i + 1, "token_id": 1, "plain_s": p, "compressed_s": 7e-6, "identical": True}
        for i, p in enumerate(plain)
    ]
    session.emit("decoder")
    summary = step_summary(session)
    assert summary["median_plain_us"] == pytest.approx(50.0)
    assert summary["p90_plain_us"] == pytest.approx(float(np.percentile(np.array(plain) * 1e6, 90)))
    assert max(panel.hist.data[0].x) == pytest.approx(420_000) and min(panel.hist.data[1].x) == pytest.approx(7.0)
    assert panel.hist.layout.xaxis.type == "log" and panel.hist.layout.xaxis.range is None  # autorange: every box
    assert "p90" in panel.summary.value and "p90 µs" in panel.quantiles.value
    assert "neither applies the mask" in WHY_TIMES_DIFFER and "benchmark" in panel.why.value


def test_pays_from_decode_steps_and_one_classing_time(session):
    """'Does it pay?' with the session's real compile and classing times and decode medians."""
    from cfgzip_lab.bench import break_even
    from cfgzip_lab.widgets.timings import TimingsPanel, pays

    s = session
    s.compile(xgrammar=False)
    assert s.run_classing(wait=True).status == "done"
    panel = TimingsPanel(s)
    assert pays(s) == [] and "step the decoder or run the benchmark" in panel.pays.value
    assert s.classes.metadata["classing_seconds"] == round(s.timings["classing"], 4)  # one number
    s.record_timing("compressed_compile", 0.05)
    s.decoder_stamp = s.stamp
    s.decode_log = [
        {"step": i + 1, "token_id": 1, "plain_s": 400e-6, "compressed_s": 100e-6, "identical": True} for i in range(4)
    ]
    s.emit("decoder")
    (verdict,) = pays(s)
    one_off = s.timings["classing"] + sum(v for k, v in s.timings.items() if k.startswith("compile_")) + 0.05
    assert verdict["one_off_s"] == pytest.approx(one_off)
    assert verdict["tokens"] == break_even(one_off, 400e-6, 100e-6)
    assert f"pays after {verdict['tokens']:,} tokens" in panel.pays.value
    s.decode_log = [dict(r, compressed_s=900e-6) for r in s.decode_log]
    s.emit("decoder")
    assert pays(s)[0]["tokens"] == "never" and "never pays: 900.0 µs per step" in panel.pays.value
    s.set_text(JSON_TEXT + "\n# edited\n")
    s.emit("text")
    assert pays(s) == [] and "out of date" in panel.pays.value  # the classing time is for the old text


def test_pays_judges_every_batch_size(session):
    """Issue 35.5: "Does it pay?" judged batch 1 alone ("never pays") above a table where CFGzip
    led at batch 16; each batch size measured is now judged, in tokens (B per step)."""
    from cfgzip_lab.bench import break_even
    from cfgzip_lab.widgets.timings import TimingsPanel, pays

    s = session
    s.compile(xgrammar=False)
    assert s.run_classing(wait=True).status == "done"
    panel = TimingsPanel(s)
    s.record_timing("compressed_compile", 0.05)
    rows = [  # per-step medians (µs) for the whole batch: behind at batch 1, ahead at batch 16
        {"batch_size": 1, "steps": 8, "plain_us": 100.0, "compressed_us": 150.0},
        {"batch_size": 16, "steps": 8, "plain_us": 1270.0, "compressed_us": 1000.0},
    ]
    s.keep("benchmark", {"rows": rows, "classes": s.classes.num_classes, "tokenizer": "llama3", "V": 1})
    s.emit("classes")
    one, sixteen = pays(s)
    assert (one["batch"], one["tokens"]) == (1, "never")
    steps = break_even(sixteen["one_off_s"], 1270e-6, 1000e-6)
    assert (sixteen["batch"], sixteen["tokens"]) == (16, 16 * steps)
    assert sixteen["text"] == f"pays after {16 * steps:,} tokens"
    summary = f"never pays at batch 1; pays at batch 16 (after {16 * steps:,} tokens)"
    assert summary in panel.pays.value


def test_batch_benchmark(checker):
    from cfgzip_lab.widgets.timings import TimingsPanel, pays

    s = WorkbenchSession(JSON_TEXT, checker=checker, tokenizer="smollm2")
    s.compile(xgrammar=False)
    s.run_classing(wait=True)
    panel = TimingsPanel(s)
    job = panel.benchmark([1, 2], steps=4, wait=True)
    assert job.status == "done", s.errors
    assert [r["batch_size"] for r in panel.batch_results] == [1, 2]
    assert all(r["plain_us"] > 0 and r["compressed_us"] > 0 for r in panel.batch_results)
    assert all(r["plain_p90_us"] >= r["plain_us"] for r in panel.batch_results)
    assert "speed-up" in panel.batch_output.value and f"K = {s.classes.num_classes:,}" in panel.batch_output.value
    assert s.is_current(s.kept["benchmark"].stamp) and "cfgzip-stale" not in panel.batch_output.value
    verdicts = pays(s)  # per step from the benchmark's medians, one basis per batch size
    assert [(v["basis"], v["engine"]) for v in verdicts] == [
        ("benchmark, batch 1", "compressed"),
        ("benchmark, batch 1", "native"),
        ("benchmark, batch 2", "compressed"),
        ("benchmark, batch 2", "native"),
    ]
    compressed = verdicts[0]
    assert compressed["parts"]["compile_s"] > 0
    assert ("pays after" in panel.pays.value) or ("never pays" in panel.pays.value)
    s.set_text(JSON_TEXT.replace("ws ::= [ \\n\\r\\t]*", "ws ::= [ \\n]*"))
    s.compile(xgrammar=False)
    assert (
        "out of date (made for another version of the grammar" in panel.batch_output.value
    )  # the old K is marked, not shown as current
    assert pays(s) == []


# ---------------------------------------------------------------------------------------- app


def test_workbench_composes_every_panel(checker):
    from cfgzip_lab.widgets import Workbench
    from cfgzip_lab.widgets.app import TABS

    session = WorkbenchSession(JSON_TEXT, checker=checker, tokenizer="llama3")
    app = Workbench(session=session, delay=0, draft=False)
    assert app.tabs.titles == TABS and len(app.tabs.children) == len(TABS)
    bundle = app._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert session.grammar_ok and "grammar ✓" in app.status.value
    assert "cfgzip-app" in app.widget._dom_classes
    app.select("Classes")
    assert app.tabs.selected_index == TABS.index("Classes")


def test_workbench_status_names_the_source_and_errors_go_when_fixed(checker):
    """The status line: provenance (untitled, + edited, a bundled name), classes with their
    tokenizer and an out-of-date mark after an edit, and an error count that falls again."""
    from cfgzip_lab.widgets import Workbench

    session = WorkbenchSession("root ::= [a]+\n", checker=checker, tokenizer="llama3")
    app = Workbench(session=session, delay=0, draft=False)
    assert "grammar ✓</span> untitled" in app.status.value and "edited" not in app.status.value
    app.editor.text.value = "root ::= [ab]+\n"
    app.editor.flush()
    assert "untitled (edited)" in app.status.value
    session.load_bundled("json")
    app.compile()
    assert "</span> json" in app.status.value and "json (edited)" not in app.status.value
    assert app.run_classing(wait=True).status == "done"
    assert "classes · llama3" in app.status.value and "out of date" not in app.status.value
    assert f"classing {fmt_seconds(session.timings['classing'])}" in app.status.value  # one classing time
    app.editor.text.value = session.text + "\n# a note\n"
    app.editor.flush()
    assert (
        "json (edited)" in app.status.value
        and "out of date (made for another version of the grammar" in app.status.value
    )
    app.timings._handler("benchmark", app.timings.benchmark)()  # stale classes: refused, counted
    assert "1 error(s)" in app.status.value and app.timings.error_box.value
    app.editor.text.value = bundled_grammars()["json"].read_text(encoding="utf-8")  # the edit undone
    app.editor.flush()
    assert "out of date" not in app.status.value  # the classes hold again for this text
    app.timings._handler("benchmark", lambda: app.timings.benchmark([1], steps=2, wait=True))()
    assert "error(s)" not in app.status.value and app.timings.error_box.value == ""
    app.close()


# -------------------------------------------------------------------------------- the decoder


@pytest.mark.slow
def test_decoder_steps_rollback_reset(checker):
    pytest.importorskip("cfgzip_lab.decode")
    from cfgzip_lab.widgets.decoder import DecoderPanel
    from cfgzip_lab.widgets.timings import TimingsPanel

    s = WorkbenchSession(JSON_TEXT, checker=checker, tokenizer="smollm2")
    s.compile(xgrammar=False)
    panel = DecoderPanel(s, prompt="A cat as JSON.", top_k=5)
    timings = TimingsPanel(s)
    first = panel.step()
    # issue 35.5: the first step's times carry the warm-up; no speed-up is claimed from them
    assert "includes the engines' warm-up" in panel.step_info.value
    assert not re.search(r"speed-up [\d.]+×", panel.step_info.value)
    results = [first] + [panel.step() for _ in range(2)]
    assert "median of steps 2–3)" in panel.step_info.value
    assert len(panel.results) == 3 and len(s.decode_log) == 3
    assert all(r["identical"] for r in s.decode_log), s.decode_log
    device = next(s.decoder_model[0].parameters()).device
    assert f"on <b>{device}</b> in <b>float32</b>" in panel.status.value  # which device and dtype
    before, after = panel.chart.data
    assert len(before.x) == 5 and 1 <= len(after.x) <= 5
    assert panel.tokens.value.count("cfgzip-tok") == 3
    assert "✓ masks identical" in panel.step_info.value
    generated = b"".join(s.decoder_model[2].token_bytes[r["token_id"]] for r in s.decode_log)
    assert generated and s.compiled.gnf.accepts(generated, prefix=True)
    assert len(timings.line.data[0].x) == 3
    panel.rollback()
    assert len(panel.results) == 2 and len(s.decode_log) == 2
    again = panel.step()  # greedy: the same token comes back
    assert again.token_id == results[2].token_id
    job = panel.run_steps(4, wait=True)
    assert job.status == "done", s.errors
    assert len(s.decode_log) == 7 or panel.results[-1].terminated
    assert all(r["identical"] for r in s.decode_log)
    panel.reset()
    assert panel.results == [] and s.decode_log == [] and panel.tokens.value == ""


def test_decoder_forces_text_and_refuses_what_the_grammar_refuses(checker):
    """Issue 35, forced text: the Force box's text is taken as the model's, one step per token
    with its masks ("forced" on the step line, dashed chips); refused text names its first
    refused token and changes nothing. The tiny random model on SmolLM2's tokenizer stands in
    for SmolLM2 (no load)."""
    pytest.importorskip("cfgzip_lab.decode")
    from tiny_models import tiny_llama

    from cfgzip_lab.hf import vocab_for
    from cfgzip_lab.widgets.decoder import DecoderPanel

    model, tokenizer = tiny_llama()
    tools = (
        'root ::= TagDispatch(("<tool_call>", call))\ncall ::= "{\\"name\\": \\"" ("get_weather" | "get_time") "\\"}"\n'
    )
    s = WorkbenchSession(tools, checker=checker, tokenizer="smollm2")
    s.compile(xgrammar=False)
    s.decoder_model, s.decoder_model_key = (model, tokenizer, vocab_for(model, tokenizer)), ("smollm2", "auto")
    panel = DecoderPanel(s, prompt="x", top_k=3)
    panel.step()
    forced = panel.force_text('<tool_call>{"name": "')
    assert all(r.forced for r in forced) and len(panel.results) == 1 + len(forced) == len(s.decode_log)
    assert f"forced {len(forced)} tokens" in panel.status.value
    assert (
        "forced <span class='cfgzip-tok'>" in panel.step_info.value
        and "allowed tokens <b>2</b>" in panel.step_info.value
    )
    assert panel.tokens.value.count("cfgzip-forced") == len(forced)
    kept = list(panel.results)
    with pytest.raises(WorkbenchError, match="the grammar refuses 'set' here, the forced text's first token"):
        panel.force_text("set_time")
    assert panel.results == kept and "not forced: the grammar refuses" in panel.status.value
    panel.forced.value = "get_time"
    panel._handler("decoder", panel.force_text)()  # the Force button
    assert panel.stepper.text.endswith('{"name": "get_time') and not s.errors
    panel.reset()


# ------------------------------------------------------------------- stamps and provenance


def test_stamp_follows_text_and_tokenizer(session):
    s = session
    first = s.stamp
    assert first.tokenizer == "llama3" and len(first.grammar_sha) == 64
    assert s.is_current(first) and s.is_current(s.grammar_stamp)
    assert not s.is_current(None)
    s.set_text(s.text + "\n# a comment\n")
    assert not s.is_current(first) and not s.is_current(Stamp(first.grammar_sha, None))
    assert s.stale_note(first) == "out of date (made for another version of the grammar)"  # no hash (35.7)
    assert first.grammar_sha[:8] not in s.stale_note(first)
    edited = s.stamp
    s.tokenizer = "smollm2"
    assert not s.is_current(edited)  # another tokenizer
    assert s.stale_note(edited) == "out of date (made for tokenizer llama3)"
    assert s.stale_note(first) == "out of date (made for another version of the grammar, tokenizer llama3)"
    assert s.is_current(Stamp(edited.grammar_sha, None))  # a tokenizer-free result still holds
    s.tokenizer = "llama3"
    assert s.is_current(edited)


def test_compile_and_xgrammar_results_carry_their_stamp(session):
    s = session
    s.compile(xgrammar=False)
    s.check_xgrammar(wait=True)
    assert s.is_current(s.compiled_stamp) and s.is_current(s.xgrammar_stamp)
    assert s.is_current(s.timing_stamps["xgrammar_compile"])
    s.set_text(BROKEN_JSON)
    assert not s.is_current(s.compiled_stamp) and not s.is_current(s.xgrammar_stamp)
    assert "xgrammar_compile" not in s.current_timings()
    kept = s.keep("benchmark", [1, 2])
    assert s.current("benchmark") == [1, 2]
    s.set_text(JSON_TEXT)
    assert s.current("benchmark") is None and kept.stamp.grammar_sha != s.grammar_sha


def test_provenance_says_untitled_file_bundled_and_edited(checker, tmp_path):
    s = WorkbenchSession("root ::= [a]\n", checker=checker)
    assert s.provenance == "untitled" and s.summary()["grammar_source"] == "untitled"
    s.set_text("root ::= [ab]\n")
    assert s.provenance == "untitled (edited)" and s.summary()["grammar_source"] == "untitled (edited)"
    s.load_bundled("json")
    assert s.provenance == "json"
    s.set_text(s.text + "\n")
    assert s.provenance == "json (edited)"
    path = s.save_file(tmp_path / "mine.ebnf")
    assert s.provenance == str(path)
    s.set_text(s.text.replace('"null"', '"nil"'))
    assert s.provenance == f"{path} (edited)"
    s.set_text("root ::= [c]\n")  # typed over (select all, type): no longer the file
    assert s.provenance == "untitled" and s.summary()["grammar_source"] == "untitled"
    s.load_bundled("c_like")
    assert s.restore_previous() and s.provenance == "untitled" and s.text == "root ::= [c]\n"
    s.close()


def test_errors_clear_when_the_action_succeeds(session):
    s = session
    s.set_text(BROKEN_JSON)
    with pytest.raises(WorkbenchError):
        s.run_classing()
    s.record_error("classing", WorkbenchError("the grammar has errors"))
    s.record_error("decoder", WorkbenchError("old failure"))
    assert len(s.errors) == 2 and s.errors[0].stamp == s.stamp
    s.set_text(JSON_TEXT)
    job = s.run_classing(wait=True)
    assert job.status == "done"
    assert [e.where for e in s.errors] == ["decoder"]  # classing's error went when classing worked
    assert s.is_current(s.classes_stamp) and s.is_current(s.timing_stamps["classing"])


def test_decoder_status_always_ends_and_uses_the_sessions_classes(checker):
    """Run N, Cancel and Reset each end in an outcome (never "decoding 8/8" left behind); a
    failed step's error goes when decoding works; the decoder adopts its model's classes so the
    session (status bar, Classes tab) names the same tokenizer; an edit marks the steps stale."""
    pytest.importorskip("cfgzip_lab.decode")
    from cfgzip_lab.widgets.classes_panel import ClassesPanel
    from cfgzip_lab.widgets.decoder import DecoderPanel

    s = WorkbenchSession(JSON_TEXT, checker=checker, tokenizer="llama3")
    s.compile(xgrammar=False)
    assert s.run_classing(wait=True).status == "done" and s.classes_stamp.tokenizer == "llama3"
    classes_panel = ClassesPanel(s)
    assert classes_panel.tokenizer.value == "llama3"
    panel = DecoderPanel(s, prompt="A cat as JSON.", top_k=3)
    job = panel.run_steps(3, wait=True)
    assert job.status == "done", s.errors
    model_vocab = s.decoder_model[2]
    assert s.tokenizer == model_vocab.name == s.classes_stamp.tokenizer == s.decoder_stamp.tokenizer
    assert classes_panel.tokenizer.value == model_vocab.name  # the Classes tab follows
    assert s.classes is panel.stepper.classes and s.is_current(s.timing_stamps["classing"])
    assert f"classes: <b>{model_vocab.name}</b>" in panel.status.value
    assert "done: 3 steps" in panel.status.value and "decoding" not in panel.status.value

    panel.n.value = 500  # cancel a long run while it runs
    job = panel.run_steps()
    deadline = time.monotonic() + 120
    while job.running and job.done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    panel.cancel()
    job.wait(120)
    assert job.status in ("cancelled", "done")
    assert ("cancelled at step" in panel.status.value) or ("stop token" in panel.status.value)

    job = panel.run_steps(400)  # Reset while running: cancels, then back to the prompt
    while job.running and job.done < 1 and time.monotonic() < deadline + 120:
        time.sleep(0.05)
    panel.reset()
    assert not job.running and panel.results == [] and "reset: back to the prompt" in panel.status.value
    assert "decoding" not in panel.status.value
    panel.reset()  # nothing runs now: no word of cancelled steps (issue 35.7)
    assert "reset: back to the prompt" in panel.status.value and "cancelled" not in panel.status.value

    s.record_error("decoder", WorkbenchError("an old failure"))
    assert panel.error_box.value
    panel.step()
    assert panel.error_box.value == "" and not s.errors  # decoding works: the old box is gone
    assert "step 1 done" in panel.status.value
    s.set_text(JSON_TEXT + "\n# edited\n")
    s.compile(xgrammar=False)
    assert (
        "out of date (made for another version of the grammar" in panel.status.value
        and "cfgzip-stale" in panel.status.value
    )
    s.close()
    s.wait(30)


SCHEMA_TEXT = """{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^[a-z]{2}[0-9]+$"},
    "size": {"type": "integer"}
  },
  "required": ["id"]
}
"""


def test_a_json_schema_is_read_classed_benchmarked_and_exported(checker, tmp_path):
    """The editor takes a JSON Schema as it takes EBNF: XGrammar builds the grammar, the
    session classes its EBNF, the engines and the export use that EBNF, and the stamps
    follow the schema text the user edits."""
    from cfgzip_lab.widgets.export import ExportPanel
    from cfgzip_lab.widgets.samples import SamplesPanel

    s = WorkbenchSession(SCHEMA_TEXT, source="untitled", tokenizer="smollm2", checker=checker)
    try:
        assert s.compile() and s.kind == "json_schema" and s.grammar_ok
        assert "root ::=" in s.grammar_text and 'Regex("^[a-z]{2}[0-9]+$"' in s.grammar_text  # lowered by us
        s.jobs["xgrammar"].wait(60)
        assert s.xgrammar is not None and s.xgrammar.ok, s.xgrammar
        samples = SamplesPanel(s)
        samples.set_samples(['{"id": "ab12"}', '{"id": "AB12"}', '{"size": 3}'])
        verdicts = [r.ours.kind for r in samples.check_samples()]
        assert verdicts[0] == "accepted" and verdicts[1] != "accepted" and verdicts[2] != "accepted"
        s.run_classing(wait=True)
        assert s.classes_current and s.classes.num_classes > 1
        panel = ExportPanel(s, folder=tmp_path)
        cache = panel.export_cache("schema.npz")
        assert (tmp_path / "schema.ebnf").read_text(encoding="utf-8") == s.grammar_text
        assert (tmp_path / "schema.json").read_text(encoding="utf-8") == SCHEMA_TEXT
        loaded = panel.load_cache(cache)
        assert np.array_equal(loaded.class_of, s.classes.class_of)
        s.compile(SCHEMA_TEXT.replace('"size"', '"count"'), xgrammar=False)
        assert not s.classes_current  # the schema changed: classes marked out of date
    finally:
        s.close()
        s.wait(30)


def test_a_bad_schema_and_a_gbnf_file_get_diagnostics_in_their_own_text(checker, tmp_path):
    s = WorkbenchSession('{\n  "type": "object",\n  "properties": {"a": }\n}\n', source="untitled", checker=checker)
    try:
        assert not s.compile(xgrammar=False)
        error = next(d for d in s.diagnostics if d.severity == "error")
        assert (error.line, error.column) == (3, 23), error  # the JSON error, where it is in the schema
        assert s.ebnf_for(s.text) is None
        gbnf = tmp_path / "digits.gbnf"
        gbnf.write_text('root ::= "\\x41" digit+\ndigit ::= [0-9]\n', encoding="utf-8")
        s.load_file(gbnf)
        assert s.compile(xgrammar=False) and s.kind == "gbnf"
        assert s.compiled.gnf is not None and "root ::=" in s.grammar_text
        s.set_input_kind("ebnf")  # read as XGrammar's EBNF, \x41 is the same A: still fine
        assert s.kind == "ebnf"
        with pytest.raises(WorkbenchError, match="unknown input kind"):
            s.set_input_kind("yaml")
    finally:
        s.close()
        s.wait(30)


def test_editor_input_kind_reads_a_schema_typed_into_it(checker):
    from cfgzip_lab.widgets.app import Workbench

    app = Workbench(JSON_TEXT, draft=False, editor="textarea", tokenizer="smollm2")
    try:
        editor = app.editor
        assert editor.editor_kind == "textarea" and editor.kind.value == "auto"
        editor.text.value = SCHEMA_TEXT
        assert editor.compile() and app.session.kind == "json_schema"
        assert "JSON Schema → EBNF" in editor.status.value
        assert not editor.set_input_kind("ebnf")  # read as EBNF, a schema is an error at line 1
        assert editor.kind.value == "ebnf" and "error" in editor.status.value
        first = next(d for d in app.session.diagnostics if d.severity == "error")
        assert first.line == 1
        editor.kind.value = "auto"  # the dropdown, as a click sets it
        assert app.session.grammar_ok and app.session.kind == "json_schema"
    finally:
        app.close()
        app.session.wait(30)


def test_editor_reads_lark_by_itself_and_a_regex_when_chosen(checker, tmp_path):
    """A Lark grammar typed in is detected, XGrammar's EBNF of it is shown read-only, its errors sit
    at their line and column of the Lark text; a regex is read as one when the Input menu says so,
    and the export keeps what the user wrote beside the EBNF."""
    from cfgzip_lab.widgets.app import Workbench
    from cfgzip_lab.widgets.export import ExportPanel

    lark = 'start: "id-" NUMBER\nNUMBER: /[0-9]+/\n'
    app = Workbench(JSON_TEXT, draft=False, editor="textarea", tokenizer="smollm2")
    try:
        editor, s = app.editor, app.session
        editor.text.value = lark
        assert editor.compile() and s.kind == "lark" and "Lark → EBNF" in editor.status.value
        assert editor.converted.layout.display == "" and editor.converted_text.value == s.grammar_text
        assert "Lark grammar (XGrammar's EBNF, read-only)" in editor.converted.get_title(0)
        editor.text.value = 'start: "a"\nb: "é" c\n'
        assert not editor.compile()
        error = next(d for d in s.diagnostics if d.severity == "error")
        assert (error.line, error.column) == (2, 8) and "unknown name 'c'" in error.message
        editor.text.value = "[a-z]+@x\\.com"
        assert editor.set_input_kind("regex") and s.kind == "regex" and "regex → EBNF" in editor.status.value
        s.run_classing(wait=True)
        ExportPanel(s, folder=tmp_path).export_cache("mail.npz")
        assert (tmp_path / "mail.regex").read_text(encoding="utf-8") == "[a-z]+@x\\.com"
    finally:
        app.close()
        app.session.wait(30)


def test_a_failed_view_refresh_is_shown_and_clears_when_it_works(session, monkeypatch):
    """A panel refresh runs from session events (maybe a worker thread): its failure lands in
    the panel's error box instead of a log, and the next refresh that works takes it away."""
    from cfgzip_lab.widgets.structure import StructurePanel

    panel = StructurePanel(session)
    session.compile(xgrammar=False)
    assert panel.error_box.value == ""
    real = StructurePanel.refresh

    def broken(self):
        raise RuntimeError("view broke")

    monkeypatch.setattr(StructurePanel, "refresh", broken)
    session.compile(xgrammar=False)  # topic "grammar" → refresh
    assert "view broke" in panel.error_box.value and any(e.where == "structure" for e in session.errors)
    monkeypatch.setattr(StructurePanel, "refresh", real)
    session.compile(xgrammar=False)
    assert panel.error_box.value == "" and not session.errors
