"""XGrammar's automaton for a ``Regex(...)``, built state for state as its C++ builds it.

XGrammar does not match a regex by the textbook meaning of its operators: ``RegexIR::Build``
(``cpp/fsm_builder.cc`` of the 0.2.8 and 0.2.9 sdists) composes a byte NFA with the operations of
``FSMWithStartEnd`` (``cpp/fsm.cc``), and those have quirks that change the language:

- ``X?`` adds one ε-edge from X's start to its *lowest-numbered* end state. When that end
  state has edges of its own (``X = a+b*``: the end is the ``b*`` loop; ``X = (\\.\\d+)``:
  the end loops back into ``\\d``), ``X?`` also matches what can be read from there:
  ``(a+b*)?`` matches ``b``, ``(\\.\\d+)?`` matches ``5``, ``(a{2,3})?`` matches ``a``.
- ``X{n,m}`` (bounds up to 128) is unrolled: copies of X, the ends of copies n..m accepting;
  ``X{n,}`` loops from the ends of copy n back to the lowest end of copy n-1.
- Bounds above 128 (``{n,m}`` with m > 128, ``{n,}`` with n > 128) become a *sub-rule*
  (the sub-pattern's text, ``(?i)`` kept, compiled as its own ``Regex``) behind a counted
  repeat edge. Up to 0.2.8 that sub-rule is compiled **without** ``json_string``: under
  ``json_string=true``, ``.{0,200}`` matches ``"`` while ``.{0,100}`` does not. From 0.2.9
  the sub-rule inherits the flag (``ParseRegexToIR``'s ``json_string`` argument), so neither
  does; :func:`subrule_keeps_json_string` follows the installed release.
- The matcher runs a repeat edge ``s -Repeat-> t`` with a counter and stands on ``s`` after each
  pass, where ``s``'s other edges and its being final stay open: ``|(?:ab){0,199}c`` matches
  ``ab`` and ``a(?:b{0,200}|c)d`` matches ``abcd`` (both releases;
  :func:`repeat_returns_to_source`).
- Classes and ``.`` become UTF-8 byte edges through ``AddPackedUTF8RangeEdges``, whose
  length boundaries are ``E0 80 80`` and ``F0 80 80 80``: a class that spans several UTF-8
  lengths (``.``, ``[^a]``, ``\\D``) also matches the overlong three- and four-byte forms
  (``E0 80 80``), while ``[\\u0800-\\uffff]`` does not.
- ``json_string=true`` removes the bytes 00-1F, ``"`` and ``\\`` from every byte edge of the
  finished automaton (``BuildWithForbiddenChars``) and prunes nothing.
- Every ``Regex`` is a rule of its own in XGrammar (its parser lifts one that stands among
  other elements into a new rule, and no pass inlines it back), and every rule's automaton
  goes through ``SimplifyEpsilon`` and ``MergeEquivalentStates``: local merge heuristics
  that do not always keep the language. ``(a{0,2}|a)`` becomes ``a*``: a state is merged
  with a sibling (same single predecessor, same labels) and, in the same union-find round,
  that sibling with every other final state without successors.

So this module mirrors all of it, step for step and state for state where it matters (the
IR the parser in :mod:`.regex` builds, the composition operators, the UTF-8 splitting, the
unrolling and its state cap, the sub-rules, the forbidden bytes, the rule automaton and
both merge passes), then hands the result to the lowering as a :class:`~.tree.Automaton`:
ε-edges removed by closure and useless states dropped, which keeps the language.
``tests/test_regex_fsm.py`` checks it against the automata the installed binary prints
(``xgrammar.testing._print_grammar_fsms``), as languages, decided exactly: on every
``Regex`` of the shared corpora, on a table of quirks, and on random patterns (60 in CI,
25,000 by hand); the three real-world mismatches of issue 17 were all the ``X?`` quirk.
Measured (2 cores, load ~12): 0.01 s for a schema pattern such as jsb_0172's (85 states),
2.9 s for ``(.{30}){128}`` (19,201 states, near XGrammar's unrolling cap).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..deadline import CHECK_MASK
from .tree import Automaton, Expr, Repeat, Span

if TYPE_CHECKING:
    from ..deadline import Deadline

__all__ = [
    "Leaf",
    "Quantified",
    "Union",
    "Bracket",
    "Repetition",
    "RepeatSubrule",
    "SubruleRef",
    "Node",
    "RegexBuildError",
    "LARGE_REPEAT_THRESHOLD",
    "MAX_UNROLLED_REPEAT_STATES",
    "JSON_STRING_FORBIDDEN_BYTES",
    "subrule_keeps_json_string",
    "repeat_returns_to_source",
    "is_nullable",
    "build",
]

#: ``kLargeRepeatThreshold``: bounds above it become a sub-rule with a counted repeat edge.
LARGE_REPEAT_THRESHOLD = 128
#: ``kMaxUnrolledRepeatStates``: an unrolled repetition of more states is an error.
MAX_UNROLLED_REPEAT_STATES = 100_000
#: ``GrammarFSMBuilder::JSONStringForbiddenChars``: bytes json_string removes from every edge.
JSON_STRING_FORBIDDEN_BYTES = frozenset([*range(0x20), 0x22, 0x5C])

#: The stage a build's :class:`~cfgzip_lab.deadline.Deadline` names when it runs out in here. The passes
#: below check it every :data:`~cfgzip_lab.deadline.CHECK_EVERY` states, so a pattern such as ``(.{1,63}\.){1,127}`` (88,000 states, 3.8 s idle, 10 s
#: under load) stops within a fraction of a second of the budget instead of when its automaton is done.
STAGE = "the front end (a regex's automaton)"


def subrule_keeps_json_string() -> bool:
    """Whether a large repetition's sub-rule is compiled with the pattern's ``json_string``: from
    XGrammar 0.2.9 (``builder->AddRegex(inner_regex, json_string)``); 0.2.8 compiles it without.
    Asked only when a pattern has one, so reading the version costs nothing elsewhere."""
    from .. import xgrammar_version  # importlib.metadata: ~60 ms, paid only here

    return xgrammar_version.at_least("0.2.9")


Ranges = tuple[tuple[int, int], ...]

# ---- the IR (RegexIR's node kinds) -------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Leaf:
    """One atom: a set of code points (a character, an escape, ``.``, a class), or ε when None."""

    ranges: Ranges | None
    span: Span = (0, 0)  # offsets in the pattern, for messages


@dataclass(frozen=True, slots=True, eq=False)
class Quantified:
    """``X*``, ``X+`` or ``X?`` (``op`` is the character); lazy forms are the same node."""

    op: str
    child: Node


@dataclass(frozen=True, slots=True, eq=False)
class Union:
    """``A|B|...``: each branch a :class:`Bracket`."""

    branches: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Bracket:
    """A sequence (a group, a branch, the whole pattern); empty is ε."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Repetition:
    """``X{lo,hi}`` unrolled (hi None: no upper bound); ``span`` is the repetition's text."""

    child: Node
    lo: int
    hi: int | None
    span: Span = (0, 0)


