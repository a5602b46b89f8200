"""Timings: per-step mask time, plain XGrammar vs CFGzip vs the native engine, over the decode
steps taken so far, a side-by-side batch benchmark, and whether the engines pay for themselves.

The per-step records come from the step decoder (``session.decode_log``, one dict per step
with ``plain_s``, ``compressed_s``, ``identical``, and ``native_s`` / ``native_identical`` when the
decoder runs the native engine). "Plain" is XGrammar's fill of the vocabulary bitmask;
"CFGzip" is the whole compressed path: XGrammar over the K representatives *and* the
expansion to the vocabulary bitmask; "native" is the native displacement engine's packed
vocabulary mask (no XGrammar). None of them includes applying the mask to the logits.

The batch benchmark is :func:`cfgzip_lab.bench.bench_engines`: B matchers of each engine
replay the same seeded random grammar-valid token paths, one mask fill per step for the
batch, side by side in this process. It reports medians and p90; it never asserts on wall
time. Its numbers are lower than the decoder's for the same fill (see :data:`WHY_TIMES_DIFFER`).

"Does it pay?" is :func:`cfgzip_lab.bench.break_even`: the one-off cost (classing + our grammar compile
+ XGrammar's compile over the K classes, or loading a cache + that compile) against
the median saving per step. The per-step times have two sources, and both are shown side by
side, each labelled, never one silently replacing the other: the decoder's steps (fills between
forward passes) and the benchmark's batch-1 replay (fills back to back). On c_like the two can
disagree about the answer (issue 21: "pays after 28,657 tokens" from the benchmark under a
decoder line at 0.24x plain), so the verdict says which basis it stands on, and the ratio
between the two bases' plain times is the one measured for this grammar.

The mask-time distribution is drawn as box plots on a log axis: plain masks reach hundreds
of ms on some states while CFGzip's stay in µs, and a linear histogram hid one behind the other.
"""

from __future__ import annotations

import time

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from ..bench import NEVER, break_even, one_off_seconds, pays_text
from ._base import Panel
from ._figures import batch
from ._format import esc, figure_layout, fmt_seconds, table
from .session import WorkbenchError

__all__ = ["TimingsPanel", "step_summary", "benchmark_batches", "pays", "WHY_TIMES_DIFFER"]

#: Why the decoder's "plain" time per step is higher than the benchmark's for the same fill.
#: Measured (bundled JSON, SmolLM2 on 2 CPU cores at load 5): 40 decoder steps, plain fill
#: median 95 µs and CFGzip 223 µs; the same 40 grammar states replayed back to back in one
#: loop, 23 µs and 55 µs on the first pass (14 and 45 best of 5). With torch on 1 thread
#: instead of 2 the decoder's medians stayed at 95 and 231 µs: the model's forward pass
#: between fills is what costs, not the states (most likely: 135M parameters streamed through
#: the CPU caches evict the grammar's tables; not measured directly). The panel shows the ratio
#: measured for the grammar at hand (:func:`basis_ratio`), not these JSON numbers.
WHY_TIMES_DIFFER = (
    "Why the decoder's per-step times are higher than the benchmark's: both time the same calls "
    "(plain: XGrammar's fill of the V-token bitmask; CFGzip: the fill over K classes + expansion to "
    "V tokens; neither applies the mask to the logits). The decoder times one fill right after each "
    "forward pass of the model, which most likely has pushed the grammar's tables out of the CPU caches; the "
    "benchmark times fills back to back in one loop, caches warm. Compare engines within one "
    "basis, not numbers across the two."
)

#: the two bases of a per-step time, in the order they are shown
BASES = ("decoder", "benchmark")


def _quantiles(values: list[float]) -> tuple[float, float]:
    """Median and p90 (numpy's linear interpolation, as :class:`cfgzip_lab.bench.Quantiles`)."""
    return float(np.median(values)), float(np.percentile(values, 90))


