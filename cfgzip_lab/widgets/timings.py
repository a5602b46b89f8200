"""Timings: per-step mask time, plain XGrammar vs CFGzip vs the native engine, over the decode
steps taken so far, plus a side-by-side batch benchmark.

The per-step records come from the step decoder (``session.decode_log``, one dict per step
with ``plain_s``, ``compressed_s``, ``identical``, and ``native_s`` / ``native_identical`` when the
decoder runs the native engine). "Compressed" is the whole CFGzip path: XGrammar over the K
representatives *and* the expansion to the vocabulary mask; "native" is the native displacement
engine's packed vocabulary mask (no XGrammar).

The batch benchmark is :func:`cfgzip_lab.bench.bench_engines`: B matchers of each engine
replay the same seeded random grammar-valid token paths, one mask fill per step for the
batch, side by side in this process. It reports medians; it never asserts on wall time.
"""

from __future__ import annotations

import statistics

import ipywidgets as w
import plotly.graph_objects as go

from ._base import Panel
from ._format import esc, figure_layout, table
from .session import WorkbenchError

__all__ = ["TimingsPanel", "step_summary", "benchmark_batches"]


def step_summary(session) -> dict:
    """Medians and speed-up of the decode steps' mask times; {} before the first step."""
    log = [
        r
        for r in getattr(session, "decode_log", [])
        if r.get("plain_s") is not None and r.get("compressed_s") is not None
    ]
    if not log:
        return {}
    plain = [r["plain_s"] for r in log]
    compressed = [r["compressed_s"] for r in log]
    med_p, med_c = statistics.median(plain), statistics.median(compressed)
    native = [r["native_s"] for r in log if r.get("native_s") is not None]
    extra = {}
    if native:
        med_n = statistics.median(native)
        extra = {
            "median_native_us": round(med_n * 1e6, 2),
            "native_speedup_median": round(med_p / med_n, 3) if med_n > 0 else None,
            "native_identical": sum(1 for r in log if r.get("native_identical")),
        }
    return {
        "steps": len(log),
        "median_plain_us": round(med_p * 1e6, 2),
        "median_compressed_us": round(med_c * 1e6, 2),
        "total_plain_ms": round(sum(plain) * 1e3, 3),
        "total_compressed_ms": round(sum(compressed) * 1e3, 3),
        "speedup_median": round(med_p / med_c, 3) if med_c > 0 else None,
        "masks_identical": sum(1 for r in log if r.get("identical")),
        **extra,
    }


def benchmark_batches(engines, batch_sizes=(1, 4, 16), *, steps: int = 16, seed: int = 0, cancel=None) -> list[dict]:
    """Median mask time per step for each batch size, plain vs compressed (with expansion).

    ``engines`` is a :class:`cfgzip_lab.engine.CompiledEngines` with classes. One
    :func:`cfgzip_lab.bench.bench_engines` replay per batch size (seeded random walks,
    ``steps`` tokens at most); ``plain_us`` is the plain fill, ``compressed_us`` the class
    fill plus the expansion to a vocabulary bitmask, ``speedup`` their ratio at the median.
    ``cancel()`` is asked before each batch size.
    """
    from ..bench import bench_engines
    from ..native import build_native_engine
    from ..pipeline import compile_grammar

    native = build_native_engine(
        compile_grammar(engines.grammar_text), engines.vocab, engines.classes, xgrammar_engines=engines
    )
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
                "compressed_us": round(med_c, 1),
                "speedup": round(b.speedup_median, 2) if med_c > 0 else None,
                "native_us": round(b.native_fill.median_us, 1),
            }
        )
    return out


