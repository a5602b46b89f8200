"""Live classes beside the editor (issue 18.6): the class count, the compression and how they
moved since the last version, re-classed by the session after each successful check.

The view only draws; the session decides and classes (:meth:`WorkbenchSession.live_reclass`,
:mod:`cfgzip_lab.live_classes`). Its one control, the "live classes" box, calls
:meth:`WorkbenchSession.set_live_classes`.
"""

from __future__ import annotations

import ipywidgets as w

from ._base import Panel, Throttle
from ._format import esc, fmt_seconds

__all__ = ["LiveClassesView", "live_html"]


def live_html(session) -> str:
    """The lines beside the editor, from the session's state (pure: no widgets)."""
    s = session
    job = s.jobs.get("live classes")
    running = job is not None and job.running
    latest = s.class_history.latest
    current = s.classes_current
    parts = []
    if s.classes is not None:
        count = f'<b class="cfgzip-live-count">{s.classes.num_classes:,}</b>'
        ratio = f'<b class="cfgzip-live-ratio">{s.classes.compression_ratio:,.1f}×</b>'
        tokenizer = s.classes_stamp.tokenizer if s.classes_stamp else s.tokenizer
        head = f"{count} classes · {ratio} compression ({esc(tokenizer)}, {s.classes.vocab_size:,} tokens)"
        if current:
            parts.append(f'<div class="cfgzip-live-head">{head}</div>')
            delta = s.class_history.delta()
            if delta is not None and latest is not None and latest.grammar_sha == s.compiled.sha256:
                parts.append(
                    f'<div><span class="cfgzip-live-delta">{esc(delta.describe())}</span> '
                    '<span class="cfgzip-muted">since the last version</span></div>'
                )
            how = (
                f"classed in {fmt_seconds(latest.seconds)}"
                if latest is not None and latest.seconds is not None
                else f"from {esc(s.classes_source)}"
            )
            parts.append(f'<div class="cfgzip-muted cfgzip-live-note">{how}</div>')
        else:
            parts.append(
                f'<div class="cfgzip-live-head cfgzip-live-stale cfgzip-muted">{head}: for an earlier version</div>'
            )
    if running:
        pct = f" {100 * job.fraction:.0f}%" if job.total else ""
        parts.append(f'<div class="cfgzip-live-running"><i>re-classing{pct}…</i></div>')
    elif not current:
        decision = s.live_decision
        if not s.live_enabled:
            why = "live classes are off: Run classing (Classes tab) classes this version"
        elif decision is not None and not decision.run:
            why = decision.reason
        else:
            why = "re-classed after the next successful check"
        css = "cfgzip-warn" if decision is not None and decision.paused else "cfgzip-muted"
        parts.append(f'<div class="cfgzip-live-why {css}">{esc(why)}</div>')
    return "".join(parts)


class LiveClassesView(Panel):
    """The "live classes" lines beside the editor. Public method: :meth:`set_live` (the box)."""

    error_sources = ("live classes",)

    def __init__(self, session) -> None:
        super().__init__(session)
        self.toggle = w.Checkbox(
            value=session.live_enabled,
            description="live classes",
            indent=False,
            tooltip=(
                f"re-class after each successful check while it takes under {session.live_policy.budget_s:g} s "
                "(the class count and compression follow the typing)"
            ),
            layout=w.Layout(width="auto"),
        )
        self.toggle.add_class("cfgzip-live-toggle")
        self._setting = False
        self.toggle.observe(self._on_toggle, names="value")
        self.output = w.HTML()
        self.output.add_class("cfgzip-live-classes")
        self.widget = w.VBox([self.toggle, self.output, self.error_box])
        self.widget.add_class("cfgzip-live")
        self._throttled = Throttle(self.refresh, 0.25)  # "job" comes per progress step (and per decode step)
        for topic in ("text", "grammar", "classes", "live"):
            session.on(topic, self.refresh)
        session.on("job", self._on_job)
        self.refresh()

    def set_live(self, on: bool):
        """Turn live classes on or off (the box)."""
        decision = self.session.set_live_classes(on)
        self._setting = True
        try:
            self.toggle.value = bool(on)
        finally:
            self._setting = False
        self.refresh()
        return decision

    def refresh(self) -> None:
        self.output.value = live_html(self.session)

    def _on_job(self) -> None:
        job = self.session.jobs.get("live classes")
        if job is not None and job.running:
            self._throttled()
        else:  # the end of a job is drawn at once
            self._throttled.cancel()
            self.refresh()

    def _on_toggle(self, change) -> None:
        if not self._setting:
            self._handler("live classes", lambda: self.set_live(change["new"]))()

    def close(self) -> None:
        self._throttled.cancel()
