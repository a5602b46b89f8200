"""What a grammar author asks of the rules as written: FIRST and FOLLOW as literals, the shortest
sentence of each rule, the rules that never end, the "keyword, nullable separator, word" lint,
and hints for habits from other dialects (``\\d``, ``.``).

:mod:`.analysis` answers in code points ("can start with 'l', 'r'"); an author thinks in the
grammar's own terminals (``"left" | "right"``), so the sets here hold the literals and classes
as written, each with the rule that writes it. Everything is computed on the AST
(:mod:`.tree`), before lowering, by least fixpoints in the shape of lark's
``GrammarAnalyzer.calculate_sets``::

    FIRST(e):  ""  -> {}          "abc" / [..] -> {e}         B -> FIRST(B)
               e1 … en -> FIRST(e1) ∪ FIRST(e2) while e1 … ei are nullable
               e1 | … | en -> the union            e{m,n} -> FIRST(e)
    FOLLOW:    FOLLOW(root) ∋ end of input;  for every occurrence of B in a rule A:
               what may come right after it (FIRST of the rest of its sequence, another
               iteration of an enclosing repetition), and FOLLOW(A) when the rest can be empty

The lint (issue 21: ``"turn" ws turn`` with ``ws ::= [ \\t]*`` let ``turnleft`` through): in a
sequence, a keyword (a literal ending or starting with two letters or digits) next to a
separator that can match nothing (nullable elements that can match white space), with a word
character on the other side: the words run together. ``[eE] [+-]? [0-9]+`` is no keyword and no
separator, so it is not flagged (on the 7 bundled grammars the lint finds nothing else). Each
warning says which string shows it, so it can be pasted as a sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import tree
from .diagnostics import Diagnostic, position_of
from .lower import complement, normalize

__all__ = [
    "Terminal",
    "first_terminals",
    "follow_terminals",
    "shortest_sentences",
    "never_ending",
    "run_together_lint",
    "hint",
    "with_hints",
    "END",
]

END = "end of input"
_SHORT_CAP = 160  # characters of a shortest sentence kept (its length is exact beyond that)
_WORD = normalize([(ord("0"), ord("9")), (ord("A"), ord("Z")), (ord("_"), ord("_")), (ord("a"), ord("z"))])
_SPACE = ((0x09, 0x0D), (0x20, 0x20))
_KEYWORD_END = re.compile(r"[A-Za-z0-9_]{2}\Z")
_KEYWORD_START = re.compile(r"[A-Za-z0-9_]{2}")

CodePoints = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Terminal:
    """A literal or character class as the author wrote it, and the rule that writes it."""

    text: str  # '"left"', '[0-9]'
    kind: str  # "literal", "class", "pattern" or "token" (Token(...)/ExcludeToken(...): a whole token by id)
    rule: str
    span: tuple[int, int] | None

    def __str__(self) -> str:
        return self.text


_AUTOMATON = getattr(tree, "Automaton", None)  # Regex(...), TagDispatch, Substring, regular bodies


def _is_automaton(e) -> bool:
    return _AUTOMATON is not None and isinstance(e, _AUTOMATON)


def _written(e, text: str) -> str:
    if e.span is not None and text:
        written = text[e.span[0] : e.span[1]]
        if written[:1] in ('"', "[") or (_is_automaton(e) and "(" in written):
            return written
    if isinstance(e, tree.Literal):
        return '"' + e.text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    if isinstance(e, tree.TokenSet):
        return _token_text(e)
    if _is_automaton(e):
        return e.pattern or "automaton"
    return "[…]"


def _token_text(e: tree.TokenSet) -> str:
    """``Token(5, 7)`` / ``ExcludeToken(5)``: how a token terminal reads (a TokenTagDispatch is
    rewritten into both, so its own text would not say which part)."""
    return f"{'ExcludeToken' if e.exclude else 'Token'}({', '.join(map(str, e.ids))})"


def _terminal(e, rule: str, text: str) -> Terminal:
    kind = (
        "literal"
        if isinstance(e, tree.Literal)
        else "pattern"
        if _is_automaton(e)
        else "token"
        if isinstance(e, tree.TokenSet)
        else "class"
    )
    return Terminal(_written(e, text), kind, rule, e.span)


def _labels(e) -> list:
    """The expressions an automaton's edges carry (a TagDispatch's rules, a counted sub-rule)."""
    return [label for _, label, _ in e.edges if not isinstance(label, tuple)]


def _automaton_nullable(e, nullable: set[str]) -> bool:
    seen, todo = {e.start}, [e.start]
    while todo:
        q = todo.pop()
        if q in e.finals:
            return True
        for source, label, target in e.edges:
            if source == q and not isinstance(label, tuple) and target not in seen and _expr_nullable(label, nullable):
                seen.add(target)
                todo.append(target)
    return False


def _nullable(ast: tree.GrammarAST) -> set[str]:
    """The rules that can match nothing (a least fixpoint; analysis.analyse computes it too, with
    FIRST and left corners that cost ten times more on c_like)."""
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            if name not in nullable and _expr_nullable(rule.body, nullable):
                nullable.add(name)
                changed = True
    return nullable


def _expr_nullable(e: tree.Expr, nullable: set[str]) -> bool:
    if isinstance(e, tree.Literal):
        return not e.text
    if isinstance(e, tree.CharClass):
        return False
    if isinstance(e, tree.RuleRef):
        return e.name in nullable
    if isinstance(e, tree.Sequence):
        return all(_expr_nullable(i, nullable) for i in e.items)
    if isinstance(e, tree.Choice):
        return any(_expr_nullable(o, nullable) for o in e.options)
    if isinstance(e, tree.Repeat):
        return e.min == 0 or _expr_nullable(e.item, nullable)
    if _is_automaton(e):
        return _automaton_nullable(e, nullable)
    return False


def first_terminals(ast: tree.GrammarAST) -> dict[str, tuple[Terminal, ...]]:
    """For every rule, the literals and classes its sentences can start with (in source order,
    each occurrence once; through the rules it starts with)."""
    nullable = _nullable(ast)
    first: dict[str, dict[Terminal, None]] = {name: {} for name in ast.rules}

    def visit(e: tree.Expr, rule: str) -> dict[Terminal, None]:
        return _first_of(e, rule, ast.text, nullable, first)

    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            found = visit(rule.body, name)
            if any(t not in first[name] for t in found):
                first[name].update(found)
                changed = True
    return {name: tuple(found) for name, found in first.items()}


def _first_of(e, rule, text, nullable, first) -> dict[Terminal, None]:
    if isinstance(e, tree.Literal):
        return {_terminal(e, rule, text): None} if e.text else {}
    if isinstance(e, tree.CharClass):
        return {_terminal(e, rule, text): None}
    if isinstance(e, tree.RuleRef):
        return dict(first.get(e.name, {}))
    if isinstance(e, tree.Sequence):
        out: dict[Terminal, None] = {}
        for item in e.items:
            out.update(_first_of(item, rule, text, nullable, first))
            if not _expr_nullable(item, nullable):
                break
        return out
    if isinstance(e, tree.Choice):
        out = {}
        for option in e.options:
            out.update(_first_of(option, rule, text, nullable, first))
        return out
    if isinstance(e, tree.Repeat):
        return _first_of(e.item, rule, text, nullable, first)
    if _is_automaton(e) or isinstance(e, tree.TokenSet):  # one terminal to an author, as written
        return {_terminal(e, rule, text): None}
    return {}


def follow_terminals(ast: tree.GrammarAST) -> dict[str, tuple[tuple[Terminal, ...], bool]]:
    """For every rule, the literals and classes that can come right after it, and whether the
    input can end right after it (``(terminals, can_end)``)."""
    nullable = _nullable(ast)
    first = {name: dict.fromkeys(ts) for name, ts in first_terminals(ast).items()}
    follow: dict[str, dict[Terminal, None]] = {name: {} for name in ast.rules}
    ends: dict[str, bool] = {name: False for name in ast.rules}
    ends[ast.root] = ast.root in ast.rules
    inherits: dict[str, set[str]] = {name: set() for name in ast.rules}  # FOLLOW(B) ⊇ FOLLOW(A)

    def walk(e: tree.Expr, owner: str, after: dict[Terminal, None], to_end: bool) -> None:
        if isinstance(e, tree.RuleRef):
            if e.name in follow:
                follow[e.name].update(after)
                if to_end:
                    inherits[e.name].add(owner)
        elif isinstance(e, tree.Sequence):
            rest, rest_end = dict(after), to_end
            for item in reversed(e.items):
                walk(item, owner, rest, rest_end)
                item_first = _first_of(item, owner, ast.text, nullable, first)
                if _expr_nullable(item, nullable):
                    rest = {**item_first, **rest}
                else:
                    rest, rest_end = item_first, False
        elif isinstance(e, tree.Choice):
            for option in e.options:
                walk(option, owner, after, to_end)
        elif isinstance(e, tree.Repeat):
            again = e.max is None or e.max > 1
            inner = {**_first_of(e.item, owner, ast.text, nullable, first), **after} if again else after
            walk(e.item, owner, inner, to_end)
        elif _is_automaton(e):  # a rule dispatched inside it: the pattern goes on after it
            inner = {_terminal(e, owner, ast.text): None, **after}
            for label in _labels(e):
                walk(label, owner, inner, to_end)

    for name, rule in ast.rules.items():
        walk(rule.body, name, {}, True)
    changed = True
    while changed:
        changed = False
        for b, owners in inherits.items():
            for a in owners:
                if any(t not in follow[b] for t in follow[a]):
                    follow[b].update(follow[a])
                    changed = True
                if ends[a] and not ends[b]:
                    ends[b] = changed = True
    return {name: (tuple(follow[name]), ends[name]) for name in ast.rules}


# -- shortest sentences and rules that never end ----------------------------------------------


def _pick(ranges: CodePoints) -> str:
    """A readable member of a code-point set: a letter, digit or other printable ASCII first."""
    for lo, hi in ((ord("a"), ord("z")), (ord("0"), ord("9")), (ord("A"), ord("Z")), (0x21, 0x7E), (0x20, 0x20)):
        for a, b in ranges:
            x, y = max(a, lo), min(b, hi)
            if x <= y:
                return chr(x)
    return chr(ranges[0][0]) if ranges else ""


def shortest_sentences(ast: tree.GrammarAST) -> dict[str, tuple[int, str] | None]:
    """For every rule, ``(length, text)`` of one shortest sentence (in code points; ``text`` cut at
    160 characters when longer), or None for a rule no finite string derives from."""
    best: dict[str, tuple[int, str] | None] = {name: None for name in ast.rules}

    def short(e: tree.Expr) -> tuple[int, str] | None:
        if isinstance(e, tree.Literal):
            return len(e.text), e.text[: _SHORT_CAP + 1]
        if isinstance(e, tree.CharClass):
            ranges = tuple(normalize(e.ranges))
            ranges = tuple(complement(ranges)) if e.negated else ranges
            return (1, _pick(ranges)) if ranges else None
        if isinstance(e, tree.RuleRef):
            return best.get(e.name)
        if isinstance(e, tree.Sequence):
            length, out = 0, ""
            for item in e.items:
                got = short(item)
                if got is None:
                    return None
                length, out = length + got[0], (out + got[1])[: _SHORT_CAP + 1]
            return length, out
        if isinstance(e, tree.Choice):
            options = [got for got in map(short, e.options) if got is not None]
            return min(options, key=lambda g: g[0]) if options else None
        if isinstance(e, tree.Repeat):
            if e.min == 0:
                return 0, ""
            got = short(e.item)
            if got is None:
                return None
            copies = min(e.min, _SHORT_CAP // max(1, got[0]) + 1)
            return got[0] * e.min, (got[1] * copies)[: _SHORT_CAP + 1]
        if _is_automaton(e):
            return _automaton_shortest(e, short)
        if isinstance(e, tree.TokenSet):  # one whole token, whose text only a tokenizer knows
            return 1, f"⟨{_token_text(e)}⟩"
        return None

    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            got = short(rule.body)
            if got is not None and (best[name] is None or got[0] < best[name][0]):
                best[name] = got
                changed = True
    return best


def _automaton_shortest(e, short) -> tuple[int, str] | None:
    """A shortest string through an automaton (Dijkstra over its states; a byte costs 1, an
    expression edge its own shortest length), as (length in bytes, text)."""
    import heapq

    best: dict[int, int] = {e.start: 0}
    words: dict[int, bytes] = {e.start: b""}
    heap = [(0, e.start)]
    while heap:
        cost, q = heapq.heappop(heap)
        if cost > best.get(q, cost):
            continue
        if q in e.finals:
            data = words[q]
            return cost, data.decode("utf-8", "replace")[: _SHORT_CAP + 1]
        for source, label, target in e.edges:
            if source != q:
                continue
            if isinstance(label, tuple):
                lo, hi = label
                printable = [b for b in (ord("a"), ord("0"), ord("A"), 0x20) if lo <= b <= hi]
                step, piece = 1, bytes([printable[0] if printable else max(lo, min(hi, 0x21))])
            else:
                got = short(label)
                if got is None:
                    continue
                step, piece = got[0], got[1].encode("utf-8", "surrogatepass")
            if cost + step < best.get(target, 1 << 62):
                best[target] = cost + step
                words[target] = (words[q] + piece)[: 4 * _SHORT_CAP]
                heapq.heappush(heap, (cost + step, target))
    return None


def _refs(e: tree.Expr) -> set[str]:
    if _is_automaton(e):
        return set().union(*(_refs(label) for label in _labels(e))) if _labels(e) else set()
    if isinstance(e, tree.RuleRef):
        return {e.name}
    if isinstance(e, tree.Sequence):
        return set().union(*(_refs(i) for i in e.items)) if e.items else set()
    if isinstance(e, tree.Choice):
        return set().union(*(_refs(o) for o in e.options)) if e.options else set()
    if isinstance(e, tree.Repeat):
        return _refs(e.item)
    return set()


def never_ending(ast: tree.GrammarAST) -> list[str]:
    """The rules that make others never end: among the rules no finite string derives from,
    those that need only themselves (a cycle without a way out, or an empty class such as
    ``[]``), not the rules that merely use them. ``root ::= "go" cmd`` / ``cmd ::= "x" cmd``
    gives ``["cmd"]``: root never ends because of cmd. In source order."""
    best = shortest_sentences(ast)
    dead = [name for name in ast.rules if best[name] is None]
    graph = {name: {r for r in _refs(ast.rules[name].body) if r in best and best[r] is None} for name in dead}
    reach: dict[str, set[str]] = {}
    for name in dead:  # rules reachable from name through dead rules (small: grammars are small)
        seen, todo = set(), [name]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[name] = seen
    # a culprit's dead rules all lead back to it: it belongs to a bottom strongly connected part
    return [name for name in dead if all(name in reach[r] for r in reach[name])]


# -- the run-together lint ----------------------------------------------------------------------


def _edge_sets(ast: tree.GrammarAST, nullable: set[str]) -> tuple[dict[str, CodePoints], dict[str, CodePoints]]:
    """FIRST and LAST code points of every rule (LAST: what its sentences can end with)."""
    first: dict[str, CodePoints] = {name: () for name in ast.rules}
    last: dict[str, CodePoints] = {name: () for name in ast.rules}
    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            for table, edge in ((first, _first_points), (last, _last_of)):
                got = edge(rule.body, nullable, table)
                if got and got != table[name]:
                    merged = tuple(normalize(table[name] + got))
                    if merged != table[name]:
                        table[name] = merged
                        changed = True
    return first, last


def _class_points(e: tree.CharClass) -> CodePoints:
    ranges = tuple(normalize(e.ranges))
    return tuple(complement(ranges)) if e.negated else ranges


def _last_of(e: tree.Expr, nullable: set[str], last: dict[str, CodePoints]) -> CodePoints:
    if isinstance(e, tree.Literal):
        return ((ord(e.text[-1]), ord(e.text[-1])),) if e.text else ()
    if isinstance(e, tree.CharClass):
        return _class_points(e)
    if isinstance(e, tree.RuleRef):
        return last.get(e.name, ())
    if isinstance(e, tree.Sequence):
        acc: CodePoints = ()
        for item in reversed(e.items):
            acc = tuple(normalize(acc + _last_of(item, nullable, last)))
            if not _expr_nullable(item, nullable):
                break
        return acc
    if isinstance(e, tree.Choice):
        return tuple(normalize([r for o in e.options for r in _last_of(o, nullable, last)]))
    if isinstance(e, tree.Repeat):
        return _last_of(e.item, nullable, last)
    if _is_automaton(e):  # the ASCII bytes that can end it (enough to tell a word character)
        into = [label for _, label, target in e.edges if target in e.finals and isinstance(label, tuple)]
        return tuple(normalize([(lo, min(hi, 0x7F)) for lo, hi in into if lo <= 0x7F]))
    return ()


def _first_points(e: tree.Expr, nullable: set[str], first: dict[str, CodePoints]) -> CodePoints:
    if isinstance(e, tree.Literal):
        return ((ord(e.text[0]), ord(e.text[0])),) if e.text else ()
    if isinstance(e, tree.CharClass):
        return _class_points(e)
    if isinstance(e, tree.RuleRef):
        return first.get(e.name, ())
    if isinstance(e, tree.Sequence):
        acc: CodePoints = ()
        for item in e.items:
            acc = tuple(normalize(acc + _first_points(item, nullable, first)))
            if not _expr_nullable(item, nullable):
                break
        return acc
    if isinstance(e, tree.Choice):
        return tuple(normalize([r for o in e.options for r in _first_points(o, nullable, first)]))
    if isinstance(e, tree.Repeat):
        return _first_points(e.item, nullable, first)
    if _is_automaton(e):
        out = [
            (label[0], min(label[1], 0x7F))
            for src, label, _ in e.edges
            if src == e.start and isinstance(label, tuple) and label[0] <= 0x7F
        ]
        return tuple(normalize(out))
    return ()


def _word_in(points: CodePoints) -> str | None:
    """A word character (letter, digit, ``_``) in ``points``, if any."""
    for a, b in points:
        for lo, hi in _WORD:
            x, y = max(a, lo), min(b, hi)
            if x <= y:
                return chr(x)
    return None


def _source(e: tree.Expr, text: str, width: int = 30) -> str:
    if e.span is None or not text:
        return type(e).__name__.lower()
    s = " ".join(text[e.span[0] : e.span[1]].split())
    return s if len(s) <= width else s[: width - 1] + "…"


def run_together_lint(ast: tree.GrammarAST) -> list[Diagnostic]:
    """Warnings where two words can run together: an element that can end with a letter or digit,
    then elements that can all match nothing, then one that can start with a letter or digit."""
    nullable = _nullable(ast)
    first, last = _edge_sets(ast, nullable)
    short = shortest_sentences(ast)
    text = ast.text
    out: list[Diagnostic] = []
    seen: set[tuple[int, int]] = set()

    def example(e: tree.Expr, want_end: str | None, want_start: str | None) -> str:
        if isinstance(e, tree.Literal):
            return e.text
        if isinstance(e, tree.RuleRef) and short.get(e.name):
            s = short[e.name][1]
            if s and ((want_end and s[-1] == want_end) or (want_start and s[0] == want_start)):
                return s
        return want_end or want_start or ""

    def keyword(e: tree.Expr, pattern: re.Pattern) -> bool:
        return isinstance(e, tree.Literal) and bool(
            pattern.search(e.text) if pattern is _KEYWORD_END else pattern.match(e.text)
        )

    def visit(e: tree.Expr, rule: str) -> None:
        if isinstance(e, tree.Sequence):
            items = e.items
            for i, a in enumerate(items):
                end_word = _word_in(_last_of(a, nullable, last))
                if end_word is None:
                    continue
                j = i + 1
                while j < len(items) and _expr_nullable(items[j], nullable) and not isinstance(items[j], tree.Literal):
                    j += 1
                if j == i + 1 or j >= len(items):
                    continue  # nothing nullable between, or nothing after it
                start_word = _word_in(_first_points(items[j], nullable, first))
                if start_word is None:
                    continue
                if not (keyword(a, _KEYWORD_END) or keyword(items[j], _KEYWORD_START)):
                    continue  # no keyword: [eE] [+-]? [0-9]+ is meant to run together
                gap_first = [r for x in items[i + 1 : j] for r in _first_points(x, nullable, first)]
                if not any(lo <= b and a0 <= hi for lo, hi in normalize(gap_first) for a0, b in _SPACE):
                    continue  # not a separator: nothing in between can be white space
                gap = items[i + 1]
                key = gap.span or (id(gap), 0)
                if key in seen:
                    continue
                seen.add(key)
                both = example(a, end_word, None) + example(items[j], None, start_word)
                where = gap.span[0] if gap.span else (e.span[0] if e.span else 0)
                line, column = position_of(text, where)
                seps = " ".join(_source(x, text) for x in items[i + 1 : j])
                out.append(
                    Diagnostic(
                        line,
                        column,
                        f"{_source(a, text)} can end with {end_word!r} and {seps} can match nothing, so "
                        f"{_source(items[j], text)} can follow it directly: {both!r} is accepted (in rule {rule}); "
                        "if the words must be apart, make the separator required (e.g. [ \\t]+)",
                        "warning",
                        span=gap.span,
                    )
                )
            for item in items:
                visit(item, rule)
        elif isinstance(e, tree.Choice):
            for option in e.options:
                visit(option, rule)
        elif isinstance(e, tree.Repeat):
            visit(e.item, rule)
        elif _is_automaton(e):
            for label in _labels(e):
                visit(label, rule)

    for name, rule in ast.rules.items():
        visit(rule.body, name)
    return out


# -- hints for habits from other dialects --------------------------------------------------------

_SHORTHANDS = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[A-Za-z0-9_]",
    "W": "[^A-Za-z0-9_]",
    "s": "[ \\t\\n\\r\\f\\v]",
    "S": "[^ \\t\\n\\r\\f\\v]",
}
_AT_BACKSLASH = re.compile(r"\\([dDwWsS])")


def hint(diagnostic: Diagnostic, text: str) -> str:
    """A hint for a diagnostic that a regex or GBNF habit explains, else ``""``:
    ``\\d`` → "write [0-9]", a rule named ``.`` → "for any character write [^\\n]"."""
    lines = text.split("\n")
    if not 1 <= diagnostic.line <= len(lines):
        return ""
    line = lines[diagnostic.line - 1]
    at = diagnostic.column - 1
    message = diagnostic.message
    if "unexpected character '\\\\'" in message or message.startswith("bad escape \\"):
        found = _AT_BACKSLASH.match(line, at) or _AT_BACKSLASH.match(line, max(0, at - 1))
        if found:
            letter = found.group(1)
            spelled = _SHORTHANDS[letter]
            if message.startswith("bad escape") and letter.islower():  # inside a class: its ranges
                return (
                    f"\\{letter} is a regex shorthand, not EBNF: write its ranges, {spelled[1:-1]} (so {spelled} alone)"
                )
            return f"\\{letter} is a regex shorthand, not EBNF: write {spelled}"
    if message == "undefined rule '.'":
        return "'.' is not 'any character' in XGrammar's EBNF: write [^\\n] (or [\\0-\\U0010FFFF] to take newlines too)"
    return ""


def with_hints(diagnostics: list[Diagnostic], text: str) -> list[Diagnostic]:
    """``diagnostics`` with :func:`hint` appended to the messages it explains."""
    out = []
    for d in diagnostics:
        extra = hint(d, text)
        out.append(d if not extra else Diagnostic(d.line, d.column, f"{d.message} — {extra}", d.severity, d.span))
    return out
