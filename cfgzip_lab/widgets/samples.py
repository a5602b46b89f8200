"""Sample tester: is each string a sentence of the grammar, a valid prefix, or where does it fail?

Two referees answer for every sample: our GNF (``GNF.accepts``) and XGrammar (in the
child process, byte by byte). The verdict is *accepted*, *valid prefix* (every byte
fits, the end is missing) or *rejected at line L, column C* (the text before that point
is a valid prefix). A disagreement between the two is flagged: it would be a bug.

A rejected sample shows the refused character highlighted in its line and what the grammar
expected there, first as its own literals and rules (``expected "left" or "right" (rule turn,
line 3)``, from an Earley parse over the source rules, :mod:`cfgzip_lab.grammar.earley`), then
as the bytes (:func:`cfgzip_lab.grammar.analysis.expected_bytes`); an incomplete one what may
come next. Every sample has a parse tree (:meth:`SamplesPanel.show_tree`): the derivation in
the author's rules, collapsible, each node's span lit up in the sample under the mouse; for a
rejected sample the partial derivation up to where it stopped; a sample with two derivations
is flagged as ambiguous. "Generate valid strings" draws random sentences of the grammar
(:mod:`cfgzip_lab.grammar.sentences`), judged by both referees like any sample and judged again
at every check. Samples are re-checked whenever the grammar is checked again, so a verdict never
belongs to an older text; each result set keeps the stamp of the text it was made for. Samples
and generated strings can be added to the test list (the Tests tab) with their expectation.

The Earley parses of one check share a budget (:data:`PARSE_BUDGET` items; a sample past it
shows its bytes only, and its tree is parsed on request with the full budget).
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as w

from ..bundled import bundled_grammars, bundled_samples
from ..errors import CfgzipError
from ..grammar.analysis import describe_bytes, expected_bytes
from ..grammar.diagnostics import position_of
from ..grammar.earley import ParseLimitError, ParseResult, describe_expected
from ..grammar.sentences import generate
from ..grammar.testlist import GrammarTest, verdict_of
from ._base import Panel
from ._format import esc, rule_links, table
from ._tree import ParseTreeView
from .html_view import HtmlView
from .session import WorkbenchError

__all__ = ["SamplesPanel", "Verdict", "SampleResult", "gnf_verdict", "failure_context", "SEPARATOR", "PARSE_BUDGET"]

SEPARATOR = "-----"  # a line holding only this separates two samples
PARSE_BUDGET = 60_000  # Earley items for the samples of one check (about half a second of Python)


@dataclass(frozen=True)
class Verdict:
    """How far a sample gets: ``accepted_bytes`` of ``length`` fit, ``complete`` if it is a sentence."""

    accepted_bytes: int
    length: int
    complete: bool
    line: int = 1
    column: int = 1

    @property
    def kind(self) -> str:
        if self.complete:
            return "accepted"
        if self.accepted_bytes == self.length:
            return "prefix"
        return "rejected"

    def describe(self) -> str:
        if self.kind == "accepted":
            return "accepted"
        if self.kind == "prefix":
            return "valid prefix (incomplete)"
        if self.accepted_bytes == 0:
            return "rejected at line 1, column 1 (not even the first character fits)"
        return f"rejected at line {self.line}, column {self.column} (a valid prefix up to there)"

    def same(self, other: Verdict) -> bool:
        return (self.accepted_bytes, self.complete) == (other.accepted_bytes, other.complete)


@dataclass(frozen=True)
class SampleResult:
    """One sample's verdicts; ``expected`` names the bytes the grammar takes where ours stopped
    (at the refused character, or at the end of a valid prefix), ``can_end`` whether it may end there."""

    text: str
    ours: Verdict
    xgrammar: Verdict | None
    expected: str = ""
    can_end: bool = False
    parse: ParseResult | None = None  # the Earley parse (None: past the check's budget)

    @property
    def agree(self) -> bool | None:
        return None if self.xgrammar is None else self.ours.same(self.xgrammar)

    @property
    def expected_terms(self) -> str:
        """What the grammar expected where the sample stops, in its own literals and rules."""
        p = self.parse
        if p is None or self.ours.kind == "accepted":
            return ""
        return describe_expected(p.expected, can_end=p.can_end)

    @property
    def ambiguous(self) -> bool:
        return self.parse is not None and self.parse.ambiguity is not None


_VISIBLE = {"\n": "⏎", " ": "␠", "\t": "⇥", "\r": "␍"}


def failure_context(text: str, verdict: Verdict, *, width: int = 40) -> str:
    """HTML: the line where ``verdict`` stops, the refused character marked, ``width`` characters
    either side (a long line is cut with …), and a caret line; empty for an accepted sample."""
    if verdict.kind == "accepted":
        return ""
    before = text.encode("utf-8")[: verdict.accepted_bytes].decode("utf-8", "ignore")
    at = len(before)
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    end = len(text) if end < 0 else end
    lo, hi = max(start, at - width), min(end, at + 1 + width)
    head = ("…" if lo > start else "") + text[lo:at]
    if at < len(text):
        bad = text[at]
        mark = f'<mark class="cfgzip-fail">{esc(_VISIBLE.get(bad, bad))}</mark>'
    else:
        mark = '<mark class="cfgzip-fail cfgzip-muted">(end)</mark>'
    tail = text[at + 1 : hi] + ("…" if hi < end else "")
    return f'<pre class="cfgzip-code cfgzip-fail-context">line {verdict.line}: {esc(head)}{mark}{esc(tail)}</pre>'


def _verdict(data: bytes, accepted: int, complete: bool) -> Verdict:
    # The position of the first refused character (a character cut inside counts as refused).
    before = data[:accepted].decode("utf-8", "ignore")
    line, column = position_of(before, len(before))
    return Verdict(accepted, len(data), complete, line, column)


def gnf_verdict(gnf, data: bytes) -> Verdict:
    """Our verdict: whole-sentence test, else the longest viable prefix by bisection.

    Viable prefixes are closed under taking prefixes, so bisection on the length finds
    the first refused byte with log2(len) runs of the GNF automaton.
    """
    status, fits = verdict_of(gnf, data)
    return _verdict(data, fits, status == "accepted")


def split_samples(text: str) -> list[str]:
    """Samples written in one text area, separated by lines holding only ``-----``."""
    samples, current = [], []
    for line in text.split("\n"):
        if line.strip() == SEPARATOR:
            samples.append("\n".join(current))
            current = []
        else:
            current.append(line)
    samples.append("\n".join(current))
    return [s for s in samples if s != ""]


def join_samples(samples: list[str]) -> str:
    return f"\n{SEPARATOR}\n".join(samples)


class SamplesPanel(Panel):
    """The sample tester. Public methods: :meth:`check_samples`, :meth:`set_samples`, :meth:`load_bundled_samples`."""

    error_sources = ("samples",)

    def __init__(self, session) -> None:
        super().__init__(session)
        self.results: list[SampleResult] = []
        self.text = w.Textarea(
            placeholder=(
                f"one sample per block; separate samples with a line '{SEPARATOR}'. The line break before "
                f"'{SEPARATOR}' is not part of the sample: to end a sample with a newline, leave an empty line "
                f"before '{SEPARATOR}'"
            ),
            layout=w.Layout(width="100%", height="220px"),
        )
        self.text.add_class("cfgzip-samples-text")
        self.text.observe(self._on_samples_text, names="value")  # kept with the author's session
        # The rule the samples are parsed from (issue 35): the root, or one rule's language alone
        # (a `value` of a JSON grammar). Kept with the session; "Add as tests" carries it over.
        self._listing_rules = False
        self.start_rule = w.Dropdown(options=[("root", "")], value="", description="from rule")
        self.start_rule.add_class("cfgzip-samples-start")
        self.start_rule.observe(self._on_start_rule, names="value")
        sets = [name for name in bundled_grammars() if bundled_samples(name)]
        self.sample_set = w.Dropdown(
            options=sets, value="json" if "json" in sets else (sets[0] if sets else None), description="Samples of"
        )
        load = self._button(
            "Load", "cfgzip-load-samples", self.load_bundled_samples, where="samples", icon="folder-open"
        )
        run = self._button(
            "Check samples", "cfgzip-check-samples", self.check_samples, where="samples", icon="play", style="primary"
        )
        gen = self._button(
            "Generate valid strings",
            "cfgzip-generate-samples",
            self.generate_samples,
            where="samples",
            icon="random",
            tooltip="random sentences of the grammar (seeded, bounded), checked by both referees",
        )
        add = self._button(
            "Add them to the samples", "cfgzip-add-generated", self.add_generated, where="samples", icon="plus"
        )
        as_tests = self._button(
            "Add as tests",
            "cfgzip-samples-as-tests",
            self.add_samples_as_tests,
            where="samples",
            icon="check-square-o",
            tooltip="add every sample to the test list, expecting what it is now (accepted, prefix or rejected)",
        )
        gen_tests = self._button(
            "Add them as tests",
            "cfgzip-generated-as-tests",
            self.add_generated_as_tests,
            where="samples",
            icon="check-square-o",
            tooltip="add the generated strings to the test list: each should be accepted",
        )
        # Results and trees are HtmlViews: a rule name jumps to its definition, "tree" shows a
        # sample's derivation, and hovering a tree node lights its span up in the sample.
        self.output = HtmlView()
        self.output.add_class("cfgzip-samples-results")
        self.generated_output = HtmlView()
        self.generated_output.add_class("cfgzip-generated-samples")
        self.tree = HtmlView()
        self.tree.add_class("cfgzip-parse-tree")
        self.tree_result: ParseResult | None = None  # the tree shown
        self.tree_view = ParseTreeView(
            self.tree, pointer=session.rule_pointer, on_error=lambda exc: session.record_error("samples", exc)
        )
        for view in (self.output, self.generated_output, self.tree):
            view.on_rule(lambda name: self._handler("samples", lambda: self.session.jump_to_rule(name))())
        self.output.on_action("tree", lambda arg: self._handler("samples", lambda: self.show_tree(int(arg)))())
        self.generated_output.on_action(
            "tree", lambda arg: self._handler("samples", lambda: self.show_tree(text=self.generated[int(arg)].text))()
        )
        self.generated: list[SampleResult] = []
        self.generated_stamp = None  # the grammar the generated strings were last judged for
        self.generated_seed: int | None = None
        self.results_stamp = None  # the grammar the shown verdicts were made for
        self._seed = 0
        self.widget = w.VBox(
            [
                w.HBox([self.sample_set, load, run, as_tests, self.start_rule], layout=w.Layout(flex_flow="row wrap")),
                self.text,
                self.output,
                self.tree,
                w.HBox([gen, add, gen_tests], layout=w.Layout(flex_flow="row wrap")),
                self.generated_output,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-samples")
        # Never a stale verdict: every (re-)check of the grammar re-checks the samples.
        session.on("grammar", self._on_grammar)
        session.on("text", self._mark_stale)
        session.on("restored", self._show_start_rules)
        self._show_start_rules()

    # -- public methods ----------------------------------------------------------------

    def _on_samples_text(self, change) -> None:
        self.session.samples_text = change["new"]
        self.session.emit("samples")

    def set_start_rule(self, rule: str = "") -> None:
        """Parse the samples from ``rule`` ("" or the root: the whole grammar) and check them
        again; kept with the author's session."""
        rule = "" if rule == self._root() else rule
        self.session.samples_start = rule
        self._show_start_rules()
        self.session.emit("samples")
        if self.results or self.results_stamp is not None:
            self.check_samples()

    def _on_start_rule(self, change) -> None:
        if not self._listing_rules and change["new"] != self.session.samples_start:
            self._handler("samples", lambda: self.set_start_rule(change["new"]))()

    def _root(self) -> str:
        names = self.session.rule_names()
        return names[0] if names else "root"

    def _show_start_rules(self) -> None:
        """The picker's rules: the current grammar's (the root first); a picked rule the grammar
        no longer has stays, marked, so its samples say why they fail instead of switching rule."""
        names = self.session.rule_names()
        picked = self.session.samples_start
        options = [(f"{names[0] if names else 'root'} (root)", "")] + [(n, n) for n in names[1:]]
        if picked and picked not in names:
            options.append((f"{picked} (not in the grammar)", picked))
        self._listing_rules = True  # new options reset the value: that is no choice of the author's
        try:
            if [tuple(o) for o in self.start_rule.options] != options:
                self.start_rule.options = options
            if self.start_rule.value != picked:
                self.start_rule.value = picked
        finally:
            self._listing_rules = False

    def set_samples(self, samples: list[str]) -> None:
        self.text.value = join_samples(samples)

    def load_bundled_samples(self, name: str | None = None) -> list[str]:
        name = name or self.sample_set.value
        samples = [p.read_text(encoding="utf-8") for p in bundled_samples(name)]
        self.set_samples(samples)
        return samples

    def check_samples(self) -> list[SampleResult]:
        """Judge every sample with our GNF and with XGrammar; show and return the results."""
        self.session.require_grammar()
        compiled = self.session.grammar_from(self.session.samples_start)
        stamp = self.session.grammar_stamp
        results, xgr = self._judge(compiled, split_samples(self.text.value))
        self.results, self.results_stamp = results, stamp
        self._show(xgr)
        return self.results

    def generate_samples(self, count: int = 5, *, seed: int | None = None, max_length: int = 120):
        """Random sentences of the grammar (a new seed each call unless given), judged by both referees."""
        compiled = self.session.grammar_from(self.session.samples_start)
        if seed is None:
            self._seed += 1
            seed = self._seed
        try:
            sentences = generate(compiled.cfg, 2 * count, seed=seed, max_length=max_length)
        except ValueError as exc:  # an empty language
            raise WorkbenchError(str(exc)) from None
        # Only strings that are text: a grammar that allows surrogate code points (XGrammar
        # matches their 3-byte encoding) can generate bytes that no Python str holds.
        texts = []
        for sentence in sentences:
            try:
                texts.append(sentence.data.decode("utf-8"))
            except UnicodeDecodeError:
                continue
        self.generated, xgr = self._judge(compiled, texts[:count])
        self.generated_stamp, self.generated_seed = self.session.grammar_stamp, seed
        self._show_generated(xgr, seed)
        return self.generated

    def recheck_generated(self) -> list[SampleResult]:
        """Judge the generated strings again under the current grammar (done on every check: a
        string generated for an earlier grammar may be refused by this one, and says so)."""
        if not self.generated:
            return []
        compiled = self.session.grammar_from(self.session.samples_start)
        self.generated, xgr = self._judge(compiled, [r.text for r in self.generated])
        self.generated_stamp = self.session.grammar_stamp
        self._show_generated(xgr, self.generated_seed, rechecked=True)
        return self.generated

    def add_generated(self) -> None:
        """Append the generated strings to the samples and check them all."""
        if not self.generated:
            raise WorkbenchError("generate some strings first")
        current = split_samples(self.text.value)
        self.set_samples(current + [r.text for r in self.generated])
        self.check_samples()

    def add_samples_as_tests(self) -> list[GrammarTest]:
        """Add every sample to the test list, expecting what the grammar makes of it now (a
        snapshot: later changes to the grammar that alter a verdict then show as failures)."""
        results = self.results if self.results_current else self.check_samples()
        if not results:
            raise WorkbenchError("no samples to add")
        expect = {"accepted": "accept", "prefix": "prefix", "rejected": "reject"}
        start = self.session.samples_start
        tests = [GrammarTest(r.text, expect[r.ours.kind], start=start) for r in results]
        self.session.add_tests(tests)
        self.session.run_tests()
        return tests

    def add_generated_as_tests(self) -> list[GrammarTest]:
        """Add the generated strings to the test list: each one should be accepted."""
        if not self.generated:
            raise WorkbenchError("generate some strings first")
        start = self.session.samples_start
        tests = [GrammarTest(r.text, "accept", "generated", start) for r in self.generated]
        self.session.add_tests(tests)
        self.session.run_tests()
        return tests

    def show_tree(self, index: int | None = None, *, text: str | None = None) -> ParseResult:
        """Show the parse tree of sample ``index`` (0-based, as checked) or of ``text``: the
        derivation in the grammar's rules, or for a rejected sample the partial derivation and
        what was expected. Returns the Earley parse (with the full budget)."""
        if text is None:
            results = self.results if self.results_current else self.check_samples()
            if index is None or not 0 <= index < len(results):
                raise WorkbenchError(f"no sample #{(index or 0) + 1} to show (there are {len(results)})")
            text = results[index].text
        grammar = self.session.earley()
        try:
            result = grammar.parse(text, start=self.session.samples_start or None)
        except (ParseLimitError, CfgzipError) as exc:
            raise WorkbenchError(str(exc)) from None
        self.tree_result = result
        title = f"sample #{index + 1}" if index is not None else "generated string"
        if self.session.samples_start:
            title += f" (from rule {self.session.samples_start})"
        self.tree_view.show(result, title)
        return result

    @property
    def results_current(self) -> bool:
        """The shown verdicts were made for the current grammar text."""
        return self.session.is_current(self.results_stamp)

    # -- checking ---------------------------------------------------------------------

    def _judge(self, compiled, samples: list[str], datas: list[bytes] | None = None):
        datas = datas if datas is not None else [s.encode("utf-8") for s in samples]
        ours = [gnf_verdict(compiled.gnf, d) for d in datas]
        theirs: list[Verdict | None] = [None] * len(datas)
        xgr = self.session.checker.check(compiled.text, datas, root=compiled.ast.root)
        if xgr.ok:
            theirs = [_verdict(d, m.accepted_bytes, m.complete) for d, m in zip(datas, xgr.samples)]
        parses = self._parses(samples)
        results = []
        for text, data, o, t, parse in zip(samples, datas, ours, theirs, parses):
            expected, can_end = "", False
            if o.kind != "accepted":
                allowed, can_end = expected_bytes(compiled.gnf, data[: o.accepted_bytes])
                expected = describe_bytes(allowed)
            results.append(SampleResult(text, o, t, expected, can_end, parse))
        return results, xgr

    def _parses(self, samples: list[str]) -> list[ParseResult | None]:
        """Earley parses of the samples within one shared budget (None past it, or when the
        grammar holds a construct the parser does not know)."""
        try:
            grammar = self.session.earley()
        except CfgzipError:
            return [None] * len(samples)
        left, out = PARSE_BUDGET, []
        for text in samples:
            if left <= 0:
                out.append(None)
                continue
            try:
                parse = grammar.parse(text, max_items=left, start=self.session.samples_start or None)
            except (ParseLimitError, RecursionError):
                out.append(None)
                left = 0
                continue
            left -= parse.items
            out.append(parse)
        return out

    def _on_grammar(self) -> None:
        try:
            self._show_start_rules()
            if self.session.grammar_ok:
                if self.results or self.results_stamp is not None:
                    self.check_samples()
                if self.generated and not self.session.is_current(self.generated_stamp):
                    self.recheck_generated()
            else:
                self._mark_stale()
        except Exception as exc:  # last resort: runs from session events, maybe in a worker thread
            self.session.record_error("samples", exc)

    def _mark_stale(self) -> None:
        why = "the grammar has errors" if self.session.checked_text == self.session.text else "the text changed"
        if self.results and not self.results_current:
            self.results = []
            self.output.value = (
                f'<p class="cfgzip-warn">out of date: {why}; the samples are re-checked as soon as the grammar '
                "compiles (or press Check samples)</p>"
            )
        if self.generated and not self.session.is_current(self.generated_stamp):
            # Keep the strings (they are re-judged when the grammar compiles), drop their verdicts.
            self.generated = [SampleResult(r.text, r.ours, None) for r in self.generated]
            self.generated_output.value = (
                f'<p class="cfgzip-warn cfgzip-generated-stale">generated strings out of date: {why}; they are '
                "re-checked as soon as the grammar compiles</p>"
            )

    # -- view -------------------------------------------------------------------------

    def _show(self, xgr) -> None:
        note = "" if xgr.ok else f'<p class="cfgzip-warn">XGrammar: {esc(xgr.summary())}</p>'
        self.output.value = note + _results_table(self.results)
        if self.tree_result is not None:  # the tree shown follows the grammar too
            shown = [i for i, r in enumerate(self.results) if r.text == self.tree_result.sample]
            if shown:
                self._handler("samples", lambda: self.show_tree(shown[0]))()
            else:
                self.tree_result = None
                self.tree_view.clear()

    def _show_generated(self, xgr, seed: int | None, *, rechecked: bool = False) -> None:
        note = "" if xgr.ok else f'<p class="cfgzip-warn">XGrammar: {esc(xgr.summary())}</p>'
        again = (
            ' · <span class="cfgzip-muted">re-checked for the current grammar (they were generated for an earlier one)</span>'
            if rechecked
            else ""
        )
        self.generated_output.value = (
            f"<b>Generated valid strings</b> (seed {seed}; random choices up to depth 12 or 120 bytes, then the "
            "shortest way to finish)" + again + note + _results_table(self.generated)
        )