def step_summary(session) -> dict:
    """Medians, p90 and speed-up of the decode steps' mask times; {} before the first step."""
    log = [
        r
        for r in getattr(session, "decode_log", [])
        if r.get("plain_s") is not None and r.get("compressed_s") is not None
    ]
    if not log:
        return {}
    plain = [r["plain_s"] for r in log]
    compressed = [r["compressed_s"] for r in log]
    (med_p, p90_p), (med_c, p90_c) = _quantiles(plain), _quantiles(compressed)
    native = [r["native_s"] for r in log if r.get("native_s") is not None]
    extra = {}
    if native:
        med_n, p90_n = _quantiles(native)
        extra = {
            "median_native_us": round(med_n * 1e6, 2),
            "p90_native_us": round(p90_n * 1e6, 2),
            "native_speedup_median": round(med_p / med_n, 3) if med_n > 0 else None,
            "native_identical": sum(1 for r in log if r.get("native_identical")),
        }
    return {
        "steps": len(log),
        "median_plain_us": round(med_p * 1e6, 2),
        "p90_plain_us": round(p90_p * 1e6, 2),
        "median_compressed_us": round(med_c * 1e6, 2),
        "p90_compressed_us": round(p90_c * 1e6, 2),
        "total_plain_ms": round(sum(plain) * 1e3, 3),
        "total_compressed_ms": round(sum(compressed) * 1e3, 3),
        "speedup_median": round(med_p / med_c, 3) if med_c > 0 else None,
        "masks_identical": sum(1 for r in log if r.get("identical")),
        **extra,
    }


def benchmark_batches(
    engines, batch_sizes=(1, 4, 16), *, steps: int = 16, seed: int = 0, cancel=None, native=None
) -> list[dict]:
    """Median and p90 mask time per step for each batch size, plain vs compressed (with expansion).

    ``engines`` is a :class:`cfgzip_lab.engine.CompiledEngines` with classes. One
    :func:`cfgzip_lab.bench.bench_engines` replay per batch size (seeded random walks,
    ``steps`` tokens at most); ``plain_us`` is the plain fill, ``compressed_us`` the class
    fill plus the expansion to a vocabulary bitmask, ``speedup`` their ratio at the median.
    ``native``: a built native engine (built here when None). ``cancel()`` is asked before
    each batch size.
    """
    from ..bench import bench_engines

    if native is None:
        native = build_native(engines)
    out = []
    for size in batch_sizes:
        if cancel is not None and cancel():
            raise InterruptedError("benchmark cancelled")
        bench = bench_engines(
            engines.grammar_text,
            engines.vocab,
            engines.classes,
            engines=engines,
            batch_sizes=(size,),
            steps=steps,
            seed=seed,
            expansion_repeats=0,
            engine_names=("plain", "compressed", "native"),
            native=native,
        )
        (b,) = bench.batches
        if not b.steps:
            continue
        med_p, med_c = b.plain_fill.median_us, b.compressed_expanded.median_us
        out.append(
            {
                "batch_size": size,
                "steps": b.steps,
                "plain_us": round(med_p, 1),
                "plain_p90_us": round(b.plain_fill.p90_us, 1),
                "compressed_us": round(med_c, 1),
                "compressed_p90_us": round(b.compressed_expanded.p90_us, 1),
                "speedup": round(b.speedup_median, 2) if med_c > 0 else None,
                "native_us": round(b.native_fill.median_us, 1),
                "native_p90_us": round(b.native_fill.p90_us, 1),
            }
        )
    return out


def build_native(engines):
    from ..native import build_native_engine
    from ..pipeline import compile_grammar

    return build_native_engine(
        compile_grammar(engines.grammar_text), engines.vocab, engines.classes, xgrammar_engines=engines
    )


def step_bases(session) -> dict[str, tuple[str, dict[str, float]]]:
    """The per-step medians (µs) measured for the current grammar and tokenizer, by basis:
    ``{"decoder": ("decoder, 40 steps", {"plain": 95.0, "compressed": 223.0, ...}),
    "benchmark": ("benchmark, batch 1", {...})}``, each present only when measured."""
    s = session
    out: dict[str, tuple[str, dict[str, float]]] = {}
    summary = step_summary(s) if s.is_current(s.decoder_stamp) else {}
    if summary:
        steps = {"plain": summary["median_plain_us"], "compressed": summary["median_compressed_us"]}
        if "median_native_us" in summary:
            steps["native"] = summary["median_native_us"]
        out["decoder"] = (f"decoder, {summary['steps']} steps", steps)
    bench = s.current("benchmark")
    # every batch size measured (issue 35.5: judging batch 1 alone said "never pays" above a table
    # where CFGzip led at batch 16); batch 1 keeps the key "benchmark"
    for row in sorted((bench or {}).get("rows", []), key=lambda r: r["batch_size"]):
        steps = {"plain": row["plain_us"], "compressed": row["compressed_us"]}
        if row.get("native_us") is not None:
            steps["native"] = row["native_us"]
        size = row["batch_size"]
        out["benchmark" if size == 1 else f"benchmark batch {size}"] = (f"benchmark, batch {size}", steps)
    return out


