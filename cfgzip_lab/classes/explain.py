"""Why a token is in its class, and why two tokens are not, in the grammar author's own terms.

A class is a set of tokens with the same displacement Δ(t): the same pairs (σ_in, σ_out)
of "GNF stack it consumes" and "stack it leaves" (paper §3.2). Those stacks hold GNF
nonterminals (``expr@3``, ``S0``, a lifted ``')'``) that are not in the grammar text, so
each one is read back through provenance (:mod:`cfgzip_lab.grammar.provenance`): the top
of σ_in says *where* the token can come ("where the repetition ((\\"+\\" | \\"-\\") term)* in
rule expr is expected"), the top of σ_out what the grammar *needs after it* ("rule
term"); an empty σ_out means the token completes what it started. The exact pairs stay
available (:attr:`Explanation.pairs`) for a "details" view.

Two tokens are in different classes exactly when their pair sets differ;
:func:`compare_tokens` finds a pair one has and the other lacks, without building the
set difference (a walk over both canonical word DAGs at once, memoised per node pair).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..grammar.provenance import rules_of
from ..grammar.words import EMPTY
from ..vocab import show_bytes
from .displacement import Displacer

__all__ = [
    "SourcePair",
    "Explanation",
    "Comparison",
    "explain",
    "explain_token",
    "explain_class",
    "compare_tokens",
    "symbol_phrase",
    "token_text",
    "class_reason",
]


@dataclass(frozen=True, slots=True)
class SourcePair:
    """One displacement pair with GNF ids (top of stack first) and their names."""

    consumed: tuple[int, ...]
    pushed: tuple[int, ...]
    consumed_names: tuple[str, ...]
    pushed_names: tuple[str, ...]

    def gnf_text(self) -> str:
        """The exact pair over GNF names, as the σ details show it."""
        return f"[{' '.join(self.consumed_names)}] → [{' '.join(self.pushed_names)}]"


@dataclass
class Explanation:
    """What a token (or a class, through its members) means under the grammar.

    ``sentence`` is the one plain sentence; ``lines`` says the same as short lines for a
    bulleted list (who shares the class, where it can come, what comes after, each place
    named once); ``where`` and ``after`` list the places it can
    come and what the grammar needs after it, most frequent first, in source terms;
    ``rules`` the source rules involved; ``pairs`` the exact pairs (at most the limit),
    ``num_pairs`` how many there are in all. ``dead``: in no sentence of the grammar.
    """

    label: str
    sentence: str
    dead: bool = False
    where: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    completes: bool = False  # some pair leaves nothing open
    spans_boundary: bool = False  # some pair consumes more than one symbol
    rules: tuple[str, ...] = ()
    pairs: list[SourcePair] = field(default_factory=list)
    num_pairs: int = 0
    node: int = EMPTY
    lines: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """Why two tokens are (or are not) interchangeable; ``only_a``/``only_b`` are pairs one has and the other lacks."""

    labels: tuple[str, str]
    same: bool
    sentence: str
    only_a: list[SourcePair] = field(default_factory=list)
    only_b: list[SourcePair] = field(default_factory=list)


def symbol_phrase(displacer: Displacer, symbol: int) -> str:
    """A GNF nonterminal in source terms (its provenance), e.g. ``rule term (line 3)``."""
    gnf = displacer.gnf
    if symbol >= gnf.num_nonterminals:  # a counted repetition's member (concrete or symbolic)
        return gnf.describe_symbol(symbol) if gnf.origins else displacer.symbol_text(symbol)
    return gnf.describe_symbol(symbol) if gnf.origins else gnf.names[symbol]


def _decode(displacer: Displacer, word: tuple[int, ...]) -> SourcePair:
    consumed, pushed = displacer.split_word(word)
    name = displacer.symbol_text
    return SourcePair(consumed, pushed, tuple(map(name, consumed)), tuple(map(name, pushed)))


def _family_origins(gnf, symbol: int) -> tuple:
    from ..grammar.counted import family_of_symbol

    f = family_of_symbol(symbol)
    return () if f is None else gnf.families[f].origins


def _pairs(displacer: Displacer, node: int, limit: int) -> list[SourcePair]:
    return [_decode(displacer, w) for w in displacer.store.words(node, limit)]


def _top(items: Counter, k: int) -> list[str]:
    return [phrase for phrase, _ in items.most_common(k)]


def _join(phrases: Sequence[str], more: int = 0) -> str:
    if not phrases:
        return ""
    text = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]
    return text + (f" (and {more} more place{'s' if more > 1 else ''})" if more else "")


def _subject(label: str, peers: list[str], more: int) -> str:
    if not peers:
        return label
    names = [label, *peers]
    if more:
        return f"{', '.join(names)} and {more:,} more tokens are interchangeable: all"
    if len(names) == 2:
        return f"{names[0]} and {names[1]} are interchangeable: both"
    return f"{', '.join(names[:-1])} and {names[-1]} are interchangeable: all"


def explain(
    displacer: Displacer,
    data: bytes,
    *,
    label: str | None = None,
    peers: Sequence[str] = (),
    more_peers: int = 0,
    limit: int = 200,
    shown: int = 2,
) -> Explanation:
    """Explain the byte string ``data`` (a token) under the displacer's grammar.

    ``peers`` are labels of other tokens of its class (``more_peers`` counts the ones not
    named): the sentence then says they are interchangeable ("'+' and '-' are interchangeable: both can come where … and need …
    after"). ``limit`` bounds the pairs read (a token may have millions); ``shown`` the
    places named in the sentence.
    """
    label = label if label is not None else repr(data.decode("utf-8", "replace"))
    node = displacer.of_bytes(data)
    if node == EMPTY:
        return Explanation(
            label, f"{label} is in no sentence of the grammar: no engine ever allows it (the dead class)", dead=True
        )
    pairs = _pairs(displacer, node, limit)
    where: Counter[str] = Counter()
    after: Counter[str] = Counter()
    completes = spans = False
    involved: list = []
    gnf = displacer.gnf
    for p in pairs:
        where[symbol_phrase(displacer, p.consumed[0])] += 1
        if p.pushed:
            after[symbol_phrase(displacer, p.pushed[0])] += 1
        else:
            completes = True
        spans = spans or len(p.consumed) > 1
        for s in p.consumed + p.pushed:
            if s < len(gnf.origins):
                involved.extend(gnf.origins[s])
            elif gnf.families:
                involved.extend(_family_origins(gnf, s))
    subject = _subject(label, list(peers), more_peers)
    places = _top(where, shown)
    needs = _top(after, shown)
    sentence = f"{subject} can come where {_join(places, max(0, len(where) - shown))} is expected"
    if needs:
        sentence += f" and need{'' if peers else 's'} {_join(needs, max(0, len(after) - shown))} after"
        if completes:
            sentence += ", or complete it"
    else:
        sentence += f" and complete{'' if peers else 's'} it: nothing of it is left open"
    if spans:
        sentence += f"; {'they' if peers else 'it'} can also finish one part and reach into the next"
    lines = _lines(list(peers), more_peers, (places, len(where) - len(places)), (needs, len(after) - len(needs)))
    if not needs:
        lines.append("Then nothing: it completes what it started")
    elif completes:
        lines.append("Or it completes what it started: nothing of it is left open")
    if spans:
        lines.append("It can also finish one part and reach into the next")
    return Explanation(
        label,
        sentence,
        lines=lines,
        where=list(where),
        after=list(after),
        completes=completes,
        spans_boundary=spans,
        rules=rules_of(involved),
        pairs=pairs,
        num_pairs=displacer.num_pairs(node),
        node=node,
    )


def _lines(peers: list[str], more_peers: int, where: tuple[list[str], int], after: tuple[list[str], int]) -> list[str]:
    """The bulleted reading of :func:`explain`: one line per place, a place named once (what
    comes after a token is often the very repetition it came in: "more of the same")."""
    lines = []
    if peers:
        others = ", ".join(peers) + (f" and {more_peers:,} more" if more_peers else "")
        lines.append(f"Interchangeable with {others}: the grammar never tells them apart")
    places, more = where
    for i, place in enumerate(places):
        lines.append(f"{'Comes' if i == 0 else 'Or comes'} where {place} is expected")
    if more:
        lines.append(f"… and {more:,} more place{'s' if more > 1 else ''}")
    needs, more = after
    for i, need in enumerate(needs):
        same = need in places and need.startswith("the repetition ")
        if i == 0:
            lines.append(f"Then: more of {_short(need)}" if same else f"Then needs {need}")
        else:
            lines.append(f"Or then: more of {_short(need)}" if same else f"Or then needs {need}")
    if more:
        lines.append(f"… or {more:,} more thing{'s' if more > 1 else ''} after it")
    return lines


def _short(phrase: str) -> str:
    """A repetition named a second time: ``the repetition (…)* in rule name (line 2)`` →
    ``the same repetition in rule name (line 2)``."""
    _head, sep, rule = phrase.partition(" in rule ")
    return f"the same repetition in rule {rule}" if sep else phrase


def class_reason(num_pairs: int, class_size: int) -> str:
    """Why a token with ``num_pairs`` displacement pairs is in a class of ``class_size``, in plain
    words: a pair is one way the token fits the grammar's stack (what it consumes, what it leaves)."""
    ways = f"{num_pairs:,} way{'s' if num_pairs != 1 else ''}"
    if class_size > 1:
        return (
            f"all {class_size:,} tokens of the class fit the grammar in exactly the same {ways} "
            "(the details list them), and no other token does"
        )
    return (
        f"no other token fits the grammar in exactly these {ways} (the details list them), so it is alone in its class"
    )


def token_text(data: bytes) -> str:
    """A token's bytes between quotes, whitespace and non-UTF-8 bytes escaped (``'\\n'``, ``'\\xff'``)."""
    return "'" + show_bytes(data) + "'"


def explain_token(displacer: Displacer, vocab, classes, token_id: int, *, peers: int = 2, **options) -> Explanation:
    """:func:`explain` for a vocabulary token, naming up to ``peers`` other members of its class.

    ``vocab`` is a :class:`~cfgzip_lab.vocab.VocabTable`, ``classes`` the
    :class:`~.classing.TokenClasses` built for it under the displacer's grammar (or None:
    no peers named). Stop and special tokens have no displacement; say so instead.
    """
    from ..vocab import TokenKind

    data = vocab.token_bytes[token_id]
    kind = int(vocab.kinds[token_id])
    if kind == TokenKind.STOP:
        return Explanation(f"<stop {token_id}>", "a stop token: allowed exactly when the grammar can end")
    if kind != TokenKind.NORMAL or not data:
        return Explanation(f"<special {token_id}>", "a special token with no text: never allowed (blocked class)")
    names: list[str] = []
    more = 0
    if classes is not None:
        members = classes.members(int(classes.class_of[token_id]))
        others = [int(t) for t in members[: peers + 1] if int(t) != token_id][:peers]
        names = [token_text(vocab.token_bytes[t]) for t in others]
        more = int(members.size) - 1 - len(names)
    return explain(displacer, data, label=token_text(data), peers=names, more_peers=more, **options)


def explain_class(displacer: Displacer, vocab, classes, k: int, **options) -> Explanation:
    """:func:`explain_token` for class ``k``, through its representative (every member has the same pairs)."""
    if not 0 <= k < classes.num_classes:
        raise IndexError(f"class {k} does not exist (0..{classes.num_classes - 1})")
    return explain_token(displacer, vocab, classes, int(classes.representatives[k]), **options)


def _diff_nonempty(store, a: int, b: int, memo: dict[tuple[int, int], bool]) -> bool:
    """Whether set(a) \\ set(b) is non-empty (both canonical word DAGs; nothing is built)."""
    key = (a, b)
    got = memo.get(key)
    if got is None:
        if a == b or a == EMPTY:
            got = False
        elif b == EMPTY:
            got = True
        else:
            got = store.accepts(a) and not store.accepts(b)
            if not got:
                for s, ca in store.edges(a):
                    if _diff_nonempty(store, ca, store.child(b, s), memo):
                        got = True
                        break
        memo[key] = got
    return got


def _diff_words(store, a: int, b: int, limit: int) -> Iterator[tuple[int, ...]]:
    """Up to ``limit`` words of set(a) \\ set(b), shortest-prefix order of the DAG walk."""
    memo: dict[tuple[int, int], bool] = {}
    found = 0
    stack: list[tuple[int, int, tuple[int, ...]]] = [(a, b, ())]
    while stack and found < limit:
        x, y, prefix = stack.pop()
        if not _diff_nonempty(store, x, y, memo):
            continue
        if store.accepts(x) and (y == EMPTY or not store.accepts(y)):
            found += 1
            yield prefix
        for s, cx in reversed(store.edges(x)):
            stack.append((cx, store.child(y, s) if y != EMPTY else EMPTY, prefix + (s,)))


def compare_tokens(
    displacer: Displacer,
    a: bytes,
    b: bytes,
    *,
    labels: tuple[str, str] | None = None,
    limit: int = 5,
) -> Comparison:
    """Why ``a`` and ``b`` are in different classes (a pair one has and the other lacks,
    in source terms), or that they are interchangeable (equal displacement)."""
    la, lb = labels or (repr(a.decode("utf-8", "replace")), repr(b.decode("utf-8", "replace")))
    na, nb = displacer.of_bytes(a), displacer.of_bytes(b)
    if na == nb:
        why = (
            "both are in no sentence of the grammar (the dead class)"
            if na == EMPTY
            else f"both have the same {displacer.num_pairs(na):,} displacement pair(s), so the grammar "
            "cannot tell them apart in any state"
        )
        return Comparison((la, lb), True, f"{la} and {lb} are interchangeable: {why}")
    store = displacer.store
    only_a = [_decode(displacer, w) for w in _diff_words(store, na, nb, limit)]
    only_b = [_decode(displacer, w) for w in _diff_words(store, nb, na, limit)]
    if na == EMPTY or nb == EMPTY:
        dead, alive, pairs = (la, lb, only_b) if na == EMPTY else (lb, la, only_a)
        sentence = f"{dead} is in no sentence of the grammar, {alive} is: " + _pair_phrase(displacer, alive, pairs[0])
        return Comparison((la, lb), False, sentence, only_a, only_b)
    first, who, other = (only_a[0], la, lb) if only_a else (only_b[0], lb, la)
    sentence = (
        f"{la} and {lb} are in different classes: {_pair_phrase(displacer, who, first)}, and {other} cannot do that"
    )
    return Comparison((la, lb), False, sentence, only_a, only_b)


def _pair_phrase(displacer: Displacer, who: str, pair: SourcePair) -> str:
    where = symbol_phrase(displacer, pair.consumed[0])
    text = f"{who} can come where {where} is expected"
    if len(pair.consumed) > 1:
        text += f", finish it and go on into {symbol_phrase(displacer, pair.consumed[1])}"
    if pair.pushed:
        text += f" and then needs {symbol_phrase(displacer, pair.pushed[0])}"
        if len(pair.pushed) > 1:
            text += f", then {symbol_phrase(displacer, pair.pushed[1])}"
    else:
        text += " and leaves nothing of it open"
    return text