def _cell(v: Verdict | None) -> str:
    if v is None:
        return '<span class="cfgzip-muted">n/a</span>'
    css = {"accepted": "cfgzip-ok", "prefix": "cfgzip-warn", "rejected": "cfgzip-bad"}[v.kind]
    return f'<span class="{css}">{esc(v.describe())}</span>'


def _results_table(results: list[SampleResult]) -> str:
    rows = []
    for i, r in enumerate(results, 1):
        preview = r.text if len(r.text) <= 70 else r.text[:67] + "…"
        agree = {
            None: "",
            True: '<span class="cfgzip-ok">✓</span>',
            False: '<span class="cfgzip-bad">✗ differ</span>',
        }[r.agree]
        where = failure_context(r.text, r.ours)
        if r.ours.kind != "accepted":
            terms = r.expected_terms
            if terms:  # the grammar's own words first, then the bytes
                where += f'<div class="cfgzip-expected-terms">{rule_links(esc(terms))}</div>'
            ends = " or the end of the input" if r.can_end else ""
            verb = "bytes expected there" if r.ours.kind == "rejected" else "bytes that may come next"
            where += (
                f'<div class="cfgzip-expected">{verb}: <span class="cfgzip-code">{esc(r.expected)}</span>{ends}</div>'
            )
        if r.ambiguous:
            where += f'<div class="cfgzip-warn cfgzip-ambiguous">⚠ {esc(r.parse.ambiguity.describe(r.text))}</div>'
        tree = f'<span data-action="tree" data-arg="{i - 1}" title="show the parse tree">tree</span>'
        rows.append(
            [
                i,
                f'<span class="cfgzip-code">{esc(preview)}</span>' + where,
                _cell(r.ours),
                _cell(r.xgrammar),
                agree,
                tree,
            ]
        )
    return table(["#", "sample", "cfgzip (GNF)", "XGrammar", "agree", ""], rows)