@dataclass(frozen=True, slots=True, eq=False)
class RepeatSubrule:
    """A large ``X{lo,hi}``: X compiled as a sub-rule, repeated by a counter (json_string: see
    :func:`subrule_keeps_json_string`)."""

    child: Node
    lo: int
    hi: int


@dataclass(frozen=True, slots=True, eq=False)
class SubruleRef:
    """One reference to the sub-rule of a large ``X{n,}`` (its ``X*`` tail)."""

    sub: RepeatSubrule


Node = Leaf | Quantified | Union | Bracket | Repetition | RepeatSubrule | SubruleRef


def is_nullable(node: Node) -> bool:
    """``RegexIR::IsNullable``: syntactic, as XGrammar decides it (it relaxes large repeats)."""
    if isinstance(node, Leaf):
        return node.ranges is None
    if isinstance(node, Quantified):
        return node.op != "+" or is_nullable(node.child)
    if isinstance(node, Union):
        return any(is_nullable(b) for b in node.branches)
    if isinstance(node, Bracket):
        return all(is_nullable(i) for i in node.items)
    if isinstance(node, Repetition):
        return node.lo == 0 or is_nullable(node.child)
    if isinstance(node, RepeatSubrule):
        return node.lo == 0
    return False  # SubruleRef: a rule reference


class RegexBuildError(Exception):
    """XGrammar cannot build the automaton (an unrolled repetition past its state cap)."""

    def __init__(self, message: str, span: Span, *, refused: bool = False) -> None:
        super().__init__(message)
        self.message, self.span, self.refused = message, span, refused


# ---- the automaton (FSMWithStartEnd) -----------------------------------------------------------

# Edge kinds, with XGrammar's codes (``FSMEdge::EdgeType``) so that edges sort as they do there.
EPSILON = -1  # ε; hi is 0
RULE = -2  # a reference to a sub-rule; hi is the sub-rule's key (its creation order)
REPEAT = -4  # a counted repeat of a sub-rule; hi indexes ``subs`` (one entry per edge copy)


class _FSM:
    """Edges ``(lo, hi, target)`` per state in insertion order; byte ranges have ``lo >= 0``.

    ``ends`` stays sorted and duplicate-free, as XGrammar keeps it: ``Optional`` and the
    ``{n,}`` loop pick ``ends[0]``, the lowest-numbered end state. ``subs`` holds the
    :class:`~.tree.Repeat` read by each REPEAT edge (XGrammar's ``edge_aux_data``).
    """

    __slots__ = ("edges", "start", "ends", "subs")

    def __init__(self, num_states: int = 0, start: int = 0, ends: list[int] | tuple[int, ...] = ()) -> None:
        self.edges: list[list[tuple[int, int, int]]] = [[] for _ in range(num_states)]
        self.start = start
        self.ends: list[int] = sorted(set(ends))
        self.subs: list[Expr] = []

    def num_states(self) -> int:
        return len(self.edges)

    def add_state(self) -> int:
        self.edges.append([])
        return len(self.edges) - 1

    def add_edge(self, source: int, target: int, lo: int, hi: int) -> None:
        self.edges[source].append((lo, hi, target))

    def add_epsilon(self, source: int, target: int) -> None:
        self.edges[source].append((EPSILON, 0, target))

    def add_end(self, state: int) -> None:
        if state not in self.ends:
            self.ends.append(state)
            self.ends.sort()

    def copy(self) -> _FSM:
        out = _FSM(0, self.start, self.ends)
        out.edges = [list(e) for e in self.edges]
        out.subs = list(self.subs)
        return out

    def append(self, other: _FSM) -> int:
        """``FSM::AddFSM``: other's states after ours; returns the offset of its states."""
        offset, sub_offset = len(self.edges), len(self.subs)
        self.subs += other.subs
        if other.subs:
            self.edges += [
                [(lo, hi + sub_offset if lo == REPEAT else hi, t + offset) for lo, hi, t in edges]
                for edges in other.edges
            ]
        else:
            self.edges += [[(lo, hi, t + offset) for lo, hi, t in edges] for edges in other.edges]
        return offset


