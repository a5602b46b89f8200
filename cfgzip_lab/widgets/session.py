"""The workbench's shared state: one :class:`WorkbenchSession` that every panel reads and drives.

The session holds what the panels show (grammar text, compiled grammar, diagnostics,
XGrammar's verdict, vocabulary, classes, the step decoder, timings, errors) and does the
work behind each button, so the panels stay thin views. It never imports ipywidgets or
plotly: a session can be driven from a script or a test on its own.

Long work (classing, loading a model, running decode steps) runs in a background thread
as a :class:`Job` with progress and cancel; its exception is kept in ``session.errors``
and announced to the panels (topic ``"error"``) instead of being lost in a log.

Every result the session keeps records the :class:`Stamp` (grammar hash, tokenizer) it was
made for; ``session.is_current(stamp)`` says whether it still holds for the current text and
tokenizer, so a panel recomputes or marks it "out of date" instead of showing an old answer as
current. The grammar hash is the sha256 of the EBNF the engines compile (for a JSON Schema or a
GBNF file, of the converted grammar), not of the text typed: editing a schema's
``description`` changes nothing the engines see, so nothing goes out of date. Errors are kept
per action and cleared when that action next succeeds.

Provenance (``source``) says where the text comes from; it turns ``untitled`` as soon as one
edit replaces most of the text (select all and type or paste, delete all), so a typed grammar is
never reported, exported or read as the file loaded before it. Drafts (:mod:`.drafts`) are
written only for typed text, never by the start-up check.

Panels subscribe with ``session.on(topic, callback)``; topics: ``"text"`` (the text was
replaced by a load), ``"grammar"`` (a check finished), ``"xgrammar"``, ``"classes"``,
``"job"`` (progress), ``"decoder"``, ``"error"``, ``"source"`` (saved under a new
provenance), ``"tests"`` (the test list or its outcomes changed), ``"jump"`` (a view asked
to show a rule's definition: ``jump_target``), ``"live"`` (live classing started, stopped or
decided not to run: ``live_decision``). Callbacks may run in a worker thread.

Live classes (issue 18.6, :mod:`cfgzip_lab.live_classes`): with ``live_enabled`` (the
workbench turns it on), each successful check re-classes the vocabulary in the background
``live_policy.delay_s`` after the check (a new edit restarts the wait and cancels a re-class
under way), under a time budget (``live_policy.budget_s``): past it the job stops and live
classing pauses for this grammar until a classing of it is quick again. ``class_history``
keeps the versions classed, for "+12 classes since the last version".

Besides the grammar's own checks, every check adds what an author wants to know (:mod:`
cfgzip_lab.grammar.authoring`): hints for habits from regex and GBNF (``\\d`` → ``[0-9]``) and
warnings where keywords can run together (a nullable separator). The test list (:mod:`
cfgzip_lab.grammar.testlist`) is re-run on every check; parse trees come from an Earley parser
over the source rules (:meth:`earley`); a JSON Schema's rules map to JSON pointers
(:meth:`schema_info`).
"""

from __future__ import annotations

import difflib
import os
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._gc import gc_paused
from ..classes.classing import grammar_sha256
from ..classes.displacement import Displacer
from ..errors import CfgzipError
from ..grammar.authoring import run_together_lint, with_hints
from ..grammar.diagnostics import Diagnostic, GrammarError, position_of
from ..grammar.sources import KINDS, check_source, detect_kind, to_ebnf
from ..grammar.testlist import GrammarTest, TestOutcome, load_tests, run_tests, save_tests
from ..live_classes import ClassHistory, ClassVersion, LiveDecision, LivePolicy
from ..pipeline import CompiledGrammar, build_classes, bundled_grammars, compile_grammar
from .drafts import Draft, read_draft, write_draft
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


