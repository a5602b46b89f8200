# C twin: csrc/cfg_passes.c (productive_nonterminals: tests/test_cfg_passes.py)
"""Dead ends: places where decoding could consume bytes and then never finish, kept exactly.

A rule that derives no string (it matches nothing, like ``[]``, or recurses forever) is
*non-productive*. XGrammar 0.2.8 does not look ahead that far: for ``root ::= "a" [] | "b"``
it allows ``a`` and then nothing, ever (and for ``x ::= "c" x`` any number of ``c``). A plain
normal form would drop every path through such a rule, and the masks would differ at the
first step. So :func:`keep_dead_ends` gives every non-productive nonterminal one more
production, the *dead terminal* (:data:`DEAD`, the empty byte set): it matches no byte, so
no sentence uses it, but it keeps the rule productive, and its paths survive the normal
form. The prefixes the byte CFG then allows are exactly the prefixes XGrammar allows:
decoding may enter a dead end and then nothing more is allowed (no byte, no stop). The
author gets a warning with the place (almost always a mistake: a misspelt class, a rule
without a base case); only a root that derives nothing at all is still refused.

A non-productive symbol is harmless when nothing can be consumed before it on its path
(``root ::= [] | "b"``): then XGrammar offers no byte for that path either. The check,
on the byte CFG (ε = the empty production)::

    PRODUCTIVE := least set with  A ∈ PRODUCTIVE  if some  A → X1…Xn  has every Xi
                  productive (a byte set is productive iff it is not empty)
    NONEMPTY   := least set with  A ∈ NONEMPTY  if some all-productive  A → X1…Xn  has
                  some Xi nonempty (a non-empty byte set is)
    LIVE       := nonterminals reachable from the start through positions whose preceding
                  symbols (in their production) are all productive
    dead end   := a production of a LIVE nonterminal whose first non-productive symbol Xi
                  has a NONEMPTY symbol before it

A counted repetition ``K = X{m,n}`` (``cfg.counted``) has no listed productions; it counts as
the production ``K → X^min`` (all it needs to be productive) plus, when ``max > 0``, the
optional further copies: K is productive iff X is or ``min == 0``, NONEMPTY iff X is and K
is productive, and X is LIVE when K is (a dead end inside X is found there).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._binding import kernel
from .cfg import CFG, ByteSet, Symbol
from .tree import Span

IN_C = True
"""Whether :func:`productive_nonterminals` runs in C (``csrc/cfg_passes.c``) where the kernel is built: the
same set, the Python worklist below its reference (tests/test_cfg_passes.py switches this off to compare)."""

__all__ = ["DEAD", "DeadEnd", "dead_ends", "keep_dead_ends", "productive_nonterminals"]

DEAD = ByteSet(0)
"""The dead terminal: matches no byte (the normal form gives it an atom no byte maps to)."""


@dataclass(frozen=True, slots=True)
class DeadEnd:
    """Production ``index`` of ``nonterminal``: bytes can be consumed before ``symbol``
    (position ``position``), which derives no string."""

    nonterminal: str
    index: int
    position: int
    symbol: Symbol
    span: Span | None

    def describe(self, cfg: CFG) -> str:
        if isinstance(self.symbol, ByteSet):
            what = "an empty character class (it matches no character)"
        else:
            why = (
                "matches nothing"
                if not cfg.rules.get(self.symbol) and self.symbol not in cfg.counted
                else "derives no string (it recurses with no way out)"
            )
            what = f"{cfg.describe_symbol(self.symbol)}, which {why}"
        return (
            f"dead end: after some text, {what}; XGrammar lets decoding go in and never finish there "
            "(cfgzip's masks do the same)"
        )


def productive_nonterminals(cfg: CFG) -> set[str]:
    """PRODUCTIVE (see the module docstring): the nonterminals that derive some string. The
    grammar's language is empty exactly when ``cfg.start`` is not among them.

    The least fixpoint by a worklist: each production waits for its nonterminal occurrences, and
    a nonterminal found productive releases the productions it occurs in (once per occurrence), so
    every production is read twice, where sweeping every rule until nothing changed read the whole
    grammar once per level of nesting (a chain of 800 rules written top-down: 736 ms, now 7 ms).
    The same worklist in C where the kernel is built (:data:`IN_C`): ~0.1 ms of a median MaskBench
    schema's build in Python."""
    if IN_C and kernel is not None and cfg.rules.__class__ is dict and cfg.counted.__class__ is dict:
        return kernel.cfg_productive(cfg.rules, cfg.counted, ByteSet)
    productive: set[str] = set()
    waiting: dict[str, list[int]] = {}  # nonterminal -> productions it occurs in (once per occurrence)
    owner: list[str] = []
    missing: list[int] = []  # per production: occurrences of nonterminals not yet productive
    ready: list[str] = []
    for name, alts in cfg.rules.items():
        counted = cfg.counted.get(name)
        if counted is not None:  # productive when it may repeat zero times, or when its item is
            if counted.min == 0:
                ready.append(name)
            else:
                waiting.setdefault(counted.item, []).append(len(owner))
                owner.append(name)
                missing.append(1)
            continue
        for rhs in alts:
            need = 0
            for symbol in rhs:
                if symbol.__class__ is ByteSet:  # (by class: isinstance was a third of this on a schema)
                    if not symbol.bits:  # the empty class: never
                        need = -1
                        break
                else:
                    need += 1
            if need == 0:
                ready.append(name)
            elif need > 0:
                k = len(owner)
                owner.append(name)
                missing.append(need)
                for symbol in rhs:
                    if symbol.__class__ is not ByteSet:
                        waiting.setdefault(symbol, []).append(k)
    while ready:
        name = ready.pop()
        if name in productive:
            continue
        productive.add(name)
        for k in waiting.pop(name, ()):
            missing[k] -= 1
            if missing[k] == 0 and owner[k] not in productive:
                ready.append(owner[k])
    return productive