def _batch_of(key: str) -> int:
    """The batch size of a :func:`step_bases` key (1 for the decoder and the batch-1 benchmark)."""
    return int(key.rsplit(" ", 1)[1]) if key.startswith("benchmark batch ") else 1


def basis_ratio(session) -> float | None:
    """The decoder's plain median over the benchmark's, measured for this grammar (None unless
    both bases are there): how much the forward passes between fills cost the fills."""
    bases = step_bases(session)
    if "decoder" not in bases or "benchmark" not in bases:
        return None
    bench_plain = bases["benchmark"][1]["plain"]
    return bases["decoder"][1]["plain"] / bench_plain if bench_plain > 0 else None


def pays(session) -> list[dict]:
    """Does each engine pay for its one-off cost? One dict per (basis, engine) with a known
    per-step time, the decoder basis first, then the benchmark's, one per batch size measured
    (see :func:`step_bases`).

    Each dict names its basis (``basis_kind``: ``"decoder"`` or ``"benchmark"``; ``basis``: in
    words; ``batch``: the sequences one step fills) and the ``ratio`` engine/plain per step on that
    basis. At batch B a step fills B masks and yields B tokens, so the break-even in tokens is B
    times the break-even in steps. One-off:
    :func:`cfgzip_lab.bench.one_off_seconds` over the session's current timings (classing +
    grammar compile + the engine's compile, or cache load + the engine's compile). ``tokens``
    is a number or ``"never"``; [] when nothing is measured yet.
    """
    s = session
    timings = s.current_timings()
    bases = step_bases(s)
    if not bases:
        return []
    cache = timings.get("cache_load")
    classing = timings.get("classing")
    if cache is None and classing is None:
        return []
    grammar_compile = sum(v for k, v in timings.items() if k.startswith("compile_"))
    out = []
    for key, engine in ((k, e) for k in bases for e in ("compressed", "native")):
        basis, steps = bases[key]
        kind, batch = ("decoder" if key == "decoder" else "benchmark"), _batch_of(key)
        compile_key = f"{engine}_compile"
        if engine not in steps or compile_key not in timings:
            continue
        compile_s = timings[compile_key] + (timings["compressed_compile"] if engine == "native" else 0.0)
        one_off = one_off_seconds(
            classing_s=(classing or 0.0) + grammar_compile, compile_s=compile_s, cache_load_s=cache
        )
        plain_s, engine_s = steps["plain"] * 1e-6, steps[engine] * 1e-6
        tokens = break_even(one_off, plain_s, engine_s)
        if tokens != NEVER:
            tokens *= batch
        out.append(
            {
                "engine": engine,
                "basis": basis,
                "basis_kind": kind,
                "batch": batch,
                "ratio": engine_s / plain_s if plain_s > 0 else None,
                "one_off_s": one_off,
                "parts": (
                    {"cache_load_s": cache, "compile_s": compile_s}
                    if cache is not None
                    else {"classing_s": classing, "grammar_compile_s": grammar_compile, "compile_s": compile_s}
                ),
                "plain_step_s": plain_s,
                "engine_step_s": engine_s,
                "tokens": tokens,
                "text": pays_text(tokens, plain_s, engine_s),
            }
        )
    return out


def _pays_by_batch(verdicts: list[dict]) -> str:
    """One line per engine whose benchmark verdict changes with the batch size, e.g. "CFGzip: never
    pays at batch 1; pays at batch 16 (after 2,048 tokens)" (HTML; "" when no verdict changes)."""
    lines = []
    for engine, name in (("compressed", "CFGzip"), ("native", "native")):
        mine = [v for v in verdicts if v["basis_kind"] == "benchmark" and v["engine"] == engine]
        if len({v["tokens"] == NEVER for v in mine}) < 2:
            continue
        said = [
            f"never pays at batch {v['batch']}"
            if v["tokens"] == NEVER
            else f"pays at batch {v['batch']} (after {v['tokens']:,} tokens)"
            for v in mine
        ]
        lines.append(f"<b>{name}</b>: " + "; ".join(said))
    if not lines:
        return ""
    return "By batch size: " + " · ".join(lines) + " (the mask fill is what a server does per batch of requests)"


