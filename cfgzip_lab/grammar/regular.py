"""A rule whose language is regular, as one byte DFA: for the attributes ``lazy`` and ``max_chars``.

XGrammar 0.2.8 gives both a meaning per occurrence of the rule (its Earley parser prunes the
occurrence's items; checked with its matcher in ``tests/test_rule_attributes.py``):

- ``lazy``: the occurrence ends at the first place its body can end, whatever follows
  (``s[lazy] ::= "x"+`` in ``"a" s "z"`` takes ``axz``, not ``axxz``). Its language is
  MIN(L) = the words of L with no proper prefix in L: a DFA of L without the edges that
  leave its accepting states.
- ``max_chars=N``: at most N code points (``[^z]*`` with N = 2 takes ``éé``): L ∩ Σ^{≤N}, the
  DFA times a counter 0..N that counts UTF-8 lead bytes. 0.2.8 prunes an occurrence only when
  a character would exceed the budget, never because the rest cannot fit: with
  ``s[max_chars=2] ::= "ab" "c" | "x"``, decoding may enter ``ab`` and never finish. Such dead
  ends are in XGrammar's masks and cannot be in cfgzip's, so a rule that has one is refused.
  0.2.8 also miscounts an occurrence that starts where another occurrence of the same rule
  ends (``s s`` takes ``b`` then ``bb`` under ``max_chars=1``), so a budgeted rule that can
  follow itself is refused (:func:`follows_itself`); on a *recursive* rule it does something
  else again (``(((x)))`` passes ``max_chars=3``): recursion is refused.

Both hold for one DFA of the rule's whole language, so the rule must not reach itself: its
body, and the bodies of the rules it uses, are expanded into one automaton (Thompson's
construction, then subsets over byte classes), within a state budget. The result replaces the
rule's body as a :class:`~.tree.Automaton`, which the lowering turns into one nonterminal per
state. MIN(L ∩ Σ^{≤N}) = MIN(L) ∩ Σ^{≤N}, so both attributes together need no order.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lower import class_sequences, complement, normalize
from .tree import Automaton, CharClass, Choice, Expr, Literal, Repeat, Rule, RuleRef, Sequence, Span, TokenSet

__all__ = ["NotRegular", "shape_rule", "follows_itself", "MAX_STATES"]

#: NFA and DFA states allowed for one shaped rule; past it the rule is refused.
MAX_STATES = 20_000


class NotRegular(Exception):
    """The rule cannot be one DFA (``reason`` says why: recursion, a construct, the budget)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _NFA:
    """States 0..n-1; ``edges[q]`` lists ``(lo, hi, target)`` byte ranges, ``eps[q]`` ε-targets."""

    edges: list[list[tuple[int, int, int]]]
    eps: list[list[int]]

    def add(self) -> int:
        if len(self.edges) >= MAX_STATES:
            raise NotRegular(f"its automaton has more than {MAX_STATES:,} states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1


class _Thompson:
    """Builds the ε-NFA of an expression, expanding rule references (never recursively)."""

    def __init__(self, rules: dict[str, Rule], shaped: dict[str, Automaton]) -> None:
        self.rules = rules
        self.shaped = shaped
        self.nfa = _NFA([], [])
        self.open: list[str] = []  # rules being expanded

    def fragment(self, e: Expr | Automaton, start: int) -> int:
        """Add ``e`` from state ``start``; returns its end state."""
        nfa = self.nfa
        if isinstance(e, Literal):
            for byte in e.text.encode("utf-8", "surrogatepass"):
                nxt = nfa.add()
                nfa.edges[start].append((byte, byte, nxt))
                start = nxt
            return start
        if isinstance(e, CharClass):
            ranges = normalize(e.ranges)
            end = nfa.add()
            for seq in class_sequences(complement(tuple(ranges)) if e.negated else ranges):
                at = start
                for i, byteset in enumerate(seq):
                    nxt = end if i == len(seq) - 1 else nfa.add()
                    for lo, hi in _runs(byteset.bits):
                        nfa.edges[at].append((lo, hi, nxt))
                    at = nxt
            return end
        if isinstance(e, Sequence):
            for item in e.items:
                start = self.fragment(item, start)
            return start
        if isinstance(e, Choice):
            end = nfa.add()
            for option in e.options:
                begin = nfa.add()
                nfa.eps[start].append(begin)
                nfa.eps[self.fragment(option, begin)].append(end)
            return end
        if isinstance(e, Repeat):
            for _ in range(e.min):
                start = self.fragment(e.item, start)
            if e.max is None:
                loop = nfa.add()
                nfa.eps[start].append(loop)
                nfa.eps[self.fragment(e.item, loop)].append(loop)
                return loop
            end = nfa.add()
            for _ in range(e.max - e.min):
                nfa.eps[start].append(end)
                start = self.fragment(e.item, start)
            nfa.eps[start].append(end)
            return end
        if isinstance(e, RuleRef):
            if e.name in self.shaped:
                return self.fragment(self.shaped[e.name], start)
            if e.name in self.open:
                raise NotRegular(f"rule {e.name!r} reaches itself")
            self.open.append(e.name)
            end = self.fragment(self.rules[e.name].body, start)
            self.open.pop()
            return end
        if isinstance(e, TokenSet):
            raise NotRegular("it takes a whole token by id (Token/ExcludeToken), not characters")
        if isinstance(e, Automaton):
            if e.pattern.startswith("TagDispatch"):
                raise NotRegular("it uses TagDispatch, whose free text is bytes rather than characters")
            states = [nfa.add() for _ in range(e.num_states)]
            nfa.eps[start].append(states[e.start])
            end = nfa.add()
            for source, label, target in e.edges:
                if isinstance(label, tuple):
                    nfa.edges[states[source]].append((label[0], label[1], states[target]))
                else:
                    nfa.eps[self.fragment(label, states[source])].append(states[target])
            for q in e.finals:
                nfa.eps[states[q]].append(end)
            return end
        raise NotRegular(f"it uses {type(e).__name__}")


def _runs(bits: int) -> list[tuple[int, int]]:
    """Maximal runs of set bits as byte ranges."""
    out: list[tuple[int, int]] = []
    byte = 0
    while bits:
        if bits & 1:
            lo = byte
            while bits & 1:
                bits >>= 1
                byte += 1
            out.append((lo, byte - 1))
        else:
            bits >>= 1
            byte += 1
    return out


def _dfa(nfa: _NFA, start: int, end: int) -> tuple[list[dict[int, int]], list[bool]]:
    """Subset construction over byte classes: ``rows[d][byte] = d'`` and which DFA states accept."""
    closure_memo: dict[int, frozenset[int]] = {}

    def closure(q: int) -> frozenset[int]:
        if q not in closure_memo:
            seen, todo = {q}, [q]
            while todo:
                for r in nfa.eps[todo.pop()]:
                    if r not in seen:
                        seen.add(r)
                        todo.append(r)
            closure_memo[q] = frozenset(seen)
        return closure_memo[q]

    cuts = {0, 256}
    for row in nfa.edges:
        for lo, hi, _ in row:
            cuts.update((lo, hi + 1))
    classes = sorted(cuts)
    first = closure(start)
    index = {first: 0}
    order = [first]
    rows: list[dict[int, int]] = []
    for subset in order:
        row: dict[int, int] = {}
        for lo, nxt_cut in zip(classes, classes[1:]):
            targets: set[int] = set()
            for q in subset:
                for a, b, t in nfa.edges[q]:
                    if a <= lo <= b:
                        targets |= closure(t)
            if not targets:
                continue
            key = frozenset(targets)
            if key not in index:
                if len(order) >= MAX_STATES:
                    raise NotRegular(f"its automaton has more than {MAX_STATES:,} states")
                index[key] = len(order)
                order.append(key)
            for byte in range(lo, nxt_cut):
                row[byte] = index[key]
        rows.append(row)
    return rows, [end in subset for subset in order]


def shape_rule(
    rules: dict[str, Rule],
    name: str,
    *,
    lazy: bool,
    max_chars: int | None,
    shaped: dict[str, Automaton],
    span: Span | None,
) -> Automaton:
    """Rule ``name``'s language under ``lazy`` / ``max_chars``, as an automaton; raises
    :class:`NotRegular` with the reason when the rule's language is not one DFA here.
    ``shaped`` holds the rules already shaped (a shaped rule inside this one keeps its meaning)."""
    builder = _Thompson(rules, shaped)
    builder.open.append(name)
    start = builder.nfa.add()
    end = builder.fragment(rules[name].body, start)
    rows, accepting = _dfa(builder.nfa, start, end)
    if max_chars is not None:
        unbounded = _coaccessible(rows, accepting)
        rows, accepting, pairs = _bound_chars(rows, accepting, max_chars)
        bounded = _coaccessible(rows, accepting)
        for state, (d, count) in enumerate(pairs):
            if d in unbounded and state not in bounded:
                raise NotRegular(
                    f"XGrammar 0.2.8 lets decoding read {count} character(s) of it that cannot end within "
                    f"max_chars={max_chars} (a dead end in its masks)"
                )
    if lazy:
        rows = [{} if accepting[d] else row for d, row in enumerate(rows)]
    return _automaton(rows, accepting, span, name, lazy, max_chars)


def _coaccessible(rows: list[dict[int, int]], accepting: list[bool]) -> set[int]:
    """States from which an accepting state can be reached."""
    reverse: list[set[int]] = [set() for _ in rows]
    for d, row in enumerate(rows):
        for target in row.values():
            reverse[target].add(d)
    alive = {d for d, ok in enumerate(accepting) if ok}
    todo = list(alive)
    while todo:
        for d in reverse[todo.pop()]:
            if d not in alive:
                alive.add(d)
                todo.append(d)
    return alive


def _bound_chars(
    rows: list[dict[int, int]], accepting: list[bool], limit: int
) -> tuple[list[dict[int, int]], list[bool], list[tuple[int, int]]]:
    """The product with a code-point counter 0..limit (a UTF-8 lead byte counts one); also
    the (DFA state, count) of each product state."""
    index = {(0, 0): 0}
    order = [(0, 0)]
    out_rows: list[dict[int, int]] = []
    for d, count in order:
        row: dict[int, int] = {}
        for byte, target in rows[d].items():
            nxt = count + (byte & 0xC0 != 0x80)
            if nxt > limit:
                continue
            key = (target, nxt)
            if key not in index:
                if len(order) >= MAX_STATES:
                    raise NotRegular(f"max_chars={limit} makes an automaton of more than {MAX_STATES:,} states")
                index[key] = len(order)
                order.append(key)
            row[byte] = index[key]
        out_rows.append(row)
    return out_rows, [accepting[d] for d, _ in order], order


def _automaton(
    rows: list[dict[int, int]], accepting: list[bool], span: Span | None, name: str, lazy: bool, max_chars: int | None
) -> Automaton:
    """Keep the states that reach an accepting one (and are reached), renumbered from 0."""
    alive = _coaccessible(rows, accepting)
    order = [0] if 0 in alive else []
    number = {d: i for i, d in enumerate(order)}
    for d in order:
        for target in sorted(set(rows[d].values())):
            if target in alive and target not in number:
                number[target] = len(order)
                order.append(target)
    edges: list[tuple[int, tuple[int, int], int]] = []
    for d in order:
        run: tuple[int, int, int] | None = None
        for byte in sorted(rows[d]):
            target = rows[d][byte]
            if target not in number:
                continue
            if run and run[1] == byte - 1 and run[2] == target:
                run = (run[0], byte, target)
            else:
                if run:
                    edges.append((number[d], (run[0], run[1]), number[run[2]]))
                run = (byte, byte, target)
        if run:
            edges.append((number[d], (run[0], run[1]), number[run[2]]))
    finals = tuple(number[d] for d in order if accepting[d])
    what = ", ".join(([] if not lazy else ["lazy"]) + ([] if max_chars is None else [f"max_chars={max_chars}"]))
    if not order:  # nothing left: the empty language, as an automaton without finals
        return Automaton(1, 0, (), (), f"{name}[{what}]", span)
    return Automaton(len(order), 0, finals, tuple(edges), f"{name}[{what}]", span)


def follows_itself(rules: dict[str, Rule], name: str, nullable: set[str]) -> bool:
    """Whether an occurrence of rule ``name`` can start where another one ends (``name name``,
    ``name*``, ``a b`` with ``a`` ending and ``b`` starting with ``name``, across nullable items).

    FIRST*(r) / LAST*(r) are the rules that can begin / end r (transitively, past nullable
    items); the rule follows itself when some sequence or repetition puts an expression
    whose LAST* holds it right before one whose FIRST* holds it.
    """
    first = {r: _edge_rules(rule.body, nullable, leftmost=True) for r, rule in rules.items()}
    last = {r: _edge_rules(rule.body, nullable, leftmost=False) for r, rule in rules.items()}

    def closed(direct: dict[str, set[str]], start: set[str]) -> set[str]:
        seen, todo = set(start), list(start)
        while todo:
            for r in direct.get(todo.pop(), ()):
                if r not in seen:
                    seen.add(r)
                    todo.append(r)
        return seen

    def ends_with(e: Expr) -> bool:
        return name in closed(last, _edge_rules(e, nullable, leftmost=False))

    def begins_with(e: Expr) -> bool:
        return name in closed(first, _edge_rules(e, nullable, leftmost=True))

    todo: list[Expr] = [rule.body for rule in rules.values()]
    while todo:
        e = todo.pop()
        if isinstance(e, Sequence):
            todo += e.items
            for i, item in enumerate(e.items):
                if not ends_with(item):
                    continue
                for other in e.items[i + 1 :]:
                    if begins_with(other):
                        return True
                    if not _nullable_expr(other, nullable):
                        break
        elif isinstance(e, Choice):
            todo += e.options
        elif isinstance(e, Repeat):
            todo.append(e.item)
            if (e.max is None or e.max >= 2) and ends_with(e.item) and begins_with(e.item):
                return True
        elif isinstance(e, Automaton):
            todo += [label for _, label, _ in e.edges if not isinstance(label, tuple)]
    return False


def _edge_rules(e: Expr, nullable: set[str], *, leftmost: bool) -> set[str]:
    """Rules that can be the first (``leftmost``) or the last symbol of ``e``."""
    if isinstance(e, RuleRef):
        return {e.name}
    if isinstance(e, Sequence):
        out: set[str] = set()
        for item in e.items if leftmost else reversed(e.items):
            out |= _edge_rules(item, nullable, leftmost=leftmost)
            if not _nullable_expr(item, nullable):
                break
        return out
    if isinstance(e, Choice):
        return set().union(*(_edge_rules(o, nullable, leftmost=leftmost) for o in e.options))
    if isinstance(e, Repeat):
        return _edge_rules(e.item, nullable, leftmost=leftmost) if e.max != 0 else set()
    if isinstance(e, Automaton) and not leftmost:
        # A rule on an edge into a final state can end it (TagDispatch: a tag's rule).
        return {label.name for _, label, target in e.edges if isinstance(label, RuleRef) and target in e.finals}
    return set()


def _nullable_expr(e: Expr, nullable: set[str]) -> bool:
    if isinstance(e, Literal):
        return not e.text
    if isinstance(e, RuleRef):
        return e.name in nullable
    if isinstance(e, Sequence):
        return all(_nullable_expr(i, nullable) for i in e.items)
    if isinstance(e, Choice):
        return any(_nullable_expr(o, nullable) for o in e.options)
    if isinstance(e, Repeat):
        return e.min == 0 or _nullable_expr(e.item, nullable)
    if isinstance(e, Automaton):
        return e.nullable()
    return False
