"""Tests: the grammar's test list, regex101 style: each string should be accepted, rejected or a
valid prefix; every check of the grammar runs them again and a failure is red.

The list lives in the session (:attr:`WorkbenchSession.tests`, run by
:meth:`WorkbenchSession.run_tests` on every check) and is saved beside the grammar as a small
JSON file (:mod:`cfgzip_lab.grammar.testlist`; ``cfgzip-lab test GRAMMAR TESTS`` runs the same
file). Opening a grammar file that has a tests file beside it loads that too. The Samples tab
adds its samples (expecting what they are now) and its generated strings (expecting accepted).

Public methods (one per UI action): :meth:`add_test`, :meth:`set_expectation`,
:meth:`remove_test`, :meth:`run_tests`, :meth:`save_tests`, :meth:`load_tests`,
:meth:`show_tree`.
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as w

from ..errors import CfgzipError
from ..grammar.earley import ParseLimitError, ParseResult
from ..grammar.testlist import EXPECTATIONS, GrammarTest, tests_path_for
from ._base import Panel
from ._format import esc, table
from ._tree import ParseTreeView
from .export import default_export_dir
from .html_view import HtmlView
from .session import UNTITLED, WorkbenchError

__all__ = ["TestsPanel"]

_LABELS = {"accept": "should accept", "reject": "should reject", "prefix": "valid prefix"}


class TestsPanel(Panel):
    """The test list of the current grammar (see the module docstring)."""

    __test__ = False
    error_sources = ("tests",)

    def __init__(self, session, *, folder: str | Path | None = None) -> None:
        super().__init__(session)
        self.folder = Path(folder) if folder is not None else default_export_dir()
        self.new_text = w.Textarea(
            placeholder="a string the grammar should accept, reject or take as a prefix",
            layout=w.Layout(width="100%", height="60px"),
        )
        self.new_text.add_class("cfgzip-test-text")
        self.new_expect = w.Dropdown(
            options=[(_LABELS[e], e) for e in EXPECTATIONS], value="accept", layout=w.Layout(width="150px")
        )
        self.new_expect.add_class("cfgzip-test-expect")
        # the rule a new test is parsed from (issue 35): the root, or one rule's language alone
        self.new_start = w.Dropdown(options=[("root", "")], value="", description="from rule")
        self.new_start.add_class("cfgzip-test-start")
        add = self._button("Add test", "cfgzip-add-test", self.add_test, where="tests", icon="plus", style="primary")
        run = self._button("Run tests", "cfgzip-run-tests", self.run_tests, where="tests", icon="play")
        self.path = w.Text(placeholder="robot.tests.json", description="File", layout=w.Layout(width="420px"))
        self.path.add_class("cfgzip-tests-path")
        save = self._button("Save tests", "cfgzip-save-tests", self.save_tests, where="tests", icon="save")
        load = self._button("Load tests", "cfgzip-load-tests", self.load_tests, where="tests", icon="folder-open")
        self.summary = w.HTML()
        self.summary.add_class("cfgzip-tests-summary")
        self.table = HtmlView()
        self.table.add_class("cfgzip-tests-table")
        self.table.on_action("cycle", lambda arg: self._handler("tests", lambda: self._cycle(int(arg)))())
        self.table.on_action("remove", lambda arg: self._handler("tests", lambda: self.remove_test(int(arg)))())
        self.table.on_action("tree", lambda arg: self._handler("tests", lambda: self.show_tree(int(arg)))())
        self.tree = HtmlView()
        self.tree.add_class("cfgzip-tests-tree")
        self.tree_result: ParseResult | None = None
        self.tree_view = ParseTreeView(
            self.tree, pointer=session.rule_pointer, on_error=lambda exc: session.record_error("tests", exc)
        )
        for view in (self.table, self.tree):
            view.on_rule(lambda name: self._handler("tests", lambda: self.session.jump_to_rule(name))())
        self.widget = w.VBox(
            [
                w.HTML(
                    "<b>Test list</b>: what each string should be. Run on every check of the grammar; saved "
                    "beside the grammar as JSON (<code>cfgzip-lab test GRAMMAR TESTS</code> runs it too). "
                    "Click an expectation to change it."
                ),
                self.new_text,
                w.HBox([self.new_expect, self.new_start, add, run], layout=w.Layout(flex_flow="row wrap")),
                w.HBox([self.path, save, load], layout=w.Layout(flex_flow="row wrap")),
                self.summary,
                self.table,
                self.tree,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-tests")
        session.on("tests", self._show)
        session.on("grammar", self._show_start_rules)
        session.on("source", self._on_source)
        session.on("text", self._on_source)
        self._on_source()
        self._show_start_rules()
        self._show()

    # -- public methods -----------------------------------------------------------------

    def add_test(self, text: str | None = None, expect: str | None = None, start: str | None = None) -> GrammarTest:
        """Add a test (default: the text box, the expectation and the start rule picked) and run
        the list. ``start``: the rule the string is parsed from ("" or the root: the grammar)."""
        text = self.new_text.value if text is None else text
        expect = expect or self.new_expect.value
        start = self.new_start.value if start is None else start
        names = self.session.rule_names()
        if start and names and start == names[0]:
            start = ""  # the root is every test's default: the file names no rule for it
        if start and names and start not in names:
            raise WorkbenchError(f"no rule {start!r} in the grammar to parse the test from")
        if text == "":
            raise WorkbenchError("type the string to test first")
        test = GrammarTest(text, expect, start=start)
        self.session.add_tests([test])
        if text == self.new_text.value:
            self.new_text.value = ""
        self._run_if_possible()
        return test

    def set_expectation(self, index: int, expect: str) -> GrammarTest:
        """What test ``index`` (0-based) should be: ``accept``, ``reject`` or ``prefix``."""
        tests = list(self.session.tests)
        self._check_index(index, tests)
        tests[index] = GrammarTest(tests[index].text, expect, tests[index].note, tests[index].start)
        self.session.set_tests(tests)
        self._run_if_possible()
        return tests[index]

    def remove_test(self, index: int) -> GrammarTest:
        tests = list(self.session.tests)
        self._check_index(index, tests)
        removed = tests.pop(index)
        self.session.set_tests(tests)
        self._run_if_possible()
        return removed

    def run_tests(self):
        """Run every test under the current grammar (our GNF and XGrammar); returns the outcomes."""
        return self.session.run_tests()

    def save_tests(self, path: str | Path | None = None) -> Path:
        """Write the list to ``path`` (default: the file box, else beside the grammar file)."""
        target = self._resolve(path or self.path.value or self.default_path())
        saved = self.session.save_tests(target)
        self.path.value = str(saved)
        self.summary.value += f' · <span class="cfgzip-ok">saved</span> to <code>{esc(saved)}</code>'
        return saved

    def load_tests(self, path: str | Path | None = None) -> list[GrammarTest]:
        target = self._resolve(path or self.path.value or self.default_path())
        tests = self.session.load_tests(target)
        self.path.value = str(target)
        return tests

    def show_tree(self, index: int) -> ParseResult:
        """The parse tree of test ``index``: the derivation, or how far it got and what was expected."""
        tests = self.session.tests
        self._check_index(index, tests)
        test = tests[index]
        try:
            result = self.session.earley().parse(test.text, start=test.start or None)
        except (ParseLimitError, CfgzipError) as exc:
            raise WorkbenchError(str(exc)) from None
        self.tree_result = result
        title = f"test #{index + 1}" + (f" (from rule {test.start})" if test.start else "")
        self.tree_view.show(result, title)
        return result

    def _show_start_rules(self) -> None:
        """The picker offers the current grammar's rules, the root first (kept as they were while
        the grammar has errors)."""
        names = self.session.rule_names()
        if not names:
            return
        options = [(f"{names[0]} (root)", "")] + [(n, n) for n in names[1:]]
        if [tuple(o) for o in self.new_start.options] == options:
            return
        picked = self.new_start.value if self.new_start.value in names else ""
        self.new_start.options = options
        self.new_start.value = picked

    def default_path(self) -> Path:
        """Beside the grammar file (``robot.ebnf`` → ``robot.tests.json``); for a bundled or
        untitled grammar, in the export folder."""
        source = self.session.source
        if source != UNTITLED and Path(source).suffix:
            return tests_path_for(source)
        return self.folder / f"{Path(source).name or 'untitled'}.tests.json"

    # -- helpers ------------------------------------------------------------------------

    def _resolve(self, path: str | Path) -> Path:
        path = Path(path).expanduser()
        return path if path.is_absolute() else self.folder / path

    @staticmethod
    def _check_index(index: int, tests) -> None:
        if not 0 <= index < len(tests):
            raise WorkbenchError(f"no test #{index + 1} (there are {len(tests)})")

    def _run_if_possible(self) -> None:
        if self.session.grammar_ok:
            self.session.run_tests()

    def _cycle(self, index: int) -> None:
        current = self.session.tests[index].expect
        self.set_expectation(index, EXPECTATIONS[(EXPECTATIONS.index(current) + 1) % len(EXPECTATIONS)])

    def _on_source(self) -> None:
        """A grammar file with a tests file beside it brings its tests (unless the list holds
        tests of another file already)."""
        source = self.session.source
        if source == UNTITLED or not Path(source).suffix:
            return
        beside = tests_path_for(source)
        if not beside.is_file() or self.session.tests_path == beside:
            return
        if self.session.tests and self.session.tests_path is None:
            return  # tests typed here and not saved: never replaced behind the author's back
        self._handler("tests", lambda: self.load_tests(beside))()

    # -- view ---------------------------------------------------------------------------

    def _show(self) -> None:
        s = self.session
        tests, outcomes = s.tests, s.test_outcomes
        if not self.path.value and s.tests_path is not None:
            self.path.value = str(s.tests_path)
        if not tests:
            self.summary.value = (
                '<span class="cfgzip-muted">no tests yet: add one above, or from the Samples tab</span>'
            )
            self.table.value = ""
            return
        current = bool(outcomes) and s.is_current(s.tests_stamp) and len(outcomes) == len(tests)
        rows, failed = [], 0
        for i, test in enumerate(tests):
            outcome = outcomes[i] if current else None
            shown = test.text if len(test.text) <= 70 else test.text[:67] + "…"
            if outcome is None:
                verdict = '<span class="cfgzip-muted">not run for this grammar yet</span>'
                css = ""
            elif outcome.passed:
                verdict = f'<span class="cfgzip-ok">pass</span> · {esc(outcome.describe())}'
                css = ""
            else:
                failed += 1
                verdict = f'<span class="cfgzip-bad">FAIL</span> · {esc(outcome.describe())}'
                css = "cfgzip-fail-row"
            note = f' <span class="cfgzip-muted">({esc(test.note)})</span>' if test.note else ""
            if test.start:
                note += f' <span class="cfgzip-test-from">from rule <b data-rule="{esc(test.start)}">{esc(test.start)}</b></span>'

            rows.append(
                (
                    css,
                    [
                        i + 1,
                        f'<span data-action="cycle" data-arg="{i}" title="click: change">{_LABELS[test.expect]}</span>',
                        f'<span class="cfgzip-code">{esc(shown)}</span>{note}',
                        verdict,
                        f'<span data-action="tree" data-arg="{i}">tree</span> · '
                        f'<span data-action="remove" data-arg="{i}" title="remove this test">✕</span>',
                    ],
                )
            )
        html = table(["#", "expect", "string", "result", ""], [r for _, r in rows], row_css=[c for c, _ in rows])
        self.table.value = html
        if not current:
            self.summary.value = f"{len(tests)} test(s) · " + (
                '<span class="cfgzip-warn">not run for this grammar: it has errors</span>'
                if s.checked_text == s.text and not s.grammar_ok
                else '<span class="cfgzip-muted">run on the next check</span>'
            )
            return
        passed = len(tests) - failed
        css = "cfgzip-ok" if not failed else "cfgzip-bad"
        self.summary.value = f'<span class="{css} cfgzip-tests-count">{passed} of {len(tests)} tests pass</span>' + (
            f" · {failed} failed" if failed else ""
        )
