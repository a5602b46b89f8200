"""The workbench: every panel on one shared session, in tabs.

>>> from cfgzip_lab.widgets import Workbench
>>> Workbench()          # in a notebook cell: the whole app       # doctest: +SKIP

The app object is not a widget (composition): ``app.widget`` is the root, ``app.editor``,
``app.samples``, ``app.tests``, ``app.structure``, ``app.classes``, ``app.decoder``,
``app.timings`` and ``app.export`` are the panels, and ``app.session`` is what they share.
Every button is one public method of a panel; the most used ones are also methods of the app.

The workbench follows JupyterLab's theme: its CSS uses the ``--jp-*`` variables, and a hidden
:class:`~.theme.ThemeProbe` reports the theme so that every plotly chart gets a template in the
same colours (:meth:`Workbench.set_theme`), again at every theme switch. A rule name clicked in
any tab (a railroad box, a parse tree, a table) opens the Grammar tab on its definition.

The status line names where the text comes from (``untitled``, a file, a bundled grammar,
each with "(edited)" once changed), the classes and their tokenizer (the decoder's too),
running jobs, the one classing time and the errors not yet fixed; results made for another
text or tokenizer are marked "out of date (made for …)". Exports go to ``exports/`` at the
repository root (git-ignored); see :mod:`.export`.
"""

from __future__ import annotations

import ipywidgets as w

from ._base import Throttle
from ._format import CSS, esc, fmt_seconds
from .classes_panel import ClassesPanel
from .decoder import DecoderPanel
from .drafts import draft_path_for, notebook_key
from .editor import EditorPanel
from .export import ExportPanel
from .samples import SamplesPanel
from .session import WorkbenchSession
from .structure import StructurePanel
from .tests_panel import TestsPanel
from .theme import ThemeProbe, apply_theme, plotly_template
from .timings import TimingsPanel

__all__ = ["Workbench"]

# The open workbench of each notebook in this kernel (by notebook_key): re-running the cell after a
# browser reload (F5) shows it again, with everything in it, instead of building an empty one.
_OPEN: dict[str, Workbench] = {}

TABS = ("Grammar", "Samples", "Tests", "Structure", "Classes", "Decoder", "Timings", "Export")


