"""The automata the installed XGrammar builds for a grammar's rules, read back from its printout,
and an exact language comparison with ours (test helper).

``xgrammar.testing._print_grammar_fsms`` after ``GrammarFunctor.fsm_builder`` prints every
rule's final byte automaton (after XGrammar's ``SimplifyEpsilon`` and ``MergeEquivalentStates``)
as ``CompactFSM(num_states=.., start=.., end=[..], edges=[ i: ['a'->j, [x-y]->k, Eps->l,
Repeat(rule=r, min=m, max=n)->p, Rule(r)->q] ... ])``. :func:`xgrammar_rule_fsms` parses that;
:func:`same_language` decides whether two automata accept the same byte strings (a product
subset construction, so no length bound), treating counted-repeat and rule edges as symbols.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import xgrammar
from xgrammar import testing

from cfgzip_lab.grammar.tree import Automaton, Repeat

_ESCAPES = {"'": 0x27, '"': 0x22, "?": 0x3F, "\\": 0x5C, "a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9}
_ESCAPES |= {"v": 11, "0": 0, "e": 0x1B}


@dataclass
class NFA:
    """Edges ``(label, target)`` per state; label ``(lo, hi)`` bytes, ``None`` ε, or a tuple
    starting with ``"rep"``/``"ref"`` for an edge that reads a sub-rule."""

    start: int
    finals: set[int]
    edges: list[list[tuple[object, int]]]


def xgrammar_rule_fsms(text: str) -> dict[str, NFA]:
    """Every rule's automaton as the installed XGrammar builds it, by rule name."""
    grammar = testing.GrammarFunctor.fsm_builder(xgrammar.Grammar.from_ebnf(text))
    printed = testing._print_grammar_fsms(grammar)
    out: dict[str, NFA] = {}
    names: dict[int, str] = {}
    for block in re.split(r"(?m)^(?=Rule \d+: )", printed):
        head = re.match(r"Rule (\d+): (\S+), FSM: CompactFSM\(num_states=(\d+), start=(\d+), end=\[([\d, ]*)\]", block)
        if not head:
            continue
        rule_id, name, num, start, ends = head.groups()
        names[int(rule_id)] = name
        edges: list[list[tuple[object, int]]] = [[] for _ in range(int(num))]
        for line in block.splitlines()[1:]:
            m = re.match(r"(\d+): \[(.*)\]$", line)
            if m:
                edges[int(m.group(1))] = _parse_edges(m.group(2))
        finals = {int(e) for e in ends.replace(" ", "").split(",") if e}
        out[name] = NFA(int(start), finals, edges)
    for nfa in out.values():  # name the sub-rules on rule edges
        for row in nfa.edges:
            for i, (label, target) in enumerate(row):
                if isinstance(label, tuple) and label and label[0] in ("rep", "ref"):
                    row[i] = ((label[0], names[label[1]], *label[2:]), target)
    return {name: as_matched(nfa) for name, nfa in out.items()}


def as_matched(nfa: NFA) -> NFA:
    """``nfa`` with the meaning XGrammar's matcher gives its repeat edges.

    The matcher runs ``s -Repeat(r, m, n)-> t`` with a counter and stands on ``s`` again after
    each pass through ``r``, where everything else ``s`` offers (its other edges, its being final)
    is open whatever the count (``|(?:ab){0,199}c`` matches ``ab``; see
    ``regex_fsm.repeat_returns_to_source``, which our build applies). Written apart from it, over
    the printed automaton: a state ``s'`` holding ``s``'s other edges and finality, reached from
    ``s`` by ``Repeat(r, 1, n)``.
    """
    edges = [list(row) for row in nfa.edges]
    finals = set(nfa.finals)
    for state, row in enumerate(nfa.edges):
        for label, _ in row:
            if not (isinstance(label, tuple) and label[0] == "rep"):
                continue
            rest = list(row)
            rest.remove((label, _))
            if not rest and state not in nfa.finals:
                continue
            edges.append(rest)
            if state in nfa.finals:
                finals.add(len(edges) - 1)
            edges[state].append((("rep", label[1], 1, label[3]), len(edges) - 1))
    return NFA(nfa.start, finals, edges)