def _star(f: _FSM) -> _FSM:
    g = f.copy()
    new_start = g.add_state()
    for end in f.ends:
        g.add_epsilon(end, new_start)
    g.add_epsilon(new_start, f.start)
    g.start, g.ends = new_start, [new_start]
    return g


def _plus(f: _FSM) -> _FSM:
    g = f.copy()
    for end in f.ends:
        g.add_epsilon(end, f.start)
    return g


def _optional(f: _FSM) -> _FSM:
    g = f.copy()
    if f.ends:
        g.add_epsilon(f.start, f.ends[0])  # XGrammar: ends_.front(), not a fresh accepting state
    return g


def _union(fsms: list[_FSM]) -> _FSM:
    if len(fsms) == 1:
        return fsms[0]
    g = _FSM(1, 0)
    ends: list[int] = []
    for f in fsms:
        offset = g.append(f)
        g.add_epsilon(0, offset + f.start)
        ends += [offset + e for e in f.ends]
    g.ends = sorted(set(ends))
    return g


def _concat(fsms: list[_FSM]) -> _FSM:
    if len(fsms) == 1:
        return fsms[0]
    g = _FSM(0)
    previous: list[int] = []
    for i, f in enumerate(fsms):
        offset = g.append(f)
        if i == 0:
            g.start = offset + f.start
        else:
            for end in previous:
                g.add_epsilon(end, offset + f.start)
        previous = [offset + e for e in f.ends]
    g.ends = sorted(set(previous))
    return g


def _concat_into(result: _FSM, child: _FSM) -> None:
    """``result = Concat({result, child})`` in place: the same states, numbering and edges
    (Concat copies ``result`` first, so its states keep their numbers), without the copy
    that makes unrolling ``X{n}`` quadratic."""
    previous = result.ends
    offset = result.append(child)
    for end in previous:
        result.add_epsilon(end, offset + child.start)
    result.ends = sorted(offset + e for e in child.ends)


def _epsilon_only() -> _FSM:
    return _FSM(1, 0, [0])


# ---- UTF-8 byte edges (AddCodepointRangesToFSM and the packed-range helpers) ------------------

_MAX_1 = 0x7F
_MIN_2, _MAX_2 = 0xC080, 0xDFBF
_MIN_3, _MAX_3 = 0xE08080, 0xEFBFBF  # E0 80 80: overlong forms are inside XGrammar's range
_MIN_4, _MAX_4 = 0xF0808080, 0xF7BFBFBF


def _packed(cp: int) -> int:
    """``CodepointToPackedUTF8``: the UTF-8 bytes of ``cp`` as one big-endian integer."""
    return int.from_bytes(chr(cp).encode("utf-8", "surrogatepass"), "big")


def _same_length(f: _FSM, source: int, target: int, lo: int, hi: int) -> None:
    """``AddSameLengthCharacterRange``: packed ``lo..hi`` of one length, byte by byte."""
    b_lo = [(lo >> (8 * k)) & 0xFF for k in range(4)]
    b_hi = [(hi >> (8 * k)) & 0xFF for k in range(4)]
    if b_hi[1] == 0:
        f.add_edge(source, target, b_lo[0], b_hi[0])
        return
    k = 3 if b_hi[3] else 2 if b_hi[2] else 1  # index of the lead byte
    rest_mask = (1 << (8 * k)) - 1
    rest_min = int.from_bytes(b"\x80" * k, "big")
    rest_max = int.from_bytes(b"\xbf" * k, "big")
    if b_hi[k] == b_lo[k]:
        t = f.add_state()
        f.add_edge(source, t, b_lo[k], b_hi[k])
        _same_length(f, t, target, lo & rest_mask, hi & rest_mask)
        return
    first, last = b_lo[k], b_hi[k]
    if lo & rest_mask != rest_min:
        t = f.add_state()
        f.add_edge(source, t, first, first)
        _same_length(f, t, target, lo & rest_mask, rest_max)
    else:
        first -= 1
    if hi & rest_mask != rest_max:
        t = f.add_state()
        f.add_edge(source, t, last, last)
        _same_length(f, t, target, rest_min, hi & rest_mask)
    else:
        last += 1
    if last - first > 1:
        state = f.add_state()
        f.add_edge(source, state, first + 1, last - 1)
        for _ in range(k - 1):
            nxt = f.add_state()
            f.add_edge(state, nxt, 0x80, 0xBF)
            state = nxt
        f.add_edge(state, target, 0x80, 0xBF)


