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
from .persisted_session import SessionState, SessionStore, apply_state, saved_session
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
    persist : bool, optional
        Keep the author's session on disk (issue 35.2, :mod:`.persisted_session`): the grammar
        text, its file, its input kind, the samples, the tests, the tokenizer and the decoder's
        prompt, saved a moment after each change; a new ``Workbench()`` for this notebook (after a
        kernel restart) starts where the last one was, its classes read from the class cache
        directory, and opening a grammar file brings back that file's own session. Default: on
        with ``draft`` when no ``session`` is passed; a ``text`` given starts from that text (and
        is saved as the session from then on).
    state_dir : path, optional
        Where sessions are kept (default ``$CFGZIP_SESSIONS_DIR`` or ``~/.cache/cfgzip_lab/sessions``).
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
        persist: bool | None = None,
        state_dir=None,
    ) -> None:
        if getattr(self, "closed", None) is False:  # the notebook's open workbench (see __new__)
            return
        self.closed = False
        notebook = notebook_key()
        draft_path = draft_path_for(notebook) if draft else None
        persist = (draft and session is None) if persist is None else persist
        # the author's session saved by the last workbench of this notebook (a kernel restart)
        restored, note = (
            saved_session(notebook, state_dir) if persist and text is None and session is None else (None, "")
        )
        self.session = session or WorkbenchSession(
            restored.text if restored is not None else text,
            source=restored.source if restored is not None else None,
            tokenizer=restored.tokenizer if restored is not None else tokenizer,
            draft_path=draft_path,
            live_classes=True if live is None else live,
        )
        s = self.session
        if restored is not None:
            apply_state(s, restored)
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
        self.store: SessionStore | None = None
        if persist:
            self.store = SessionStore(s, notebook, state_dir)
            if restored is not None:
                self.store.adopt(restored)
                self._show_restored(restored)
                if restored.classed and s.grammar_ok:
                    s.run_classing()  # from the class cache directory: classed before, not classed again
            elif note:
                self.store.message = note
            self._draft_hint = self.editor.draft_note.value  # said once, with the start-up note
            self._say(self.store.message)
            s.on("restored", self._on_restored)
            s.on("session_note", lambda: self._say(self.store.message))
            self.store.attach()
            if restored is None:
                self.store.changed()  # a first session (or one whose file was corrupt) is on disk from now on
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
        """Save the session, cancel running jobs and close this app's widgets (not other widgets of the kernel)."""
        if self.store is not None:
            self.store.close()
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

    # -- the author's session -------------------------------------------------------------

    def save_session(self) -> bool:
        """Write the author's session now (it is also saved a moment after each change)."""
        return self.store.save() if self.store is not None else False

    def _show_restored(self, state: SessionState) -> None:
        """Show a session brought back in the panels that hold their own text."""
        self.samples.text.value = state.samples
        if state.prompt:
            self.decoder.prompt.value = state.prompt
        if state.tokenizer in {value for _, value in self.classes.tokenizer.options}:
            self.classes.tokenizer.value = state.tokenizer

    def _on_restored(self) -> None:
        """Opening a grammar file brought back its session (or said why it could not)."""
        s = self.session
        if self.editor.kind.value != s.input_kind:  # read as the session read it: check it again so
            self.editor._set_kind_dropdown(s.input_kind)
            self.editor.compile()
        elif s.tests and s.grammar_ok:
            s._guarded_tests()  # the tests brought back, judged under this grammar
        self.samples.text.value = s.samples_text
        if s.decoder_prompt:
            self.decoder.prompt.value = s.decoder_prompt
        if s.tokenizer in {value for _, value in self.classes.tokenizer.options}:
            self.classes.tokenizer.value = s.tokenizer

    _draft_hint = ""

    def _say(self, message: str) -> None:
        """Show ``message`` (session restored, kept aside…) above the editor in place of the one
        before; at start-up the draft hint stays under it."""
        css = "cfgzip-warn" if "could not be read" in message or "changed on disk" in message else "cfgzip-muted"
        note = f'<span class="{css}">{esc(message)}</span>' if message else ""
        hint, self._draft_hint = self._draft_hint, ""
        self.editor.draft_note.value = note + ("<br>" if note and hint else "") + hint

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
