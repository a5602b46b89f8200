"""Step decoder: a real model, one constrained token at a time, plain and CFGzip masks side by side.

Each step shows the top-k logits before and after the grammar mask, how many classes and
tokens the grammar allows, the chosen token, the text so far, the mask time of plain
XGrammar vs CFGzip, and a check mark when the two masks were bit-identical. The work is
done by :class:`cfgzip_lab.decode.Stepper`; this panel only drives it and draws.

The decoder's classes are the session's: when the classes in the session are for another
tokenizer than the model's, the decoder classes the model's vocabulary and makes those the
session's classes, so the status line, the Classes tab and the decoder name one tokenizer.
Its status line always ends in an outcome: done, cancelled (with how many steps ran after the
click and how long stopping took, measured), stop token, rolled back, or failed.

While Run N runs, the step's text is drawn at most every :data:`DRAW_INTERVAL` seconds
(:class:`~._base.Throttle`) and the plotly chart only when the run ends. Measured in the browser
test (issue 21, Cancel took 6.5 and 11.3 s): every chart update makes plotly's front end send
layout updates back to the kernel, and those queued on the kernel's message channel ahead of the
Cancel click, which the decode thread's steps (20 a second here) left little time to reach;
with the chart drawn per step or even four times a second, the click waited seconds.

The model runs on the GPU when there is one (device "auto"), else on the CPU. XGrammar is
compiled inside the kernel here, so the panel first asks the XGrammar child process
whether the grammar compiles at all (some grammars crash xgrammar 0.2.8).
"""

from __future__ import annotations

import html
import threading
import time

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._base import Panel, Throttle
from ._figures import batch
from ._format import esc, fmt_seconds, show_bytes, table, token_label
from .session import Stamp, WorkbenchError

__all__ = ["DecoderPanel", "DEFAULT_PROMPT"]

DEFAULT_PROMPT = "Describe a cat as a JSON object with a name, an age and a list of toys."
DRAW_INTERVAL = 0.25  # seconds between two redraws while Run N runs
CHART_WIDTH = 660  # px: the before/after chart


def _speed_up(results) -> str:
    """The speed-up shown after the step's mask times: none on the first step, whose times carry
    the engines' warm-up (issue 35.5: "speed-up 0.02×"), then the median over steps 2 on."""
    ratios = [r.plain_mask_seconds / r.compressed_mask_seconds for r in results[1:] if r.compressed_mask_seconds > 0]
    if not results[1:]:
        return ' <span class="cfgzip-muted">(first step: includes the engines\' warm-up; the speed-up shows from step 2)</span>'
    if not ratios:
        return ""
    return f" (speed-up {float(np.median(ratios)):.2f}×, median of steps 2–{len(results)})"