def _packed_range(f: _FSM, source: int, target: int, lo: int, hi: int) -> None:
    """``AddPackedUTF8RangeEdges``: clamp, then split at XGrammar's (overlong) length bounds."""
    if hi > _MAX_4:
        hi = _MAX_4
    elif hi > _MAX_3:
        hi = _MAX_3 if hi < _MIN_4 else hi
    elif hi > _MAX_2:
        hi = _MAX_2 if hi < _MIN_3 else hi
    elif _MAX_1 < hi < _MIN_2:
        hi = _MAX_1
    if lo > _MAX_4:
        lo = _MAX_4
    elif lo > _MAX_3:
        lo = _MIN_4 if lo < _MIN_4 else lo
    elif lo > _MAX_2:
        lo = _MIN_3 if lo < _MIN_3 else lo
    elif _MAX_1 < lo < _MIN_2:
        lo = _MIN_2
    bounds = [(0, _MAX_1), (_MIN_2, _MAX_2), (_MIN_3, _MAX_3), (_MIN_4, _MAX_4)]
    for low, high in bounds:
        a, b = max(lo, low), min(hi, high)
        if a <= b:
            _same_length(f, source, target, a, b)


def _add_code_points(f: _FSM, source: int, target: int, ranges: Ranges) -> None:
    """``AddCodepointRangesToFSM``: ASCII as one edge, the rest through the packed helper."""
    for lo, hi in ranges:
        if lo <= _MAX_1:
            f.add_edge(source, target, lo, min(hi, _MAX_1))
        if hi > _MAX_1:
            _packed_range(f, source, target, _packed(max(lo, _MAX_1 + 1)), _packed(hi))


# ---- RegexIR::Build ------------------------------------------------------------------------------


@dataclass
class _Builder:
    """Builds nodes into FSMs; sub-rules become :class:`~.tree.Automaton` s (built once each)."""

    span: Span | None
    pattern: str
    json_string: bool = False  # the pattern's flag; sub-rules take it from 0.2.9
    keep_dead: bool = False  # keep a sub-rule's dead-end states (see :func:`to_automaton`)
    deadline: Deadline | None = None  # the build's time budget, checked per unrolled copy and in each pass
    keys: dict[int, int] = field(default_factory=dict)  # id(RepeatSubrule) → sub-rule key
    rules: dict[int, Automaton] = field(default_factory=dict)  # sub-rule key → its automaton
    rule_fsms: list[_FSM] = field(default_factory=list)  # every sub-rule's raw rule automaton

    def build(self, node: Node) -> _FSM:
        if isinstance(node, Leaf):
            if node.ranges is None:
                return _epsilon_only()
            f = _FSM(1, 0)
            end = f.add_state()
            _add_code_points(f, 0, end, node.ranges)
            f.add_end(end)
            return f
        if isinstance(node, Quantified):
            child = self.build(node.child)
            return {"*": _star, "+": _plus, "?": _optional}[node.op](child)
        if isinstance(node, Union):
            return _union([self.build(b) for b in node.branches])
        if isinstance(node, Bracket):
            if not node.items:
                return _epsilon_only()
            return _concat([self.build(i) for i in node.items])
        if isinstance(node, Repetition):
            return self.repetition(node)
        if isinstance(node, RepeatSubrule):
            # Padded with ε on both sides, as XGrammar pads its repeat edge.
            f = _FSM(4, 0, [3])
            f.add_epsilon(0, 1)
            f.subs.append(Repeat(self.rules[self.subrule(node)], node.lo, node.hi, self.span))
            f.add_edge(1, 2, REPEAT, 0)
            f.add_epsilon(2, 3)
            return f
        assert isinstance(node, SubruleRef)
        f = _FSM(2, 0, [1])
        f.add_edge(0, 1, RULE, self.subrule(node.sub))
        return f

    def subrule(self, node: RepeatSubrule) -> int:
        """The key of the sub-rule XGrammar adds for a large repetition (the child as a regex of
        its own: json_string from 0.2.9 only, a rule FSM of its own, simplified as every rule's)."""
        if id(node) not in self.keys:
            key = self.keys[id(node)] = len(self.keys)
            inner = self.build(node.child)
            if self.json_string and subrule_keeps_json_string():
                inner = _forbid(inner, JSON_STRING_FORBIDDEN_BYTES, self.deadline)
            raw = repeat_returns_to_source(rule_fsm(inner, self.deadline))
            self.rule_fsms.append(raw)
            self.rules[key] = to_automaton(
                raw, self.span, self.pattern, self.rules, keep_dead=self.keep_dead, deadline=self.deadline
            )
        return self.keys[id(node)]

    def repetition(self, node: Repetition) -> _FSM:
        """``RegexIR::visit(const Repeat&)``, quirks included."""
        lo, hi = node.lo, node.hi
        if hi == 0:
            return _epsilon_only()
        child = self.build(node.child)
        copies = hi if hi is not None else max(lo, 1)
        if child.num_states() * copies > MAX_UNROLLED_REPEAT_STATES:
            bounds = f"{{{lo},{'' if hi is None else hi}}}"
            raise RegexBuildError(f"The bounded repetition {bounds} is too large to compile into a FSM", node.span)
        result = child.copy()
        new_ends: set[int] = set()
        deadline = self.deadline
        if lo <= 1:
            new_ends |= set(result.ends)  # one copy is accepting
        if hi is None:
            for _ in range(2, lo):
                if deadline is not None:
                    deadline.check(STAGE)
                _concat_into(result, child)
            loop_to = result.ends[0]  # the lowest end of copy lo-1 (of copy 1 when lo <= 1)
            _concat_into(result, child)
            for end in list(result.ends):
                result.add_epsilon(end, loop_to)
        else:
            for i in range(2, hi + 1):
                if deadline is not None:
                    deadline.check(STAGE)
                _concat_into(result, child)
                if i >= lo:
                    new_ends |= set(result.ends)
        for end in sorted(new_ends):
            result.add_end(end)
        if lo == 0:  # a fresh accepting start, so that zero copies match
            new_start = result.add_state()
            result.add_epsilon(new_start, result.start)
            result.start = new_start
            result.add_end(new_start)
        return result