def _parse_edges(text: str) -> list[tuple[object, int]]:
    out: list[tuple[object, int]] = []
    i = 0

    def char() -> int:
        nonlocal i
        if text[i] != "\\":
            i += 1
            return ord(text[i - 1])
        letter = text[i + 1]
        if letter in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[letter]
            value = int(text[i + 2 : i + 2 + width], 16)
            i += 2 + width
            return value
        i += 2
        return _ESCAPES[letter]

    while i < len(text):
        if text.startswith(", ", i):
            i += 2
        if text[i] == "'":
            i += 1
            c = char()
            assert text[i] == "'"
            i += 1
            label: object = (c, c)
        elif text[i] == "[":
            i += 1
            lo = char()
            assert text[i] == "-", text[i:]
            i += 1
            hi = char()
            assert text[i] == "]", text[i:]
            i += 1
            label = (lo, hi)
        elif text.startswith("Eps", i):
            i += 3
            label = None
        elif text.startswith("Rule(", i):
            m = re.compile(r"Rule\((\d+)\)").match(text, i)
            i = m.end()
            label = ("ref", int(m.group(1)))
        elif text.startswith("Repeat(", i):
            m = re.compile(r"Repeat\(rule=(\d+), min=(-?\d+), max=(-?\d+)\)").match(text, i)
            i = m.end()
            label = ("rep", int(m.group(1)), int(m.group(2)), int(m.group(3)))
        else:
            raise ValueError(f"cannot read the edge at {text[i:]!r}")
        m = re.compile(r"->(\d+)").match(text, i)
        i = m.end()
        out.append((label, int(m.group(1))))
    return out


def nfa_of(automaton: Automaton, subrules: dict[int, str] | None = None) -> NFA:
    """Our automaton as an :class:`NFA`; sub-expression edges become ``("rep", name, min, max)``
    / ``("ref", name)`` with ``subrules`` naming each inner automaton (by id)."""
    subrules = {} if subrules is None else subrules
    edges: list[list[tuple[object, int]]] = [[] for _ in range(automaton.num_states)]
    for source, label, target in automaton.edges:
        if isinstance(label, tuple):
            edges[source].append((label, target))
        elif isinstance(label, Repeat):
            name = subrules.setdefault(id(label.item), f"sub{len(subrules)}")
            edges[source].append((("rep", name, label.min, -1 if label.max is None else label.max), target))
        else:
            name = subrules.setdefault(id(label), f"sub{len(subrules)}")
            edges[source].append((("ref", name), target))
    return NFA(automaton.start, set(automaton.finals), edges)


def same_language(a: NFA, b: NFA, *, budget: int = 200_000) -> tuple[bool, bytes | None]:
    """Whether ``a`` and ``b`` accept the same strings; else a shortest witness (bytes, with
    sub-rule edges shown as ``<name>``). Bytes no edge tells apart are one symbol. Raises
    RuntimeError past ``budget`` state-set pairs."""
    cuts = {0, 256}
    for nfa in (a, b):
        for row in nfa.edges:
            for label, _ in row:
                if isinstance(label, tuple) and isinstance(label[0], int):
                    cuts.update((label[0], label[1] + 1))
    bounds = sorted(cuts)
    index = {lo: k for k, lo in enumerate(bounds[:-1])}

    def moves(nfa: NFA) -> list[list[tuple[object, int]]]:
        out = []
        for row in nfa.edges:
            expanded = []
            for label, t in row:
                if isinstance(label, tuple) and isinstance(label[0], int):
                    k = index[label[0]]
                    while k < len(bounds) - 1 and bounds[k] <= label[1]:
                        expanded.append((k, t))
                        k += 1
                else:
                    expanded.append((("sub", label) if label is not None else None, t))
            out.append(expanded)
        return out

    move_a, move_b = moves(a), moves(b)

    def closure(moves_of, states) -> frozenset[int]:
        seen, todo = set(states), list(states)
        while todo:
            for label, t in moves_of[todo.pop()]:
                if label is None and t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)

    def step(moves_of, states: frozenset[int]) -> dict[object, set[int]]:
        out: dict[object, set[int]] = {}
        for q in states:
            for label, t in moves_of[q]:
                if label is not None:
                    out.setdefault(label, set()).add(t)
        return out

    start = (closure(move_a, [a.start]), closure(move_b, [b.start]))
    seen = {start: b""}
    queue = deque([start])
    while queue:
        sa, sb = queue.popleft()
        word = seen[(sa, sb)]
        if bool(sa & a.finals) != bool(sb & b.finals):
            return False, word
        ta, tb = step(move_a, sa), step(move_b, sb)
        for symbol in set(ta) | set(tb):
            pair = (closure(move_a, ta.get(symbol, ())), closure(move_b, tb.get(symbol, ())))
            if pair in seen:
                continue
            if len(seen) >= budget:
                raise RuntimeError("language comparison past its budget")
            shown = bytes([bounds[symbol]]) if isinstance(symbol, int) else f"<{symbol[1]}>".encode()
            seen[pair] = word + shown
            queue.append(pair)
    return True, None