class DecoderPanel(Panel):
    """The step decoder. Public methods: :meth:`load_model`, :meth:`step`, :meth:`run_steps`,
    :meth:`force_text`, :meth:`rollback`, :meth:`reset`, :meth:`cancel`."""

    error_sources = ("decoder", "load model", "run steps", "decode")
    #: the actions whose errors a working decode step proves fixed
    _decode_actions = ("decoder", "run steps", "decode")

    def __init__(self, session, *, model: str = "smollm2", prompt: str = DEFAULT_PROMPT, top_k: int = 10) -> None:
        super().__init__(session)
        self.stepper = None
        self.results: list = []  # StepResult of every step taken since the last reset
        self._stepper_key = None
        self._lock = threading.RLock()
        self.outcome = ""  # how the last action ended: "done: 8 steps", "cancelled at step 3", …
        self._latest = None  # the last StepResult drawn by the throttled redraw
        self._redraw = Throttle(lambda: self._show(self._latest, chart=False), DRAW_INTERVAL)

        # Any local Hugging Face model folder works too (hf.load_model); the status line says
        # which device and dtype it was loaded with.
        self.model = w.Combobox(
            value=model,
            options=["smollm2"],
            description="Model",
            ensure_option=False,
            placeholder="smollm2 or a local HF model folder",
        )
        self.model.add_class("cfgzip-model")
        self.device = w.Dropdown(options=["auto", "cpu", "cuda"], value="auto", description="Device")
        self.device.add_class("cfgzip-device")
        self.prompt = w.Textarea(value=prompt, description="Prompt", layout=w.Layout(width="100%", height="60px"))
        self.prompt.add_class("cfgzip-prompt")
        # the prompt the export's snippet uses (issue 35.7: it always said "A cat as JSON:")
        session.decoder_prompt = self.prompt.value
        self.prompt.observe(self._on_prompt, names="value")
        self.top_k = w.BoundedIntText(value=top_k, min=1, max=50, description="Top-k", layout=w.Layout(width="160px"))
        self.n = w.BoundedIntText(value=8, min=1, max=2000, description="N", layout=w.Layout(width="140px"))
        self.n.add_class("cfgzip-steps-n")
        load = self._button("Load model", "cfgzip-load-model", self.load_model, where="load model", icon="download")
        step = self._button("Step", "cfgzip-step", self.step, where="decoder", icon="step-forward", style="primary")
        run = self._button("Run N", "cfgzip-run-steps", self.run_steps, where="run steps", icon="forward")
        back = self._button("Rollback", "cfgzip-rollback", self.rollback, where="decoder", icon="step-backward")
        reset = self._button("Reset", "cfgzip-reset", self.reset, where="decoder", icon="refresh")
        cancel = self._button("Cancel", "cfgzip-cancel-steps", self.cancel, where="decoder", icon="stop")
        # text the author writes for the model: a trigger or a tag's begin, to watch a tool call's masks (issue 35.3)
        self.forced = w.Text(
            placeholder="text to force, e.g. <tool_call>",
            description="Force",
            tooltip="taken as if the model had written it, token by token, each with its masks; "
            "refused whole when the grammar does not allow it here",
            layout=w.Layout(width="360px"),
        )
        self.forced.add_class("cfgzip-forced-text")
        force = self._button("Force", "cfgzip-force", self.force_text, where="decoder", icon="i-cursor")
        self.status = w.HTML()
        self.status.add_class("cfgzip-decoder-status")
        self.step_info = w.HTML()
        self.step_info.add_class("cfgzip-decoder-step")
        self.text = w.HTML()
        self.text.add_class("cfgzip-decoder-text")
        self.tokens = w.HTML()
        self.tokens.add_class("cfgzip-decoder-tokens")
        self.allowed = w.HTML()
        self.allowed.add_class("cfgzip-decoder-allowed")
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=("top-k logits before the mask (red: masked out)", "top-k logits after the mask"),
            horizontal_spacing=0.22,
        )
        self.chart = go.FigureWidget(fig)
        self.chart.add_bar(x=[], y=[], orientation="h", name="before", marker_color=[], row=1, col=1)
        self.chart.add_bar(x=[], y=[], orientation="h", name="after", marker_color="#1a7f37", row=1, col=2)
        # A fixed width: the table beside it wraps below when the window is narrow (a 1,000 px
        # window), and the chart is never squeezed or clipped by its neighbour.
        self.chart.update_layout(height=360, width=CHART_WIDTH, showlegend=False, margin=dict(l=110, r=20, t=40, b=40))
        self.chart.update_yaxes(autorange="reversed", type="category")
        # The chart takes the room the window gives it and the allowed-classes table wraps below
        # it when both do not fit side by side (a 1,000 px window), never on top of it.
        self.chart_box = w.Box([self.chart], layout=w.Layout(flex=f"0 0 {CHART_WIDTH}px"))
        self.chart_box.add_class("cfgzip-decoder-chart")
        self.allowed.layout = w.Layout(flex="1 1 300px", min_width="280px", overflow="auto")
        self.widget = w.VBox(
            [
                w.HBox([self.model, self.device, load]),
                self.prompt,
                w.HBox([self.top_k, step, self.n, run, back, reset, cancel]),
                w.HBox([self.forced, force]),
                self.status,
                self.error_box,
                self.step_info,
                w.HBox([self.chart_box, self.allowed], layout=w.Layout(flex_flow="row wrap", width="100%")),
                w.HTML("<b>Text so far</b> (prompt in grey, generated in green)"),
                self.text,
                w.HTML("<b>Tokens</b>"),
                self.tokens,
            ]
        )
        self.widget.add_class("cfgzip-decoder")
        session.on("job", self._show_job)
        for topic in ("text", "grammar", "classes"):
            session.on(topic, self._show_status)  # marks the steps out of date after an edit
        self._show_status()

    # -- set-up ---------------------------------------------------------------------------

    def _on_prompt(self, change) -> None:
        self.session.decoder_prompt = change["new"]
        self.session.emit("prompt")  # kept with the author's session

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
        if s.decoder_model_key != key:
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
        from ..engine import compile_engines
        from .timings import record_compile

        s = self.session
        compiled = s.require_grammar()
        if not s.xgrammar_ok():
            raise WorkbenchError(
                f"XGrammar cannot compile this grammar, so it cannot decode with it: {s.xgrammar.summary()}"
            )
        model, tokenizer, vocab = self._ensure_model()
        key = (compiled.sha256, vocab.fingerprint, s.decoder_model_key)  # prompt, top-k: at Reset
        if self.stepper is None or self._stepper_key != key:
            classes = s.adopt_classes_for(vocab, job)
            # XGrammar's compile over the K classes, timed before the Stepper hits the cache
            # (the compressed engine's one-off, for "does it pay?" in Timings).
            record_compile(s, compile_engines(compiled.text, vocab, classes), Stamp(compiled.sha256, vocab.name))
            self.stepper = Stepper(
                model,
                tokenizer,
                compiled,
                classes,
                vocab=vocab,
                prompt=self.prompt.value,
                top_k=self.top_k.value,
                native=True,  # the third engine, timed and compared with plain at every step
            )
            self._stepper_key = key
            self.results = []
            s.decode_log = []
            s.decoder = self.stepper
            s.decoder_stamp = Stamp(compiled.sha256, vocab.name)
            self._show_status()
        return self.stepper

    # -- public methods (one per button) ---------------------------------------------------

    def step(self):
        """One constrained token: returns the StepResult and draws it."""
        try:
            with self._lock:
                stepper = self._ensure_stepper()
                result = stepper.step()
                self._record(result)
        except Exception as exc:
            self._end(f"failed: {exc}")
            raise
        self._end("stop token: done" if result.terminated else f"step {len(self.results)} done")
        self._show(result)
        return result

    def force_text(self, text: str | None = None) -> list:
        """Take ``text`` (default: the Force box) as if the model had written it: one step per
        token, each drawn with its masks. Text the grammar refuses here is not applied at all:
        a WorkbenchError names the first refused token."""
        from ..decode import ForcedTextRefused

        if text is not None:
            self.forced.value = text
        text = self.forced.value
        if not text:
            raise WorkbenchError("type the text to force first (a trigger, a tag's begin)")
        try:
            with self._lock:
                stepper = self._ensure_stepper()
                results = stepper.force(text)
                for result in results:
                    self._record(result)
        except ForcedTextRefused as exc:
            self._end(f"not forced: {exc}")
            raise WorkbenchError(str(exc)) from exc
        except Exception as exc:
            self._end(f"failed: {exc}")
            raise
        n = len(results)
        self._end(f"forced {n} token{'s' * (n != 1)}" + (": stop token, done" if results[-1].terminated else ""))
        self._show(results[-1])
        return results

    def run_steps(self, n: int | None = None, *, wait: bool = False):
        """Run ``n`` steps (default: the N box) in the background; drawn as they come."""
        n = n or self.n.value

        def work(job):
            with self._lock:
                stepper = self._ensure_stepper(job)
                out = []
                try:
                    for i in range(n):
                        if job.cancelled or self._finished():  # polled between steps: Cancel waits one step at most
                            break
                        result = stepper.step()
                        self._record(result)
                        out.append(result)
                        job.progress(i + 1, n, "decoding")
                        self._latest = result
                        self._redraw()
                finally:
                    self._redraw.cancel()
                    if out:
                        self._show(out[-1])  # the last step is always drawn, chart included
                return out

        self.outcome = ""
        job = self.session.start_job("decode", work)
        if wait:
            job.wait()
        return job

    def rollback(self, n: int = 1):
        """Undo the last ``n`` steps; the status says where decoding stands now."""
        with self._lock:
            if self.stepper is None or not self.results:
                self._end("nothing to roll back")
                return None
            n = min(n, len(self.results))
            self.stepper.rollback(n)
            self.results = self.stepper.history
            del self.session.decode_log[len(self.results) :]
            self.session.emit("decoder")
        self._show(self.results[-1] if self.results else None)
        kept = len(self.results)
        self._end(
            f"rolled back {n} step{'s' * (n != 1)}: at step {kept}"
            if kept
            else f"rolled back {n} step{'s' * (n != 1)}: at the prompt"
        )
        return self.results[-1] if self.results else None

    def reset(self):
        """Back to the prompt; a changed prompt, top-k, model or grammar is picked up here.
        A running Run N is cancelled first (it ends as "cancelled"), then the steps go."""
        job = self.session.jobs.get("decode")
        was_running = job is not None and job.running  # an older run's "cancelled" is not this Reset's
        if was_running:
            job.cancel()
            job.wait(60)  # a step takes at most one forward pass
            job._cfgzip_reported = True  # Reset says how it ended, below
        with self._lock:
            self._stepper_key = None  # rebuild on the next step: picks up every setting
            if self.stepper is not None:  # session.decoder may still point at it
                try:
                    self.stepper.reset()
                except ValueError:  # an empty prompt without a BOS id: the next step reports it
                    pass
            self.stepper = None
            self.results = []
            self.session.decode_log = []
            self.session.decoder_stamp = None
        self.session.emit("decoder")
        self._show(None)
        self._end(
            "reset: back to the prompt"
            + (" (the running steps were cancelled)" if was_running and job.status == "cancelled" else "")
        )

    def cancel(self) -> None:
        self.session.cancel("decode")

    # -- recording and drawing -----------------------------------------------------------

    def _finished(self) -> bool:
        return bool(self.results) and self.results[-1].terminated

    def _record(self, result) -> None:
        self.session.clear_errors(*self._decode_actions)  # decoding works: an old failure is gone
        self.results.append(result)
        self.session.decode_log.append(
            {
                "step": len(self.results),
                "token_id": result.token_id,
                "plain_s": result.plain_mask_seconds,
                "compressed_s": result.compressed_mask_seconds,
                "identical": result.masks_identical,
                "native_s": result.native_mask_seconds,
                "native_identical": result.native_identical,
                "forward_s": result.forward_seconds,
            }
        )
        self.session.emit("decoder")

    def _end(self, outcome: str) -> None:
        self.outcome = outcome
        self._show_status()

    def _show_status(self) -> None:
        s = self.session
        model = s.decoder_model
        outcome = f" · <b class='cfgzip-decoder-outcome'>{esc(self.outcome)}</b>" if self.outcome else ""
        if model is None:
            self.status.value = '<span class="cfgzip-muted">no model loaded yet (Step loads it)</span>' + outcome
            return
        m, _, vocab = model
        try:
            first = next(m.parameters())
            device, dtype = first.device, str(first.dtype).removeprefix("torch.")
        except (AttributeError, StopIteration):  # not a torch module, or one without parameters
            device = dtype = "?"
        classes = getattr(self.stepper, "classes", None)
        k = f" · classes: <b>{esc(vocab.name)}</b>, K = {classes.num_classes:,}" if classes is not None else ""
        stale = ""
        if self.results and not s.is_current(s.decoder_stamp):
            note = s.stale_note(s.decoder_stamp)
            stale = f' · <span class="cfgzip-warn cfgzip-stale">steps {esc(note)}: Reset to decode the current grammar</span>'
        took = s.timings.get("model_load")
        self.status.value = (
            f"model <b>{esc(self.model.value)}</b> on <b>{esc(device)}</b> in <b>{esc(dtype)}</b>"
            f" · V = {vocab.vocab_size:,} tokens{k}"
            + (f" · loaded in {fmt_seconds(took)}" if took else "")
            + outcome
            + stale
        )

    def _show_job(self) -> None:
        decode, load = self.session.jobs.get("decode"), self.session.jobs.get("load model")
        job = decode if decode is not None and decode.running else load if load is not None and load.running else None
        if job is not None:
            self.status.value = f"{esc(job.message)} {job.done}/{job.total}" if job.total else f"{esc(job.message)}…"
            return
        # Nothing runs: the last job's end is the outcome, said once (never "decoding 8/8" left behind).
        last = max((j for j in (decode, load) if j is not None), key=lambda j: j.started, default=None)
        if last is None or getattr(last, "_cfgzip_reported", False):
            return
        last._cfgzip_reported = True
        if last.name == "load model":
            self._end(
                f"model loaded in {fmt_seconds(last.seconds)}" if last.status == "done" else f"load {last.status}"
            )
        elif last.status == "done":
            steps = len(last.result or [])
            self._end("stop token: done" if self._finished() else f"done: {steps} step{'s' * (steps != 1)}")
        elif last.status == "cancelled":
            after = last.steps_after_cancel
            took = f", stopped {fmt_seconds(last.stopped_after)} after Cancel" if last.stopped_after is not None else ""
            extra = f" ({after} step{'s' * (after != 1)} after Cancel{took})" if after is not None else ""
            self._end(f"cancelled at step {len(self.results)}{extra}")
        else:
            self._end(f"failed: {last.error.message if last.error else 'see the error below'}")

    def _show(self, result, *, chart: bool = True) -> None:
        if result is None:
            with batch(self.chart):
                for trace in self.chart.data:
                    trace.x, trace.y = [], []
            self.step_info.value = ""
            self.text.value = ""
            self.tokens.value = ""
            self.allowed.value = ""
            return
        if chart:
            self._show_chart(result)
        self._show_step(result)
        self._show_text(result)

    def _label(self, token_id: int) -> str:
        return token_label(self.stepper.vocab, token_id)

    def _bars(self, top) -> tuple[list[str], list[float]]:
        # Category labels must be unique: the id keeps two tokens with one text apart.
        return [f"{self._label(t.token_id)} #{t.token_id}" for t in top], [t.logit for t in top]

    def _show_chart(self, result) -> None:
        before_y, before_x = self._bars(result.top_before)
        after_y, after_x = self._bars(result.top_after)
        with batch(self.chart):
            before, after = self.chart.data
            before.y, before.x = before_y, before_x
            before.marker.color = ["#1a7f37" if t.allowed else "#cf222e" for t in result.top_before]
            after.y, after.x = after_y, after_x

    def _show_step(self, result) -> None:
        mark = (
            '<span class="cfgzip-ok cfgzip-identical">✓ masks identical</span>'
            if result.masks_identical
            else '<span class="cfgzip-bad">✗ masks differ</span>'
        )
        plain, compressed = result.plain_mask_seconds, result.compressed_mask_seconds
        speed = _speed_up(self.results)
        end = (
            " · <b>stop token: done</b>"
            if result.terminated
            else (" · complete sentence so far" if result.completed else "")
        )
        self.step_info.value = (
            f"<b>step {len(self.results)}</b>: {'forced' if result.forced else 'chose'} "
            f"<span class='cfgzip-tok'>{esc(self._label(result.token_id))}</span> "
            f"#{result.token_id} · allowed classes <b>{result.allowed_classes:,}</b> / {result.num_classes:,} · "
            f"allowed tokens <b>{result.allowed_tokens:,}</b> / {result.vocab_size:,}<br>"
            f"mask time: plain XGrammar {fmt_seconds(plain)} · CFGzip {fmt_seconds(compressed)}{speed} · "
            + (
                f"native {fmt_seconds(result.native_mask_seconds)} ({'✓' if result.native_identical else '✗ differs'}) · "
                if result.native_mask_seconds is not None
                else ""
            )
            + f"forward {fmt_seconds(result.forward_seconds)} · {mark}{end}"
        )
        rows = [
            [
                ex.class_id,
                f"<span class='cfgzip-tok'>{esc(self._label(ex.representative))}</span> #{ex.representative}",
                f"{ex.size:,}",
            ]
            for ex in result.class_examples
        ]
        self.allowed.value = (
            "<b>Largest allowed classes</b>" + table(["class", "representative", "tokens"], rows, numeric=(0, 2))
            if rows
            else ""
        )

    def _show_text(self, result) -> None:
        prompt = self.stepper.prompt if self.stepper is not None else self.prompt.value
        self.text.value = (
            f'<pre class="cfgzip-code" style="white-space:pre-wrap"><span class="cfgzip-muted">{html.escape(prompt)}</span>\n'
            f'<span class="cfgzip-generated">{html.escape(result.text)}</span></pre>'
        )
        chips = []
        vocab = self.stepper.vocab
        for r in self.results:
            data = vocab.token_bytes[r.token_id]
            label = show_bytes(data) if data else token_label(vocab, r.token_id)
            bad = "" if r.masks_identical else " style='outline:1px solid red'"
            forced = (" cfgzip-forced", ", forced") if r.forced else ("", "")
            chips.append(
                f"<span class='cfgzip-tok{forced[0]}' title='#{r.token_id}{forced[1]}: "
                f"{r.allowed_tokens:,} tokens allowed'{bad}>{esc(label)}</span>"
            )
        self.tokens.value = " ".join(chips)