def _forbid(f: _FSM, forbidden: frozenset[int], deadline: Deadline | None = None) -> _FSM:
    """``BuildWithForbiddenChars``: byte edges lose the forbidden bytes; nothing is pruned."""
    g = f.copy()
    for state, edges in enumerate(f.edges):
        if deadline is not None and not state & CHECK_MASK:
            deadline.check(STAGE)
        out: list[tuple[int, int, int]] = []
        for lo, hi, target in edges:
            if lo < 0:
                out.append((lo, hi, target))
                continue
            start = None
            for c in range(lo, hi + 2):
                if c <= hi and c not in forbidden:
                    start = c if start is None else start
                elif start is not None:
                    out.append((start, c - 1, target))
                    start = None
        g.edges[state] = out
    return g


# ---- the rule's automaton (GrammarFSMBuilderImpl::BuildRuleFSM) -------------------------------

#: ``SimplifyEpsilon`` / ``MergeEquivalentStates`` leave automata above these sizes alone.
SIMPLIFY_EPSILON_MAX_STATES = 100_000_000
MERGE_EQUIVALENT_MAX_STATES = 100_000


#: The refusal of a repeat edge whose source state :func:`repeat_returns_to_source` does not mirror.
REPEAT_SOURCE_REFUSAL = (
    "cfgzip cannot reproduce how XGrammar's matcher runs this large repetition (bound above 128) exactly: "
    "its state also starts another large repetition or loops back to itself; use bounds up to 128 there"
)


def repeat_returns_to_source(f: _FSM) -> _FSM:
    """``f`` as XGrammar's matcher runs its counted repeat edges.

    XGrammar's Earley parser runs a repeat edge ``s -Repeat(r, m, n)-> t`` with a counter and,
    after each pass through ``r``, stands on ``s`` again: from there it takes another pass
    (fewer than ``n`` so far), leaves for ``t`` (at least ``m``), and also whatever else ``s``
    offers, its other edges and its being final, whatever the count. So when ``s`` offers more
    than the repeat, the language is not the automaton's: ``|(?:ab){0,199}c`` matches ``ab``
    and ``x|(?:ab){2,199}c`` matches ``abx`` (0.2.8 and 0.2.9 alike; bounds up to 128 are
    unrolled and match as written). Mirrored by a copy ``s'`` of ``s`` without that repeat
    edge, reached by ``Repeat(r, 1, n)``: ``s -Repeat(r, m, n)-> t`` stays, and
    ``s -Repeat(r, 1, n)-> s'`` adds the other ways out after one or more passes.
    """
    plain = [(state, i) for state, edges in enumerate(f.edges) for i, e in enumerate(edges) if e[0] == REPEAT]
    if not plain:
        return f
    sources = [state for state, _ in plain]
    for state in sources:
        if sources.count(state) > 1 or any(t == state for _, _, t in f.edges[state]):
            # Two repeat edges on one state share its counter, and an edge back to the state keeps
            # it (a fuzz against the binary found both): not mirrored, so refused, never guessed.
            raise RegexBuildError(REPEAT_SOURCE_REFUSAL, (0, 0), refused=True)
    g = f.copy()
    for state, i in plain:
        lo, sub, _ = f.edges[state][i]
        others = [e for j, e in enumerate(f.edges[state]) if j != i]
        if not others and state not in f.ends:
            continue  # nothing else to take at s: the automaton's own language
        repeat = f.subs[sub]
        assert isinstance(repeat, Repeat)
        copy = g.add_state()
        g.edges[copy] = list(others)
        if state in f.ends:
            g.add_end(copy)
        g.subs.append(Repeat(repeat.item, 1, repeat.max, repeat.span))
        g.add_edge(state, copy, REPEAT, len(g.subs) - 1)
    return g