class TimingsPanel(Panel):
    """Timings. Public methods: :meth:`refresh`, :meth:`benchmark`."""

    error_sources = ("benchmark", "timings view")

    def __init__(self, session) -> None:
        super().__init__(session)
        self.batch_results: list[dict] = []
        self.summary = w.HTML()
        self.summary.add_class("cfgzip-timings-summary")
        self.line = go.FigureWidget(
            layout=figure_layout(
                "Mask time per decode step",
                width=480,
                xaxis=dict(title="step"),
                yaxis=dict(title="µs", rangemode="tozero"),
            )
        )
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="plain XGrammar (V tokens)")
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="CFGzip (K classes + expand)")
        self.line.add_scatter(x=[], y=[], mode="lines+markers", name="native (σ_in trie, no XGrammar)")
        self.hist = go.FigureWidget(
            layout=figure_layout(
                "Distribution of mask times",
                width=440,
                barmode="overlay",
                xaxis=dict(title="µs"),
                yaxis=dict(title="steps"),
            )
        )
        self.hist.add_histogram(x=[], name="plain", opacity=0.6, nbinsx=30)
        self.hist.add_histogram(x=[], name="CFGzip", opacity=0.6, nbinsx=30)
        self.hist.add_histogram(x=[], name="native", opacity=0.6, nbinsx=30)
        charts = w.HBox(
            [
                w.Box([self.line], layout=w.Layout(min_width="490px")),
                w.Box([self.hist], layout=w.Layout(min_width="450px")),
            ]
        )
        charts.add_class("cfgzip-timings-charts")
        self.batch_sizes = w.Text(value="1, 4, 16", description="Batch sizes")
        self.batch_sizes.add_class("cfgzip-batch-sizes")
        self.bench_steps = w.BoundedIntText(value=16, min=1, max=1000, description="Steps")
        run = self._button("Benchmark", "cfgzip-benchmark", self.benchmark, where="benchmark", icon="tachometer")
        self.batch_output = w.HTML()
        self.batch_output.add_class("cfgzip-batch-results")
        self.widget = w.VBox(
            [
                self.summary,
                charts,
                w.HTML(
                    "<b>Batch benchmark</b> (current grammar and classes; the same seeded random valid paths for every batch size)"
                ),
                w.HBox([self.batch_sizes, self.bench_steps, run]),
                self.batch_output,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-timings")
        session.on("decoder", self._guarded_refresh)
        self._guarded_refresh()

    def _guarded_refresh(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # last resort: a refresh runs from session events, maybe in a worker thread
            self.session.record_error("timings view", exc)

    def refresh(self) -> None:
        log = [r for r in getattr(self.session, "decode_log", []) if r.get("plain_s") is not None]
        steps = [r["step"] for r in log]
        plain = [r["plain_s"] * 1e6 for r in log]
        compressed = [r["compressed_s"] * 1e6 for r in log]
        native_log = [r for r in log if r.get("native_s") is not None]
        native = [r["native_s"] * 1e6 for r in native_log]
        with self.line.batch_update():
            self.line.data[0].x, self.line.data[0].y = steps, plain
            self.line.data[1].x, self.line.data[1].y = steps, compressed
            self.line.data[2].x, self.line.data[2].y = [r["step"] for r in native_log], native
        with self.hist.batch_update():
            self.hist.data[0].x = plain
            self.hist.data[1].x = compressed
            self.hist.data[2].x = native
        summary = step_summary(self.session)
        if not summary:
            self.summary.value = (
                '<span class="cfgzip-muted">no decode steps yet: step the decoder to fill these charts</span>'
            )
            return
        speed = summary["speedup_median"]
        self.summary.value = (
            f"<b>{summary['steps']}</b> steps · median mask time plain <b>{summary['median_plain_us']:.0f} µs</b>, "
            f"CFGzip <b>{summary['median_compressed_us']:.0f} µs</b> · speed-up (median) "
            f"<b>{speed:.2f}×</b> · masks identical in {summary['masks_identical']}/{summary['steps']} steps"
            + (
                f" · native <b>{summary['median_native_us']:.0f} µs</b> ({summary['native_speedup_median']:.2f}× plain), "
                f"identical in {summary['native_identical']}/{summary['steps']} steps"
                if "median_native_us" in summary and summary["native_speedup_median"]
                else ""
            )
            if speed
            else f"{summary['steps']} steps"
        )

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

        engines = compile_engines(s.text, s.vocab, s.classes)

        def work(job):
            job.progress(0, 1, "benchmark")
            results = benchmark_batches(engines, batch_sizes, steps=steps, cancel=lambda: job.cancelled)
            self.batch_results = results
            self._show_batches()
            return results

        job = s.start_job("benchmark", work)
        if wait:
            job.wait()
        return job

    def _show_batches(self) -> None:
        rows = [
            [
                r["batch_size"],
                r["steps"],
                f"{r['plain_us']:,.0f}",
                f"{r['compressed_us']:,.0f}",
                f"{r['speedup']:.2f}×" if r["speedup"] else "–",
                f"{r['native_us']:,.0f}" if r.get("native_us") is not None else "–",
            ]
            for r in self.batch_results
        ]
        vocab = self.session.vocab
        head = f"<p>{esc(vocab.name)}: V = {vocab.vocab_size:,} tokens, K = {self.session.classes.num_classes:,} classes</p>"
        self.batch_output.value = head + table(
            ["batch", "steps", "plain µs/step", "CFGzip µs/step", "speed-up", "native µs/step"],
            rows,
            numeric=(0, 1, 2, 3, 4, 5),
        )
