"""Step decoder: a real model, one constrained token at a time, plain and CFGzip masks side by side.

Each step shows the top-k logits before and after the grammar mask, how many classes and
tokens the grammar allows, the chosen token, the text so far, the mask time of plain
XGrammar vs CFGzip, and a check mark when the two masks were bit-identical. The work is
done by :class:`cfgzip_lab.decode.Stepper`; this panel only drives it and draws.

The model runs on the GPU when there is one (device "auto"), else on the CPU. XGrammar is
compiled inside the kernel here, so the panel first asks the XGrammar child process
whether the grammar compiles at all (some grammars crash xgrammar 0.2.8).
"""
from __future__ import annotations

import html
import threading
import time

import ipywidgets as w
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._base import Panel
from ._format import esc, fmt_seconds, show_bytes

__all__ = ["DecoderPanel", "DEFAULT_PROMPT"]

DEFAULT_PROMPT = "Describe a cat as a JSON object with a name, an age and a list of toys."


def _get(obj, *names, default=None):
    """The first attribute of ``obj`` among ``names`` (StepResult field names, tolerant)."""
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


class DecoderPanel(Panel):
    """The step decoder. Public methods: :meth:`load_model`, :meth:`step`, :meth:`run_steps`,
    :meth:`rollback`, :meth:`reset`, :meth:`cancel`."""

    error_sources = ("decoder", "load model", "run steps")

    def __init__(self, session, *, model: str = "smollm2", prompt: str = DEFAULT_PROMPT, top_k: int = 10) -> None:
        super().__init__(session)
        self.stepper = None
        self.results: list = []  # StepResult of every step taken since the last reset
        self._stepper_key = None
        self._lock = threading.RLock()
        session.decode_log = []  # what the timings panel and the report read

        self.model = w.Combobox(value=model, options=["smollm2"], description="Model", ensure_option=False)
        self.model.add_class("cfgzip-model")
        self.device = w.Dropdown(options=["auto", "cpu", "cuda"], value="auto", description="Device")
        self.device.add_class("cfgzip-device")
        self.prompt = w.Textarea(value=prompt, description="Prompt", layout=w.Layout(width="100%", height="60px"))
        self.prompt.add_class("cfgzip-prompt")
        self.top_k = w.BoundedIntText(value=top_k, min=1, max=50, description="Top-k", layout=w.Layout(width="160px"))
        self.n = w.BoundedIntText(value=8, min=1, max=2000, description="N", layout=w.Layout(width="140px"))
        load = self._button("Load model", "cfgzip-load-model", self.load_model, where="load model", icon="download")
        step = self._button("Step", "cfgzip-step", self.step, where="decoder", icon="step-forward", style="primary")
        run = self._button("Run N", "cfgzip-run-steps", self.run_steps, where="run steps", icon="forward")
        back = self._button("Rollback", "cfgzip-rollback", self.rollback, where="decoder", icon="step-backward")
        reset = self._button("Reset", "cfgzip-reset", self.reset, where="decoder", icon="refresh")
        cancel = self._button("Cancel", "cfgzip-cancel-steps", self.cancel, where="decoder", icon="stop")
        self.status = w.HTML()
        self.status.add_class("cfgzip-decoder-status")
        self.step_info = w.HTML()
        self.step_info.add_class("cfgzip-decoder-step")
        self.text = w.HTML()
        self.text.add_class("cfgzip-decoder-text")
        self.tokens = w.HTML()
        self.tokens.add_class("cfgzip-decoder-tokens")
        fig = make_subplots(rows=1, cols=2, subplot_titles=("top-k logits before the mask", "top-k logits after the mask"), horizontal_spacing=0.22)
        self.chart = go.FigureWidget(fig)
        self.chart.add_bar(x=[], y=[], orientation="h", name="before", marker_color=[], row=1, col=1)
        self.chart.add_bar(x=[], y=[], orientation="h", name="after", marker_color="#1a7f37", row=1, col=2)
        self.chart.update_layout(height=360, showlegend=False, margin=dict(l=110, r=20, t=40, b=40))
        self.chart.update_yaxes(autorange="reversed", type="category")
        self.chart_box = w.Box([self.chart])
        self.chart_box.add_class("cfgzip-decoder-chart")
        self.widget = w.VBox(
            [
                w.HBox([self.model, self.device, load]),
                self.prompt,
                w.HBox([self.top_k, step, self.n, run, back, reset, cancel]),
                self.status,
                self.error_box,
                self.step_info,
                self.chart_box,
                w.HTML("<b>Text so far</b> (prompt in grey, generated in green)"),
                self.text,
                w.HTML("<b>Tokens</b>"),
                self.tokens,
            ]
        )
        self.widget.add_class("cfgzip-decoder")
        session.on("job", self._show_job)
        self._show_status()

    # -- set-up ---------------------------------------------------------------------------

    def _device(self):
        if self.device.value == "auto":
            return None  # hf.load_model picks CUDA when present
        return self.device.value

    def load_model(self, *, wait: bool = False):
        """Load the picked model in the background (first load converts the GGUF once)."""

        def work(job):
            job.progress(0, 0, f"loading {self.model.value}")
            self._ensure_model()
            return self.session.decoder_model

        job = self.session.start_job("load model", work)
        if wait:
            job.wait()
        return job

    def _ensure_model(self):
        from ..hf import load_model

        s = self.session
        key = (self.model.value, self.device.value)
        if getattr(s, "decoder_model_key", None) != key:
            self.status.value = f"loading {esc(self.model.value)}…"
            started = time.perf_counter()
            model, tokenizer, vocab = load_model(self.model.value, device=self._device())
            s.timings["model_load"] = time.perf_counter() - started
            s.decoder_model = (model, tokenizer, vocab)
            s.decoder_model_key = key
            self._stepper_key = None
            self._show_status()
        return s.decoder_model

    def _ensure_stepper(self, job=None):
        from ..decode import Stepper

        s = self.session
        compiled = s.require_grammar()
        if not s.xgrammar_ok():
            raise ValueError(f"XGrammar cannot compile this grammar, so it cannot decode with it: {s.xgrammar.summary()}")
        model, tokenizer, vocab = self._ensure_model()
        key = (compiled.sha256, vocab.fingerprint, s.decoder_model_key, self.prompt.value, self.top_k.value)
        if self.stepper is None or self._stepper_key != key:
            classes = s.classes_for(vocab, job)
            self.stepper = Stepper(model, tokenizer, compiled, classes, vocab=vocab, prompt=self.prompt.value, top_k=self.top_k.value)
            self._stepper_key = key
            self.results = []
            s.decode_log = []
            s.decoder = self.stepper
            self._show_status()
        return self.stepper

    # -- public methods (one per button) ---------------------------------------------------

    def step(self):
        """One constrained token: returns the StepResult and draws it."""
        with self._lock:
            stepper = self._ensure_stepper()
            result = stepper.step()
            self._record(result)
        self._show(result)
        return result

    def run_steps(self, n: int | None = None, *, wait: bool = False):
        """Run ``n`` steps (default: the N box) in the background; drawn as they come."""
        n = n or self.n.value

        def work(job):
            with self._lock:
                stepper = self._ensure_stepper(job)
                out = []
                for i in range(n):
                    if job.cancelled or self._finished():
                        break
                    result = stepper.step()
                    self._record(result)
                    out.append(result)
                    job.progress(i + 1, n, "decoding")
                    self._show(result)
                return out

        job = self.session.start_job("decode", work)
        if wait:
            job.wait()
        return job

    def rollback(self, n: int = 1):
        with self._lock:
            if self.stepper is None or not self.results:
                return None
            self.stepper.rollback(n)
            del self.results[-n:]
            del self.session.decode_log[-n:]
        self._show(self.results[-1] if self.results else None)
        return self.results[-1] if self.results else None

    def reset(self):
        """Back to the prompt (a changed prompt, model or grammar is picked up here)."""
        with self._lock:
            self._stepper_key = None  # rebuild on the next step: picks up every setting
            if self.stepper is not None:
                try:
                    self.stepper.reset()
                except Exception:
                    pass
            self.stepper = None
            self.results = []
            self.session.decode_log = []
        self._show(None)

    def cancel(self) -> None:
        self.session.cancel("decode")

    # -- recording and drawing -----------------------------------------------------------

    def _finished(self) -> bool:
        return bool(self.results) and bool(_get(self.results[-1], "finished", "done", "terminated", default=False))

    def _record(self, result) -> None:
        self.results.append(result)
        self.session.decode_log.append(
            {
                "step": len(self.results),
                "token_id": _get(result, "token_id", "chosen_id", "chosen"),
                "plain_s": _get(result, "plain_seconds", "mask_seconds_plain", "plain_mask_seconds"),
                "compressed_s": _get(result, "compressed_seconds", "mask_seconds_compressed", "compressed_mask_seconds"),
                "identical": _get(result, "masks_identical", "identical"),
            }
        )
        self.session.emit("decoder")

    def _show_status(self) -> None:
        s = self.session
        model = getattr(s, "decoder_model", None)
        if model is None:
            self.status.value = '<span class="cfgzip-muted">no model loaded yet (Step loads it)</span>'
            return
        m, _, vocab = model
        try:
            device = next(m.parameters()).device
        except Exception:
            device = "?"
        classes = getattr(self.stepper, "classes", None)
        k = f" · K = {classes.num_classes:,} classes" if classes is not None else ""
        took = s.timings.get("model_load")
        self.status.value = (
            f"model <b>{esc(self.model.value)}</b> on <b>{esc(device)}</b> · V = {vocab.vocab_size:,} tokens{k}"
            + (f" · loaded in {fmt_seconds(took)}" if took else "")
        )

    def _show_job(self) -> None:
        job = self.session.jobs.get("decode") or self.session.jobs.get("load model")
        if job is not None and job.running:
            self.status.value = f"{esc(job.message)} {job.done}/{job.total}" if job.total else f"{esc(job.message)}…"
        elif job is not None and job.name == "load model" and job.status == "done":
            self._show_status()

    def _label(self, token_id: int) -> str:
        vocab = self.session.decoder_model[2]
        data = vocab.token_bytes[int(token_id)]
        return repr(data.decode("utf-8", "backslashreplace")) if data else f"<{token_id}>"

    def _show(self, result) -> None:
        if result is None:
            with self.chart.batch_update():
                for trace in self.chart.data:
                    trace.x, trace.y = [], []
            self.step_info.value = ""
            self.text.value = ""
            self.tokens.value = ""
            return
        self._show_chart(result)
        self._show_step(result)
        self._show_text()

    def _pairs(self, result, *names):
        """Top-k as [(label, logit, allowed)], whatever shape the StepResult gives them in."""
        top = _get(result, *names, default=[]) or []
        out = []
        for item in top:
            if isinstance(item, dict):
                tid, logit = item.get("token_id", item.get("id")), item.get("logit", item.get("score"))
                allowed = item.get("allowed", True)
            else:
                tid, logit, *rest = item
                allowed = rest[0] if rest else True
            out.append((f"{self._label(tid)} #{tid}", float(logit), bool(allowed)))
        return out

    def _show_chart(self, result) -> None:
        before = self._pairs(result, "top_before", "topk_before", "before")
        after = self._pairs(result, "top_after", "topk_after", "after")
        with self.chart.batch_update():
            b, a = self.chart.data
            b.y = [lbl for lbl, _, _ in before]
            b.x = [v for _, v, _ in before]
            b.marker.color = ["#1a7f37" if ok else "#cf222e" for _, _, ok in before]
            a.y = [lbl for lbl, _, _ in after]
            a.x = [v for _, v, _ in after]

    def _show_step(self, result) -> None:
        rec = self.session.decode_log[-1] if self.session.decode_log else {}
        tid = rec.get("token_id")
        identical = rec.get("identical")
        mark = (
            '<span class="cfgzip-ok cfgzip-identical">✓ masks identical</span>'
            if identical
            else ('<span class="cfgzip-bad">✗ masks differ</span>' if identical is not None else "")
        )
        allowed_classes = _get(result, "allowed_classes", "num_allowed_classes")
        allowed_tokens = _get(result, "allowed_tokens", "num_allowed_tokens")
        k = _get(result, "num_classes")
        v = _get(result, "vocab_size")

        def count(x, total):
            n = len(x) if hasattr(x, "__len__") else x
            return "?" if n is None else (f"{n:,}" + (f" / {total:,}" if total else ""))

        plain, compressed = rec.get("plain_s"), rec.get("compressed_s")
        times = ""
        if plain is not None and compressed is not None:
            speed = f" ({plain / compressed:.1f}× faster)" if compressed > 0 else ""
            times = f"mask time: plain {fmt_seconds(plain)} · CFGzip {fmt_seconds(compressed)}{speed}"
        chosen = esc(self._label(tid)) if tid is not None else "–"
        self.step_info.value = (
            f"<b>step {len(self.results)}</b>: chose <span class='cfgzip-tok'>{chosen}</span> #{tid} · "
            f"allowed classes {count(allowed_classes, k)} · allowed tokens {count(allowed_tokens, v)} · {times} {mark}"
        )

    def _show_text(self) -> None:
        if not self.results:
            return
        last = self.results[-1]
        generated = _get(last, "text", "generated_text", "text_so_far", default="")
        prompt = _get(last, "prompt", default=self.prompt.value)
        if isinstance(generated, bytes):
            generated = generated.decode("utf-8", "replace")
        self.text.value = (
            f'<pre class="cfgzip-code" style="white-space:pre-wrap"><span class="cfgzip-muted">{html.escape(str(prompt))}</span>'
            f'<span class="cfgzip-generated">{html.escape(str(generated))}</span></pre>'
        )
        vocab = self.session.decoder_model[2]
        chips = []
        for rec in self.session.decode_log:
            tid = rec.get("token_id")
            if tid is None:
                continue
            data = vocab.token_bytes[int(tid)]
            label = show_bytes(data) if data else f"<{tid}>"
            ok = "" if rec.get("identical", True) else " style='outline:1px solid red'"
            chips.append(f"<span class='cfgzip-tok' title='#{tid}'{ok}>{esc(label)}</span>")
        self.tokens.value = " ".join(chips)
