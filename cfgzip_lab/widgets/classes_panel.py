"""Classes: run displacement classing for a tokenizer, see the classes, and ask why a token is where it is.

Classing runs in a background thread (progress bar, cancel). The panel shows the class
count, the compression ratio V/K, the dead/stop/special counts, a class-size histogram,
the largest classes with their representatives, and a search: a token (its text or its
id) → its class, representative, members and *why*: its displacement pairs
(σ_in, σ_out), the stack it consumes and the stack it leaves (paper §3.2). Tokens with
the same pairs are interchangeable in every state of the grammar.
"""

from __future__ import annotations

import codecs
import re

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from ..classes.classing import ClassKind
from ..grammar.words import EMPTY
from ..vocab import TokenKind, available_vocabs
from ._base import Panel
from ._format import esc, figure_layout, fmt_seconds, table, token_html, token_label
from .session import WorkbenchError

__all__ = ["ClassesPanel", "size_histogram"]

_KIND_NAMES = {int(k): k.name.lower() for k in ClassKind}


def size_histogram(sizes: np.ndarray) -> tuple[list[str], list[int]]:
    """Class counts by size bucket 1, 2–3, 4–7, …: (labels, counts)."""
    sizes = np.asarray(sizes)
    if sizes.size == 0:
        return [], []
    top = int(np.ceil(np.log2(sizes.max() + 1)))
    labels, counts = [], []
    for b in range(top):
        lo, hi = 1 << b, (1 << (b + 1)) - 1
        labels.append(f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}")
        counts.append(int(np.count_nonzero((sizes >= lo) & (sizes <= hi))))
    return labels, counts


