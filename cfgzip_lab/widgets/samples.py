"""Sample tester: is each string a sentence of the grammar, a valid prefix, or where does it fail?

Two referees answer for every sample: our GNF (``GNF.accepts``) and XGrammar (in the
child process, byte by byte). The verdict is *accepted*, *valid prefix* (every byte
fits, the end is missing) or *rejected at line L, column C* (the text before that point
is a valid prefix). A disagreement between the two is flagged: it would be a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as w

from ..bundled import bundled_grammars, bundled_samples
from ..grammar.diagnostics import position_of
from ._base import Panel
from ._format import esc, table

__all__ = ["SamplesPanel", "Verdict", "SampleResult", "gnf_verdict", "SEPARATOR"]

SEPARATOR = "-----"  # a line holding only this separates two samples


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
    text: str
    ours: Verdict
    xgrammar: Verdict | None

    @property
    def agree(self) -> bool | None:
        return None if self.xgrammar is None else self.ours.same(self.xgrammar)


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
    if gnf.accepts(data):
        return _verdict(data, len(data), True)
    lo, hi = 0, len(data)  # data[:lo] is viable; find the largest such lo
    if gnf.accepts(data, prefix=True):
        lo = hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if gnf.accepts(data[:mid], prefix=True):
            lo = mid
        else:
            hi = mid - 1
    return _verdict(data, lo, False)


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
            placeholder=f"one sample per block; separate samples with a line '{SEPARATOR}'",
            layout=w.Layout(width="100%", height="220px"),
        )
        self.text.add_class("cfgzip-samples-text")
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
        self.output = w.HTML()
        self.output.add_class("cfgzip-samples-results")
        self.widget = w.VBox([w.HBox([self.sample_set, load, run]), self.text, self.output, self.error_box])
        self.widget.add_class("cfgzip-samples")

    # -- public methods ----------------------------------------------------------------

    def set_samples(self, samples: list[str]) -> None:
        self.text.value = join_samples(samples)

    def load_bundled_samples(self, name: str | None = None) -> list[str]:
        name = name or self.sample_set.value
        samples = [p.read_text(encoding="utf-8") for p in bundled_samples(name)]
        self.set_samples(samples)
        return samples

    def check_samples(self) -> list[SampleResult]:
        """Judge every sample with our GNF and with XGrammar; show and return the results."""
        compiled = self.session.require_grammar()
        samples = split_samples(self.text.value)
        datas = [s.encode("utf-8") for s in samples]
        ours = [gnf_verdict(compiled.gnf, d) for d in datas]
        theirs: list[Verdict | None] = [None] * len(datas)
        xgr = self.session.checker.check(self.session.text, datas)
        if xgr.ok:
            theirs = [_verdict(d, m.accepted_bytes, m.complete) for d, m in zip(datas, xgr.samples)]
        self.results = [SampleResult(s, o, t) for s, o, t in zip(samples, ours, theirs)]
        self._show(xgr)
        return self.results

    # -- view -------------------------------------------------------------------------

    def _show(self, xgr) -> None:
        def cell(v: Verdict | None) -> str:
            if v is None:
                return '<span class="cfgzip-muted">n/a</span>'
            css = {"accepted": "cfgzip-ok", "prefix": "cfgzip-warn", "rejected": "cfgzip-bad"}[v.kind]
            return f'<span class="{css}">{esc(v.describe())}</span>'

        rows = []
        for i, r in enumerate(self.results, 1):
            preview = r.text if len(r.text) <= 70 else r.text[:67] + "…"
            agree = {
                None: "",
                True: '<span class="cfgzip-ok">✓</span>',
                False: '<span class="cfgzip-bad">✗ differ</span>',
            }[r.agree]
            rows.append([i, f'<span class="cfgzip-code">{esc(preview)}</span>', cell(r.ours), cell(r.xgrammar), agree])
        note = "" if xgr.ok else f'<p class="cfgzip-warn">XGrammar: {esc(xgr.summary())}</p>'
        self.output.value = note + table(["#", "sample", "cfgzip (GNF)", "XGrammar", "agree"], rows)
