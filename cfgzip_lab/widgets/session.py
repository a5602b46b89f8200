"""The workbench's shared state: one :class:`WorkbenchSession` that every panel reads and drives.

The session holds what the panels show (grammar text, compiled grammar, diagnostics,
XGrammar's verdict, vocabulary, classes, the step decoder, timings, errors) and does the
work behind each button, so the panels stay thin views. It never imports ipywidgets or
plotly: a session can be driven from a script or a test on its own.

Long work (classing, loading a model, running decode steps) runs in a background thread
as a :class:`Job` with progress and cancel; its exception is kept in ``session.errors``
and announced to the panels (topic ``"error"``) instead of being lost in a log.

Every result the session keeps records the :class:`Stamp` (grammar text hash, tokenizer) it
was made for; ``session.is_current(stamp)`` says whether it still holds for the current text
and tokenizer, so a panel recomputes or marks it "out of date" instead of showing an old
answer as current. Errors are kept per action and cleared when that action next succeeds.

Panels subscribe with ``session.on(topic, callback)``; topics: ``"text"`` (the text was
replaced by a load), ``"grammar"`` (a check finished), ``"xgrammar"``, ``"classes"``,
``"job"`` (progress), ``"decoder"``, ``"error"``, ``"source"`` (saved under a new
provenance). Callbacks may run in a worker thread.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..classes.classing import grammar_sha256
from ..classes.displacement import Displacer
from ..errors import CfgzipError
from ..grammar.diagnostics import Diagnostic, GrammarError
from ..grammar.sources import KINDS, check_source, detect_kind, to_ebnf
from ..pipeline import CompiledGrammar, build_classes, bundled_grammars, compile_grammar
from .xgrammar_worker import XGrammarChecker, XGrammarVerdict, default_checker

__all__ = [
    "WorkbenchSession",
    "Job",
    "ErrorRecord",
    "WorkbenchError",
    "Stamp",
    "Stamped",
    "DEFAULT_GRAMMAR",
    "DEFAULT_TOKENIZER",
]

DEFAULT_GRAMMAR = "json"
UNTITLED = "untitled"  # the provenance of a text that was typed, not loaded
DEFAULT_TOKENIZER = "smollm2"  # the default model's own vocabulary: the decoder reuses its classes


class WorkbenchError(CfgzipError, ValueError):
    """A workbench action that cannot run now (no classes yet, a grammar with errors, an empty
    search, a job already running): shown in its panel as a message, without a traceback."""


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a result was made for: the grammar text (its sha256) and the tokenizer.

    ``tokenizer`` is None for a result that does not depend on one (our compile, XGrammar's
    verdict, sample verdicts): such a stamp holds for as long as the text is the same.
    """

    grammar_sha: str
    tokenizer: str | None = None

    def describe(self) -> str:
        """Short words for an "out of date (made for …)" mark: ``grammar 1a2b3c4d, llama3``."""
        grammar = f"grammar {self.grammar_sha[:8]}"
        return f"{grammar}, {self.tokenizer}" if self.tokenizer else grammar


@dataclass(frozen=True, slots=True)
class Stamped:
    """A kept result and the stamp it was made for (see :meth:`WorkbenchSession.keep`)."""

    value: Any
    stamp: Stamp


@dataclass(frozen=True)
class ErrorRecord:
    """An error caught in a button handler or a worker, kept for the panel that shows it.

    ``details`` holds the traceback of an unexpected exception (a bug) and is empty for a
    :class:`~cfgzip_lab.errors.CfgzipError`, whose message says all a user needs."""

    where: str
    message: str
    details: str = ""
    at: float = field(default_factory=time.time)
    stamp: Stamp | None = None  # the text and tokenizer the failing action ran on


