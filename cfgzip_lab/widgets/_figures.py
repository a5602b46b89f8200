"""One plotly chart updated from several threads, one update at a time.

A panel redraws its chart from whichever thread told it something changed (a decode job, the
editor's debounce timer, live classes), while :meth:`~cfgzip_lab.widgets.Workbench.set_theme`
colours every chart from the kernel's main thread when JupyterLab switches theme. Plotly's
``FigureWidget.batch_update`` is not thread-safe: two batches at once share one list of pending
edits, and the first to close sends and clears the other's (or fails with "OrderedDict changed
size during iteration"). Measured with a chart redrawn in a loop from a second thread while
the theme was applied: the dark colours were lost in 17 of 200 tries, the chart staying white in
JupyterLab Dark (issue 35.8). :func:`batch` is ``batch_update`` under a lock of the figure's own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["batch"]

_GUARD = threading.Lock()  # makes each figure's lock once
_LOCK_ATTRIBUTE = "_cfgzip_update_lock"


def _lock_of(figure) -> threading.RLock:
    lock = getattr(figure, _LOCK_ATTRIBUTE, None)
    if lock is None:
        with _GUARD:
            lock = getattr(figure, _LOCK_ATTRIBUTE, None)
            if lock is None:
                lock = threading.RLock()
                object.__setattr__(figure, _LOCK_ATTRIBUTE, lock)
    return lock


@contextmanager
def batch(figure) -> Iterator[None]:
    """``figure.batch_update()`` while no other thread updates ``figure``: the edits made inside
    reach the browser as one message, and none of another thread's are dropped.

    >>> import plotly.graph_objects as go
    >>> figure = go.Figure()
    >>> with batch(figure):
    ...     figure.update_layout(paper_bgcolor="black")
    """
    with _lock_of(figure), figure.batch_update():
        yield
