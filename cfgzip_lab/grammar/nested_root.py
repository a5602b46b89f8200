"""A root rule used inside the grammar: where XGrammar's masks leave its language.

XGrammar computes each rule position's token mask ahead of time, and a token that would run past
the end of the rule it starts in is "uncertain" there: checked at decode time against the whole
stack, so exact. The root rule is the exception (``GetAdaptiveTokenMask(is_root_rule)`` in its
``grammar_compiler.cc``, 0.2.8 and 0.2.9 alike): nothing is supposed to follow the root, so a token
that runs past its end is rejected outright. Where the root is also *referenced* by a rule (a JSON
Schema's ``"$ref": "#"``, ``root ::= "(" root ")" | "x"``), a nested root does have something after
it, and a token whose first byte the nested root's own body reads and that runs past that root's end
is left out of the mask although the matcher accepts it: after ``((x``, XGrammar's mask leaves out
``))`` while ``accept_string("))")`` succeeds.

That behaviour depends on where a token starts, not on the language, and the native engine's walk
(displacement under the grammar's normal form) follows the language: it would allow ``))``. Nor can
the compressed engine: one representative does not speak for its class there (``root ::= "" | root
[b]``: ``b`` is in XGrammar's mask, ``bb`` of the same class is not). So for a grammar whose root is
referenced where something can follow it, the native engine takes no σ_in index and serves every
request through XGrammar itself over the whole vocabulary (its plain matcher: XGrammar's masks by
construction, at XGrammar's speed), and the compressed engine refuses it with the reference named. A
reference after which nothing can ever come (``root ::= "a" root | "b"``: the nested root ends where
the outer one does) cannot be run past, and both engines serve it.

The check reads the grammar as XGrammar compiles it (the EBNF's rules), before any lowering:
- ``at_end`` occurrences: what follows a reference inside its rule derives only the empty string,
  and no enclosing repetition can go round again;
- ``aligned`` rules: rules whose end is always the end of the whole input (the root, and, as a
  greatest fixpoint, every rule all of whose references are ``at_end`` in an aligned rule);
- found: a reference to the root that is not ``at_end`` in an aligned rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from . import tree
from .diagnostics import Diagnostic, position_of

__all__ = [
    "COMPRESSED_REFUSAL",
    "NESTED_ROOT_REFUSAL",
    "mentions_root_again",
    "nested_root_in_text",
    "nested_root_reference",
]

NESTED_ROOT_REFUSAL = (
    "the root rule {root!r} is used inside the grammar here, with more input after it: XGrammar's mask "
    "leaves out every token that the nested {root!r} begins and that runs past its end (it builds the root's "
    "token masks as if nothing could follow the root), although its matcher accepts such a token; cfgzip's "
    "native walk cannot reproduce that, so this grammar's masks come from XGrammar itself over the whole "
    'vocabulary (the native engine\'s fallback). A JSON Schema\'s "$ref": "#" does this; giving the recursive '
    "part its own definition and referring to that lets the native engine serve it"
)
COMPRESSED_REFUSAL = (
    "the root rule {root!r} is used inside the grammar here, with more input after it: XGrammar's mask "
    "leaves out every token that the nested {root!r} begins and that runs past its end, so one representative "
    "does not speak for its class and the compressed engine refuses this grammar (the native engine serves it "
    "through XGrammar itself)"
)


def nested_root_reference(ast: tree.GrammarAST) -> Diagnostic | None:
    """The first reference to the root rule after which input can follow, as an error diagnostic
    (line and column in ``ast.text``), or None when XGrammar's masks are the language's."""
    rules, root = ast.rules, ast.root
    if ast.text and not mentions_root_again(ast.text, root):
        return None  # the common case: the root's name only where it is defined
    if not any(ref.name == root for rule in rules.values() for ref in _names(rule.body)):
        return None
    empty = _only_empty_rules(rules)
    occurrences = {name: list(_references(rule.body, empty, tail=True)) for name, rule in rules.items()}
    reachable, todo = {root}, [root]
    while todo:
        for ref, _ in occurrences[todo.pop()]:
            if ref.name in rules and ref.name not in reachable:
                reachable.add(ref.name)
                todo.append(ref.name)
    found = [(owner, ref, at_end) for owner in reachable for ref, at_end in occurrences[owner] if ref.name in rules]
    # not aligned: a rule referenced where input can follow, or referenced inside a rule not aligned
    unaligned = {ref.name for _, ref, at_end in found if not at_end and ref.name != root}
    todo = list(unaligned)
    while todo:
        for ref, _ in occurrences[todo.pop()]:
            if ref.name in rules and ref.name != root and ref.name not in unaligned:
                unaligned.add(ref.name)
                todo.append(ref.name)
    refused = [ref for owner, ref, at_end in found if ref.name == root and not (at_end and owner not in unaligned)]
    if not refused:
        return None
    ref = min(refused, key=lambda r: r.span or (0, 0))
    line, column = position_of(ast.text, ref.span[0]) if ref.span else (1, 1)
    return Diagnostic(line, column, NESTED_ROOT_REFUSAL.format(root=root), span=ref.span)


def nested_root_in_text(text: str, root: str = "root") -> Diagnostic | None:
    """:func:`nested_root_reference` of an EBNF text whose syntax tree is not at hand (a grammar read
    back from a cache, the compressed engine's text): its rules parsed only where the root's name
    stands in it twice."""
    if not mentions_root_again(text, root):
        return None
    from .ebnf import parse_ebnf

    return nested_root_reference(parse_ebnf(text, root=root, reachable_only=True, warn_unreachable=False))


def mentions_root_again(text: str, root: str = "root") -> bool:
    """Whether ``text`` names ``root`` as a whole identifier more than once (its definition): where
    not, no rule refers to it, and nothing else need be read."""
    return _name_count(text, root) >= 2


def _name_count(text: str, name: str, limit: int = 2) -> int:
    """How many times ``name`` stands in ``text`` as a whole identifier, up to ``limit``: one regex search per
    count, the name first (its literal prefix found in C) and the characters around it checked after, as
    :func:`_name_count_scan` checks them (``\\w`` is ``str.isalnum()`` or ``_``). A schema's EBNF names its
    root's parts ``root_prop_0``...: the scan's Python step per such hit was ~0.1 ms of a median MaskBench
    schema's first mask."""
    if limit <= 0 or not _NAME_CHARS.fullmatch(name):
        return _name_count_scan(text, name, limit)
    pattern = _WHOLE_NAME.get(name)
    if pattern is None:
        if len(_WHOLE_NAME) >= 64:
            _WHOLE_NAME.clear()
        escaped = re.escape(name)
        pattern = _WHOLE_NAME[name] = re.compile(f"{escaped}(?<![\\w.\\-]{escaped})(?![\\w.\\-])")
    count = 0
    for _ in pattern.finditer(text):
        count += 1
        if count >= limit:
            break
    return count


# A name of identifier characters (each a candidate's neighbour would stop): a hit inside an earlier candidate
# has one of them before it, so the regex's candidates are the scan's. Per name, its regex.
_NAME_CHARS = re.compile(r"[\w.\-]+")
_WHOLE_NAME: dict[str, re.Pattern] = {}


def _name_count_scan(text: str, name: str, limit: int = 2) -> int:
    """:func:`_name_count`'s reference: a scan with ``str.find`` (a regex with its look-behind first took 1.4 ms
    on a 42 KB schema grammar: no literal prefix to search for)."""
    count, at = 0, text.find(name)
    while at >= 0 and count < limit:
        before = text[at - 1] if at else " "
        after = text[at + len(name) : at + len(name) + 1] or " "
        if not (before.isalnum() or before in "_.-" or after.isalnum() or after in "_.-"):
            count += 1
        at = text.find(name, at + len(name))
    return count


def _names(e: tree.Expr) -> Iterator[tree.RuleRef]:
    """Every rule reference in ``e`` (automaton edges included)."""
    todo = [e]
    while todo:
        e = todo.pop()
        if isinstance(e, tree.RuleRef):
            yield e
        elif isinstance(e, tree.Sequence):
            todo.extend(e.items)
        elif isinstance(e, tree.Choice):
            todo.extend(e.options)
        elif isinstance(e, tree.Repeat):
            todo.append(e.item)
        elif isinstance(e, tree.Automaton):
            todo.extend(label for _, label, _ in e.edges if not isinstance(label, tuple))


def _references(e: tree.Expr, empty: set[str], tail: bool) -> Iterator[tuple[tree.RuleRef, bool]]:
    """Every rule reference in ``e`` and whether nothing but the empty string can follow it
    inside ``e`` (given that nothing follows ``e`` when ``tail``)."""
    if isinstance(e, tree.RuleRef):
        yield e, tail
    elif isinstance(e, tree.Sequence):
        rest_empty = tail  # from the last item back: whether all after the item derive only ""
        for item in reversed(e.items):
            yield from _references(item, empty, rest_empty)
            rest_empty = rest_empty and _only_empty(item, empty)
    elif isinstance(e, tree.Choice):
        for option in e.options:
            yield from _references(option, empty, tail)
    elif isinstance(e, tree.Repeat):
        # another round can follow the item, unless there is at most one
        yield from _references(e.item, empty, tail and e.max is not None and e.max <= 1)
    elif isinstance(e, tree.Automaton):
        for _, label, _ in e.edges:
            if not isinstance(label, tuple):
                yield from _references(label, empty, False)


def _only_empty_rules(rules: dict[str, tree.Rule]) -> set[str]:
    """The rules that derive the empty string and nothing else, as a least fixpoint (a rule that
    only recurses into itself is left out: a refusal, never a wrong mask)."""
    empty: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rule in rules.items():
            if name not in empty and _only_empty(rule.body, empty):
                empty.add(name)
                changed = True
    return empty


def _only_empty(e: tree.Expr, empty: set[str]) -> bool:
    """``e`` derives the empty string and nothing else, given the rules ``empty`` known to."""
    if isinstance(e, tree.Literal):
        return e.text == ""
    if isinstance(e, tree.Sequence):
        return all(_only_empty(x, empty) for x in e.items)
    if isinstance(e, tree.Choice):
        return all(_only_empty(x, empty) for x in e.options)
    if isinstance(e, tree.Repeat):
        return e.max == 0 or _only_empty(e.item, empty)
    if isinstance(e, tree.RuleRef):
        return e.name in empty
    return False
