"""Classes: run displacement classing for a tokenizer, see the classes, and ask why a token is where it is.

Classing runs in a background thread (progress bar, cancel). The panel shows the class
count, the compression ratio V/K, the dead/stop/special counts, a class-size histogram,
the largest classes with their representatives, and a search: a token (its text or its
id) → its class, representative, members and *why*, in the grammar's own terms: one
sentence over source rule names (where the token can come, what the grammar needs after
it; :mod:`cfgzip_lab.classes.explain`), with the exact displacement pairs (σ_in, σ_out)
over GNF nonterminals behind a "details" toggle (paper §3.2). "Compare" says why two
tokens are in different classes, or that they are interchangeable.

The search reads what the placeholder promises: ``\\n \\t \\r \\\\ \\xNN`` (one byte)
``\\uNNNN`` escapes, a bare space (the space token), quotes around the text, ``#12`` for an
id only, and ``12`` for both the token with id 12 and the token whose text is "12" (each
result says which it is). A search or comparison made for an earlier grammar or tokenizer
is recomputed when the classes fit again, or marked out of date until then.
"""

from __future__ import annotations

import re

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from ..classes.classing import ClassKind
from ..classes.explain import Comparison, class_reason, compare_tokens, explain_token, symbol_phrase
from ..vocab import TokenKind
from ..vocab_sources import available_vocabs
from ._base import Panel
from ._figures import batch
from ._format import esc, figure_layout, fmt_seconds, table, token_html, token_label
from .session import WorkbenchError

__all__ = ["ClassesPanel", "size_histogram", "decode_escapes"]

_SIMPLE_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "'": b"'", '"': b'"', "0": b"\0"}