class ClassesPanel(Panel):
    """Classing and the class explorer. Public methods: :meth:`run_classing`, :meth:`cancel`,
    :meth:`search`, :meth:`refresh`."""

    error_sources = ("classing", "search", "classes view")

    def __init__(self, session, *, largest: int = 10, sample_members: int = 6, pair_limit: int = 12) -> None:
        super().__init__(session)
        self.largest = largest
        self.sample_members = sample_members
        self.pair_limit = pair_limit
        self.search_results: list[dict] = []

        options = [(f"{v.name}" + ("" if v.installed else " (not installed)"), v.name) for v in available_vocabs()]
        names = [value for _, value in options]
        self.tokenizer = w.Dropdown(
            options=options,
            value=session.tokenizer if session.tokenizer in names else names[0],
            description="Tokenizer",
        )
        self.tokenizer.add_class("cfgzip-tokenizer")
        self.run_button = self._button(
            "Run classing", "cfgzip-run-classing", self.run_classing, where="classing", icon="play", style="primary"
        )
        self.cancel_button = self._button(
            "Cancel", "cfgzip-cancel-classing", self.cancel, where="classing", icon="stop"
        )
        self.cancel_button.disabled = True
        self.progress = w.IntProgress(value=0, min=0, max=1000, description="", layout=w.Layout(width="200px"))
        self.progress.add_class("cfgzip-classing-progress")
        self.progress_label = w.HTML()
        self.summary = w.HTML()
        self.summary.add_class("cfgzip-class-count")
        self.histogram = go.FigureWidget(
            layout=figure_layout(
                "Class sizes: how many classes hold 1, 2–3, 4–7… tokens",
                width=480,
                showlegend=False,
                xaxis=dict(title="tokens in the class"),
                yaxis=dict(title="classes", type="log"),
            )
        )
        self.histogram.add_bar(x=[], y=[], name="classes", marker_color="#4c78a8")
        self.histogram_box = w.Box([self.histogram], layout=w.Layout(min_width="490px"))
        self.histogram_box.add_class("cfgzip-class-histogram")
        self.largest_table = w.HTML()
        self.largest_table.add_class("cfgzip-largest-classes")
        self.query = w.Text(
            placeholder="token text (\\n, \\t escapes) or id, e.g. 1904 or '\",\"'", description="Token"
        )
        self.query.add_class("cfgzip-search-input")
        self.query.continuous_update = False  # Enter (or leaving the box) searches
        self._setting_query = False
        self.query.observe(self._on_query, names="value")
        find = self._button("Find", "cfgzip-search", self.search, where="search", icon="search")
        self.search_output = w.HTML()
        self.search_output.add_class("cfgzip-search-result")

        self.widget = w.VBox(
            [
                w.HBox([self.tokenizer, self.run_button, self.cancel_button, self.progress, self.progress_label]),
                self.summary,
                self.error_box,
                w.HTML("<b>Why is a token in its class?</b> Type its text or its id."),
                w.HBox([self.query, find]),
                self.search_output,
                w.HBox([self.histogram_box, self.largest_table]),
            ]
        )
        self.widget.add_class("cfgzip-classes")
        session.on("classes", self._guarded_refresh)
        session.on("grammar", self._show_summary)
        session.on("job", self._show_progress)
        self._guarded_refresh()

    # -- public methods ----------------------------------------------------------------

    def run_classing(self, *, wait: bool = False):
        """Class the picked tokenizer's vocabulary under the current grammar (background)."""
        return self.session.run_classing(self.tokenizer.value, wait=wait)

    def cancel(self) -> None:
        self.session.cancel("classing")

    def search(self, query: str | None = None) -> list[dict]:
        """Token text or id → class, representative, members and displacement pairs."""
        if query is not None and query != self.query.value:
            self._setting_query = True
            try:
                self.query.value = query
            finally:
                self._setting_query = False
        query = self.query.value
        s = self.session
        if s.classes is None or s.vocab is None:
            raise WorkbenchError("run classing first")
        ids, note = self._resolve(query)
        self.search_results = [self._explain(t) for t in ids]
        self.search_output.value = (f"<p>{esc(note)}</p>" if note else "") + "".join(
            self._explain_html(r) for r in self.search_results
        )
        return self.search_results

    def refresh(self) -> None:
        self._show_summary()
        classes = self.session.classes
        vocab = self.session.vocab
        if classes is None or vocab is None:
            self.largest_table.value = ""
            with self.histogram.batch_update():
                self.histogram.data[0].x, self.histogram.data[0].y = [], []
            return
        sizes = classes.class_sizes()
        labels, counts = size_histogram(sizes)
        with self.histogram.batch_update():
            self.histogram.data[0].x, self.histogram.data[0].y = labels, counts
        order = np.argsort(-sizes, kind="stable")[: self.largest]
        rows = []
        for k in order.tolist():
            members = classes.members(k)
            sample = " ".join(token_html(vocab, int(t), with_id=False) for t in members[: self.sample_members])
            more = (
                f' <span class="cfgzip-muted">+{len(members) - self.sample_members:,}</span>'
                if len(members) > self.sample_members
                else ""
            )
            rows.append(
                [
                    k,
                    _KIND_NAMES.get(int(classes.class_kind[k]), "?"),
                    f"{int(sizes[k]):,}",
                    token_html(vocab, int(classes.representatives[k])),
                    sample + more,
                ]
            )
        self.largest_table.value = "<b>Largest classes</b>" + table(
            ["class", "kind", "size", "representative", "members"], rows, numeric=(0, 2)
        )

    # -- helpers ----------------------------------------------------------------------

    def _on_query(self, _change) -> None:
        if not self._setting_query and self.query.value.strip():
            self._handler("search", self.search)()

    def _guarded_refresh(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # last resort: a refresh runs from session events, maybe in a worker thread
            self.session.record_error("classes view", exc)

    def _show_summary(self) -> None:
        s = self.session
        classes = s.classes
        if classes is None:
            self.summary.value = '<span class="cfgzip-muted">no classes yet: pick a tokenizer and run classing</span>'
            return
        meta = classes.metadata
        stale = "" if s.classes_current else ' <span class="cfgzip-warn">(for an older grammar text: run again)</span>'
        took = meta.get("classing_seconds")
        self.summary.value = (
            f'<span class="cfgzip-class-count-value" style="font-size:1.4em"><b>{classes.num_classes:,}</b></span> classes for '
            f"<b>{classes.vocab_size:,}</b> {esc(meta.get('tokenizer', s.tokenizer))} tokens — compression "
            f"<b>{classes.compression_ratio:,.1f}×</b>{stale}<br>"
            f"dead {meta.get('dead_tokens', 0):,} · stop {meta.get('stop_tokens', 0):,} · "
            f"special {meta.get('special_tokens', 0):,} · blocked class {meta.get('blocked_tokens', 0):,} tokens · "
            f"over budget (singletons) {meta.get('fallback_singletons', 0):,}"
            + (f" · classing took {fmt_seconds(took)}" if took is not None else "")
            + (f" · from {esc(s.classes_source)}" if s.classes_source and s.classes_source != "classing" else "")
        )

    def _show_progress(self) -> None:
        job = self.session.jobs.get("classing")
        if job is None:
            return
        running = job.running
        self.run_button.disabled = running
        self.cancel_button.disabled = not running
        self.progress.value = int(1000 * job.fraction) if job.total else (0 if running else 1000)
        if running:
            detail = f" {job.done:,}/{job.total:,}" if job.total else ""
            self.progress_label.value = f"{esc(job.message)}{detail}"
            self.progress.bar_style = ""
        else:
            self.progress.bar_style = {"done": "success", "cancelled": "warning", "failed": "danger"}.get(
                job.status, ""
            )
            self.progress_label.value = f"{job.status} in {fmt_seconds(job.seconds)}"

    def _resolve(self, query: str) -> tuple[list[int], str]:
        vocab = self.session.vocab
        query = query.strip("\r\n") if query.strip() else query
        found = re.fullmatch(r"\s*#?(\d+)\s*", query)
        if found:
            tid = int(found.group(1))
            if not 0 <= tid < vocab.vocab_size:
                raise WorkbenchError(f"token id {tid} is outside the vocabulary (0..{vocab.vocab_size - 1})")
            return [tid], ""
        # The text as typed first; then with \n-style escapes decoded; then without quotes.
        candidates = [query]
        if len(query) >= 2 and query[0] == query[-1] and query[0] in "'\"":
            candidates.append(query[1:-1])
        for text in list(candidates):
            if "\\" in text:
                try:
                    candidates.append(codecs.decode(text, "unicode_escape").encode("latin-1").decode("utf-8"))
                except (UnicodeError, ValueError):
                    pass
        index = self._bytes_index()
        for text in candidates:
            tid = index.get(text.encode("utf-8"))
            if tid is not None:
                return [tid], ""
        if not query:
            raise WorkbenchError("type a token's text or id")
        ids = vocab.encode(candidates[-1])[:8]
        labels = " ".join(token_label(vocab, t) for t in ids)
        return ids, f"no single token is {candidates[-1]!r}; it tokenizes as {labels} — each is shown below"

    def _bytes_index(self) -> dict[bytes, int]:
        vocab = self.session.vocab
        cached = getattr(self, "_index", None)
        if cached is None or cached[0] is not vocab:
            index = {}
            for tid, data in enumerate(vocab.token_bytes):
                if data:
                    index.setdefault(data, tid)
            cached = self._index = (vocab, index)
        return cached[1]

    def _explain(self, tid: int) -> dict:
        s = self.session
        vocab, classes = s.vocab, s.classes
        k = int(classes.class_of[tid])
        members = classes.members(k)
        kind = int(classes.class_kind[k])
        token_kind = int(vocab.kinds[tid])
        info = {
            "token_id": tid,
            "text": token_label(vocab, tid),
            "class": k,
            "class_kind": _KIND_NAMES.get(kind, "?"),
            "class_size": int(members.size),
            "representative": int(classes.representatives[k]),
            "representative_text": token_label(vocab, int(classes.representatives[k])),
            "members": [int(t) for t in members[:40]],
            "pairs": [],
            "num_pairs": 0,
            "why": "",
        }
        if token_kind == TokenKind.STOP:
            info["why"] = "a stop token: allowed exactly when the grammar can end; all stop tokens share one class"
        elif token_kind != TokenKind.NORMAL:
            info["why"] = (
                "a special/added token (no text): never allowed by either engine, so it sits in the blocked class"
            )
        elif s.grammar_ok:
            displacer = s.displacer()
            node = displacer.of_bytes(vocab.token_bytes[tid])
            if node == EMPTY:
                info["why"] = (
                    "its displacement is empty: no sentence of the grammar contains these bytes, so it is dead (blocked)"
                )
            else:
                info["num_pairs"] = displacer.num_pairs(node)
                info["pairs"] = [(p.consumed, p.pushed) for p in displacer.pairs(node, self.pair_limit)]
                same = (
                    "every member of the class has exactly these pairs"
                    if members.size > 1
                    else "no other token has exactly these pairs"
                )
                info["why"] = f"its displacement has {info['num_pairs']:,} pair(s) (σ_in, σ_out); {same}"
                if kind == ClassKind.NORMAL and members.size == 1 and classes.metadata.get("fallback_singletons"):
                    info["why"] += " (or it went over the per-token budget and was given its own class)"
        else:
            info["why"] = "the current grammar text does not compile, so its displacement cannot be shown"
        return info

    def _explain_html(self, info: dict) -> str:
        vocab = self.session.vocab
        tid = info["token_id"]
        members = " ".join(token_html(vocab, t, with_id=False) for t in info["members"][:24])
        if info["class_size"] > 24:
            members += f' <span class="cfgzip-muted">+{info["class_size"] - 24:,} more</span>'
        head = (
            f"<p>{token_html(vocab, tid)} is in class <b>{info['class']}</b> ({info['class_kind']}, "
            f"{info['class_size']:,} tokens); representative {token_html(vocab, info['representative'])}</p>"
            f"<p><b>Why:</b> {esc(info['why'])}</p>"
        )
        pairs = ""
        if info["pairs"]:

            def stack(symbols):
                return f'<span class="cfgzip-code">{esc(" ".join(symbols)) if symbols else "ε"}</span>'

            rows = [[stack(c), "→", stack(p)] for c, p in info["pairs"]]
            shown = len(info["pairs"])
            more = (
                f'<p class="cfgzip-muted">first {shown} of {info["num_pairs"]:,} pairs</p>'
                if info["num_pairs"] > shown
                else ""
            )
            pairs = (
                "<p>Reading this token pops σ<sub>in</sub> off the grammar's stack (top first) and leaves "
                "σ<sub>out</sub> on top of what remains:</p>"
                + table(["consumes σ<sub>in</sub>", "", "leaves σ<sub>out</sub>"], rows)
                + more
            )
        return f'<div class="cfgzip-search-item">{head}{pairs}<p><b>Members:</b> {members}</p></div><hr>'