class Job:
    """One piece of background work: a thread, its progress, a cancel flag and its outcome.

    ``fn(job)`` runs in the thread; it reports with ``job.progress(done, total)`` and
    polls ``job.cancelled``. ``status`` is ``"running"``, ``"done"``, ``"cancelled"`` or
    ``"failed"`` (then ``error`` holds the :class:`ErrorRecord`).
    """

    def __init__(self, name: str, fn: Callable[[Job], Any], session: WorkbenchSession, on_done=None) -> None:
        self.name = name
        self.session = session
        self.done = 0
        self.total = 0
        self.message = ""
        self.status = "running"
        self.result: Any = None
        self.error: ErrorRecord | None = None
        self.started = time.perf_counter()
        self.seconds = 0.0
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._fn = fn
        self._on_done = on_done
        self.thread = threading.Thread(target=self._run, name=f"cfgzip-{name}", daemon=True)

    def _run(self) -> None:
        try:
            self.result = self._fn(self)
            self.status = "cancelled" if self._cancel.is_set() else "done"
            if self.status == "done":
                self.session.clear_errors(self.name)  # it worked this time: an old failure is fixed
            if self._on_done is not None and self.status == "done":
                self._on_done(self.result)
        except InterruptedError:
            self.status = "cancelled"
        except Exception as exc:  # last resort: a worker thread's exception would otherwise vanish
            self.status = "failed"
            self.error = self.session.record_error(self.name, exc)
        finally:
            self.seconds = time.perf_counter() - self.started
            self._finished.set()
            self.session.emit("job")

    def progress(self, done: int, total: int, message: str = "") -> None:
        self.done, self.total = done, total
        if message:
            self.message = message
        self.session.emit("job")

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else (1.0 if not self.running else 0.0)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def running(self) -> bool:
        return not self._finished.is_set()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends; True if it did within ``timeout``."""
        return self._finished.wait(timeout)

    def __repr__(self) -> str:
        return f"Job({self.name!r}, {self.status}, {self.done}/{self.total})"


class WorkbenchSession:
    """Everything the workbench panels share; every panel action is one method here.

    Parameters
    ----------
    text : str, optional
        Initial grammar text; default: the bundled ``json`` grammar.
    tokenizer : str
        Vocabulary name for classing (see ``cfgzip_lab.vocab.available_vocabs``).
    checker : XGrammarChecker, optional
        Where XGrammar compiles grammars (a child process); default: one per kernel.
    draft_path : path, optional
        Where each checked text is also written, so a kernel crash loses nothing.
    """

    def __init__(
        self,
        text: str | None = None,
        *,
        source: str | None = None,
        tokenizer: str = DEFAULT_TOKENIZER,
        checker: XGrammarChecker | None = None,
        draft_path: str | Path | None = None,
    ) -> None:
        if text is None:
            source = source or DEFAULT_GRAMMAR
            text = bundled_grammars()[DEFAULT_GRAMMAR].read_text(encoding="utf-8")
        self.text = text
        # provenance: where the text came from and the text as it came (to say "edited")
        self.source = source or UNTITLED
        self.source_text = text
        self.previous_text: str | None = None
        self._previous_source: tuple[str, str] | None = None
        self.draft_path = Path(draft_path) if draft_path else None
        # grammar
        self.compiled: CompiledGrammar | None = None
        self.compiled_stamp: Stamp | None = None
        self.diagnostics: list[Diagnostic] = []
        self.checked_text: str | None = None
        self.input_kind = "auto"  # or one of KINDS: how to read the text (see ``kind``)
        self.checker = checker or default_checker()
        self.xgrammar: XGrammarVerdict | None = None
        self.xgrammar_text: str | None = None
        self.xgrammar_stamp: Stamp | None = None
        # vocabulary and classes
        self.tokenizer = tokenizer
        self.vocab = None
        self.classing = None  # ClassingResult of the last run (None after loading a cache)
        self.classes = None  # TokenClasses
        self.classes_key: tuple[str, str] | None = None  # (grammar sha256, vocab fingerprint)
        self.classes_stamp: Stamp | None = None
        self.classes_source = ""  # "classing" or the cache path
        # Run classing reads the class cache directory first and writes what it classes there
        # (cfgzip_lab.cache_dir: $CFGZIP_CACHE_DIR); False classes afresh and writes nothing.
        self.use_class_cache = True
        self._displacer: tuple[str, Displacer] | None = None
        # decoding (driven by the decoder panel)
        self.decoder: Any = None  # the cfgzip_lab.decode.Stepper in use
        self.decoder_stamp: Stamp | None = None  # grammar and tokenizer of the stepper's classes
        self.decoder_model: tuple | None = None  # (model, tokenizer, vocab) from hf.load_model
        self.decoder_model_key: tuple | None = None  # (model name, device) it was loaded for
        self.decode_log: list[dict] = []  # one record per decode step: mask times, identical
        # bookkeeping
        self.timings: dict[str, float] = {}
        self.timing_stamps: dict[str, Stamp] = {}  # the stamp each timing was measured for
        self.kept: dict[str, Stamped] = {}  # other results (benchmark table, token explanation)
        self.errors: list[ErrorRecord] = []
        self.jobs: dict[str, Job] = {}
        self._listeners: dict[str, list[Callable[[], None]]] = defaultdict(list)
        self._lock = threading.RLock()
        self._sha: tuple[str, str] | None = None  # (text, sha256) of the last hashed text

    # -- stamps -----------------------------------------------------------------------

    @property
    def grammar_sha(self) -> str:
        """sha256 of the current text (hashed once per text: a few µs for a grammar)."""
        text = self.text
        if self._sha is None or self._sha[0] is not text:
            self._sha = (text, grammar_sha256(text))
        return self._sha[1]

    @property
    def stamp(self) -> Stamp:
        """The stamp of the current text and tokenizer: what a result made now is made for."""
        return Stamp(self.grammar_sha, self.tokenizer)

    @property
    def grammar_stamp(self) -> Stamp:
        """The stamp of the current text alone (for results that need no tokenizer)."""
        return Stamp(self.grammar_sha, None)

    def is_current(self, stamp: Stamp | None) -> bool:
        """Whether a result made for ``stamp`` still holds: same text and (if it names one)
        same tokenizer. ``None`` (no result, or one made before stamps) is never current."""
        if stamp is None or stamp.grammar_sha != self.grammar_sha:
            return False
        return stamp.tokenizer is None or stamp.tokenizer == self.tokenizer

    def keep(self, name: str, value: Any, stamp: Stamp | None = None) -> Stamped:
        """Keep a result under ``name`` with the stamp it was made for (default: the current one)."""
        kept = Stamped(value, stamp or self.stamp)
        self.kept[name] = kept
        return kept

    def current(self, name: str) -> Any:
        """The result kept under ``name`` if it still holds, else None."""
        kept = self.kept.get(name)
        return kept.value if kept is not None and self.is_current(kept.stamp) else None

    def record_timing(self, name: str, seconds: float, stamp: Stamp | None = None) -> None:
        """One timing and the stamp it was measured for (default: the current text and tokenizer)."""
        self.timings[name] = seconds
        self.timing_stamps[name] = stamp or self.stamp

    def current_timings(self) -> dict[str, float]:
        """The timings measured for the current text and tokenizer (model load: always)."""
        return {
            k: v
            for k, v in self.timings.items()
            if self.timing_stamps.get(k) is None or self.is_current(self.timing_stamps[k])
        }

    def stale_note(self, stamp: Stamp | None) -> str:
        """``""`` for a current result, else ``"out of date (made for grammar 1a2b3c4d, llama3)"``."""
        if self.is_current(stamp):
            return ""
        return (
            "out of date (made for an earlier state)" if stamp is None else f"out of date (made for {stamp.describe()})"
        )

    # -- provenance -------------------------------------------------------------------

    @property
    def edited(self) -> bool:
        """The text differs from the text as it was loaded, saved or created."""
        return self.text != self.source_text

    @property
    def provenance(self) -> str:
        """Where the text comes from, in words: ``untitled``, ``untitled (edited)``, a file
        path or a bundled grammar's name, followed by ``(edited)`` once the text differs."""
        return f"{self.source} (edited)" if self.edited else self.source

    def _set_source(self, source: str, text: str) -> None:
        self.source, self.source_text = source, text

    # -- events -----------------------------------------------------------------------

    def on(self, topic: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever ``topic`` happens (possibly from a worker thread)."""
        self._listeners[topic].append(callback)

    def emit(self, topic: str) -> None:
        for callback in list(self._listeners.get(topic, ())):
            try:
                callback()
            except Exception as exc:  # a broken view must not break the session
                if topic != "error":
                    self.record_error(f"view of {topic!r}", exc)

    def record_error(self, where: str, exc: BaseException) -> ErrorRecord:
        stamp = self.stamp
        if isinstance(exc, CfgzipError):  # bad input: the message is the whole story
            record = ErrorRecord(where, str(exc), stamp=stamp)
        else:  # a bug: keep its type and traceback for the report
            record = ErrorRecord(where, f"{type(exc).__name__}: {exc}", traceback.format_exc(), stamp=stamp)
        self.errors.append(record)
        self.emit("error")
        return record

    @property
    def last_error(self) -> ErrorRecord | None:
        return self.errors[-1] if self.errors else None

    def clear_errors(self, *where: str) -> None:
        """Forget the errors of the actions ``where`` (all errors if none named): called when an
        action succeeds, so a fixed failure leaves the panels and the count."""
        before = len(self.errors)
        if where:
            self.errors[:] = [e for e in self.errors if e.where not in where]
        else:
            self.errors.clear()
        if len(self.errors) != before:
            self.emit("error")

    # -- jobs -------------------------------------------------------------------------

    def start_job(self, name: str, fn: Callable[[Job], Any], *, on_done=None) -> Job:
        """Run ``fn(job)`` in a thread; refuses a second job of the same name while one runs."""
        current = self.jobs.get(name)
        if current is not None and current.running:
            raise WorkbenchError(f"{name} is already running")
        job = Job(name, fn, self, on_done)
        self.jobs[name] = job
        job.thread.start()
        self.emit("job")
        return job

    def cancel(self, name: str | None = None) -> None:
        """Ask the running job ``name`` (every running job if None) to stop."""
        for job_name, job in self.jobs.items():
            if (name is None or job_name == name) and job.running:
                job.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no job runs; True if that happened within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in list(self.jobs.values()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.wait(left):
                return False
        return True

    # -- grammar text -----------------------------------------------------------------

    def set_text(self, text: str) -> None:
        """The editor's current text (kept at once: nothing typed is lost by a failed check)."""
        self.text = text

    def replace_text(self, text: str, source: str) -> None:
        """Replace the text by a loaded one (``source``: a path or a bundled name); the replaced
        text and its provenance stay in ``previous_text`` for :meth:`restore_previous`."""
        if text != self.text:
            self.previous_text = self.text
            self._previous_source = (self.source, self.source_text)
        self.text = text
        self._set_source(source, text)
        self.emit("text")

    def new_text(self, text: str = "") -> None:
        """Start an untitled grammar (typed from scratch)."""
        self.replace_text(text, UNTITLED)

    def restore_previous(self) -> bool:
        """Undo the last load: bring back the text it replaced, with its provenance."""
        if self.previous_text is None:
            return False
        current = (self.source, self.source_text)
        self.text, self.previous_text = self.previous_text, self.text
        self._set_source(*(self._previous_source or (UNTITLED, self.text)))
        self._previous_source = current
        self.emit("text")
        return True

    def load_bundled(self, name: str) -> None:
        path = bundled_grammars()[name]
        self.replace_text(path.read_text(encoding="utf-8"), name)

    def load_file(self, path: str | Path) -> None:
        path = Path(path).expanduser()
        self.replace_text(path.read_text(encoding="utf-8"), str(path))

    def save_file(self, path: str | Path) -> Path:
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.text, encoding="utf-8")
        self._set_source(str(path), self.text)
        self.emit("source")  # the provenance changed, the text did not: nothing to re-check
        return path

    def restore_draft(self) -> bool:
        """Load the draft written by the last check (after a kernel crash or restart)."""
        if self.draft_path is None or not self.draft_path.exists():
            return False
        # A draft is what was typed, not a file the user chose: its provenance is "untitled",
        # and "edited" since it differs from nothing the user saved.
        self.replace_text(self.draft_path.read_text(encoding="utf-8"), UNTITLED)
        self.source_text = ""
        return True

    # -- checking and compiling -------------------------------------------------------

    def compile(self, text: str | None = None, *, xgrammar: bool = True) -> bool:
        """Check and compile the current text (or ``text``); True if it compiled.

        Our diagnostics come at once (``check_ebnf`` never raises); XGrammar's verdict
        follows from the child process (topic ``"xgrammar"``) unless ``xgrammar=False``.
        """
        with self._lock:
            if text is not None:
                self.text = text
            text = self.text
            self._write_draft(text)
            kind = self.kind
            diagnostics = check_source(text, kind, name=self.source)
            compiled = None
            if not any(d.severity == "error" for d in diagnostics):
                try:
                    compiled = compile_grammar(text, source=self.source, kind=kind)
                except GrammarError as error:
                    diagnostics = error.diagnostics
                except Exception as exc:  # a core bug: show it as a diagnostic, keep going
                    self.record_error("compile", exc)
                    diagnostics = diagnostics + [Diagnostic(1, 1, f"internal error while compiling: {exc!r}")]
            self.diagnostics = diagnostics
            self.compiled = compiled
            self.compiled_stamp = Stamp(grammar_sha256(text), None)
            self.checked_text = text
            if compiled is not None:
                for k, v in compiled.seconds.items():
                    self.record_timing(f"compile_{k}", v, self.compiled_stamp)
                self.clear_errors("compile")
        self.emit("grammar")
        if xgrammar:
            self.check_xgrammar()
        return compiled is not None

    @property
    def kind(self) -> str:
        """What the text is: ``"ebnf"``, ``"gbnf"`` or ``"json_schema"`` (``input_kind``, or
        detected from the text and the file name when it is ``"auto"``)."""
        if self.input_kind != "auto":
            return self.input_kind
        return detect_kind(self.text, self.source)

    def set_input_kind(self, kind: str) -> None:
        """Read the text as ``kind`` (``"auto"`` or one of :data:`KINDS`) from now on."""
        if kind != "auto" and kind not in KINDS:
            raise WorkbenchError(f"unknown input kind {kind!r}: expected auto, {', '.join(KINDS)}")
        self.input_kind = kind

    def ebnf_for(self, text: str) -> str | None:
        """The EBNF that XGrammar compiles for ``text`` (itself for EBNF; the converted grammar
        of a schema or a GBNF file), or None when the text cannot be converted (its errors
        are already among our diagnostics)."""
        kind = self.kind
        if kind == "ebnf":
            return text
        if self.compiled is not None and self.checked_text == text:
            return self.compiled.text
        try:
            return to_ebnf(text, kind, name=self.source).ebnf
        except CfgzipError:
            return None

    @property
    def grammar_text(self) -> str:
        """The EBNF the engines compile for the current text (raises if it has errors)."""
        return self.require_grammar().text

    def _xgrammar_verdict(self, text: str) -> XGrammarVerdict:
        ebnf = self.ebnf_for(text)
        if ebnf is None:
            return XGrammarVerdict(False, "not compiled: the input has errors (see ours)")
        verdict = self.checker.check(ebnf)
        if ebnf is not text and verdict.line is not None:
            # XGrammar's position is in the converted EBNF, not in what the user typed.
            verdict = replace(verdict, message=f"{verdict.message} (in the converted grammar)", line=None, column=None)
        return verdict

    def check_xgrammar(self, *, wait: bool = False) -> Job | XGrammarVerdict:
        """XGrammar's verdict on the current text, from the child process."""
        text = self.text

        def work(job: Job) -> XGrammarVerdict:
            verdict = self._xgrammar_verdict(text)
            if text == self.text:  # a newer text's verdict must not be overwritten
                self._set_xgrammar(verdict, text)
                self.record_timing("xgrammar_compile", verdict.seconds, self.xgrammar_stamp)
                self.emit("xgrammar")
            return verdict

        if wait:
            return work(None)
        return self.start_job_queued("xgrammar", work)

    def start_job_queued(self, name: str, fn: Callable[[Job], Any]) -> Job:
        """Like :meth:`start_job`, but waits for a running job of that name instead of refusing."""
        previous = self.jobs.get(name)

        def after_previous(job: Job):
            if previous is not None:
                previous.wait()
            return fn(job)

        job = Job(name, after_previous, self)
        self.jobs[name] = job
        job.thread.start()
        return job

    def xgrammar_ok(self) -> bool:
        """Whether XGrammar compiles the current text (asks the child if it was not asked yet).

        Everything that compiles XGrammar *inside* the kernel (engines, the step decoder)
        checks this first: a grammar that crashes XGrammar must crash the child only.
        """
        if self.xgrammar is None or self.xgrammar_text != self.text:
            text = self.text
            self._set_xgrammar(self._xgrammar_verdict(text), text)
            self.emit("xgrammar")
        return self.xgrammar.ok

    def _set_xgrammar(self, verdict: XGrammarVerdict, text: str) -> None:
        self.xgrammar, self.xgrammar_text = verdict, text
        self.xgrammar_stamp = Stamp(grammar_sha256(text), None)

    @property
    def grammar_ok(self) -> bool:
        """The current text compiled (by us) without errors."""
        return self.compiled is not None and self.checked_text == self.text

    def require_grammar(self) -> CompiledGrammar:
        if self.checked_text != self.text:
            self.compile(xgrammar=False)
        if not self.grammar_ok:
            first = next((d for d in self.diagnostics if d.severity == "error"), None)
            where = f" (line {first.line}, column {first.column}: {first.message})" if first else ""
            raise WorkbenchError(f"the grammar has errors{where}; fix them first")
        return self.compiled

    def _write_draft(self, text: str) -> None:
        if self.draft_path is None:
            return
        try:
            self.draft_path.parent.mkdir(parents=True, exist_ok=True)
            self.draft_path.write_text(text, encoding="utf-8")
        except OSError:
            pass  # a draft is a convenience; never fail a check over it

    # -- vocabulary and classes -------------------------------------------------------

    def load_vocab(self, name: str | None = None):
        from ..vocab import load_vocab

        name = name or self.tokenizer
        vocab = load_vocab(name)
        if name == self.tokenizer:
            self.vocab = vocab
        return vocab

    def run_classing(self, tokenizer: str | None = None, *, wait: bool = False) -> Job:
        """Class the tokenizer's vocabulary under the current grammar, in the background."""
        if tokenizer is not None:
            self.tokenizer = tokenizer
        compiled = self.require_grammar()
        name = self.tokenizer

        def work(job: Job):
            job.progress(0, 0, f"loading the {name} vocabulary")
            started = time.perf_counter()
            vocab = self.load_vocab(name)
            stamp = Stamp(compiled.input_sha256, name)
            self.record_timing("vocab_load", time.perf_counter() - started, stamp)
            if self.use_class_cache:
                from ..cache_dir import cached_classes_for

                started = time.perf_counter()
                cached = cached_classes_for(compiled, vocab)
                if cached is not None:  # classed before on this machine: no classing now
                    with self._lock:
                        self.vocab = vocab
                        self.classing = None
                        self.classes = cached
                        self.classes_key = (compiled.sha256, vocab.fingerprint)
                        self.classes_stamp = stamp
                        self.classes_source = "the class cache directory"
                        self.record_timing("cache_load", time.perf_counter() - started, stamp)
                        self.timings.pop("classing", None)
                    self.emit("classes")
                    return cached
            job.progress(0, 1, "classing")
            started = time.perf_counter()
            result = build_classes(
                compiled,
                vocab,
                progress=lambda done, total: job.progress(done, total, "classing"),
                cancel=lambda: job.cancelled,
            )
            # One classing time, reported everywhere (status line, Timings, report): the
            # wall time of build_classes as this job ran it.
            self.record_timing("classing", time.perf_counter() - started, stamp)
            result.classes.metadata["classing_seconds"] = round(self.timings["classing"], 4)  # one number
            with self._lock:
                self.vocab = vocab
                self.classing = result
                self.classes = result.classes
                self.classes_key = (compiled.sha256, vocab.fingerprint)
                self.classes_stamp = stamp
                self.classes_source = "classing"
                self.timings.pop("cache_load", None)
            self.emit("classes")
            if self.use_class_cache:
                from ..cache_dir import store_classes_for

                store_classes_for(compiled, vocab, result.classes)  # the index is added on first native use
            return result

        job = self.start_job("classing", work)
        if wait:
            job.wait()
        return job

    def set_classes(self, classes, vocab, source: str, *, seconds: float | None = None) -> None:
        """Use classes from elsewhere (a cache, or the decoder's model); they must be for the
        current grammar and ``vocab``. ``seconds``: what loading them took (the one-off cost
        of a cache, for "does it pay?")."""
        compiled = self.require_grammar()
        classes.check_fits(compiled.text, vocab)
        with self._lock:
            self.vocab = vocab
            self.tokenizer = vocab.name
            self.classing = None
            self.classes = classes
            self.classes_key = (compiled.sha256, vocab.fingerprint)
            self.classes_stamp = Stamp(compiled.input_sha256, vocab.name)
            self.classes_source = source
            if seconds is not None:
                self.record_timing("cache_load", seconds, self.classes_stamp)
        self.emit("classes")

    @property
    def classes_current(self) -> bool:
        """Classes exist and were made for the current grammar text and tokenizer."""
        if self.classes is None or self.vocab is None or not self.grammar_ok:
            return False
        return self.classes_key == (self.compiled.sha256, self.vocab.fingerprint)

    def displacer(self) -> Displacer:
        """A Displacer for the current grammar (the classing run's, or a fresh one)."""
        compiled = self.require_grammar()
        if self.classing is not None and self.classes_current:
            return self.classing.displacer
        if self._displacer is None or self._displacer[0] != compiled.sha256:
            self._displacer = (compiled.sha256, Displacer(compiled.gnf))
        return self._displacer[1]

    def classes_for(self, vocab, job: Job | None = None):
        """Classes of ``vocab`` under the current grammar: the session's if they fit, else built."""
        compiled = self.require_grammar()
        if self.classes is not None and self.classes_key == (compiled.sha256, vocab.fingerprint):
            return self.classes
        result = build_classes(
            compiled,
            vocab,
            progress=(lambda d, t: job.progress(d, t, f"classing {vocab.name}")) if job else None,
            cancel=(lambda: job.cancelled) if job else None,
        )
        return result.classes

    def adopt_classes_for(self, vocab, job: Job | None = None):
        """The classes the decoder uses, made the session's own: the session's classes if they
        are for ``vocab`` (the model's vocabulary), else built now (timed as *the* classing
        time) and kept as the session's classes, so that the status line, the Classes tab and
        the decoder always speak of one tokenizer's classes."""
        compiled = self.require_grammar()
        if self.classes is not None and self.classes_key == (compiled.sha256, vocab.fingerprint):
            return self.classes
        started = time.perf_counter()
        result = build_classes(
            compiled,
            vocab,
            progress=(lambda d, t: job.progress(d, t, f"classing {vocab.name}")) if job else None,
            cancel=(lambda: job.cancelled) if job else None,
        )
        stamp = Stamp(compiled.input_sha256, vocab.name)
        self.record_timing("classing", time.perf_counter() - started, stamp)
        result.classes.metadata["classing_seconds"] = round(self.timings["classing"], 4)  # one number
        with self._lock:
            self.vocab = vocab
            self.tokenizer = vocab.name
            self.classing = result
            self.classes = result.classes
            self.classes_key = (compiled.sha256, vocab.fingerprint)
            self.classes_stamp = stamp
            self.classes_source = "classing (for the decoder's model)"
            self.timings.pop("cache_load", None)
        self.emit("classes")
        return result.classes

    # -- summaries --------------------------------------------------------------------

    def summary(self) -> dict:
        """What the report and the status line show: grammar, tokenizer, counts."""
        out: dict[str, Any] = {"grammar_source": self.provenance, "grammar_ok": self.grammar_ok}
        if self.compiled is not None:
            out["grammar_sha256"] = self.compiled.sha256
            out["grammar_stats"] = self.compiled.stats()
        if self.classes is not None:
            meta = self.classes.metadata
            out.update(
                {
                    "tokenizer": self.tokenizer,
                    "vocab_size": self.classes.vocab_size,
                    "classes": self.classes.num_classes,
                    "compression_ratio": round(self.classes.compression_ratio, 3),
                    "dead_tokens": meta.get("dead_tokens"),
                    "stop_tokens": meta.get("stop_tokens"),
                    "special_tokens": meta.get("special_tokens"),
                    "blocked_tokens": meta.get("blocked_tokens"),
                    "fallback_singletons": meta.get("fallback_singletons"),
                    "classes_current": self.classes_current,
                }
            )
        return out

    def close(self) -> None:
        self.cancel()