def typed_over(before: str, after: str) -> bool:
    """Whether one update from ``before`` to ``after`` replaced most of the text: less than half of
    ``before`` survives in ``after`` (select all and type, paste over, delete all). Typing,
    deleting a line or pasting a rule into a grammar keeps most of it.

    One update can hold several edits: the browser sends only the latest text while a message is
    in flight, so a rule typed at the end and one typed at the start can arrive together (the
    browser test did exactly that, and a common prefix and suffix alone called it typed over).
    So when prefix and suffix keep less than half, the lines both texts share decide."""
    if not before:
        return False
    if not after:
        return True
    n = min(len(before), len(after))
    prefix = _common_prefix(before, after, n)
    suffix = _common_prefix(before[::-1], after[::-1], n - prefix)
    if 2 * (prefix + suffix) >= len(before):
        return False
    old_lines, new_lines = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    kept = sum(len(line) for a, _, size in matcher.get_matching_blocks() for line in old_lines[a : a + size])
    return 2 * kept < len(before)


def _common_prefix(a: str, b: str, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b`` (at most ``limit``), by bisection on slices:
    C-speed comparisons, a few µs for a 100 kB grammar at every keystroke."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a result was made for: the grammar (the sha256 of the EBNF the engines compile) and
    the tokenizer.

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
        # When Cancel arrived and how far the job was then (``done``): how long it took to stop
        # and how many progress steps it made after the request are measured, not guessed.
        self.cancel_requested: float | None = None
        self.done_at_cancel: int | None = None
        self.stopped_after: float | None = None  # seconds from the request to the end
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._announced = threading.Event()  # the end was announced (topic "job"): views drew it
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
            ended = time.perf_counter()
            self.seconds = ended - self.started
            if self.cancel_requested is not None:
                self.stopped_after = ended - self.cancel_requested
            self._finished.set()
            try:
                self.session.emit("job")
            finally:
                self._announced.set()

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
        if not self._cancel.is_set():
            self.cancel_requested, self.done_at_cancel = time.perf_counter(), self.done
        self._cancel.set()

    @property
    def steps_after_cancel(self) -> int | None:
        """Progress steps made after Cancel was asked for (the one in flight counts: at most 1
        for a job that polls ``cancelled`` between steps); None if it was never cancelled."""
        return None if self.done_at_cancel is None else self.done - self.done_at_cancel

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends and the panels have drawn its end; True if that happened
        within ``timeout``."""
        return self._announced.wait(timeout)

    def __repr__(self) -> str:
        return f"Job({self.name!r}, {self.status}, {self.done}/{self.total})"


class WorkbenchSession:
    """Everything the workbench panels share; every panel action is one method here.

    Parameters
    ----------
    text : str, optional
        Initial grammar text; default: the bundled ``json`` grammar.
    tokenizer : str
        Vocabulary name for classing (see ``cfgzip_lab.vocab_sources.available_vocabs``).
    checker : XGrammarChecker, optional
        Where XGrammar compiles grammars (a child process); default: one per kernel.
    draft_path : path, optional
        Where each checked text that was typed (not loaded) is also written, so a kernel crash
        or restart loses nothing (see :mod:`.drafts`; ``.json``: with its input kind and time).
    live_classes : bool
        Re-class by itself after each successful check (see the module doc); the workbench
        turns it on, a session used from a script keeps it off unless asked.
    """

    def __init__(
        self,
        text: str | None = None,
        *,
        source: str | None = None,
        tokenizer: str = DEFAULT_TOKENIZER,
        checker: XGrammarChecker | None = None,
        draft_path: str | Path | None = None,
        live_classes: bool = False,
    ) -> None:
        if text is None:
            source = source or DEFAULT_GRAMMAR
            text = bundled_grammars()[DEFAULT_GRAMMAR].read_text(encoding="utf-8")
        self.text = text
        # provenance: where the text came from and the text as it came (to say "edited");
        # source_text None: typed here, never loaded or saved (the label is plain "untitled")
        self.source = source or UNTITLED
        self.source_text: str | None = text
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
        # (cfgzip_lab.cache.directory: $CFGZIP_CACHE_DIR); False classes afresh and writes nothing.
        self.use_class_cache = True
        self._displacer: tuple[str, Displacer] | None = None
        # live classes (issue 18.6): re-class after each successful check, within a time budget
        self.live_enabled = live_classes
        self.live_policy = LivePolicy()
        self.live_decision: LiveDecision | None = None  # the last decision, shown beside the editor
        # what the last classing of the grammar being edited took (None: not classed since it
        # was loaded); the estimate for the next re-class (see cfgzip_lab.live_classes)
        self.live_last_seconds: float | None = None
        self.class_history = ClassHistory()
        self._live_timer: threading.Timer | None = None
        self._live_lock = threading.RLock()
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
        # the test list: strings with what they should be, re-run on every check
        self.tests: list[GrammarTest] = []
        self.test_outcomes: list[TestOutcome] = []
        self.tests_stamp: Stamp | None = None
        self.tests_path: Path | None = None  # where the list was loaded from or saved to
        # views asking to show a rule's definition (topic "jump")
        self.jump_target: dict | None = None
        self._derived: dict[str, tuple[str, Any]] = {}  # per-grammar results: name -> (sha, value)
        self._listeners: dict[str, list[Callable[[], None]]] = defaultdict(list)
        self._lock = threading.RLock()
        self._sha: tuple[str, str, str] | None = None  # (text, kind, sha256 of its EBNF) last hashed
        self.on("classes", self._record_class_version)  # first listener: views see the new version

    # -- stamps -----------------------------------------------------------------------

    @property
    def grammar_sha(self) -> str:
        """sha256 of the EBNF the engines compile for the current text (:meth:`sha_for`), computed
        once per text and input kind."""
        text, kind = self.text, self.kind
        if self._sha is None or self._sha[0] is not text or self._sha[1] != kind:
            self._sha = (text, kind, self.sha_for(text))
        return self._sha[2]

    def sha_for(self, text: str) -> str:
        """sha256 of the EBNF that ``text`` becomes (itself for EBNF; XGrammar's grammar for a
        schema; the conversion of a GBNF file): what stamps compare. A text that cannot be
        converted gets a hash no EBNF has, so everything made for another text is out of date."""
        ebnf = self.ebnf_for(text)
        return grammar_sha256(ebnf) if ebnf is not None else grammar_sha256("\0unconverted\0" + text)

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
        """``""`` for a current result, else what it was made for, in words the author can check:
        ``"out of date (made for another version of the grammar, tokenizer llama3)"``. The grammar's
        hash is left out: it appeared nowhere else in the workbench (issue 35.7)."""
        if self.is_current(stamp):
            return ""
        if stamp is None:
            return "out of date (made for an earlier state)"
        made_for = []
        if stamp.grammar_sha != self.grammar_sha:
            made_for.append("another version of the grammar")
        if stamp.tokenizer is not None and stamp.tokenizer != self.tokenizer:
            made_for.append(f"tokenizer {stamp.tokenizer}")
        return f"out of date (made for {', '.join(made_for) or 'an earlier state'})"

    # -- provenance -------------------------------------------------------------------

    @property
    def edited(self) -> bool:
        """The text differs from the text as it was loaded, saved or created (a text typed over
        is not "edited": it is untitled)."""
        return self.source_text is not None and self.text != self.source_text

    @property
    def provenance(self) -> str:
        """Where the text comes from, in words: ``untitled``, ``untitled (edited)``, a file
        path or a bundled grammar's name, followed by ``(edited)`` once the text differs."""
        return f"{self.source} (edited)" if self.edited else self.source

    def _set_source(self, source: str, text: str | None) -> None:
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
        """The editor's current text (kept at once: nothing typed is lost by a failed check).

        An edit that replaces most of the text (:func:`typed_over`) makes it ``untitled``: what
        is in the editor then comes from no file, and is not read as one (a ``.gbnf`` name)."""
        if (
            text != self.text
            and typed_over(self.text, text)
            and not (self.source == UNTITLED and self.source_text is None)
        ):
            self._set_source(UNTITLED, None)
            self.emit("source")
        if text != self.text:
            self._stop_live()  # a re-class of the text before this edit is wasted work now
        self.text = text

    def replace_text(self, text: str, source: str) -> None:
        """Replace the text by a loaded one (``source``: a path or a bundled name); the replaced
        text and its provenance stay in ``previous_text`` for :meth:`restore_previous`."""
        if text != self.text:
            self.previous_text = self.text
            self._previous_source = (self.source, self.source_text)
            self._stop_live()
            # another grammar: its own classing time is the estimate, and "+N classes" would
            # compare it with a different grammar
            self.live_last_seconds = None
            self.class_history.clear()
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
        self._stop_live()
        self.live_last_seconds = None
        self.class_history.clear()
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

    def draft(self) -> Draft | None:
        """The draft on disk for this session's draft path (None: there is none)."""
        return read_draft(self.draft_path)

    def restore_draft(self) -> bool:
        """Load the draft written by the last check of typed text (after a kernel crash or
        restart), with the input kind it was read as."""
        draft = self.draft()
        if draft is None:
            return False
        if draft.kind != "auto" and (draft.kind in KINDS):
            self.input_kind = draft.kind
        # A draft is what was typed, not a file the user chose: its provenance is "untitled".
        self.replace_text(draft.text, UNTITLED)
        self.source_text = None
        return True

    # -- checking and compiling -------------------------------------------------------

    def compile(self, text: str | None = None, *, xgrammar: bool = True, draft: bool = True) -> bool:
        """Check and compile the current text (or ``text``); True if it compiled.

        Our diagnostics come at once (``check_ebnf`` never raises); XGrammar's verdict
        follows from the child process (topic ``"xgrammar"``) unless ``xgrammar=False``.
        A typed text is also written as the draft, unless ``draft=False`` (the start-up check:
        it must never overwrite the draft a restarted kernel is about to restore).
        """
        with self._lock:
            if text is not None:
                self.set_text(text)
            text = self.text
            if draft:
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
            if compiled is not None:
                diagnostics = diagnostics + self._author_warnings(compiled)
            self.diagnostics = with_hints(diagnostics, text)
            self.compiled = compiled
            self.compiled_stamp = Stamp(compiled.sha256 if compiled is not None else self.sha_for(text), None)
            self.checked_text = text
            if compiled is not None:
                for k, v in compiled.seconds.items():
                    self.record_timing(f"compile_{k}", v, self.compiled_stamp)
                self.clear_errors("compile")
        self.emit("grammar")
        if compiled is not None and self.tests and not self.is_current(self.tests_stamp):
            self._guarded_tests()
        if xgrammar:
            self.check_xgrammar()
        if compiled is not None:
            self._schedule_live()
        return compiled is not None

    def _author_warnings(self, compiled: CompiledGrammar) -> list[Diagnostic]:
        """The run-together lint, placed in the user's text (a GBNF file's through its map; none
        for a schema, whose rules XGrammar wrote)."""
        origin = compiled.grammar_source
        if origin is not None and origin.kind == "json_schema":
            return []
        try:
            found = self.derived("lint", lambda c: run_together_lint(c.ast), compiled)
        except Exception as exc:  # a lint must never stop a check
            self.record_error("compile", exc)
            return []
        if origin is None or origin.kind == "ebnf":
            return found
        return [m for m in (origin.remap(d) for d in found) if m is not None]

    def _guarded_tests(self) -> None:
        try:
            self.run_tests()
        except Exception as exc:  # runs from a check, maybe in the debounce thread
            self.record_error("tests", exc)

    # -- per-grammar results for authors ------------------------------------------------

    def derived(
        self, name: str, make: Callable[[CompiledGrammar], Any], compiled: CompiledGrammar | None = None
    ) -> Any:
        """``make(compiled)`` for the current grammar (or ``compiled``), computed once per grammar
        (by its sha): the views of one check share it."""
        compiled = compiled or self.require_grammar()
        kept = self._derived.get(name)
        if kept is not None and kept[0] == compiled.sha256:
            return kept[1]
        value = make(compiled)
        self._derived[name] = (compiled.sha256, value)
        return value

    def earley(self):
        """The :class:`~cfgzip_lab.grammar.earley.EarleyGrammar` of the current grammar's rules
        (as the user wrote them, or as XGrammar built them from a schema)."""
        from ..grammar.earley import EarleyGrammar

        return self.derived("earley", lambda c: EarleyGrammar(c.ast))

    def schema_info(self) -> dict | None:
        """For a JSON Schema: ``{"pointers": {rule: JSON pointer}, "notes": [SchemaNote],
        "warnings": [XGrammar's own], "costly": [SchemaNote]}``; None for other inputs."""
        compiled = self.require_grammar()
        origin = compiled.grammar_source
        if origin is None or origin.kind != "json_schema":
            return None

        def make(c: CompiledGrammar) -> dict:
            from ..grammar import schema_info as si
            from ..grammar.provenance import rule_sizes

            pointers = si.rule_pointers(origin.text, c.text)
            warnings = si.xgrammar_warnings(origin.text)
            seconds = sum(c.seconds.values())
            return {
                "pointers": pointers,
                "notes": si.unenforced_keywords(origin.text, warnings),
                "warnings": warnings,
                "costly": si.costly_keywords(origin.text, pointers, rule_sizes(c.cfg, c.gnf), seconds=seconds),
                "order": si.PROPERTY_ORDER,
            }

        return self.derived("schema_info", make)

    def rule_pointer(self, rule: str) -> str | None:
        """The JSON pointer a schema's rule enforces (None for other inputs or unknown rules)."""
        try:
            info = self.schema_info()
        except WorkbenchError:
            return None
        return info["pointers"].get(rule) if info else None

    def rule_location(self, rule: str) -> dict | None:
        """Where ``rule`` is defined: ``{"rule", "line", "column", "in": "text" | "converted"}``
        ("converted": in the EBNF built from a schema or a GBNF file, not in the user's text)."""
        compiled = self.compiled if self.grammar_ok else None
        if compiled is None or rule not in compiled.ast.rules:
            return None
        span = compiled.ast.rules[rule].span
        offset = span[0] if span else 0
        origin = compiled.grammar_source
        if origin is None or origin.kind == "ebnf":
            line, column = position_of(compiled.text, offset)
            return {"rule": rule, "line": line, "column": column, "in": "text"}
        if origin.kind == "gbnf":
            moved = origin.remap(Diagnostic(1, 1, "", span=(offset, offset + 1)))
            if moved is not None:
                return {"rule": rule, "line": moved.line, "column": moved.column, "in": "text"}
        line, column = position_of(compiled.text, offset)
        return {"rule": rule, "line": line, "column": column, "in": "converted"}

    def jump_to_rule(self, rule: str) -> dict | None:
        """Ask the views to show ``rule``'s definition (the editor puts its cursor there; topic
        ``"jump"``); returns the location, None for an unknown rule."""
        where = self.rule_location(rule)
        if where is None:
            raise WorkbenchError(f"no rule {rule!r} in the current grammar")
        self.jump_target = where
        self.emit("jump")
        return where

    # -- the test list ------------------------------------------------------------------

    def set_tests(self, tests: list[GrammarTest]) -> None:
        self.tests = list(tests)
        self.test_outcomes, self.tests_stamp = [], None
        self.emit("tests")

    def add_tests(self, tests: list[GrammarTest]) -> None:
        """Append tests (a string already in the list is not added twice with one expectation)."""
        have = {(t.text, t.expect) for t in self.tests}
        self.set_tests(self.tests + [t for t in tests if (t.text, t.expect) not in have])

    def run_tests(self) -> list[TestOutcome]:
        """Judge every test under the current grammar: our GNF, and XGrammar in its child."""
        compiled = self.require_grammar()
        # each test from its start rule, by both referees (XGrammar with that root_rule_name)
        outcomes = run_tests(compiled, self.tests, xgrammar=self.xgrammar_referee(compiled.text))
        self.test_outcomes, self.tests_stamp = outcomes, self.grammar_stamp
        self.emit("tests")
        return outcomes

    def save_tests(self, path: str | Path) -> Path:
        """Write the test list to ``path``; it names its grammar (a bundled name, or a file's path
        relative to the tests file, so the pair moves together: issue 35.7 found an absolute one)."""
        grammar = self.source if self.source not in (UNTITLED,) else None
        if grammar is not None and grammar not in bundled_grammars():
            target = Path(path).expanduser().absolute()
            try:
                grammar = Path(os.path.relpath(Path(grammar).expanduser().absolute(), target.parent)).as_posix()
            except ValueError:  # another drive (Windows): only an absolute path names it
                pass
        self.tests_path = save_tests(path, self.tests, grammar=grammar)
        self.emit("tests")
        return self.tests_path

    def load_tests(self, path: str | Path) -> list[GrammarTest]:
        tests = load_tests(path)
        self.tests_path = Path(path).expanduser()
        self.set_tests(tests)
        if self.grammar_ok:
            self.run_tests()
        return tests

    @property
    def kind(self) -> str:
        """What the text is: one of :data:`KINDS` (``"ebnf"``, ``"lark"``, ``"json_schema"``...) (``input_kind``, or
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
        self.xgrammar_stamp = Stamp(self.sha_for(text), None)

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
        # Only what was typed: a loaded file or bundled grammar is on disk already, and writing
        # it would replace the draft of the typing it replaced (Undo load brings that back).
        if self.draft_path is None or not text or not (self.edited or self.source == UNTITLED):
            return
        write_draft(self.draft_path, text, kind=self.input_kind, notebook=self.draft_notebook)

    #: which notebook the draft is for (written into it; set by the app)
    draft_notebook = ""
    #: the decoder's prompt (set by the Decoder tab; the export's usage snippet uses it)
    decoder_prompt = ""
    #: the Samples tab's text (set by it; kept with the author's session, see .persisted_session)
    samples_text = ""
    #: the rule the samples are parsed from ("" for the root; the Samples tab's "from rule" picker)
    samples_start = ""

    def rule_names(self) -> list[str]:
        """The rules of the current grammar, root first (what a start-rule picker offers; for a
        schema or a Lark file the rules of the EBNF XGrammar compiles); empty when it has errors."""
        compiled = self.compiled if self.grammar_ok else None
        if compiled is None:
            return []
        root = compiled.ast.root
        return [root] + [name for name in compiled.ast.rules if name != root]

    def grammar_from(self, rule: str = "") -> CompiledGrammar:
        """The current grammar started from ``rule`` ("" or the root: the grammar itself), built once
        per rule and grammar; a :class:`WorkbenchError` names a rule it does not have."""
        compiled = self.require_grammar()
        try:
            return compiled.from_rule(rule or compiled.ast.root)
        except CfgzipError as exc:
            raise WorkbenchError(str(exc)) from None

    def xgrammar_referee(self, text: str):
        """The second referee of :func:`~cfgzip_lab.grammar.testlist.run_tests` for grammar
        ``text``: XGrammar in the child process, from the root or from a test's start rule; None
        (our verdicts alone) when XGrammar refuses or crashes on it (its own panel says why)."""

        def referee(datas: list[bytes], start: str = "root"):
            verdict = self.checker.check(text, datas, root=start)
            return [(m.accepted_bytes, m.complete) for m in verdict.samples] if verdict.ok else None

        return referee

    # -- the lossless check (Verify) ----------------------------------------------------

    def verify(self, *, walks: int = 20, steps: int = 64, seed: int = 0, wait: bool = False) -> Job:
        """Check in the background that the compressed engine masks exactly like plain XGrammar
        with the current classes (:func:`cfgzip_lab.verify.verify_engines`: ``walks`` random
        constrained walks of at most ``steps`` tokens, with rollbacks), with progress per walk and
        Cancel between steps. The report is kept as ``"verify"`` (stamped), topic ``"verify"``."""
        compiled = self.require_grammar()
        if not self.classes_current:
            raise WorkbenchError("no classes for this grammar and tokenizer yet: run classing first")
        vocab, classes, stamp = self.vocab, self.classes, self.stamp

        def work(job: Job):
            from ..engine import compile_engines
            from ..grammar.tag_dispatch import dispatch_triggers
            from ..grammar.token_macros import guide_token_ids
            from ..verify import verify_engines

            job.progress(0, walks, "compiling both engines")
            engines = compile_engines(compiled.text, vocab, classes)
            report = verify_engines(
                engines,
                walks=walks,
                steps=steps,
                seed=seed,
                guides=dispatch_triggers(compiled.ast),  # as cfgzip-lab verify: walks type TagDispatch's tags
                token_guides=guide_token_ids(compiled.gnf, vocab),
                progress=lambda done, total: job.progress(done, total, f"walk {done} of {total}"),
                cancel=lambda: job.cancelled,
            )
            self.keep("verify", report, stamp)
            self.emit("verify")
            return report

        job = self.start_job("verify", work)
        if wait:
            job.wait()
        return job

    # -- vocabulary and classes -------------------------------------------------------

    def load_vocab(self, name: str | None = None):
        from ..vocab_sources import load_vocab

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
        self._stop_live()  # this classing replaces a live one under way
        job = self.start_job("classing", lambda job: self._classing_work(job, compiled, name))
        if wait:
            job.wait()
        return job

    def _classing_work(self, job: Job, compiled: CompiledGrammar, name: str, *, budget_s: float | None = None):
        """What a classing job does (Run classing, and live classes with ``budget_s``): the
        class cache directory first, else classing; the classes become the session's. Returns
        the ClassingResult, the cached TokenClasses, or None when ``budget_s`` ran out (then
        live classing pauses: :attr:`live_last_seconds` says how long it ran)."""
        live = budget_s is not None
        job.progress(0, 0, f"loading the {name} vocabulary")
        started = time.perf_counter()
        vocab = self.load_vocab(name)
        stamp = Stamp(compiled.sha256, name)
        self.record_timing("vocab_load", time.perf_counter() - started, stamp)
        if self.use_class_cache:
            from ..cache.directory import cached_classes_for

            started = time.perf_counter()
            cached = cached_classes_for(compiled, vocab)
            if cached is not None:  # classed before on this machine: no classing now
                with self._lock:
                    if job.cancelled:
                        return None
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
        deadline = None if budget_s is None else started + budget_s
        try:
            # the collector's passes over classing's nodes free nothing (cfgzip_lab._gc)
            with gc_paused():
                result = build_classes(
                    compiled,
                    vocab,
                    progress=lambda done, total: job.progress(done, total, "classing"),
                    cancel=lambda: job.cancelled or (deadline is not None and time.perf_counter() > deadline),
                )
        except InterruptedError:
            if job.cancelled or deadline is None:
                raise
            self._live_over_budget(time.perf_counter() - started)
            return None
        seconds = time.perf_counter() - started
        self.live_last_seconds = seconds  # any classing of this grammar: the next estimate
        if live and seconds > budget_s:  # a classing path that never polls cancel (compiled)
            self._live_over_budget(seconds)
        with self._lock:
            if job.cancelled:  # an edit came while the last tokens were classed: not current
                return None
            # One classing time, reported everywhere (status line, Timings, report): the
            # wall time of build_classes as this job ran it.
            self.record_timing("classing", seconds, stamp)
            result.classes.metadata["classing_seconds"] = round(seconds, 4)  # one number
            self.vocab = vocab
            self.classing = result
            self.classes = result.classes
            self.classes_key = (compiled.sha256, vocab.fingerprint)
            self.classes_stamp = stamp
            self.classes_source = "live classing" if live else "classing"
            self.timings.pop("cache_load", None)
        self.emit("classes")
        if self.use_class_cache:
            from ..cache.directory import store_classes_for

            store_classes_for(compiled, vocab, result.classes)  # the index is added on first native use
        return result

    # -- live classes (issue 18.6) ----------------------------------------------------

    def set_live_classes(self, on: bool) -> LiveDecision | None:
        """Turn live classes on or off (the "live classes" box beside the editor). Turning them
        on forgets a pause (the author asks to try again) and re-classes the current grammar
        now if it needs it; off stops a re-class under way."""
        self.live_enabled = bool(on)
        self.live_last_seconds = None
        if not on:
            self._stop_live()
            self.live_decision = LiveDecision(False, "live classes are off")
            self.emit("live")
            return self.live_decision
        return self._live_now()

    def live_reclass(self, *, wait: bool = False) -> Job | None:
        """Re-class the current grammar now if the live policy allows (what a successful check
        does after the debounce): the job, or None with :attr:`live_decision` saying why not.
        The job stops itself past ``live_policy.budget_s``."""
        with self._live_lock:  # the debounce timer and a click may both ask: one job
            timer, self._live_timer = self._live_timer, None
            if timer is not None:
                timer.cancel()
            compiled = self.compiled if self.grammar_ok else None
            running = self.jobs.get("live classes")
            if running is not None and running.running:
                if compiled is not None and getattr(running, "grammar_sha", None) == compiled.sha256:
                    return running  # already classing this very grammar
                running.cancel()
            busy = next((n for n in ("classing", "decode") if (j := self.jobs.get(n)) is not None and j.running), None)
            decision = self.live_policy.decide(
                enabled=self.live_enabled,
                grammar_ok=compiled is not None,
                classes_current=self.classes_current,
                busy=busy,
                last_seconds=self.live_last_seconds,
            )
            self.live_decision = decision
            job = None
            if decision.run:
                name, budget = self.tokenizer, self.live_policy.budget_s
                job = Job("live classes", lambda job: self._classing_work(job, compiled, name, budget_s=budget), self)
                job.grammar_sha = compiled.sha256
                self.jobs["live classes"] = job
                job.thread.start()
        self.emit("live")
        if job is None:
            return None
        self.emit("job")
        if wait:
            job.wait()
        return job

    def _live_now(self) -> LiveDecision | None:
        job = self.live_reclass()
        return None if job is not None else self.live_decision

    def _schedule_live(self) -> None:
        """After a successful check: re-class ``live_policy.delay_s`` later (debounced: the next
        edit cancels the wait, see :meth:`set_text`)."""
        if not self.live_enabled:
            return
        delay = self.live_policy.delay_s
        if delay <= 0:
            self._guarded_live()
            return
        timer = threading.Timer(delay, self._guarded_live)
        timer.daemon = True
        with self._live_lock:
            old, self._live_timer = self._live_timer, timer
        if old is not None:
            old.cancel()
        timer.start()

    def _guarded_live(self) -> None:
        try:
            self.live_reclass()
        except Exception as exc:  # runs in the debounce timer's thread: never lose the error
            self.record_error("live classes", exc)

    def _stop_live(self) -> None:
        """Cancel a pending live re-class and the one under way (the text changed)."""
        with self._live_lock:
            timer, self._live_timer = self._live_timer, None
        if timer is not None:
            timer.cancel()
        job = self.jobs.get("live classes")
        if job is not None and job.running:
            job.cancel()

    def _live_over_budget(self, seconds: float) -> None:
        self.live_last_seconds = seconds
        self.live_decision = self.live_policy.decide(
            enabled=self.live_enabled, grammar_ok=True, classes_current=False, last_seconds=seconds
        )
        self.emit("live")

    def _record_class_version(self) -> None:
        """Topic "classes": the new classes are a version in :attr:`class_history`."""
        classes, stamp = self.classes, self.classes_stamp
        if classes is None or stamp is None:
            return
        seconds = self.timings.get("classing") if self.is_current(self.timing_stamps.get("classing")) else None
        with self._lock:
            self.class_history.add(
                ClassVersion(
                    stamp.grammar_sha,
                    stamp.tokenizer or "",
                    classes.num_classes,
                    classes.vocab_size,
                    seconds if "classing" in self.classes_source else None,
                    self.classes_source,
                )
            )

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
            self.classes_stamp = Stamp(compiled.sha256, vocab.name)
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
        stamp = Stamp(compiled.sha256, vocab.name)
        self.record_timing("classing", time.perf_counter() - started, stamp)
        self.live_last_seconds = self.timings["classing"]
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
        self._stop_live()
        self.cancel()