def rule_fsm(regex: _FSM, deadline: Deadline | None = None) -> _FSM:
    """The automaton XGrammar keeps for a rule whose body is this regex.

    XGrammar's parser makes every ``Regex(...)`` a rule of its own (``x ::= "a" Regex("b")``
    becomes ``x ::= "a" x_1`` and ``x_1 ::= Regex("b")``), and no pass inlines such a rule, so
    a regex always gets exactly this: the regex automaton appended to a fresh one-state
    automaton (``AppendFSM``), then :func:`_simplify_epsilon` and :func:`_merge_equivalent`.
    Both are local merge heuristics that do not always keep the language (``(a{0,2}|a)``
    becomes ``a*``: a state is merged with a sibling and, in the same round, the sibling with
    every other final state that has no successor); they are mirrored step for step. ``deadline``: the
    build's, checked as both go (:data:`STAGE`).
    """
    if regex.start == 0:
        f = regex.copy()
    else:
        f = _FSM(1, 0)
        offset = f.append(regex)
        f.add_epsilon(0, offset + regex.start)
        f.ends = sorted(offset + e for e in regex.ends)
    return _merge_equivalent(_simplify_epsilon(f, deadline), deadline)


class _UnionFind:
    """``UnionFindSet``: union by size; :meth:`sets` sorted as XGrammar's ``GetAllSets``."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.size: dict[int, int] = {}

    def add(self, x: int) -> None:
        if x not in self.parent:
            self.parent[x], self.size[x] = x, 1

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]

    def sets(self) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for x in self.parent:
            groups.setdefault(self.find(x), []).append(x)
        return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def _rebuild(f: _FSM, mapping: list[int], num_states: int, deadline: Deadline | None = None) -> _FSM:
    """``RebuildWithMapping``: states renamed, ε self-loops dropped, each row sorted and unique."""
    g = _FSM(num_states, mapping[f.start], [mapping[e] for e in f.ends])
    g.subs = f.subs
    rows: list[set[tuple[int, int, int]]] = [set() for _ in range(num_states)]
    for state, edges in enumerate(f.edges):
        if deadline is not None and not state & CHECK_MASK:
            deadline.check(STAGE)
        for lo, hi, target in edges:
            if lo == EPSILON and mapping[state] == mapping[target]:
                continue
            rows[mapping[state]].add((lo, hi, mapping[target]))
    g.edges = [sorted(row) for row in rows]
    return g


def _mapping_of(sets: list[list[int]], num_states: int) -> tuple[list[int], int]:
    mapping = [-1] * num_states
    for index, members in enumerate(sets):
        for state in members:
            mapping[state] = index
    count = len(sets)
    for state in range(num_states):
        if mapping[state] == -1:
            mapping[state], count = count, count + 1
    return mapping, count


def _simplify_epsilon(f: _FSM, deadline: Deadline | None = None) -> _FSM:
    """``FSMWithStartEnd::SimplifyEpsilon``: merge along ε-edges by two local rules.

    Rule 1: ``a -ε-> b`` is a's only edge, and a is not final or b is: merge a and b.
    Rule 2: ``a -ε-> b`` and b (its rule-1 class) has no other incoming edge and is not the
    start: merge them.
    """
    n = f.num_states()
    if n > SIMPLIFY_EPSILON_MAX_STATES:
        return f
    ends = set(f.ends)
    uf = _UnionFind()
    in_degree = [0] * n
    epsilon_edges: list[tuple[int, int]] = []
    for state, edges in enumerate(f.edges):
        if deadline is not None and not state & CHECK_MASK:
            deadline.check(STAGE)
        for lo, _, target in edges:
            in_degree[target] += 1
            if lo != EPSILON:
                continue
            if len(edges) == 1 and (state not in ends or target in ends):
                uf.add(state)
                uf.add(target)
                uf.union(state, target)
                in_degree[target] -= 1
            else:
                epsilon_edges.append((state, target))
    equiv = list(range(n))
    for state in range(n):
        if state in uf.parent:
            equiv[state] = uf.find(state)
            if equiv[state] != state:
                in_degree[equiv[state]] += in_degree[state]
    for source, target in epsilon_edges:
        a, b = equiv[source], equiv[target]
        if in_degree[b] == 1 and equiv[f.start] != b:
            uf.add(a)
            uf.add(b)
            uf.union(a, b)
    sets = uf.sets()
    if not sets:
        return f
    mapping, count = _mapping_of(sets, n)
    return _rebuild(f, mapping, count, deadline)


def _merge_equivalent(f: _FSM, deadline: Deadline | None = None) -> _FSM:
    """``FSMWithStartEnd::MergeEquivalentStates``, round after round until nothing merges.

    Case 1: two non-start states with one and the same predecessor, reached from it by the
    same labels, both final or both not: merged. Case 2: two states with one and the same
    successor, left by the same labels, both final or both not: merged. Then every final
    state without successors is merged into one, and so is every other state without
    successors. One union-find per round, so these chain into each other.
    """
    n = f.num_states()
    if MERGE_EQUIVALENT_MAX_STATES < n:
        return f
    if n < 4:
        return f.copy()
    result = f.copy()
    result.edges = [sorted(row) for row in result.edges]
    while True:
        if deadline is not None:
            deadline.check(STAGE)
        n = result.num_states()
        ends = set(result.ends)
        start = result.start
        uf = _UnionFind()
        incoming: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        outgoing: list[list[tuple[int, int, int]]] = []
        for source, edges in enumerate(result.edges):
            for lo, hi, target in edges:
                incoming[target].append((source, lo, hi))
            outgoing.append(sorted((target, lo, hi) for lo, hi, target in edges))
        in_count, single_in = _distinct(incoming)
        out_count, single_out = _distinct(outgoing)

        merged_successor = False
        for i in range(n):
            if deadline is not None and not i & CHECK_MASK:
                deadline.check(STAGE)
            if in_count[i] != 1 or i in uf.parent or i == start:
                continue
            labels_i = [(lo, hi) for _, lo, hi in incoming[i]]
            for sibling, labels in _groups(outgoing[single_in[i]]):
                if sibling <= i or in_count[sibling] != 1 or sibling == start or (sibling in ends) != (i in ends):
                    continue
                if labels == labels_i:
                    uf.add(i)
                    uf.add(sibling)
                    uf.union(i, sibling)
                    merged_successor = True

        merged_precursor = False
        final_sinks: list[int] = []
        other_sinks: list[int] = []
        for i in range(n):
            if deadline is not None and not i & CHECK_MASK:
                deadline.check(STAGE)
            if out_count[i] == 0:
                (final_sinks if i in ends else other_sinks).append(i)
                continue
            if out_count[i] != 1 or i in uf.parent:
                continue
            labels_i = [(lo, hi) for _, lo, hi in outgoing[i]]
            for sibling, _ in _groups(incoming[single_out[i]]):
                if sibling <= i or sibling in uf.parent or out_count[sibling] != 1 or (i in ends) != (sibling in ends):
                    continue
                if [(lo, hi) for _, lo, hi in outgoing[sibling]] == labels_i:
                    uf.add(i)
                    uf.add(sibling)
                    uf.union(i, sibling)
                    merged_precursor = True
        for sinks in (final_sinks, other_sinks):
            if len(sinks) > 1:
                for other in sinks[1:]:
                    uf.add(sinks[0])
                    uf.add(other)
                    uf.union(sinks[0], other)
                merged_precursor = True

        if not (merged_successor or merged_precursor):
            return result
        mapping, count = _mapping_of(uf.sets(), n)
        result = _rebuild(result, mapping, count, deadline)


def _distinct(rows: list[list[tuple[int, int, int]]]) -> tuple[list[int], list[int]]:
    """Per row: how many distinct peers (runs of equal first fields), and the peer if only one."""
    counts, single = [], []
    for row in rows:
        count, peer = 0, -1
        for k, entry in enumerate(row):
            if k == 0 or entry[0] != row[k - 1][0]:
                count += 1
        if count == 1:
            peer = row[0][0]
        counts.append(count)
        single.append(peer)
    return counts, single


def _groups(row: list[tuple[int, int, int]]):
    """Runs of equal peers in a row: (peer, [(lo, hi), ...])."""
    k = 0
    while k < len(row):
        peer, labels = row[k][0], []
        while k < len(row) and row[k][0] == peer:
            labels.append((row[k][1], row[k][2]))
            k += 1
        yield peer, labels


# ---- to the AST --------------------------------------------------------------------------------


def to_automaton(
    f: _FSM,
    span: Span | None,
    pattern: str,
    rules: dict[int, Automaton],
    *,
    keep_dead: bool = False,
    deadline: Deadline | None = None,
) -> Automaton:
    """The ε-free, trimmed :class:`~.tree.Automaton` of ``f`` (the same language).

    ε-closure: state q gets the byte and sub-expression edges of every state in its
    ε-closure and is final when the closure holds an end state; then states that are not
    reachable or cannot reach a final state go. Equivalent states are left to the normal
    form, which merges them (a Moore-style refinement here took 13 minutes on the 30,000
    states of ``(.{30}){128}``).

    ``keep_dead`` keeps the reachable states that cannot reach a final state (a json_string
    dead end: XGrammar's matcher accepts the text that leads there and then nothing); they
    lower to non-productive rules, which the pipeline keeps exactly (:mod:`.dead_ends`). ``deadline``: the
    build's, checked as it goes (:data:`STAGE`).
    """
    n = f.num_states()
    closures = _epsilon_closures(f)
    ends = set(f.ends)
    edges: list[set[tuple[int, int, int]]] = []
    finals = []
    for q in range(n):
        if deadline is not None and not q & CHECK_MASK:
            deadline.check(STAGE)
        out: set[tuple[int, int, int]] = set()
        for p in closures[q]:
            out.update(e for e in f.edges[p] if e[0] != EPSILON)
        edges.append(out)
        finals.append(any(p in ends for p in closures[q]))
    live = _reachable([f.start], lambda q: (t for _, _, t in edges[q]))
    preds: dict[int, list[int]] = {}
    for q in live:
        for _, _, t in edges[q]:
            preds.setdefault(t, []).append(q)
    useful = _reachable([q for q in live if finals[q]], lambda q: preds.get(q, ()))
    if keep_dead:
        useful = live
    number: dict[int, int] = {f.start: 0}
    for q in sorted(useful):
        number.setdefault(q, len(number))
    out_edges: set[tuple[int, object, int]] = set()
    for q in number:
        for lo, hi, t in edges[q]:
            if t in useful:
                label = f.subs[hi] if lo == REPEAT else rules[hi] if lo == RULE else (lo, hi)
                out_edges.add((number[q], label, number[t]))
    final_states = sorted(number[q] for q in number if finals[q])
    ordered = tuple(sorted(out_edges, key=_edge_key))
    return Automaton(len(number), 0, tuple(final_states), ordered, pattern, span)


def _edge_key(edge: tuple[int, object, int]) -> tuple:
    source, label, target = edge
    if isinstance(label, tuple):
        return (source, 0, label, target)
    return (source, 1, (), target)


def _epsilon_closures(f: _FSM) -> list[frozenset[int]]:
    """The ε-closure of every state; states of one ε-cycle share one closure object."""
    eps = [[t for lo, _, t in edges if lo == EPSILON] for edges in f.edges]
    memo: list[frozenset[int] | None] = [None] * f.num_states()
    for q in range(f.num_states()):
        if memo[q] is None:
            memo[q] = frozenset(_reachable([q], lambda s: eps[s]))
    return memo  # type: ignore[return-value]


def _reachable(roots, successors) -> set[int]:
    seen = set(roots)
    todo = list(seen)
    while todo:
        for t in successors(todo.pop()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


# ---- the entry point ---------------------------------------------------------------------------


def build(
    root: Node,
    *,
    json_string: bool,
    span: Span | None = None,
    pattern: str = "",
    keep_dead: bool = False,
    deadline: Deadline | None = None,
) -> tuple[Automaton, list[_FSM]]:
    """XGrammar's automaton for the parsed pattern ``root``: the AST node, and the rule automata
    XGrammar matches with (:func:`rule_fsm`, forbidden bytes removed under ``json_string``), the
    pattern's first and then its large repetitions' sub-rules, which the dead-end check in
    :mod:`.regex` reads.

    Raises
    ------
    RegexBuildError
        Where XGrammar's own build fails (an unrolled repetition past its state cap).
    BuildBudgetError
        Past ``deadline`` (a :class:`~cfgzip_lab.deadline.Deadline`), checked per unrolled copy and every
        :data:`~cfgzip_lab.deadline.CHECK_EVERY` states of each pass; the stage is :data:`STAGE`.
    """
    builder = _Builder(span, pattern, json_string, keep_dead, deadline=deadline)
    fsm = builder.build(root)
    if json_string:
        fsm = _forbid(fsm, JSON_STRING_FORBIDDEN_BYTES, deadline)
    final = repeat_returns_to_source(rule_fsm(fsm, deadline))
    automaton = to_automaton(final, span, pattern, builder.rules, keep_dead=keep_dead, deadline=deadline)
    return automaton, [final, *builder.rule_fsms]


def dead_end(fsm: _FSM, *, budget: int = 20_000, deadline: Deadline | None = None) -> tuple[bytes, set[int]] | None:
    """A byte string XGrammar's matcher accepts as a prefix and can never finish, if any.

    Breadth-first over the sets of NFA states a prefix reaches (ε-closed): a set that is
    not empty but holds no state that can still reach an end is a dead end. Returns the
    shortest such prefix and its state set (raw NFA states), or None. Sub-expression edges
    and sets past ``budget`` are treated conservatively: any reachable state that cannot
    reach an end counts as a dead end there. ``deadline``: the build's, checked as it goes (:data:`STAGE`).
    """
    closures = _epsilon_closures(fsm)
    n = fsm.num_states()
    preds: dict[int, set[int]] = {}
    for q, edges in enumerate(fsm.edges):
        for _, _, t in edges:
            preds.setdefault(t, set()).add(q)
    alive = _reachable(fsm.ends, lambda q: preds.get(q, ()))
    if len(alive) == n:
        return None
    start = closures[fsm.start]
    has_sub = any(lo in (RULE, REPEAT) for edges in fsm.edges for lo, _, _ in edges)
    if not has_sub:
        seen = {start: b""}
        queue = deque([start])
        while queue and len(seen) <= budget:
            if deadline is not None:  # each set costs a walk over its states' edges: cheap next to that
                deadline.check(STAGE)
            states = queue.popleft()
            prefix = seen[states]
            by_byte: dict[int, set[int]] = {}
            for q in states:
                for lo, hi, t in fsm.edges[q]:
                    if lo >= 0:
                        for b in range(lo, hi + 1):
                            by_byte.setdefault(b, set()).update(closures[t])
            for b, targets in sorted(by_byte.items()):
                nxt = frozenset(targets)
                if nxt in seen:
                    continue
                seen[nxt] = prefix + bytes([b])
                if not nxt & alive:
                    return seen[nxt], set(nxt)
                queue.append(nxt)
        if not queue:
            return None
    # Conservative: a state that is reached after consuming something and is dead.
    after_consuming = _reachable(
        [t for q in range(n) for lo, _, t in fsm.edges[q] if lo != EPSILON],
        lambda q: (t for _, _, t in fsm.edges[q]),
    )
    reachable = _reachable([fsm.start], lambda q: (t for _, _, t in fsm.edges[q]))
    dead = (after_consuming & reachable) - alive
    return (b"", dead) if dead else None
