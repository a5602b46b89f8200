"""HTML that answers the mouse: rule names and railroad boxes that jump to the rule, spans of a
parse tree that light up in the sample.

>>> view = HtmlView(value='<span data-rule="turn">turn</span>')   # doctest: +SKIP
>>> view.on_rule(lambda name: print("jump to", name))                # doctest: +SKIP

The front end (``static/html_view.js``, hand-written, no build step) only translates: a click
on an element with ``data-rule`` (or on a railroad diagram's nonterminal box) sends the rule's
name, a click on an element with ``data-action="name" data-arg="..."`` sends the action, a
click on an element with ``data-span="start,end"`` sends the span, and hovering such an
element marks those code points in the ``[data-sample]`` element of its ``[data-sample-root]``.
:meth:`HtmlView.click_rule`, :meth:`HtmlView.click_action` and :meth:`HtmlView.click_span` are
what those messages call, so a test or a notebook drives the same path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anywidget
import traitlets as t

__all__ = ["HtmlView", "BUNDLE"]

BUNDLE = Path(__file__).resolve().parent / "static" / "html_view.js"


class HtmlView(anywidget.AnyWidget):
    """An HTML block (trait ``value``) with clickable rules and hoverable spans."""

    value = t.Unicode("").tag(sync=True)

    def __init__(self, value: str = "", **kwargs) -> None:
        self._esm = BUNDLE.read_text(encoding="utf-8")
        super().__init__(value=value, **kwargs)
        self._rule_handlers: list[Callable[[str], None]] = []
        self._span_handlers: list[Callable[[int, int], None]] = []
        self._action_handlers: dict[str, list[Callable[[str], None]]] = {}
        self.on_msg(self._on_front_end)

    def on_rule(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(rule name)`` when a rule name or a railroad box is clicked."""
        self._rule_handlers.append(callback)

    def on_span(self, callback: Callable[[int, int], None]) -> None:
        """Call ``callback(start, end)`` when a node with a span is clicked."""
        self._span_handlers.append(callback)

    def on_action(self, action: str, callback: Callable[[str], None]) -> None:
        """Call ``callback(arg)`` when an element with ``data-action="action"`` is clicked."""
        self._action_handlers.setdefault(action, []).append(callback)

    def click_action(self, action: str, arg: str = "") -> None:
        for callback in list(self._action_handlers.get(action, ())):
            callback(arg)

    def click_rule(self, name: str) -> None:
        for callback in list(self._rule_handlers):
            callback(name)

    def click_span(self, start: int, end: int) -> None:
        for callback in list(self._span_handlers):
            callback(start, end)

    def _on_front_end(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict):
            return
        if content.get("type") == "rule" and isinstance(content.get("rule"), str):
            self.click_rule(content["rule"])
        elif content.get("type") == "action" and isinstance(content.get("action"), str):
            self.click_action(content["action"], str(content.get("arg", "")))
        elif content.get("type") == "span":
            self.click_span(int(content["start"]), int(content["end"]))