class TimingsPanel(Panel):
    """Timings. Public methods: :meth:`refresh`, :meth:`benchmark`."""

    error_sources = ("benchmark", "timings view")
    refresh_where = "timings view"

    def __init__(self, session) -> None:
        super().__init__(session)
        self.batch_results: list[dict] = []
        self.summary = w.HTML()
        self.summary.add_class("cfgzip-timings-summary")
        self.pays = w.HTML()
        self.pays.add_class("cfgzip-pays")
        self.line = go.FigureWidget(
            layout=figure_layout(
                "Mask time per decode step (log scale)",
                width=480,
                height=380,
                xaxis=dict(title="step"),
                yaxis=dict(title="µs", type="log"),
                # below the plot: three long names above it covered the title
                legend=dict(orientation="h", y=-0.22, yanchor="top", x=0),
                margin=dict(l=55, r=20, t=50, b=120),
            )
        )
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="plain XGrammar (V tokens)")
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="CFGzip (K classes + expand)")
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="native (σ_in trie, no XGrammar)")
        # Box plots on one log axis: every series is on the axis whatever its range, and the
        # box marks the median (line) and quartiles; the p90 is in the table beside it.
        self.hist = go.FigureWidget(
            layout=figure_layout(
                "Distribution of mask times (log scale)",
                width=440,
                xaxis=dict(title="µs per step", type="log"),
                yaxis=dict(title=""),
                showlegend=False,
            )
        )
        for name in ("plain", "CFGzip", "native"):
            self.hist.add_box(x=[], name=name, orientation="h", boxpoints="all", jitter=0.4, pointpos=0)
        charts = w.HBox(
            [
                w.Box([self.line], layout=w.Layout(min_width="490px")),
                w.Box([self.hist], layout=w.Layout(min_width="450px")),
            ]
        )
        charts.add_class("cfgzip-timings-charts")
        self.quantiles = w.HTML()
        self.quantiles.add_class("cfgzip-timings-quantiles")
        self.why = w.HTML(f'<p class="cfgzip-muted cfgzip-timings-why">{esc(WHY_TIMES_DIFFER)}</p>')
        self.batch_sizes = w.Text(value="1, 4, 16", description="Batch sizes")
        self.batch_sizes.add_class("cfgzip-batch-sizes")
        self.bench_steps = w.BoundedIntText(value=16, min=1, max=1000, description="Steps")
        run = self._button("Benchmark", "cfgzip-benchmark", self.benchmark, where="benchmark", icon="tachometer")
        self.batch_output = w.HTML()
        self.batch_output.add_class("cfgzip-batch-results")
        self.widget = w.VBox(
            [
                self.summary,
                self.pays,
                charts,
                self.quantiles,
                w.HTML(
                    "<b>Batch benchmark</b> (current grammar and classes; the same seeded random valid paths for every batch size)"
                ),
                w.HBox([self.batch_sizes, self.bench_steps, run]),
                self.batch_output,
                self.why,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-timings")
        self._stale_during_run = False
        session.on("decoder", self._on_decoder)
        session.on("job", self._on_job)
        for topic in ("text", "grammar", "classes"):
            session.on(topic, self._guarded_refresh)  # marks old numbers out of date
        self._guarded_refresh()

    def _on_decoder(self) -> None:
        # While Run N runs, nothing is drawn here: each plotly update sends layout updates back
        # to the kernel, which delayed the Cancel click by seconds (see decoder.py); the charts
        # are drawn once the run ends (topic "job").
        job = self.session.jobs.get("decode")
        if job is not None and job.running:
            self._stale_during_run = True
        else:
            self._guarded_refresh()

    def _on_job(self) -> None:
        job = self.session.jobs.get("decode")
        if getattr(self, "_stale_during_run", False) and (job is None or not job.running):
            self._stale_during_run = False
            self._guarded_refresh()

    def refresh(self) -> None:
        s = self.session
        log = [r for r in getattr(s, "decode_log", []) if r.get("plain_s") is not None]
        steps = [r["step"] for r in log]
        plain = [r["plain_s"] * 1e6 for r in log]
        compressed = [r["compressed_s"] * 1e6 for r in log]
        native_log = [r for r in log if r.get("native_s") is not None]
        native = [r["native_s"] * 1e6 for r in native_log]
        with batch(self.line):
            self.line.data[0].x, self.line.data[0].y = steps, plain
            self.line.data[1].x, self.line.data[1].y = steps, compressed
            self.line.data[2].x, self.line.data[2].y = [r["step"] for r in native_log], native
        with batch(self.hist):
            self.hist.data[0].x = plain
            self.hist.data[1].x = compressed
            self.hist.data[2].x = native
        self._show_pays()
        self._show_batches()
        summary = step_summary(s)
        if not summary:
            self.summary.value = (
                '<span class="cfgzip-muted">no decode steps yet: step the decoder to fill these charts</span>'
            )
            self.quantiles.value = ""
            return
        stale = ""
        if not s.is_current(s.decoder_stamp):
            stale = f' <span class="cfgzip-warn cfgzip-stale">{esc(s.stale_note(s.decoder_stamp))}</span>'
        speed = summary["speedup_median"]
        self.summary.value = (
            f"<b>{summary['steps']}</b> decode steps · median mask time plain <b>{summary['median_plain_us']:,.0f} µs</b>"
            f" (p90 {summary['p90_plain_us']:,.0f}), CFGzip <b>{summary['median_compressed_us']:,.0f} µs</b>"
            f" (p90 {summary['p90_compressed_us']:,.0f})"
            + (f" · speed-up (median) <b>{speed:.2f}×</b>" if speed else "")
            + f" · masks identical in {summary['masks_identical']}/{summary['steps']} steps"
            + (
                f" · native <b>{summary['median_native_us']:,.0f} µs</b> (p90 {summary['p90_native_us']:,.0f}, "
                f"{summary['native_speedup_median']:.2f}× plain), identical in {summary['native_identical']}/{summary['steps']} steps"
                if "median_native_us" in summary and summary["native_speedup_median"]
                else ""
            )
            + stale
        )
        rows = [["plain XGrammar", summary["median_plain_us"], summary["p90_plain_us"]]]
        rows.append(["CFGzip (fill + expand)", summary["median_compressed_us"], summary["p90_compressed_us"]])
        if "median_native_us" in summary:
            rows.append(["native", summary["median_native_us"], summary["p90_native_us"]])
        self.quantiles.value = "<b>Decode steps</b>" + table(
            ["engine", "median µs", "p90 µs"],
            [[name, f"{m:,.1f}", f"{p:,.1f}"] for name, m, p in rows],
            numeric=(1, 2),
        )

    def _show_pays(self) -> None:
        s = self.session
        parts = []
        if "classing" in s.timings:
            note = s.stale_note(s.timing_stamps.get("classing"))
            parts.append(
                f"classing {fmt_seconds(s.timings['classing'])}"
                + (f' <span class="cfgzip-warn cfgzip-stale">{esc(note)}</span>' if note else "")
            )
        if "cache_load" in s.current_timings():
            parts.append(f"cache loaded in {fmt_seconds(s.timings['cache_load'])}")
        verdicts = pays(s)
        table_html = ""
        if verdicts:
            rows = []
            for v in verdicts:
                cls = "cfgzip-bad" if v["tokens"] == NEVER else "cfgzip-ok"
                detail = ", ".join(
                    f"{k.removesuffix('_s').replace('_', ' ')} {fmt_seconds(x)}" for k, x in v["parts"].items()
                )
                ratio = f"{v['ratio']:.2f}× plain" if v["ratio"] is not None else "–"
                rows.append(
                    [
                        f'<span class="cfgzip-basis cfgzip-basis-{v["basis_kind"]}">{esc(v["basis"])}</span>',
                        f"<b>{esc(v['engine'])}</b>",
                        f"{fmt_seconds(v['engine_step_s'])} vs plain {fmt_seconds(v['plain_step_s'])}",
                        ratio,
                        f"{fmt_seconds(v['one_off_s'])} ({esc(detail)})",
                        f"<span class='{cls}'>{esc(v['text'])}</span>",
                    ]
                )
            table_html = table(
                ["basis", "engine", "per step", "engine / plain", "one-off", "verdict"], rows, css="cfgzip-pays-table"
            )
            kinds = {v["basis_kind"] for v in verdicts}
            missing = [k for k in BASES if k not in kinds]
            if missing:
                how = {"decoder": "step the decoder", "benchmark": "run the benchmark"}[missing[0]]
                table_html += f'<p class="cfgzip-muted">{missing[0]} basis: not measured yet ({how})</p>'
            summary = _pays_by_batch(verdicts)
            if summary:
                table_html += f'<p class="cfgzip-pays-summary">{summary}</p>'
            ratio = basis_ratio(s)
            if ratio is not None:
                bases = step_bases(s)
                table_html += (
                    f'<p class="cfgzip-muted cfgzip-basis-ratio">For this grammar the decoder\'s plain fill (median '
                    f"{fmt_seconds(bases['decoder'][1]['plain'] * 1e-6)}) is <b>{ratio:.1f}×</b> the benchmark's "
                    f"({fmt_seconds(bases['benchmark'][1]['plain'] * 1e-6)}): the bases differ by that much, so "
                    "compare engines within one basis.</p>"
                )
        else:
            parts.append(
                '<span class="cfgzip-muted">does it pay? class the vocabulary and step the decoder or run the '
                "benchmark to know</span>"
            )
        self.pays.value = "<b>Does it pay?</b> " + " · ".join(parts) + table_html

    def benchmark(self, batch_sizes=None, *, steps: int | None = None, wait: bool = False):
        """Time plain vs CFGzip mask fills for each batch size (background job)."""
        s = self.session
        if batch_sizes is None:
            batch_sizes = [int(x) for x in self.batch_sizes.value.replace(",", " ").split()]
        steps = steps or self.bench_steps.value
        if not s.classes_current:
            raise WorkbenchError("run classing for the current grammar first")
        if not s.xgrammar_ok():
            raise WorkbenchError(f"XGrammar cannot compile this grammar: {s.xgrammar.summary()}")
        from ..engine import compile_engines

        engines = compile_engines(s.grammar_text, s.vocab, s.classes)
        stamp, k, vocab = s.stamp, s.classes.num_classes, s.vocab

        def work(job):
            job.progress(0, 1, "benchmark")
            record_compile(s, engines, stamp)
            started = time.perf_counter()
            native = build_native(engines)
            if not s.is_current(s.timing_stamps.get("native_compile")):
                s.record_timing("native_compile", time.perf_counter() - started, stamp)
            results = benchmark_batches(engines, batch_sizes, steps=steps, cancel=lambda: job.cancelled, native=native)
            self.batch_results = results
            s.keep("benchmark", {"rows": results, "classes": k, "tokenizer": vocab.name, "V": vocab.vocab_size}, stamp)
            self.refresh()
            return results

        job = s.start_job("benchmark", work)
        if wait:
            job.wait()
        return job

    def _show_batches(self) -> None:
        kept = self.session.kept.get("benchmark")
        if kept is None:
            self.batch_output.value = ""
            return
        bench = kept.value
        rows = [
            [
                r["batch_size"],
                r["steps"],
                f"{r['plain_us']:,.0f} / {r['plain_p90_us']:,.0f}",
                f"{r['compressed_us']:,.0f} / {r['compressed_p90_us']:,.0f}",
                f"{r['speedup']:.2f}×" if r["speedup"] else "–",
                f"{r['native_us']:,.0f} / {r['native_p90_us']:,.0f}" if r.get("native_us") is not None else "–",
            ]
            for r in bench["rows"]
        ]
        note = self.session.stale_note(kept.stamp)
        stale = f' <span class="cfgzip-warn cfgzip-stale">{esc(note)}: run the benchmark again</span>' if note else ""
        head = f"<p>{esc(bench['tokenizer'])}: V = {bench['V']:,} tokens, K = {bench['classes']:,} classes{stale}</p>"
        self.batch_output.value = head + table(
            ["batch", "steps", "plain µs/step (median / p90)", "CFGzip µs/step", "speed-up (median)", "native µs/step"],
            rows,
            numeric=(0, 1, 2, 3, 4, 5),
        )


def record_compile(session, engines, stamp) -> None:
    """Time XGrammar's compile over the K classes (the compressed engine's one-off), once per stamp.

    Compiled grammars are cached per process, so a second compile of the same text and classes
    returns at once: the first measurement for a stamp is kept, never overwritten by a cache hit.
    """
    if session.is_current(session.timing_stamps.get("compressed_compile")):
        return
    started = time.perf_counter()
    _ = engines.compressed_grammar
    session.record_timing("compressed_compile", time.perf_counter() - started, stamp)