class Workbench:
    """The whole workbench.

    Parameters
    ----------
    text : str, optional
        Grammar text to start with (default: the bundled JSON grammar).
    tokenizer : str
        Tokenizer picked for classing (default ``smollm2``, the default model's).
    delay : float
        Seconds after the last keystroke before the editor re-checks the grammar.
    draft : bool
        Write every checked text that was typed to a draft file of this notebook
        (``~/.cache/cfgzip_lab/drafts/``, one per notebook path, see :mod:`.drafts`), so nothing
        typed is lost if the kernel dies or restarts ("Restore draft" reads it back). The
        start-up check never writes it.
    session : WorkbenchSession, optional
        Share a session with other views.
    editor : str
        ``"codemirror"`` (default) or ``"textarea"``: a plain text field, for front ends that
        cannot load the editor's ES module (it also falls back on its own when the bundle is missing).
    live : bool
        Live classes (issue 18.6): re-class after each successful check, from the start-up check
        on, while a classing stays under ~1 s; the class count, the compression and their change
        show beside the editor. For a ``session`` passed in, its own ``live_enabled`` is kept
        unless ``live`` is given.

    Notes
    -----
    ``Workbench()`` with no ``text`` and no ``session``, in a kernel where this notebook's
    workbench is open, returns that workbench (issue 35.2): after a browser reload (F5) the
    kernel still holds the grammar, its file, the samples, the tests and the decoder's steps,
    and re-running the cell shows them again. :meth:`close` ends it; the next ``Workbench()``
    is a new one.
    """

    def __new__(cls, text: str | None = None, *, session: WorkbenchSession | None = None, draft: bool = True, **_):
        if text is None and session is None and draft:
            open_one = _OPEN.get(notebook_key())
            if open_one is not None and not open_one.closed:
                return open_one  # __init__ sees it is built and keeps it as it is
        return super().__new__(cls)

    def __init__(
        self,
        text: str | None = None,
        *,
        tokenizer: str = "smollm2",
        delay: float = 0.4,
        draft: bool = True,
        session: WorkbenchSession | None = None,
        model: str = "smollm2",
        cache_path: str = "cfgzip_classes.npz",
        report_path: str = "cfgzip_report.json",
        editor: str = "codemirror",
        live: bool | None = None,
    ) -> None:
        if getattr(self, "closed", None) is False:  # the notebook's open workbench (see __new__)
            return
        self.closed = False
        notebook = notebook_key()
        draft_path = draft_path_for(notebook) if draft else None
        self.session = session or WorkbenchSession(
            text, tokenizer=tokenizer, draft_path=draft_path, live_classes=True if live is None else live
        )
        s = self.session
        if session is not None and live is not None:
            s.live_enabled = live
        if s.draft_path is not None and not s.draft_notebook:
            s.draft_notebook = notebook
        s.checker.warm_up()
        self.editor = EditorPanel(s, delay=delay, editor=editor)
        self.samples = SamplesPanel(s)
        self.tests = TestsPanel(s)
        self.structure = StructurePanel(s)
        self.classes = ClassesPanel(s)
        self.decoder = DecoderPanel(s, model=model)
        self.timings = TimingsPanel(s)
        self.export = ExportPanel(s, cache_path=cache_path, report_path=report_path)
        panels = [
            self.editor,
            self.samples,
            self.tests,
            self.structure,
            self.classes,
            self.decoder,
            self.timings,
            self.export,
        ]
        self.tabs = w.Tab(children=[p.widget for p in panels], titles=TABS)
        self.tabs.add_class("cfgzip-tabs")
        self.status = w.HTML()
        self.status.add_class("cfgzip-status")
        self.theme = ThemeProbe()
        self.theme.observe(lambda change: self.set_theme(change["new"]), names="theme")
        self.widget = w.VBox(
            [
                w.HTML(CSS),
                self.theme,
                w.HTML("<h3 style='margin:4px 0'>cfgzip workbench</h3>"),
                self.status,
                self.tabs,
            ]
        )
        self.widget.add_class("cfgzip-app")
        self._throttled_status = Throttle(self._show_status, 0.25)
        for topic in ("text", "source", "grammar", "classes", "error"):
            s.on(topic, self._show_status)
        for topic in ("job", "decoder"):  # one per decode step: drawn at most every 0.25 s while it runs
            s.on(topic, self._on_progress)
        s.on("jump", lambda: self.select("Grammar"))
        s.compile(draft=False)  # the start-up check: the draft on disk stays for "Restore draft"
        self.editor.show_draft_hint()
        if text is None and session is None and draft:
            _OPEN[notebook] = self

    # -- the main actions, one call each ------------------------------------------------

    def compile(self) -> bool:
        return self.editor.compile()

    def check_samples(self):
        return self.samples.check_samples()

    def run_classing(self, *, wait: bool = False):
        return self.classes.run_classing(wait=wait)

    def cancel(self) -> None:
        self.session.cancel()

    def set_live_classes(self, on: bool):
        return self.editor.live.set_live(on)

    def search(self, query: str):
        return self.classes.search(query)

    def step(self):
        return self.decoder.step()

    def run_steps(self, n: int | None = None, *, wait: bool = False):
        return self.decoder.run_steps(n, wait=wait)

    def rollback(self):
        return self.decoder.rollback()

    def reset(self):
        return self.decoder.reset()

    def export_cache(self, path=None):
        return self.export.export_cache(path)

    def export_report(self, path=None):
        return self.export.export_report(path)

    def select(self, tab: str) -> None:
        """Show the tab titled ``tab`` ("Grammar", "Classes", …)."""
        self.tabs.selected_index = TABS.index(tab)

    def run_tests(self):
        return self.tests.run_tests()

    def jump_to_rule(self, rule: str):
        """Open the Grammar tab on ``rule``'s definition."""
        return self.session.jump_to_rule(rule)

    def figures(self) -> list:
        """Every plotly chart of the workbench (what :meth:`set_theme` colours)."""
        return [
            self.structure.figure,
            self.classes.histogram,
            self.decoder.chart,
            self.timings.line,
            self.timings.hist,
        ]

    def set_theme(self, theme: dict | None) -> dict:
        """Colour every chart for ``theme`` (as :class:`~.theme.ThemeProbe` reports JupyterLab's:
        ``{"light": bool, "name": ..., "vars": {"layout-color1": ..., ...}}``); returns the template."""
        for figure in self.figures():
            apply_theme(figure, theme)
        self.theme_applied = theme
        return plotly_template(theme)

    # -- display ------------------------------------------------------------------------

    def display(self) -> None:
        from IPython.display import display

        display(self.widget)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def close(self) -> None:
        """Cancel running jobs and close this app's widgets (not other widgets of the kernel)."""
        self.closed = True
        for key, app in list(_OPEN.items()):
            if app is self:
                del _OPEN[key]
        self.session.close()

        def close_tree(widget) -> None:
            for child in getattr(widget, "children", ()):
                close_tree(child)
            widget.close()

        close_tree(self.widget)

    # -- status line ---------------------------------------------------------------------

    def _on_progress(self) -> None:
        job = self.session.jobs.get("decode")
        if job is not None and job.running:
            self._throttled_status()
        else:
            self._show_status()

    def _show_status(self) -> None:
        s = self.session
        parts = []
        source = esc(s.provenance)
        if s.checked_text != s.text:
            parts.append(f'<span class="cfgzip-muted">grammar not checked yet</span> {source}')
        elif s.grammar_ok:
            parts.append(f'<span class="cfgzip-ok">grammar ✓</span> {source}')
        else:
            parts.append(f'<span class="cfgzip-bad">grammar ✗</span> {source}')
        if s.classes is not None:
            tokenizer = s.classes_stamp.tokenizer if s.classes_stamp else s.tokenizer
            note = s.stale_note(s.classes_stamp)
            mark = f' <span class="cfgzip-warn cfgzip-stale">{esc(note)}</span>' if note else ""
            parts.append(f"{s.classes.num_classes:,} classes · {esc(tokenizer)}{mark}")
            if "classing" in s.timings and s.is_current(s.timing_stamps.get("classing")):
                parts.append(f"classing {fmt_seconds(s.timings['classing'])}")
        for name, job in s.jobs.items():
            if job.running and name != "xgrammar":
                pct = f" {100 * job.fraction:.0f}%" if job.total else ""
                parts.append(f"<i>{esc(name)}{pct}…</i>")
        if s.errors:
            parts.append(f'<span class="cfgzip-bad">{len(s.errors)} error(s)</span> — last: {esc(s.errors[-1].where)}')
        self.status.value = " · ".join(parts)
