"""The author's session on disk (issue 35.2): a kernel restart brings the author back to where they were.

A session is what an author builds around one grammar: its text, where it comes from (a file, a
bundled grammar, or ``untitled``) and the text as it was loaded, how it is read (the input kind),
the samples (and the rule they are parsed from), the tests (each with its start rule, and their file), the tokenizer, the decoder's prompt, and whether it was
classed. :class:`SessionStore` keeps it in a per-user state folder (:func:`sessions_dir`:
``$CFGZIP_SESSIONS_DIR``, else ``~/.cache/cfgzip_lab/sessions``, which ``$CFGZIP_CACHE`` moves),
saved a moment after each change (debounced) and at :meth:`SessionStore.close`, each file
written atomically (a crash mid-write keeps the one before).

Two files are written each time:

* the notebook's session (one per notebook path, :func:`~.drafts.notebook_key`): what a fresh
  ``Workbench()`` in a new kernel reads back first;
* the source's session: one per grammar file (keyed by its absolute path), and per notebook one
  for ``untitled`` and one per bundled grammar. Opening a grammar file brings back that file's own
  samples, tests, input kind, tokenizer and prompt, and its unsaved edits when the file on disk is
  still the one they were made on (else the file's text, the edits one "Undo load" away). A source
  with no session yet keeps what the panels show.

A session file that cannot be read is renamed ``<name>.corrupt-<time>`` (kept, never deleted), the
workbench says so in words, and starts as it would without one. No ipywidgets here: the store
drives a :class:`~.session.WorkbenchSession` (topics ``"grammar"``, ``"text"``, ``"source"``,
``"tests"``, ``"classes"``, ``"samples"``, ``"prompt"``; it emits ``"restored"`` after bringing a
session back, for the panels to show the samples and the prompt, and ``"session_note"`` when
:attr:`SessionStore.message` changed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..grammar.testlist import GrammarTest
from ..vocab_sources import vocab_cache_dir

__all__ = [
    "SessionState",
    "SessionStore",
    "sessions_dir",
    "session_key",
    "session_path",
    "read_state",
    "write_state",
    "state_of",
    "apply_state",
    "saved_session",
]

VERSION = 1
UNTITLED = "untitled"


def sessions_dir() -> Path:
    """``$CFGZIP_SESSIONS_DIR``, else ``sessions/`` in the per-user cache (``$CFGZIP_CACHE`` or
    ``~/.cache/cfgzip_lab``)."""
    env = os.environ.get("CFGZIP_SESSIONS_DIR")
    return Path(env).expanduser() if env else vocab_cache_dir() / "sessions"


@dataclass
class SessionState:
    """One author's session, as saved (see the module doc)."""

    text: str
    source: str = UNTITLED
    source_text: str | None = None  # the text as loaded or saved (None: typed, never loaded)
    kind: str = "auto"
    samples: str = ""
    samples_start: str = ""  # the rule the samples are parsed from ("" for the root)
    tests: list[dict[str, Any]] = field(default_factory=list)
    tests_path: str | None = None
    tokenizer: str = "smollm2"
    prompt: str = ""
    classed: bool = False  # classes for this text and tokenizer existed (a restart reads them from the cache)
    saved_at: float = 0.0
    notebook: str = ""

    def grammar_tests(self) -> list[GrammarTest]:
        names = {f.name for f in dataclasses.fields(GrammarTest)}
        return [GrammarTest(**{k: v for k, v in t.items() if k in names}) for t in self.tests]

    def describe(self) -> str:
        """``"robot.ebnf, 2 tests, 3 samples, saved 2026-12-06 20:41"``."""
        from .samples import split_samples

        name = self.source if self.source == UNTITLED else Path(self.source).name
        samples = len(split_samples(self.samples)) if self.samples.strip() else 0
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved_at)) if self.saved_at else "at an unknown time"
        return (
            f"{name}, {len(self.tests)} test{'s' * (len(self.tests) != 1)}, "
            f"{samples} sample{'s' * (samples != 1)}, saved {when}"
        )

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, **dataclasses.asdict(self)}, ensure_ascii=False, indent=1)

    @classmethod
    def from_data(cls, data: Any) -> SessionState:
        """Raises ValueError (with what is wrong) for anything but a session written by :meth:`to_json`."""
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise ValueError("not a workbench session (no grammar text)")
        if data.get("version", VERSION) > VERSION:
            raise ValueError(f"written by a newer cfgzip_lab (session version {data['version']})")
        names = {f.name for f in dataclasses.fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in names})
        if not isinstance(state.tests, list) or not all(isinstance(t, dict) for t in state.tests):
            raise ValueError("its tests are not a list of tests")
        state.grammar_tests()  # an unknown expectation raises here, not later in a panel
        return state


