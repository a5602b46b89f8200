"""``TagDispatch(...)``: free text until a tag, then the tag's rule, as XGrammar matches it.

``TagDispatch(("<tool>", call), ("<think>", thought), loop_after_dispatch=true, excludes=("</s>",))``
reads *free text*: any bytes (not only UTF-8: ``b"\\xff"`` is free text too) until one of the
tags has been read, then the tag's rule, then free text again (``loop_after_dispatch``, the
default) or nothing more. It may end anywhere in free text, also inside a half-read tag
(``"<to"``), but not right after a whole tag. An excluded string never appears in free text
(it may straddle the end of the free text and what follows the macro).

XGrammar builds one automaton for this (``BuildTagDispatchFSM`` over ``TrieFSMBuilder``, in
``cpp/grammar_functor.cc`` and ``cpp/fsm_builder.cc``), and the details of that automaton are
the language. Checked against the installed binary, 0.2.8 and 0.2.9 alike (``tests/test_tag_dispatch.py``,
random tag and exclude sets over small alphabets, every string up to a length, prefix and
full acceptance):

- a trie over the tags' and then the excludes' UTF-8 bytes, made an Aho-Corasick automaton:
  a byte with no trie edge goes where the longest proper suffix that is still a trie path
  leads (failure links; ``"aab"`` is found in ``"aaab"``);
- a state where a whole tag ends keeps only its trie edges, and its one way out of the trie is
  the tag's rule: with tags ``"<a"`` and ``"<ab"``, ``"<a"`` may be the first tag (then its rule)
  or the start of the second; a tag that is only a *suffix* of the state's string is not seen
  (tags ``"xa"`` and ``"a"``: after ``"xa"`` only ``"xa"``'s rule follows);
- a state is dead (free text can never reach it) when its string *ends with* an excluded string
  (its failure chain reaches an exclude's end): exclude ``"b"`` also kills the tag ``"ab"``.
  (XGrammar's current source removes only the edges into the excluded strings' own states;
  0.2.8 and 0.2.9 do what is described here.)
- every other state may end the free text; after a tag's rule the automaton is back at its
  start (``loop_after_dispatch``) or at a final state with no edges.

The result is a :class:`~.tree.Automaton` whose edges are byte ranges, plus one edge per tag
labelled with a :class:`~.tree.RuleRef` to its rule: the lowering makes one nonterminal per
state, so free text becomes a right-linear grammar with exactly this language.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tree import Automaton, Choice, Expr, GrammarAST, Repeat, RuleRef, Sequence, Span

__all__ = ["TagDispatchAutomaton", "build_states", "tag_dispatch_automaton", "dispatch_triggers", "DESCRIPTION"]

#: The ``pattern`` of a TagDispatch's :class:`~.tree.Automaton` (what provenance and views show).
DESCRIPTION = "TagDispatch"


@dataclass(frozen=True, slots=True)
class TagDispatchAutomaton:
    """What :func:`tag_dispatch_automaton` builds, before it becomes an :class:`~.tree.Automaton`.

    ``rows[q]`` maps the bytes that occur in some tag or exclude to next states (None: refused,
    an excluded string would end there); every other byte goes to ``defaults[q]`` (the start, from a state that may read free text; None from a
    state where a whole tag ends, which has only its trie edges). ``dispatch[q]`` lists the tags
    (their index) whose rule follows state ``q``; ``finals`` may end the free text.
    """

    rows: tuple[dict[int, int | None], ...]
    defaults: tuple[int | None, ...]
    dispatch: dict[int, tuple[int, ...]]
    finals: frozenset[int]
    start: int = 0

    def step(self, state: int, byte: int) -> int | None:
        """The state after ``byte`` (None: the byte is refused there)."""
        return self.rows[state].get(byte, self.defaults[state])


def build_states(tags: list[bytes], excludes: list[bytes]) -> TagDispatchAutomaton:
    """The Aho-Corasick automaton of XGrammar's TagDispatch (0.2.8 and 0.2.9) (see the module docstring)."""
    children: list[dict[int, int]] = [{}]

    def insert(pattern: bytes) -> int:
        state = 0
        for byte in pattern:
            nxt = children[state].get(byte)
            if nxt is None:
                children.append({})
                nxt = children[state][byte] = len(children) - 1
            state = nxt
        return state

    tag_ends = [insert(tag) for tag in tags]
    exclude_ends = {insert(exclude) for exclude in excludes}
    ends = set(tag_ends) | exclude_ends
    # Failure links and the transition table, in breadth-first order (a state's failure state
    # is shallower, so its row is complete when the state is reached). A byte that occurs in no
    # pattern leads every state back to the start, so only the patterns' bytes get entries.
    alphabet = sorted({byte for pattern in (*tags, *excludes) for byte in pattern})
    order = [0]
    for state in order:
        order += children[state].values()
    fail = [0] * len(children)
    delta: list[dict[int, int]] = [{} for _ in children]
    for state in order:
        for byte in alphabet:
            child = children[state].get(byte)
            fallback = 0 if state == 0 else delta[fail[state]][byte]
            if child is None:
                delta[state][byte] = fallback
            else:
                delta[state][byte] = child
                fail[child] = fallback
    dead = set(exclude_ends)
    for state in order:
        if state != 0 and fail[state] in dead:
            dead.add(state)
    rows = []
    defaults: list[int | None] = []
    for state in range(len(children)):
        whole_tag = state != 0 and state in ends
        row = children[state] if whole_tag else delta[state]
        rows.append({byte: (None if target in dead else target) for byte, target in row.items()})
        defaults.append(None if whole_tag else 0)
    dispatch: dict[int, list[int]] = {}
    for index, end in enumerate(tag_ends):
        if end not in dead:
            dispatch.setdefault(end, []).append(index)
    finals = frozenset(state for state in range(len(children)) if state not in ends)
    return TagDispatchAutomaton(tuple(rows), tuple(defaults), {q: tuple(ix) for q, ix in dispatch.items()}, finals)


