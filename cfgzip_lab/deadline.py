"""A build's time budget (``../shared/DESIGN.md`` invariant 5): the clock a grammar's build checks, and
the error it raises past it.

The size budgets (the normal form's nodes, classing's DAG cap) bound memory and stop a grammar that
grows; they do not bound a grammar that stays small but takes long (MaskBench's Github_medium o9914
took 56 s to build with every stage under its size budget before its counted families were merged).
:class:`~cfgzip_lab.cache.grammars.GrammarCache` therefore builds under a :class:`Deadline`
(``build_seconds``): the cache checks it between its stages, and so does every stage that can run for
seconds on a large input, inside its loops: a regex's automaton every 1,024 states of each pass
(:data:`~cfgzip_lab.grammar.regex_fsm.STAGE`), the parse and the lowering per rule and every 1,024 edges
of an automaton, the terminal lifting per rule, the rest of the normal form between its steps and in each
round of merging, classing through its ``cancel`` callback (polled between keys of the vocabulary walk
and, at most every 50 ms, from inside a step's unions), and the compressed engine's XGrammar compile that
a grammar without a σ_in index needs before its first request is made in the build, given the time left
(:meth:`Deadline.wait_for`). (A grammar XGrammar serves alone, over the whole vocabulary, has its compile
made in the build too, but not held to this budget: XGrammar would serve it after the same compile.) Past
it the build stops with :class:`BuildBudgetError`, which names the stage and the time spent, instead of a
request waiting as long as the build takes: within ~0.2 s of the budget on MaskBench's aerleon schema (2 cores, load 2.5), which overran it by up to 8 s when the deadline was read
only between stages, and then spent 62 s in XGrammar's compile of its compressed engine. Not covered:
XGrammar's conversion of a JSON Schema (``Grammar.from_json_schema``, ~0.5-3 s on the largest), the
normal form's compiled merging, the σ_in index (0.2-3 s on the largest schemas, load 9).
Unlike the size budgets this one depends on the machine and its load: the same grammar can pass it on
an idle machine and not on a busy one, which is why it is the cache's (a server's) setting and not the
pipeline's default.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import CfgzipError

T = TypeVar("T")

__all__ = ["CHECK_EVERY", "CHECK_MASK", "BuildBudgetError", "Deadline"]

CHECK_EVERY = 1024
"""How often a loop over states or edges reads the deadline (a clock read, ~0.1 µs, against ~1 µs per item
of the passes that use it: a regex's automaton, its lowering). A power of two: ``not i & CHECK_MASK`` is the test."""
CHECK_MASK = CHECK_EVERY - 1


class BuildBudgetError(CfgzipError, TimeoutError):
    """A grammar's build passed its time budget (``GrammarCache(build_seconds=...)``).

    Attributes
    ----------
    budget : float
        The budget, in seconds.
    elapsed : float
        Seconds the build had run when it stopped.
    stage : str
        The stage it stopped in (``"classing"``, ``"the normal form (merging)"``...).
    """

    def __init__(self, budget: float, elapsed: float, stage: str) -> None:
        self.budget, self.elapsed, self.stage = budget, elapsed, stage
        super().__init__(
            f"building this grammar passed its time budget of {budget:g} s: stopped in {stage} after "
            f"{elapsed:.1f} s (GrammarCache(build_seconds=...) sets the budget; None lifts it)"
        )


class Deadline:
    """The clock of one build: ``seconds`` from now.

    Examples
    --------
    >>> deadline = Deadline(30.0)
    >>> deadline.check("classing")      # raises BuildBudgetError once 30 s have passed
    >>> deadline.passed()
    False
    """

    __slots__ = ("budget", "start", "at")

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a build's time budget is a positive number of seconds, not {seconds!r}")
        self.budget = float(seconds)
        self.start = time.perf_counter()
        self.at = self.start + self.budget

    def passed(self) -> bool:
        """Whether the budget is spent (classing's ``cancel`` callback)."""
        return time.perf_counter() > self.at

    def error(self, stage: str) -> BuildBudgetError:
        """The error that says the build stopped in ``stage``."""
        return BuildBudgetError(self.budget, time.perf_counter() - self.start, stage)

    def check(self, stage: str) -> None:
        """Raise :class:`BuildBudgetError` (naming ``stage``) once the budget is spent."""
        if time.perf_counter() > self.at:
            raise self.error(stage)

    def wait_for(self, call: Callable[[], T], stage: str) -> T:
        """``call()``, given the time left: past it :class:`BuildBudgetError` naming ``stage``.

        For a call that reads no clock and releases the GIL (XGrammar's compile: aerleon's took 62 s, over
        931 representatives). It runs in a daemon thread, which cannot be stopped: past the budget it goes
        on in the background and its result is dropped (what it caches on its own stays cached). Its
        exceptions are raised here.
        """
        self.check(stage)
        done = threading.Event()
        box: dict = {}

        def run() -> None:
            try:
                box["value"] = call()
            except BaseException as error:  # raised again in the waiting thread
                box["error"] = error
            finally:
                done.set()

        threading.Thread(target=run, name=f"cfgzip build: {stage}", daemon=True).start()
        if not done.wait(max(0.0, self.at - time.perf_counter())):
            raise self.error(stage)
        if "error" in box:
            raise box["error"]
        return box["value"]
