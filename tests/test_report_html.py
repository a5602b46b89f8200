"""Export report (issue 35): one self-contained HTML file (cfgzip_lab.widgets.report_html).

The highlighter loses and reorders nothing; a report made from a real session holds the grammar
highlighted, the tests with their verdicts (a failing one and one from a start rule), a railroad
diagram per rule, the class counts, the timings and the usage snippet, and refers to nothing
outside itself. The browser test opens it in Debian's chromium with the network off and checks
that every part is drawn and that the page asked for nothing but itself."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets")

from cfgzip_lab.bundled import bundled_grammars  # noqa: E402
from cfgzip_lab.grammar.testlist import GrammarTest  # noqa: E402
from cfgzip_lab.widgets.report_html import ReportData, TestRow, highlight_ebnf, render_report  # noqa: E402

ROBOT = """# a robot's moves
root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]{1,3}
ws ::= [ \\t]*
"""
CHROMIUM = os.environ.get("CFGZIP_CHROMIUM", "/usr/bin/chromium")


def _text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@pytest.mark.parametrize("name", sorted(bundled_grammars()))
def test_highlighting_keeps_the_grammar_text_exactly(name):
    text = bundled_grammars()[name].read_text(encoding="utf-8")
    marked = highlight_ebnf(text)
    assert _text_of(marked) == text
    assert marked.count('<span class="d">') >= 3 and '<span class="s">' in marked


def test_highlighting_names_each_kind_of_token():
    marked = highlight_ebnf(ROBOT)
    assert '<span class="c"># a robot&#x27;s moves</span>' in marked
    assert '<span class="d">command</span> <span class="o">::=</span>' in marked
    assert '<span class="s">&quot;turn&quot;</span> <span class="n">ws</span>' in marked
    assert '<span class="k">[0-9]</span><span class="m">{1,3}</span>' in marked


@pytest.fixture
def report_session(checker):
    from cfgzip_lab.widgets.session import WorkbenchSession

    s = WorkbenchSession(ROBOT, tokenizer="smollm2", checker=checker)
    s.compile(xgrammar=False)
    s.set_tests(
        [GrammarTest("go 12; turn left"), GrammarTest("turnleft", "reject"), GrammarTest("right", start="turn")]
    )
    yield s
    s.close()
    s.wait(30)


def _report(session, tmp_path) -> Path:
    from cfgzip_lab.widgets.export import ExportPanel

    session.run_classing(wait=True)
    panel = ExportPanel(session, folder=tmp_path)
    panel.export_cache()
    target = panel.export_report()
    assert target.suffix == ".json" and "report written" in panel.status.value
    page = target.with_suffix(".html")
    assert page.is_file() and str(page.resolve()) in panel.status.value
    return page


def test_the_report_holds_every_part_and_nothing_from_outside(report_session, tmp_path):
    s = report_session
    page = _report(s, tmp_path).read_text(encoding="utf-8")
    # the grammar, highlighted
    grammar = page[page.index('<pre class="grammar">') :]
    grammar = grammar[: grammar.index("</pre>")]
    assert _text_of(grammar) == ROBOT and '<span class="d">turn</span>' in grammar
    # the tests and their verdicts: turnleft is accepted though it should be rejected
    assert "2 of 3 tests pass" in page and page.count('<tr class="fail">') == 1
    assert "should reject, got accepted" in page
    assert "<td>turn</td>" in page  # the third test's start rule
    # a railroad diagram per rule
    assert page.count('<div class="diagram"') == len(s.compiled.ast.rules) == 5
    assert page.count("<svg") >= 5 and 'class="railroad-diagram"' in page
    # the class counts, their sizes and the timings
    classes = s.classes.num_classes
    assert f"<b>{classes:,}</b> classes for {s.classes.vocab_size:,} tokens" in page
    sizes = re.findall(r"<tr><td>(1 token|2–9|10–99|100–999|1,000\+)</td><td>([\d,]+)</td></tr>", page)
    assert len(sizes) == 5 and sum(int(n.replace(",", "")) for _, n in sizes) == classes
    assert "<td>classing</td>" in page and "compile gnf" in page
    # the usage snippet, naming the exported cache
    snippet = _text_of(page[page.index('<pre class="snippet">') :].split("</pre>")[0])
    assert "cz.load_classes(" in snippet and str((tmp_path / "cfgzip_classes.npz").resolve()) in snippet
    # self-contained: no script, no stylesheet or image to fetch, no external address
    assert "<script" not in page and "<link" not in page and "<img" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", page)
    assert "url(" not in page
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page)  # the SVG namespace is a name, not a fetch


def test_a_report_without_classes_or_a_compiled_grammar_says_so():
    data = ReportData(
        title="untitled",
        created="now",
        versions={"cfgzip_lab": "0"},
        grammar_text='root ::= "a" missing',
        tests=[TestRow("a", "accept", "", "not run", "the grammar has errors")],
    )
    page = render_report(data)
    assert "the grammar has errors: it was not compiled" in page and "not run" in page
    assert "the vocabulary was not classed in this session" in page and "export the class cache first" in page


@pytest.mark.e2e
def test_the_report_opens_offline_in_chromium(report_session, tmp_path):
    """The file, opened in chromium with the network off: every part drawn, nothing asked for."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    page_path = _report(report_session, tmp_path)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
            page = context.new_page()
            asked = []
            page.on("request", lambda request: asked.append(request.url))
            page.goto(page_path.resolve().as_uri())
            page.locator("pre.grammar span.d", has_text="command").first.wait_for(timeout=10_000)
            assert page.locator("pre.grammar span.d").count() == 5
            colour = page.evaluate("getComputedStyle(document.querySelector('pre.grammar span.s')).color")
            plain = page.evaluate("getComputedStyle(document.querySelector('pre.grammar')).color")
            assert colour != plain, (colour, plain)  # highlighted: strings in their own colour
            assert page.locator(".tests-count", has_text="2 of 3 tests pass").count() == 1
            assert page.locator("tr.fail").count() == 1
            diagrams = page.locator(".diagram svg.railroad-diagram")
            assert diagrams.count() == 5
            box = diagrams.first.bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 20, box
            assert page.locator(".diagram svg path").count() > 10  # the tracks are drawn
            assert page.locator(".class-count b").inner_text().replace(",", "") == str(
                report_session.classes.num_classes
            )
            assert "cz.load_classes(" in page.locator("pre.snippet").inner_text()
            assert asked == [page_path.resolve().as_uri()], asked  # the page itself, nothing else
            shots = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "report.png"))
            if os.environ.get("CFGZIP_UPDATE_DOCS_SCREENSHOTS") == "1":  # the docs' picture (see test_browser)
                page.screenshot(path=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots" / "report.png"))
        finally:
            browser.close()


def test_a_schemas_report_shows_what_was_written_and_the_ebnf_it_became(checker):
    from cfgzip_lab.widgets.report_html import report_data
    from cfgzip_lab.widgets.session import WorkbenchSession

    schema = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
    s = WorkbenchSession(schema, tokenizer="smollm2", checker=checker)
    try:
        s.compile(xgrammar=False)
        page = render_report(report_data(s))
    finally:
        s.close()
    assert "as written (json_schema)" in page and html.escape(schema) in page
    grammar = page[page.index('<pre class="grammar">') :].split("</pre>")[0]
    assert _text_of(grammar) == s.compiled.text and '<span class="d">root</span>' in grammar
    assert page.count('<div class="diagram"') == min(len(s.compiled.ast.rules), 80)