def _nonempty(cfg: CFG, productive: set[str]) -> set[str]:
    """The productive nonterminals that derive a non-empty string: through a production of productive
    symbols only with a non-empty one among them (a byte, or a nonterminal found so), or as a counted
    repetition of such an item. The least fixpoint by a worklist, as :func:`productive_nonterminals`."""
    nonempty: set[str] = set()
    waiting: dict[str, list[str]] = {}  # nonterminal -> nonterminals that are non-empty once it is
    ready: list[str] = []
    for name, alts in cfg.rules.items():
        counted = cfg.counted.get(name)
        if counted is not None:
            if name in productive and counted.item in productive:
                waiting.setdefault(counted.item, []).append(name)
            continue
        for rhs in alts:
            # (a symbol is productive when it is a non-empty byte set or a productive nonterminal; checked
            # inline: a generator of calls per symbol was most of this function's time)
            has_bytes = False
            for s in rhs:
                if s.__class__ is ByteSet:
                    if not s.bits:
                        break
                    has_bytes = True
                elif s not in productive:
                    break
            else:
                if has_bytes:  # productive bytes: non-empty now
                    ready.append(name)
                    break
                for symbol in rhs:
                    waiting.setdefault(symbol, []).append(name)
    while ready:
        name = ready.pop()
        if name in nonempty:
            continue
        nonempty.add(name)
        ready.extend(n for n in waiting.pop(name, ()) if n not in nonempty)
    return nonempty


def dead_ends(cfg: CFG, productive: set[str] | None = None) -> list[DeadEnd]:
    """Every dead end of ``cfg`` (see the module docstring), in a deterministic order;
    ``productive`` is :func:`productive_nonterminals` when the caller has it already."""
    if productive is None:
        productive = productive_nonterminals(cfg)
    if _every_symbol_productive(cfg, productive):
        return []  # a dead end needs a non-productive symbol (the usual case: no NONEMPTY, no walk)
    nonempty = _nonempty(cfg, productive)
    found: list[DeadEnd] = []
    live, todo = {cfg.start}, [cfg.start]
    while todo:
        name = todo.pop()
        counted = cfg.counted.get(name)
        if counted is not None and counted.item not in live:
            live.add(counted.item)
            todo.append(counted.item)
        for index, rhs in enumerate(cfg.rules.get(name, ())):
            consumed = False
            for position, symbol in enumerate(rhs):
                # (productive and non-empty, inline: a non-empty byte set is both)
                if isinstance(symbol, ByteSet):
                    if not symbol.bits:
                        if consumed:
                            found.append(_dead_end(cfg, name, index, position, symbol))
                        break
                    consumed = True
                    continue
                if symbol not in live:
                    live.add(symbol)
                    todo.append(symbol)
                if symbol not in productive:
                    if consumed:
                        found.append(_dead_end(cfg, name, index, position, symbol))
                    break
                consumed = consumed or symbol in nonempty
    return sorted(found, key=lambda d: (d.span or (1 << 62, 0), d.nonterminal, d.index))


def _every_symbol_productive(cfg: CFG, productive: set[str]) -> bool:
    """Whether every symbol of every production (and every counted repetition's item) is productive (in C as
    :func:`productive_nonterminals`, this loop its reference)."""
    if IN_C and kernel is not None and cfg.rules.__class__ is dict and cfg.counted.__class__ is dict:
        if productive.__class__ is set:
            return kernel.cfg_every_symbol_productive(cfg.rules, cfg.counted, productive, ByteSet)
    for alts in cfg.rules.values():
        for rhs in alts:
            for s in rhs:
                if s.__class__ is ByteSet:
                    if not s.bits:
                        return False
                elif s not in productive:
                    return False
    return all(counted.item in productive for counted in cfg.counted.values())


def _dead_end(cfg: CFG, name: str, index: int, position: int, symbol: Symbol) -> DeadEnd:
    spans = cfg.symbol_spans.get(name)
    span = spans[index][position] if spans and index < len(spans) else None
    return DeadEnd(name, index, position, symbol, span)


def keep_dead_ends(cfg: CFG, productive: set[str] | None = None) -> list[str]:
    """Give every non-productive nonterminal of ``cfg`` the production ``→ DEAD`` (in place),
    so that the normal form keeps the paths XGrammar lets decoding enter; returns their names.

    A counted repetition ``X{m,n}`` is non-productive only through its item X, which gets the
    production itself. The start must be productive (the caller refuses an empty language).
    """
    if productive is None:
        productive = productive_nonterminals(cfg)
    patched = [name for name in cfg.rules if name not in productive and name not in cfg.counted]
    for name in patched:
        cfg.rules[name].append((DEAD,))
        spans = cfg.symbol_spans.get(name)
        if spans is not None and len(spans) == len(cfg.rules[name]) - 1:
            spans.append((None,))
    return patched