def is_file_source(source: str) -> bool:
    """A grammar file's path (not ``untitled``, not a bundled grammar's name)."""
    from ..pipeline import bundled_grammars

    return source != UNTITLED and source not in bundled_grammars()


def session_key(source: str, notebook: str) -> str:
    """A grammar file's session is the file's (any notebook opening it finds it); ``untitled`` and a
    bundled grammar have one per notebook."""
    if is_file_source(source):
        return "file:" + str(Path(source).expanduser().resolve())
    return f"notebook:{notebook}:{source}"


def session_path(folder: Path, key: str) -> Path:
    """``<folder>/<readable stem>-<hash of key>.json``."""
    tail = key.rsplit(":", 1)[-1] if key.startswith("notebook:") else Path(key.removeprefix("file:")).name
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", tail)[:40] or "session"
    return folder / f"{stem}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}.json"


def write_state(path: Path, state: SessionState) -> bool:
    """Write ``state`` to ``path`` atomically; False if it could not be written (never raises:
    saving a session must not fail an action)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(state.to_json(), encoding="utf-8")
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def read_state(path: Path) -> tuple[SessionState | None, str]:
    """The session at ``path`` and a message. No file: ``(None, "")``. A file that cannot be read
    as a session is renamed ``<name>.corrupt-<time>`` (kept for the author) and the message says
    so: ``(None, "the saved session … could not be read (…); it is kept as …")``."""
    if not path.is_file():
        return None, ""
    try:
        return SessionState.from_data(json.loads(path.read_text(encoding="utf-8"))), ""
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.replace(path, aside)
            kept = f"it is kept as {aside}"
        except OSError:
            kept = f"it stays at {path}"
        return None, f"the saved session {path} could not be read ({exc}); {kept}, and nothing in it was used"


def state_of(session, notebook: str = "") -> SessionState:
    """What a :class:`~.session.WorkbenchSession` holds now, as a session to save."""
    return SessionState(
        text=session.text,
        source=session.source,
        source_text=session.source_text,
        kind=session.input_kind,
        samples=getattr(session, "samples_text", ""),
        samples_start=getattr(session, "samples_start", ""),
        tests=[dataclasses.asdict(t) for t in session.tests],
        tests_path=str(session.tests_path) if session.tests_path else None,
        tokenizer=session.tokenizer,
        prompt=session.decoder_prompt,
        classed=bool(session.classes is not None and session.classes_current),
        saved_at=time.time(),
        notebook=notebook,
    )


def apply_state(session, state: SessionState, *, text: bool = True) -> None:
    """Bring ``state`` back into ``session`` (``text=False``: everything but the text and its
    provenance). Emits ``"tests"`` and ``"restored"``."""
    if text:
        session.text = state.text
        session.source = state.source
        session.source_text = state.source_text
    if state.kind == "auto" or state.kind in _kinds():
        session.input_kind = state.kind
    session.samples_text = state.samples
    session.samples_start = state.samples_start if isinstance(state.samples_start, str) else ""
    session.tokenizer = state.tokenizer or session.tokenizer
    session.decoder_prompt = state.prompt
    session.tests_path = Path(state.tests_path) if state.tests_path else None
    session.set_tests(state.grammar_tests())


def saved_session(notebook: str, folder: str | Path | None = None) -> tuple[SessionState | None, str]:
    """The session saved for ``notebook`` and a message (see :func:`read_state`): what a new
    ``Workbench()`` brings back."""
    folder = Path(folder).expanduser() if folder else sessions_dir()
    return read_state(session_path(folder, f"notebook:{notebook}"))


def _kinds() -> tuple[str, ...]:
    from ..grammar.sources import KINDS

    return tuple(KINDS)


class SessionStore:
    """Keeps ``session`` on disk as the author's session of ``notebook`` (see the module doc).

    ``delay``: seconds after the last change before it is written (0: at once)."""

    def __init__(self, session, notebook: str, folder: str | Path | None = None, *, delay: float = 1.0) -> None:
        self.session = session
        self.notebook = notebook
        self.folder = Path(folder).expanduser() if folder else sessions_dir()
        self.delay = delay
        self.message = ""  # the last thing worth telling the author (restored, kept aside, …)
        self.saves = 0
        self._key = session_key(session.source, notebook)
        self._timer: threading.Timer | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._bringing_back = False

    @property
    def notebook_path(self) -> Path:
        return session_path(self.folder, f"notebook:{self.notebook}")

    @property
    def source_path(self) -> Path:
        return session_path(self.folder, self._key)

    # -- restore -------------------------------------------------------------------------

    def adopt(self, state: SessionState) -> None:
        """``state`` was brought back into the session: its key is the current one."""
        self._key = session_key(self.session.source, self.notebook)
        self.message = f"session restored ({state.describe()})"

    # -- saving --------------------------------------------------------------------------

    def attach(self) -> SessionStore:
        """Save after every change of the session (subscribes to its topics)."""
        s = self.session
        for topic in ("grammar", "tests", "classes", "samples", "prompt"):
            s.on(topic, self.changed)
        s.on("source", self._on_source)
        s.on("text", self._on_text)
        return self

    def changed(self) -> None:
        """Something changed: save ``delay`` seconds from now (a later change restarts the wait)."""
        if self._closed:
            return
        if self.delay <= 0:
            self.save()
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.delay, self.save)
            self._timer.daemon = True
            self._timer.start()

    def save(self, state: SessionState | None = None) -> bool:
        """Write the session now: the notebook's file and its source's file."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            state = state or state_of(self.session, self.notebook)
            ok = write_state(self.notebook_path, state)
            ok = write_state(self.source_path, state) and ok
            self.saves += ok
            return ok

    def flush(self) -> None:
        """Write a pending save now."""
        with self._lock:
            pending = self._timer is not None
        if pending:
            self.save()

    def close(self) -> None:
        self.flush()
        self._closed = True

    # -- another source ------------------------------------------------------------------

    def _on_source(self) -> None:
        """Saved under another name (Save as): the session goes with the text to its new key."""
        self._key = session_key(self.session.source, self.notebook)
        self.changed()

    def _on_text(self) -> None:
        """A load replaced the text. Another source: the session before is saved under its own
        key, and the new source's session (if it has one) comes back."""
        s = self.session
        key = session_key(s.source, self.notebook)
        if key == self._key:
            if self.message and not self._bringing_back:  # said of the load before (then Undo load)
                self.message = ""
                s.emit("session_note")
            self.changed()
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            before = state_of(s, self.notebook)
            if s.previous_text is not None and s._previous_source is not None:
                before.text = s.previous_text
                before.source, before.source_text = s._previous_source
                write_state(self.source_path, before)
            self._key = key
        state, self.message = read_state(self.source_path)
        if state is not None:
            self._bring_back(state)
            s.emit("restored")
        s.emit("session_note")
        self.save()

    def _bring_back(self, state: SessionState) -> None:
        s = self.session
        apply_state(s, state, text=False)
        edited = state.source_text is not None and state.text != state.source_text
        self.message = f"this grammar's session is back ({state.describe()})"
        if not edited or s.text == state.text:  # nothing unsaved, or the edits are on screen (Undo load)
            return
        if state.source_text == s.text:  # the file is as the edits found it: bring them back
            self.message += ", with its unsaved edits"
            s.text = state.text
            self._bringing_back = True
            try:
                s.emit("text")  # the editor shows them
            finally:
                self._bringing_back = False
        else:  # the file changed on disk since: its text wins, the edits are one "Undo load" away
            s.previous_text = state.text  # edits of the file as it was then: "(edited)" when brought back
            s._previous_source = (s.source, state.source_text)
            self.message += (
                "; the file changed on disk since its unsaved edits were made: "
                "they are kept, press Undo load to bring them back"
            )
