"""What every panel shares: display by composition, buttons that call one method, an error box.

A panel is a plain object holding ``widget`` (its root box); it is not a ``VBox`` subclass,
so nothing collides with widget traits. Each button calls exactly one public method of the
panel, through :meth:`Panel._handler`, which catches the exception and records it in the
session so the panel's error box shows it.
"""

from __future__ import annotations

import threading
import time

import ipywidgets as w

from ._format import CSS, error_html


class Throttle:
    """Call ``fn()`` at most once per ``interval`` seconds, and always once after the last request.

    A decode run emits an event per step (tens per second on a GPU); drawing each one sends
    plotly and HTML updates faster than the browser renders them, and the browser fell seconds
    behind the kernel (issue 21: Cancel seemed to take 6.5 s and 11.3 s, 80–114 steps "past the
    click", which were steps already taken and still being drawn). Throttled, the browser is at
    most ``interval`` behind, and the last state is always drawn (a trailing call)."""

    def __init__(self, fn, interval: float = 0.25) -> None:
        self.fn = fn
        self.interval = interval
        self._last = 0.0
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                if self._timer is None:  # one trailing call for every request in the interval
                    self._timer = threading.Timer(wait, self._trailing)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._last = time.monotonic()
        self.fn()

    def _trailing(self) -> None:
        with self._lock:
            self._timer = None
            self._last = time.monotonic()
        self.fn()

    def cancel(self) -> None:
        """Drop the pending trailing call (the caller draws the final state itself)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def flush(self) -> None:
        """Draw now (a run ended): cancels the pending trailing call."""
        self.cancel()
        with self._lock:
            self._last = time.monotonic()
        self.fn()


class Panel:
    """Base of the workbench panels (composition: the root widget is ``self.widget``)."""

    #: the session ``ErrorRecord.where`` names this panel shows in its error box
    error_sources: tuple[str, ...] = ()
    #: the ``where`` a failed :meth:`_guarded_refresh` is recorded under (one of ``error_sources``)
    refresh_where = "view"
    widget: w.Widget

    def __init__(self, session) -> None:
        self.session = session
        self.error_box = w.HTML()
        self.error_box.add_class("cfgzip-error")
        session.on("error", self._show_errors)

    def _show_errors(self) -> None:
        mine = [e for e in self.session.errors if e.where in self.error_sources]
        self.error_box.value = error_html(mine[-1]) if mine else ""

    def _handler(self, where: str, method):
        """A widget callback that calls ``method()`` and records (never raises) its error."""

        def handle(*_event):
            try:
                method()
                # It worked: an earlier failure of this action is fixed, so its error goes
                # (the panels' boxes and the status line's count follow the session's list).
                self.session.clear_errors(where)
            # Last resort, on purpose: an exception escaping an ipywidgets callback only reaches
            # the kernel's log, where nobody sees it. record_error shows a CfgzipError (bad
            # input) as its message and anything else (a bug) with its traceback.
            except Exception as exc:
                self.session.record_error(where, exc)

        return handle

    def _guarded_refresh(self) -> None:
        """``self.refresh()`` for session events, which may run in a worker thread: a failure is
        recorded for the error box (never raised), and a later refresh that works clears it."""
        self._handler(self.refresh_where, self.refresh)()

    def _button(
        self, description: str, css: str, method, *, where: str, icon: str = "", style: str = "", tooltip: str = ""
    ) -> w.Button:
        button = w.Button(
            description=description,
            icon=icon,
            button_style=style,
            tooltip=tooltip or description,
            layout=w.Layout(width="auto", flex="0 0 auto"),
        )
        button.add_class(css)
        button.on_click(self._handler(where, method))
        return button

    def display(self) -> None:
        from IPython.display import display

        display(w.VBox([w.HTML(CSS), self.widget]))

    def _repr_mimebundle_(self, **kwargs):
        return w.VBox([w.HTML(CSS), self.widget])._repr_mimebundle_(**kwargs)