def decode_escapes(text: str) -> bytes:
    """The bytes a search text stands for: ``\\n \\t \\r \\0 \\\\ \\' \\"``, ``\\xNN`` (one raw
    byte, so a partial UTF-8 token can be found), ``\\uNNNN`` and ``\\UNNNNNNNN`` (a code point,
    as UTF-8); everything else as UTF-8. A bad escape raises WorkbenchError naming it."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogatepass")
            i += 1
            continue
        kind = text[i + 1 : i + 2]
        if kind in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[kind]
            i += 2
            continue
        digits = {"x": 2, "u": 4, "U": 8}.get(kind)
        hexpart = text[i + 2 : i + 2 + digits] if digits else ""
        if not digits or len(hexpart) != digits or not all(c in "0123456789abcdefABCDEF" for c in hexpart):
            shown = text[i : i + 2 + (digits or 0)] or "\\"
            raise WorkbenchError(
                f"unknown escape {shown!r} at character {i + 1}: use \\n \\t \\r \\\\ \\xNN (a byte) or \\uNNNN "
                "(write \\\\ for a backslash)"
            )
        value = int(hexpart, 16)
        if kind == "x":
            out.append(value)
        elif value > 0x10FFFF:
            raise WorkbenchError(f"escape {text[i : i + 10]!r} is beyond U+10FFFF")
        else:
            out += chr(value).encode("utf-8", "surrogatepass")
        i += 2 + digits
    return bytes(out)


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
    :meth:`search`, :meth:`explain_class`, :meth:`compare`, :meth:`refresh`."""

    error_sources = ("classing", "search", "classes view", "verify")
    refresh_where = "classes view"

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
            placeholder="token text (escapes \\n \\t \\\\ \\xNN \\uNNNN), a space, or an id: 1904, #1904, '\",\"'",
            description="Token",
            layout=w.Layout(width="420px"),
        )
        self.query.add_class("cfgzip-search-input")
        self.query.continuous_update = False  # Enter (or leaving the box) searches
        self._setting_query = False
        self.query.observe(self._on_query, names="value")
        find = self._button("Find", "cfgzip-search", self.search, where="search", icon="search")
        self.search_output = w.HTML()
        self.search_output.add_class("cfgzip-search-result")
        self.also_results: list[dict] = []  # other readings of the query (a number's text token)
        self.search_stamp = None  # the grammar and tokenizer the shown search was made for
        self.search_query: str | None = None
        self.compare_a = w.Text(placeholder="first token", description="Compare", layout=w.Layout(width="260px"))
        self.compare_b = w.Text(placeholder="second token", description="with", layout=w.Layout(width="260px"))
        self.compare_a.add_class("cfgzip-compare-a")
        self.compare_b.add_class("cfgzip-compare-b")
        compare = self._button("Compare", "cfgzip-compare", self.compare, where="search", icon="balance-scale")
        self.compare_output = w.HTML()
        self.compare_output.add_class("cfgzip-compare-result")
        self.comparison: Comparison | None = None
        self.compare_stamp = None
        self._search_stale = self._compare_stale = False  # what the outputs show now
        # Verify: the lossless check (cfgzip-lab verify) on the current classes, with progress and Cancel
        self.verify_walks = w.BoundedIntText(
            value=20, min=1, max=1000, description="walks", layout=w.Layout(width="150px")
        )
        self.verify_button = self._button(
            "Verify",
            "cfgzip-verify",
            self.verify,
            where="verify",
            icon="check",
            tooltip="check that the compressed masks equal plain XGrammar's over random walks (cfgzip-lab verify)",
        )
        self.verify_cancel_button = self._button(
            "Cancel", "cfgzip-cancel-verify", self.cancel_verify, where="verify", icon="stop"
        )
        self.verify_cancel_button.disabled = True
        self.verify_progress = w.IntProgress(value=0, min=0, max=1000, layout=w.Layout(width="160px"))
        self.verify_progress.add_class("cfgzip-verify-progress")
        self.verify_output = w.HTML()
        self.verify_output.add_class("cfgzip-verify-result")

        self.widget = w.VBox(
            [
                w.HBox([self.tokenizer, self.run_button, self.cancel_button, self.progress, self.progress_label]),
                self.summary,
                self.error_box,
                w.HTML("<b>Why is a token in its class?</b> Type its text or its id."),
                w.HBox([self.query, find]),
                self.search_output,
                w.HTML("<b>Why are two tokens in different classes?</b>"),
                w.HBox([self.compare_a, self.compare_b, compare]),
                self.compare_output,
                w.HTML("<b>Is it lossless?</b> Random walks compare every mask with plain XGrammar's."),
                w.HBox([self.verify_walks, self.verify_button, self.verify_cancel_button, self.verify_progress]),
                self.verify_output,
                w.HBox([self.histogram_box, self.largest_table]),
            ]
        )
        self.widget.add_class("cfgzip-classes")
        session.on("classes", self._guarded_refresh)
        session.on("classes", self._renew_answers)
        session.on("grammar", self._show_summary)
        session.on("grammar", self._renew_answers)
        session.on("text", self._renew_answers)
        session.on("job", self._show_progress)
        session.on("job", self._show_verify)
        for topic in ("classes", "grammar", "text"):
            session.on(topic, self._show_verify)
        self._guarded_refresh()
        self._show_progress()  # a panel made after classing ran shows how it ended

    # -- public methods ----------------------------------------------------------------

    def run_classing(self, *, wait: bool = False):
        """Class the picked tokenizer's vocabulary under the current grammar (background)."""
        return self.session.run_classing(self.tokenizer.value, wait=wait)

    def cancel(self) -> None:
        self.session.cancel("classing")

    def verify(self, *, walks: int | None = None, steps: int = 64, seed: int = 0, wait: bool = False):
        """Run the lossless check on the current classes in the background (the Verify button):
        ``walks`` random walks (default: the box), progress per walk, :meth:`cancel_verify` stops it
        between steps. The result is said in words under the button (:meth:`verify_words`)."""
        if walks is not None:
            self.verify_walks.value = walks
        self.verify_output.value = ""
        return self.session.verify(walks=self.verify_walks.value, steps=steps, seed=seed, wait=wait)

    def cancel_verify(self) -> None:
        self.session.cancel("verify")

    def verify_words(self) -> list[str]:
        """The last check's result in sentences ([] when none ran); a result made for another grammar
        or tokenizer starts with what it was made for."""
        kept = self.session.kept.get("verify")
        if kept is None:
            return []
        job = self.session.jobs.get("verify")
        lines = kept.value.in_words(job.total if job is not None and job.total else None)
        note = self.session.stale_note(kept.stamp)
        return ([note[:1].upper() + note[1:] + ":"] if note else []) + lines

    def search(self, query: str | None = None) -> list[dict]:
        """Token text or id → class, representative, members and why (in source terms).

        A number is read as an id; the token whose text is that number (if any) is explained
        too and kept in :attr:`also_results`; ``#12`` is the id alone."""
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
        hits, also, note = self._resolve(query)
        self.search_query = query
        self.search_stamp = s.classes_stamp
        self.search_results = [dict(self._explain(t), match=how) for t, how in hits]
        self.also_results = [dict(self._explain(t), match=how) for t, how in also]
        self._show_search(note)
        return self.search_results

    def explain_class(self, k: int) -> dict:
        """Why class ``k`` is a class: its representative explained, naming the other members."""
        s = self.session
        if s.classes is None or s.vocab is None:
            raise WorkbenchError("run classing first")
        if not 0 <= k < s.classes.num_classes:
            raise WorkbenchError(f"class {k} does not exist (0..{s.classes.num_classes - 1:,})")
        rep = int(s.classes.representatives[k])
        self.search_query = f"#{rep}"
        self.search_stamp = s.classes_stamp
        self.search_results = [dict(self._explain(rep), match=f"class {k}, through its representative")]
        self.also_results = []
        self._show_search()
        return self.search_results[0]

    def compare(self, a: str | None = None, b: str | None = None) -> Comparison:
        """Why two tokens are in different classes, or that they are interchangeable.

        Each is read as in :meth:`search`, except that a bare number means the token with that
        text when there is one (``#12`` is the id)."""
        for box, value in ((self.compare_a, a), (self.compare_b, b)):
            if value is not None:
                box.value = value
        s = self.session
        if s.classes is None or s.vocab is None:
            raise WorkbenchError("run classing first")
        if not self.compare_a.value or not self.compare_b.value:
            raise WorkbenchError("type two tokens to compare")
        ids = []
        for text in (self.compare_a.value, self.compare_b.value):
            hits, also, note = self._resolve(text)
            if note:
                raise WorkbenchError(f"{text!r}: {note}; compare single tokens")
            # Comparing, a bare number means its text (the digits token); #12 is the id.
            ids.append(also[0][0] if also and also[0][1].startswith("the token whose text") else hits[0][0])
        vocab, classes = s.vocab, s.classes
        labels = (token_label(vocab, ids[0]), token_label(vocab, ids[1]))
        kinds = [int(vocab.kinds[t]) for t in ids]
        if any(k != TokenKind.NORMAL for k in kinds) or not all(vocab.token_bytes[t] for t in ids):
            same = classes.class_of[ids[0]] == classes.class_of[ids[1]]
            why = "same class" if same else "different classes"
            result = Comparison(
                labels,
                bool(same),
                f"{labels[0]} and {labels[1]}: {why} (stop/special tokens are classed by kind, not by the grammar)",
            )
        else:
            result = compare_tokens(s.displacer(), vocab.token_bytes[ids[0]], vocab.token_bytes[ids[1]], labels=labels)
        self.comparison, self.compare_stamp = result, s.classes_stamp
        self._show_comparison(result, ids)
        return result

    def refresh(self) -> None:
        tokenizer = self.session.tokenizer  # the decoder may have classed its model's vocabulary
        if tokenizer != self.tokenizer.value and tokenizer in {value for _, value in self.tokenizer.options}:
            self.tokenizer.value = tokenizer
        self._show_summary()
        classes = self.session.classes
        vocab = self.session.vocab
        if classes is None or vocab is None:
            self.largest_table.value = ""
            with batch(self.histogram):
                self.histogram.data[0].x, self.histogram.data[0].y = [], []
            return
        sizes = classes.class_sizes()
        labels, counts = size_histogram(sizes)
        with batch(self.histogram):
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
        if not self._setting_query and self.query.value != "":  # a bare space is a query
            self._handler("search", self.search)()

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
            # Token(...) macros: what their ids are in this tokenizer (ids belong to one tokenizer)
            + (
                f"<br>token ids the grammar names: {esc(', '.join(meta['named_tokens']))}"
                if meta.get("named_tokens")
                else ""
            )
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
            timings = self.session.timings
            if job.status == "done" and "classing" in timings:
                # The classing time is the one number the status line, Timings and the report
                # show; the job also loaded the vocabulary, which is said apart.
                load = timings.get("vocab_load")
                extra = f" (+ vocabulary load {fmt_seconds(load)})" if load is not None else ""
                self.progress_label.value = f"done: classing {fmt_seconds(timings['classing'])}{extra}"
            else:
                self.progress_label.value = f"{job.status} after {fmt_seconds(job.seconds)}"

    def _show_verify(self) -> None:
        job = self.session.jobs.get("verify")
        running = job is not None and job.running
        self.verify_button.disabled = running
        self.verify_cancel_button.disabled = not running
        if job is None:
            return
        self.verify_progress.value = int(1000 * job.fraction) if job.total else (0 if running else 1000)
        if running:
            detail = f" ({job.done}/{job.total} walks)" if job.total else ""
            self.verify_output.value = f'<span class="cfgzip-muted">{esc(job.message)}{detail}…</span>'
            self.verify_progress.bar_style = ""
            return
        report = self.session.kept.get("verify")
        self.verify_progress.bar_style = (
            "danger"
            if job.status == "failed" or (report is not None and not report.value.ok)
            else {"done": "success", "cancelled": "warning"}.get(job.status, "")
        )
        if job.status == "failed":
            self.verify_output.value = '<span class="cfgzip-bad">the check failed: see the error below</span>'
            return
        words = self.verify_words()
        if words:
            css = "cfgzip-ok" if report.value.ok and not report.value.cancelled else "cfgzip-warn"
            if not report.value.ok:
                css = "cfgzip-bad"
            first, rest = words[0], words[1:]
            self.verify_output.value = f'<span class="{css}">{esc(first)}</span>' + "".join(
                f"<br>{esc(line)}" for line in rest
            )

    def _resolve(self, query: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]], str]:
        """(hits, other readings, note): each hit a token id and how the query matched it."""
        vocab = self.session.vocab
        if query == "":
            raise WorkbenchError("type a token's text or id")
        index = self._bytes_index()
        found = re.fullmatch(r"\s*(#?)(\d+)\s*", query) if query.strip() else None
        if found:
            tid = int(found.group(2))
            text_hit = index.get(found.group(2).encode())
            also = (
                []
                if found.group(1) or text_hit is None
                else [(text_hit, f"the token whose text is {found.group(2)!r}")]
            )
            if 0 <= tid < vocab.vocab_size:
                return [(tid, f"token id {tid}")], also, ""
            if also:
                return also, [], f"there is no token id {tid} (0..{vocab.vocab_size - 1:,}); showing the text instead"
            raise WorkbenchError(f"token id {tid} is outside the vocabulary (0..{vocab.vocab_size - 1:,})")
        # Whitespace is a query too (a bare space is the space token); other text is trimmed of a
        # trailing newline from pasting. Escapes are read; quotes around the text are optional.
        text = query if not query.strip() else query.strip("\r\n")
        candidates = [text]
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            candidates.append(text[1:-1])
        readings = [decode_escapes(c) for c in candidates]
        for data in readings:
            tid = index.get(data)
            if tid is not None:
                how = f"the token whose bytes are {token_label(vocab, tid)}"
                also = []
                literal = index.get(text.encode("utf-8"))
                if "\\" in text and literal is not None and literal != tid:
                    also = [(literal, f"the token spelt {text!r} without reading the escapes")]
                return [(tid, how)], also, ""
        data = readings[-1]
        try:
            as_text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkbenchError(f"no token is exactly {data!r} (and it is not text that could be tokenized)") from None
        ids = vocab.encode(as_text)[:8]
        if not ids:
            raise WorkbenchError(f"no token is {as_text!r}")
        labels = " ".join(token_label(vocab, t) for t in ids)
        note = f"no single token is {as_text!r}; it tokenizes as {labels} — each is shown below"
        return [(t, f"part {i + 1} of {as_text!r}") for i, t in enumerate(ids)], [], note

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
            "sentence": "",
            "lines": [],
            "where": [],
            "after": [],
            "rules": (),
            "legend": {},
        }
        if token_kind == TokenKind.STOP:
            info["why"] = "a stop token: allowed exactly when the grammar can end; all stop tokens share one class"
        elif token_kind != TokenKind.NORMAL:
            info["why"] = (
                "a special/added token (no text): never allowed by either engine, so it sits in the blocked class"
            )
        elif s.grammar_ok:
            displacer = s.displacer()
            explanation = explain_token(displacer, vocab, classes if s.classes_current else None, tid, limit=200)
            info["sentence"], info["lines"] = explanation.sentence, explanation.lines
            info["where"], info["after"], info["rules"] = explanation.where, explanation.after, explanation.rules
            if explanation.dead:
                info["why"] = (
                    "its displacement is empty: no sentence of the grammar contains these bytes, so it is dead (blocked)"
                )
            else:
                info["num_pairs"] = explanation.num_pairs
                shown = explanation.pairs[: self.pair_limit]
                info["pairs"] = [(p.consumed_names, p.pushed_names) for p in shown]
                symbols = dict.fromkeys(x for p in shown for x in p.consumed + p.pushed)
                info["legend"] = {displacer.symbol_text(x): symbol_phrase(displacer, x) for x in symbols}
                info["why"] = class_reason(info["num_pairs"], int(members.size))
                if kind == ClassKind.NORMAL and members.size == 1 and classes.metadata.get("fallback_singletons"):
                    info["why"] += " (or it went over the per-token budget and was given its own class)"
        else:
            info["why"] = "the current grammar text does not compile, so its displacement cannot be shown"
        return info

    def _show_search(self, note: str = "") -> None:
        s = self.session
        stale = s.stale_note(self.search_stamp)
        self._search_stale = bool(stale)
        banner = f'<p class="cfgzip-warn cfgzip-stale">{esc(stale)}: run classing again</p>' if stale else ""
        also = ""
        if self.also_results:
            also = "<p><b>Also:</b></p>" + "".join(self._explain_html(r) for r in self.also_results)
        self.search_output.value = (
            banner
            + (f"<p>{esc(note)}</p>" if note else "")
            + "".join(self._explain_html(r) for r in self.search_results)
            + also
        )

    def _show_comparison(self, result: Comparison, ids: list[int] | None = None) -> None:
        s = self.session
        stale = s.stale_note(self.compare_stamp)
        self._compare_stale = bool(stale)
        banner = f'<p class="cfgzip-warn cfgzip-stale">{esc(stale)}: run classing again</p>' if stale else ""
        css = "cfgzip-ok" if result.same else "cfgzip-warn"
        details = ""
        if result.only_a or result.only_b:

            def rows(pairs):
                return [[f'<span class="cfgzip-code">{esc(p.gnf_text())}</span>'] for p in pairs] or [
                    ['<span class="cfgzip-muted">none</span>']
                ]

            details = (
                "<details><summary>details: displacement pairs one token has and the other lacks</summary>"
                + f"<p>only {esc(result.labels[0])}:</p>"
                + table(["σ_in → σ_out"], rows(result.only_a))
                + f"<p>only {esc(result.labels[1])}:</p>"
                + table(["σ_in → σ_out"], rows(result.only_b))
                + "</details>"
            )
        classes = s.classes
        where = ""
        if ids is not None and classes is not None:
            where = f'<p class="cfgzip-muted">classes {int(classes.class_of[ids[0]])} and {int(classes.class_of[ids[1]])}</p>'
        self.compare_output.value = f'{banner}<p class="{css}">{esc(result.sentence)}</p>{where}{details}'

    def _renew_answers(self) -> None:
        """Recompute the shown search and comparison when the classes fit again; else mark them."""
        try:
            s = self.session
            current = s.classes_current
            # Re-render also when the stamp holds again (an edit undone): the out-of-date mark goes.
            if self.search_query is not None and not (s.is_current(self.search_stamp) and not self._search_stale):
                if current:
                    self.search(self.search_query)
                else:
                    self._show_search()
            if self.comparison is not None and not (s.is_current(self.compare_stamp) and not self._compare_stale):
                if current:
                    self.compare()
                else:
                    self._show_comparison(self.comparison)
        except Exception as exc:  # last resort: runs from session events, maybe in a worker thread
            self.session.record_error("search", exc)

    def _explain_html(self, info: dict) -> str:
        vocab = self.session.vocab
        tid = info["token_id"]
        members = " ".join(token_html(vocab, t, with_id=False) for t in info["members"][:24])
        if info["class_size"] > 24:
            members += f' <span class="cfgzip-muted">+{info["class_size"] - 24:,} more</span>'
        match = f'<span class="cfgzip-muted">({esc(info["match"])})</span> ' if info.get("match") else ""
        head = (
            f"<p>{match}{token_html(vocab, tid)} is in class <b>{info['class']}</b> ({info['class_kind']}, "
            f"{info['class_size']:,} tokens); representative {token_html(vocab, info['representative'])}</p>"
        )
        plain = ""
        if info["lines"] or info["sentence"]:
            said = "".join(f"<li>{esc(line)}</li>" for line in info["lines"]) or f"<li>{esc(info['sentence'])}</li>"
            plain = f'<div class="cfgzip-why-sentence"><b>In the grammar\'s terms:</b><ul>{said}</ul></div>'
            if info["rules"]:
                rules = ", ".join(f'<span class="cfgzip-code">{esc(r)}</span>' for r in info["rules"])
                plain += f"<p>Source rules involved: {rules}</p>"
        why = f"<p><b>Why this class:</b> {esc(info['why'])}</p>"
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
            legend = table(
                ["GNF name", "stands for"],
                [[f'<span class="cfgzip-code">{esc(n)}</span>', esc(d)] for n, d in info["legend"].items()],
            )
            pairs = (
                '<details class="cfgzip-why-details"><summary>details: the exact displacement pairs '
                "(σ<sub>in</sub> → σ<sub>out</sub>) over GNF nonterminals</summary>"
                "<p>Reading this token pops σ<sub>in</sub> off the grammar's stack (top first) and leaves "
                "σ<sub>out</sub> on top of what remains:</p>"
                + table(["consumes σ<sub>in</sub>", "", "leaves σ<sub>out</sub>"], rows)
                + more
                + legend
                + "</details>"
            )
        return f'<div class="cfgzip-search-item">{head}{plain}{why}{pairs}<p><b>Members:</b> {members}</p></div><hr>'
