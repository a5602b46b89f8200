"""Live classes as you type (issue 18.6): when the workbench re-classes by itself, and what changed.

After each successful check the workbench re-classes the vocabulary under the new grammar in
the background, so the class count and the compression ratio beside the editor follow the
typing, with how they moved since the last version ("+12 classes"). This module is the pure
part of it: no threads, no widgets, no classing. The session (``cfgzip_lab.widgets.session``)
owns the debounce timer and the job; it asks :meth:`LivePolicy.decide` whether to start one and
keeps a :class:`ClassHistory` of the versions it classed.

Why a budget: re-classing is only "live" while it is short. Measured as the workbench re-classes
(an edit, a fresh compile, no cache; SmolLM2's 49,152 tokens, 2 cores): with the Python classing
(the reference, and the fallback without a C compiler), at load ~10: json 0.40-0.50 s, xml
0.75-0.86 s, sql_select 1.05 s, c_like and bython past 1 s (cut at 1.16-1.26 s); with the compiled
classing (cfgzip_lab.grammar.compiled_words, where the C kernel is built), at load ~8: json 0.01 s, xml 0.02 s,
sql_select 0.03-0.08 s, c_like 0.07-0.08 s, bython 0.07 s. So a re-class runs under a time budget (:attr:`LivePolicy.budget_s`, 1 s): past it the job
stops itself (classing polls its cancel flag every 2,048 byte-class strings, ~40 ms here) and
live classing pauses for this grammar, saying why, until a classing of it is quick again (a
Run classing that finishes within the budget, a compiled classing that landed, a new file
loaded) or the author turns live classes off and on. Nothing is guessed from the grammar's
size: the last classing of the grammar being edited is the estimate, since an edit rarely
changes the cost much. A classing path that ignores the cancel flag (a compiled one) is still
timed afterwards, so a slow run pauses live classing all the same.

>>> h = ClassHistory()
>>> h.add(ClassVersion("aa", "smollm2", classes=143, vocab_size=49152, seconds=0.2))
>>> h.add(ClassVersion("bb", "smollm2", classes=155, vocab_size=49152, seconds=0.2))
>>> h.delta().describe()
'+12 classes (143 → 155), compression 343.7× → 317.1×'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ClassVersion", "ClassDelta", "ClassHistory", "LiveDecision", "LivePolicy", "LIVE_BUDGET_S", "LIVE_DELAY_S"]

LIVE_BUDGET_S = 1.0  # seconds a live re-class may take (issue 18.6: "only while it stays under ~1 s")
LIVE_DELAY_S = 0.5  # seconds after a successful check before re-classing (a new check restarts it)


@dataclass(frozen=True, slots=True)
class ClassVersion:
    """The classes of one grammar version: what the line beside the editor shows.

    ``grammar_sha``: sha256 of the EBNF the engines compile; ``seconds``: the classing time
    (None when the classes came from a cache or elsewhere without classing)."""

    grammar_sha: str
    tokenizer: str
    classes: int
    vocab_size: int
    seconds: float | None = None
    source: str = "classing"

    @property
    def ratio(self) -> float:
        """Compression: tokens per class (``TokenClasses.compression_ratio``)."""
        return self.vocab_size / max(1, self.classes)


@dataclass(frozen=True, slots=True)
class ClassDelta:
    """How the classes moved from one version to the next (same tokenizer)."""

    before: ClassVersion
    after: ClassVersion

    @property
    def classes(self) -> int:
        return self.after.classes - self.before.classes

    @property
    def ratio(self) -> float:
        return self.after.ratio - self.before.ratio

    def describe(self) -> str:
        """``+12 classes (143 → 155), compression 343.7× → 317.1×``; ``no change (155 classes)``."""
        if self.classes == 0:
            return f"no change ({self.after.classes:,} classes)"
        return (
            f"{self.classes:+,} classes ({self.before.classes:,} → {self.after.classes:,}), "
            f"compression {self.before.ratio:,.1f}× → {self.after.ratio:,.1f}×"
        )


class ClassHistory:
    """The grammar versions classed in a session, newest last, at most ``keep`` of them.

    Classing the same grammar and tokenizer again (a cache hit, a manual Run classing after a
    live one) replaces the newest entry instead of adding a version, so "since the last
    version" always compares two different grammars."""

    def __init__(self, versions: Iterable[ClassVersion] = (), *, keep: int = 50) -> None:
        self.keep = keep
        self.versions: list[ClassVersion] = []
        for v in versions:
            self.add(v)

    def add(self, version: ClassVersion) -> None:
        last = self.versions[-1] if self.versions else None
        if last is not None and (last.grammar_sha, last.tokenizer) == (version.grammar_sha, version.tokenizer):
            self.versions[-1] = version
        else:
            self.versions.append(version)
        del self.versions[: -self.keep]

    @property
    def latest(self) -> ClassVersion | None:
        return self.versions[-1] if self.versions else None

    def delta(self) -> ClassDelta | None:
        """The newest version against the version before it, or None when there is none to
        compare with (the first version, or the one before was for another tokenizer)."""
        if len(self.versions) < 2:
            return None
        before, after = self.versions[-2], self.versions[-1]
        if before.tokenizer != after.tokenizer:
            return None
        return ClassDelta(before, after)

    def clear(self) -> None:
        self.versions.clear()

    def __len__(self) -> int:
        return len(self.versions)


@dataclass(frozen=True, slots=True)
class LiveDecision:
    """Whether to re-class now; ``reason`` says why not (shown beside the editor)."""

    run: bool
    reason: str = ""
    paused: bool = False  # skipped because the last classing was too slow (not merely busy)


@dataclass
class LivePolicy:
    """When the workbench re-classes by itself (see the module doc for the numbers).

    ``budget_s``: the time a live re-class may take (its job stops past it); ``delay_s``: the
    debounce after a successful check."""

    budget_s: float = LIVE_BUDGET_S
    delay_s: float = LIVE_DELAY_S

    def decide(
        self,
        *,
        enabled: bool,
        grammar_ok: bool,
        classes_current: bool,
        busy: str | None = None,
        last_seconds: float | None = None,
    ) -> LiveDecision:
        """Re-class now? ``busy``: the name of a job that must not share the CPU with it (a
        classing or a decode run); ``last_seconds``: what the last classing of the grammar
        being edited took (None: not classed since it was loaded)."""
        if not enabled:
            return LiveDecision(False, "live classes are off")
        if not grammar_ok:
            return LiveDecision(False, "the grammar has errors")
        if classes_current:
            return LiveDecision(False, "the classes are current")
        if busy:
            return LiveDecision(False, f"waiting: {busy} is running")
        if last_seconds is not None and last_seconds > self.budget_s:
            return LiveDecision(
                False,
                f"paused: classing this grammar ran past the {self.budget_s:g} s budget (the last "
                f"one took {last_seconds:.2f} s); Run classing (Classes tab) classes it anyway",
                paused=True,
            )
        return LiveDecision(True)