def tag_dispatch_automaton(
    tags: list[tuple[bytes, RuleRef]],
    *,
    loop_after_dispatch: bool,
    excludes: list[bytes],
    span: Span | None,
) -> Automaton:
    """The ``TagDispatch`` as an :class:`~.tree.Automaton` (reachable states only, renumbered
    breadth-first; byte edges merged into ranges per target; one RuleRef edge per tag)."""
    built = build_states([tag for tag, _ in tags], excludes)
    # After a rule: back to the start, or to one final state without edges.
    after_rule = built.start if loop_after_dispatch else len(built.rows)
    number = {built.start: 0}
    order = [built.start]
    for state in order:
        if state == len(built.rows):  # the state after a rule without looping: no edges
            continue
        successors = [t for t in built.rows[state].values() if t is not None]
        if built.defaults[state] is not None:
            successors.append(built.start)
        if state in built.dispatch:
            successors.append(after_rule)
        for target in successors:
            if target not in number:
                number[target] = len(order)
                order.append(target)
    edges: list[tuple[int, tuple[int, int] | RuleRef, int]] = []
    for state in order:
        if state == len(built.rows):  # the state after a rule without looping
            continue
        for lo, hi, target in _ranges(built.rows[state], built.defaults[state]):
            edges.append((number[state], (lo, hi), number[target]))
        for index in built.dispatch.get(state, ()):
            edges.append((number[state], tags[index][1], number[after_rule]))
    finals = tuple(sorted(number[q] for q in order if q in built.finals or q == len(built.rows)))
    return Automaton(len(order), 0, finals, tuple(edges), DESCRIPTION, span)


def _ranges(row: dict[int, int | None], default: int | None) -> list[tuple[int, int, int]]:
    """``(lo, hi, target)`` for runs of consecutive bytes with the same target (the bytes
    ``row`` does not list go to ``default``, or nowhere when it is None)."""
    out: list[tuple[int, int, int]] = []

    def add(lo: int, hi: int, target: int) -> None:
        if out and out[-1][1] == lo - 1 and out[-1][2] == target:
            out[-1] = (out[-1][0], hi, target)
        else:
            out.append((lo, hi, target))

    at = 0
    for byte in sorted(row):
        if default is not None and at < byte:
            add(at, byte - 1, default)
        target = row[byte]
        if target is not None:
            add(byte, byte, target)
        at = byte + 1
    if default is not None and at <= 255:
        add(at, 255, default)
    return out


def dispatch_triggers(ast: GrammarAST) -> list[bytes]:
    """The tags and excluded strings of every ``TagDispatch`` in ``ast``, as bytes (every
    string of the call, read from the text it spans): what a walk must type to dispatch, or
    to leave free text where the grammar goes on with an excluded string (``guides`` of
    :func:`cfgzip_lab.verify.verify_engines`)."""
    from .ebnf import decode_ebnf_string  # ebnf imports this module
    from .ebnf_syntax import tokens

    out: set[bytes] = set()
    todo: list[Expr] = [rule.body for rule in ast.rules.values()]
    while todo:
        e = todo.pop()
        if isinstance(e, (Sequence, Choice)):
            todo += e.items if isinstance(e, Sequence) else e.options
        elif isinstance(e, Repeat):
            todo.append(e.item)
        elif isinstance(e, Automaton) and e.pattern == DESCRIPTION and e.span is not None:
            for token in tokens(ast.text, *e.span):
                if token.type == "STRING":
                    out.add(decode_ebnf_string(token.value[1:-1]).encode("utf-8", "surrogatepass"))
    return sorted(out - {b""})
