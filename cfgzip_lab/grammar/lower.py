"""Lowering: grammar AST → byte-level CFG, with XGrammar's exact byte semantics.

XGrammar reads a character class as a set of *code points* 0..0x10FFFF (the
surrogates U+D800..U+DFFF included) and matches their standard UTF-8 encodings:
overlong forms (C0/C1 leads, E0 80.., F0 80..), bytes F5..FF and anything beyond
U+10FFFF are rejected. Those facts were checked against ``GrammarMatcher`` and are
pinned by ``tests/test_lower.py``. A class therefore lowers to the UTF-8 byte
sequences of exactly its code points; a lenient lowering (any lead byte C0..F7)
would split token classes, because the engine rejects what we would accept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from typing import TYPE_CHECKING

from ..deadline import CHECK_MASK
from . import tree
from .cfg import CFG, ByteSet, Production, Symbol
from .counted import COUNTED_THRESHOLD, Counted
from .diagnostics import position_of
from .provenance import origin_at
from .token_macros import named_ids, token_terminal, token_universe
from .tree import Span

if TYPE_CHECKING:
    from ..deadline import Deadline

MAX_CODE_POINT = 0x10FFFF


def encode_code_point(cp: int) -> bytes:
    """UTF-8 of one code point, surrogates included (XGrammar accepts ED A0 80 for U+D800)."""
    return chr(cp).encode("utf-8", "surrogatepass")


def complement(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """Code points 0..0x10FFFF not in ``ranges``."""
    out, nxt = [], 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return out


def normalize(ranges) -> list[tuple[int, int]]:
    """Sorted, merged, non-overlapping inclusive ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF, MAX_CODE_POINT)


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of lo..hi.

    The classic construction (as in RE2 and Rust's regex-syntax): split the range at
    encoded-length boundaries, then until every continuation position spans a full
    or aligned block, so that each piece is a product of per-position byte ranges.
    """
    out: list[tuple[tuple[int, int], ...]] = []
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        for limit in _LENGTH_LIMITS[:-1]:
            if lo <= limit < hi:
                stack += [(limit + 1, hi), (lo, limit)]
                break
        else:
            for i in (1, 2, 3):
                mask = (1 << (6 * i)) - 1
                if lo & ~mask != hi & ~mask:
                    if lo & mask:
                        stack += [((lo | mask) + 1, hi), (lo, lo | mask)]
                        break
                    if hi & mask != mask:
                        stack += [(hi & ~mask, hi), (lo, (hi & ~mask) - 1)]
                        break
            else:
                a, b = encode_code_point(lo), encode_code_point(hi)
                out.append(tuple(zip(a, b)))
    return out


def class_sequences(ranges: list[tuple[int, int]]) -> list[tuple[ByteSet, ...]]:
    """Per-position byte sets for a set of code points; one-byte pieces merged into one set."""
    single = 0
    multi: list[tuple[ByteSet, ...]] = []
    for lo, hi in ranges:
        for seq in utf8_sequences(lo, hi):
            if len(seq) == 1:
                single |= ByteSet.range(*seq[0]).bits
            else:
                multi.append(tuple(ByteSet.range(a, b) for a, b in seq))
    return ([(ByteSet(single),)] if single else []) + multi


@lru_cache(maxsize=4096)
def _class_byte_sequences(ranges: tuple[tuple[int, int], ...], negated: bool) -> tuple[tuple[ByteSet, ...], ...]:
    """:func:`class_sequences` of a class's code points, kept: the same classes recur across grammars
    (every JSON Schema's EBNF has XGrammar's ``[^\0-\x1f\"\\\r\n]``, ``[0-9]``, ``[ \n\r\t]``)."""
    normal = normalize(ranges)
    return tuple(class_sequences(complement(tuple(normal)) if negated else normal))


@dataclass
class _Lowerer:
    cfg: CFG
    text: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    class_cache: dict[tuple, str | ByteSet | None] = field(default_factory=dict)
    counted_threshold: int = COUNTED_THRESHOLD
    automata: dict[object, tuple[tree.Automaton, str]] = field(default_factory=dict)  # _automaton_key → (node, start)
    named_tokens: frozenset[int] = frozenset()  # token ids named anywhere (.token_macros)
    # While a rule is lowered for :data:`_LOWERED`: the class_cache entries it found made (by
    # earlier rules), and whether it lowered an automaton (shared by identity: not kept).
    found: list[tuple[tuple, str | ByteSet | None]] = field(default_factory=list)
    automaton_seen: bool = False
    # The build's time budget: checked per rule and every CHECK_EVERY edges and states of an automaton
    # (a regex's can hold 100,000 edges: ~1 s to lower, 2-3 s under load).
    deadline: Deadline | None = None

    def fresh(
        self,
        owner: str,
        alts: list[Production],
        kind: str = "",
        node: tree.Expr | None = None,
        spans: list[tuple[Span | None, ...]] | None = None,
    ) -> str:
        n = self.counters.get(owner, 0) + 1
        self.counters[owner] = n
        name = f"{owner}@{n}"
        self.cfg.rules[name] = alts
        self.cfg.origins[name] = origin_at(owner, kind, None if node is None else node.span, self.text)
        # Without spans per symbol, a helper's symbols point at the construct it was made from.
        if spans is None:
            span = _span(node)
            spans = [(span,) * len(rhs) for rhs in alts]
        self.cfg.symbol_spans[name] = spans
        return name

    def alternatives(self, owner: str, e: tree.Expr) -> list[Production]:
        return [rhs for rhs, _ in self.spanned_alternatives(owner, e)]

    def spanned_alternatives(self, owner: str, e: tree.Expr) -> list[tuple[Production, tuple[Span | None, ...]]]:
        """Productions of ``e`` with the source span of each symbol (for provenance)."""
        if e.__class__ is tree.Choice:
            return [alt for o in e.options for alt in self.spanned_alternatives(owner, o)]
        pairs = self.symbols(owner, e)
        if not pairs:
            return [((), ())]
        symbols, spans = zip(*pairs)
        return [(symbols, spans)]

    def symbols(self, owner: str, e: tree.Expr) -> list[tuple[Symbol, Span | None]]:
        # By class identity, the commonest first (no node class is subclassed): isinstance chains
        # were a good part of the lowering's time.
        cls = e.__class__
        if cls is tree.Literal:
            span = e.span
            return [(_BYTE[b], span) for b in e.text.encode("utf-8", "surrogatepass")]
        if cls is tree.Sequence:
            symbols = self.symbols
            return [pair for item in e.items for pair in symbols(owner, item)]
        if cls is tree.RuleRef:
            return [(e.name, e.span)]
        if cls is tree.CharClass:
            return [(s, e.span) for s in self.char_class(owner, e)]
        if cls is tree.Repeat:
            return self.repeat(owner, e)
        if isinstance(e, tree.Choice):
            spanned = self.spanned_alternatives(owner, e)
            alts, spans = [rhs for rhs, _ in spanned], [sp for _, sp in spanned]
            return [(self.fresh(owner, alts, "alternation", e, spans), e.span)]
        if isinstance(e, tree.CharClass):
            return [(s, e.span) for s in self.char_class(owner, e)]
        if isinstance(e, tree.Repeat):
            return self.repeat(owner, e)
        if isinstance(e, tree.Automaton):
            return [(self.automaton(owner, e), e.span)]
        if isinstance(e, tree.TokenSet):  # Token(...) / ExcludeToken(...): a token terminal
            return [(token_terminal(e, self.named_tokens), e.span)]
        raise TypeError(f"unknown grammar node {e!r}")

    def char_class(self, owner: str, e: tree.CharClass) -> list[Symbol]:
        key = (e.ranges, e.negated)
        if key not in self.class_cache:
            seqs = _class_byte_sequences(e.ranges, e.negated)
            if not seqs:
                # An empty class matches nothing: a nonterminal without productions.
                self.class_cache[key] = self.fresh(owner, [], "character class", e)
            elif len(seqs) == 1 and len(seqs[0]) == 1:
                self.class_cache[key] = seqs[0][0]
            else:
                self.class_cache[key] = self.fresh(owner, list(seqs), "character class", e)
            return [self.class_cache[key]]
        got = self.class_cache[key]
        self.found.append((key, got))
        return [got]

    def automaton(self, owner: str, e: tree.Automaton) -> str:
        """One nonterminal per state, ``Q → label Q'`` per edge and ``Q → ε`` per final state: a
        right-linear grammar with exactly the automaton's language (byte ranges between the
        same two states share one production). An automaton met twice (XGrammar's sub-rule of a
        large ``X{n,}`` is both repeated and starred), or two equal ones (a JSON Schema's pattern,
        one ``Regex(...)`` per property that has it), is lowered once: its states' languages are
        the same wherever it stands. Github_hard o21075 has 20 regexes, 6 of them distinct: lowered
        once each, its normal form fell from 30,208 nonterminals to 8,958 and its classing from 14.8
        to 1.5 s, with the same 1,331 classes (their stack contexts are united; that can only
        split classes, never merge two tokens the grammar tells apart)."""
        self.automaton_seen = True
        key = _automaton_key(e)
        got = self.automata.get(key)
        if got is not None:
            return got[1]
        deadline = self.deadline
        kind = _AUTOMATON_KINDS.get(e.pattern, "attribute" if e.pattern.endswith("]") else "regex")
        names = [self.fresh(owner, [], kind, e) for _ in range(e.num_states)]
        self.automata[key] = (e, names[e.start])  # keeps e alive, so an id key stays its own
        bytesets: dict[tuple[int, int], ByteSet] = {}
        alts: list[list[Production]] = [[] for _ in range(e.num_states)]
        for i, (source, label, target) in enumerate(e.edges):
            if deadline is not None and not i & CHECK_MASK:
                deadline.check(STAGE)
            if isinstance(label, tuple):
                pair = (source, target)
                bytesets[pair] = bytesets.get(pair, ByteSet(0)) | ByteSet.range(*label)
            else:
                alts[source].append(tuple(s for s, _ in self.symbols(owner, label)) + (names[target],))
        for (source, target), byteset in bytesets.items():
            alts[source].append((byteset, names[target]))
        for q in e.finals:
            alts[q].append(())
        for i, (name, productions) in enumerate(zip(names, alts)):
            if deadline is not None and not i & CHECK_MASK:
                deadline.check(STAGE)
            self.cfg.rules[name] = productions
            self.cfg.symbol_spans[name] = [tuple(e.span for _ in rhs) for rhs in productions]
        return names[e.start]

    def repeat(self, owner: str, e: tree.Repeat) -> list[tuple[Symbol, Span | None]]:
        pairs = self.symbols(owner, e.item)
        item = [s for s, _ in pairs]
        if len(item) != 1:
            item = [self.fresh(owner, [tuple(item)], "group", e.item, [tuple(sp for _, sp in pairs)])]
            pairs = [(item[0], e.item.span)]
        if (e.max if e.max is not None else e.min) > self.counted_threshold:
            # Large bounds stay one counted nonterminal (see .counted): never n copies.
            if not isinstance(item[0], str):
                item = [self.fresh(owner, [(item[0],)], "group", e.item, [(pairs[0][1],)])]
            counted = self.fresh(owner, [], "counted repetition", e, [])
            self.cfg.counted[counted] = Counted(item[0], e.min, e.max)
            return [(counted, e.span)]
        head = pairs * e.min  # the mandatory copies point at the item, the loop at the repetition
        if e.max is None:
            # X* as right recursion (star -> ε | X star): right recursion needs no
            # left-recursion removal later and keeps GNF tails short. (fresh(), inlined: the
            # production names the star itself; the same name, origin and spans.)
            n = self.counters.get(owner, 0) + 1
            self.counters[owner] = n
            star = f"{owner}@{n}"
            cfg = self.cfg
            cfg.rules[star] = [(), (item[0], star)]
            cfg.origins[star] = origin_at(owner, "repetition", e.span, self.text)
            cfg.symbol_spans[star] = [(), (pairs[0][1], e.span)]
            return head + [(star, e.span)]
        tail: list[Symbol] = []
        kind = "optional" if (e.min, e.max) == (0, 1) else "bounded repetition"
        for _ in range(e.max - e.min):  # X{0,k} = ε | X X{0,k-1}
            tail = [self.fresh(owner, [(), tuple(item + tail)], kind, e, [(), (pairs[0][1],) + (e.span,) * len(tail)])]
        return head + [(s, e.span) for s in tail]


def _without_spans(x: object) -> object:
    """``x`` with every grammar node's ``span`` left out (nodes as (type, fields...) tuples): equal for
    two occurrences of one construct."""
    if x.__class__ is tuple:
        return tuple(_without_spans(item) for item in x)
    names = getattr(x.__class__, "__dataclass_fields__", None)
    if names is None:
        return x
    if "edges" in names:  # an automaton: most labels are byte ranges, which hold no span
        edges = tuple(e if e[1].__class__ is tuple else (e[0], _without_spans(e[1]), e[2]) for e in x.edges)
        return (
            x.__class__,
            edges,
            *(_without_spans(getattr(x, name)) for name in names if name not in ("span", "edges")),
        )
    return (x.__class__, *(_without_spans(getattr(x, name)) for name in names if name != "span"))


def _automaton_key(e: tree.Automaton) -> object:
    """What :meth:`_Lowerer.automaton` lowers once: ``e``'s states, edges (sub-expressions without
    their spans), finals and pattern; ``id(e)`` where some part of it cannot be hashed."""
    key = _without_spans(e)
    try:
        hash(key)
    except TypeError:
        return id(e)
    return key


#: The stage a build's :class:`~cfgzip_lab.deadline.Deadline` names when it runs out while lowering.
STAGE = "the front end (lowering)"

# One ByteSet per byte value, shared (a literal's bytes: a third of lowering's ByteSets were these).
_BYTE = tuple(ByteSet(1 << b) for b in range(256))

# What provenance calls an automaton's states, by the automaton's ``pattern`` (a Regex's is its
# pattern; a rule shaped by lazy / max_chars is "name[lazy]").
_AUTOMATON_KINDS = {"TagDispatch": "tag dispatch", "Substring": "substring"}


def _span(node: tree.Expr | None) -> Span | None:
    return None if node is None else node.span


def lower(ast: tree.GrammarAST, *, counted_threshold: int = COUNTED_THRESHOLD, deadline: Deadline | None = None) -> CFG:
    """Byte-level CFG with the same language as ``ast`` under XGrammar's semantics.

    Rule names are kept; helper nonterminals are named ``rule@n``. ``cfg.origins`` maps
    every nonterminal to the source construct it stands for (:mod:`.provenance`), and
    ``cfg.symbol_spans`` gives each production symbol's span in the grammar text.
    A repetition whose bound exceeds ``counted_threshold`` becomes one counted nonterminal
    (``cfg.counted``, :mod:`.counted`) instead of that many copies of its item.
    ``deadline`` (:class:`~cfgzip_lab.deadline.Deadline`): the build's time budget, checked per rule and
    inside a large automaton (past it: :class:`~cfgzip_lab.deadline.BuildBudgetError`, stage :data:`STAGE`).
    """
    cfg = CFG(start=ast.root, text=ast.text)
    lowerer = _Lowerer(
        cfg, ast.text, counted_threshold=counted_threshold, named_tokens=named_ids(ast), deadline=deadline
    )
    cfg.tokens = token_universe(lowerer.named_tokens)
    rules = list(ast.rules.values())
    key = (counted_threshold, lowerer.named_tokens)
    kept = _kept_prefix(rules, key)
    done = 0 if kept is None else len(kept.rules)
    lowered = [None] * len(rules)  # per rule from `done` on: its kept lowering, where one fits
    for i, (name, rule) in enumerate(ast.rules.items()):
        cfg.rules[name] = []
        if i < done:
            cfg.origins[name] = kept.origins[i]
            continue
        again = lowered[i] = _kept_rule(rule, key, ast.text)
        cfg.origins[name] = again.origin if again is not None else origin_at(name, "rule", rule.span, ast.text)
    if kept is not None:
        kept.restore(lowerer, rules)
    # A prefix this grammar shares with the last one lowered, when the two texts differ (XGrammar's
    # basic_* rules head every JSON Schema's EBNF), is kept for the next grammar: a prefix of two
    # different grammars, never a grammar lowered twice.
    last_rules, last_text = _LAST.get(key, ((), None))
    share = _shared(rules, last_rules) if last_text != ast.text else 0
    keep_at = share if done < share < min(len(rules), len(last_rules)) and share >= _PREFIX_MIN else -1
    _LAST[key] = (rules, ast.text)
    for i in range(done, len(rules)):
        if deadline is not None:
            deadline.check(STAGE)
        if i == keep_at:
            _keep_prefix(lowerer, rules[:i], ast.rules, key)
        rule = rules[i]
        again = lowered[i]
        if again is None or not again.replay(lowerer):
            _lower_rule(lowerer, rule, key)
    return cfg


def _lower_rule(lowerer: _Lowerer, rule: tree.Rule, key: tuple) -> None:
    """Lower one rule into ``lowerer.cfg``, and keep what it made in :data:`_LOWERED`."""
    cfg, name = lowerer.cfg, rule.name
    before = (len(cfg.rules), len(cfg.counted), len(lowerer.class_cache))
    lowerer.found, lowerer.automaton_seen = [], False
    spanned = lowerer.spanned_alternatives(name, rule.body)
    cfg.rules[name] = [rhs for rhs, _ in spanned]
    cfg.symbol_spans[name] = [spans for _, spans in spanned]
    if lowerer.automaton_seen or rule.span is None or not cfg.text:
        return
    helpers = _last_items(cfg.rules, len(cfg.rules) - before[0])
    made = _last_items(lowerer.class_cache, len(lowerer.class_cache) - before[2])
    new = {k for k, _ in made}
    start, end = rule.span
    if len(_LOWERED) >= _LOWERED_KEPT:
        _LOWERED.clear()  # derived data only: dropped whole
    _LOWERED[id(rule), key] = _Lowered(
        rule=rule,
        place=(cfg.text[start:end], position_of(cfg.text, start)),
        origin=cfg.origins[name],
        productions=tuple(cfg.rules[name]),
        spans=tuple(cfg.symbol_spans[name]),
        helpers=tuple((n, tuple(p), cfg.origins[n], tuple(cfg.symbol_spans[n])) for n, p in helpers),
        counted=tuple(_last_items(cfg.counted, len(cfg.counted) - before[1])),
        found=tuple(dict.fromkeys((k, v) for k, v in lowerer.found if k not in new)),
        made=tuple(made),
        count=lowerer.counters.get(name),
    )


def _last_items(mapping: dict, n: int) -> list:
    """The ``n`` items last inserted into ``mapping``, in insertion order (without walking the rest)."""
    return [(k, mapping[k]) for k in islice(reversed(mapping), n)][::-1] if n > 0 else []


@dataclass(frozen=True, slots=True)
class _Lowered:
    """What lowering one rule made, to make again without lowering it.

    A rule's lowering depends on the rule (a frozen :class:`~.tree.Rule`: the parse's chunk cache gives
    the same object for the same rule text at the same place, :func:`~.ebnf.parse_ebnf`), the
    threshold and named tokens (the key), the text at its place (origins and excerpts) and, of the
    state before it, only the multi-byte classes it uses: such a class is made once, by the first rule
    that uses it, and named after that rule. Helper names count per rule (``name@n``). So where the
    classes it found made are made alike and the ones it made are not made yet, the same rule lowers to
    exactly these nonterminals, productions, origins and spans, in this order. Kept for XGrammar's
    ``basic_*`` rules, which every JSON Schema's EBNF carries, and for a grammar compiled again
    (measured: 0042's lowering 0.16 -> 0.05 ms in a loop). Rules with an automaton (lowered once per
    node identity, .automaton) are not kept."""

    rule: tree.Rule  # held, so its identity stays its own
    place: tuple[str, tuple[int, int]]  # the rule's text and (line, column)
    origin: object
    productions: tuple[Production, ...]
    spans: tuple
    helpers: tuple  # (name, productions, origin, spans), in creation order
    counted: tuple
    found: tuple  # (class key, value): the classes it used that earlier rules had made
    made: tuple  # (class key, value): the classes it made
    count: int | None  # lowerer.counters[rule name] after it

    def fits(self, text: str) -> bool:
        start, end = self.rule.span
        return text[start:end] == self.place[0] and position_of(text, start) == self.place[1]

    def replay(self, lowerer: _Lowerer) -> bool:
        """Make the rule's nonterminals again, or False (nothing done) where the classes differ."""
        classes = lowerer.class_cache
        if any(classes.get(k, _MISSING) != v for k, v in self.found) or any(k in classes for k, _ in self.made):
            return False
        cfg = lowerer.cfg
        rules, origins, symbol_spans = cfg.rules, cfg.origins, cfg.symbol_spans
        for name, productions, origin, spans in self.helpers:
            rules[name] = list(productions)
            origins[name] = origin
            symbol_spans[name] = list(spans)
        cfg.counted.update(self.counted)
        classes.update(self.made)
        name = self.rule.name
        rules[name] = list(self.productions)
        symbol_spans[name] = list(self.spans)
        if self.count is not None:
            lowerer.counters[name] = self.count
        return True


_MISSING = object()
_LOWERED: dict[tuple, _Lowered] = {}
_LOWERED_KEPT = 4096


def _kept_rule(rule: tree.Rule, key: tuple, text: str) -> _Lowered | None:
    """The kept lowering of this very rule under ``key``, where ``text`` holds it at the same place."""
    got = _LOWERED.get((id(rule), key))
    return got if got is not None and got.rule is rule and got.fits(text) else None


@dataclass
class _Prefix:
    """The lowering's state after the first rules of a grammar, to start another grammar from.

    Lowering goes rule by rule in source order, and what it makes for a rule depends on that rule
    (a frozen :class:`~.tree.Rule`), the rules before it (a multi-byte class is made once, by the
    first rule that uses it, and shared), the threshold and the named tokens; positions come from
    the rule's spans. :func:`~.ebnf.parse_ebnf` gives the same rule *object* for a rule chunk of the
    same text at the same offset and line (its chunk cache), so a grammar whose first rules are these
    very objects (``is``) lowers them to exactly this state: the same nonterminals, names, origins and
    spans, in the same order. Kept: XGrammar prints the same ``basic_*`` rules at the top of every
    JSON Schema's EBNF (measured: 0042's lowering 0.29 -> 0.05 ms)."""

    rules: tuple[tree.Rule, ...]  # holds the rule objects, so their identities stay theirs
    key: tuple
    origins: list  # cfg.origins of the rules, in order
    productions: list[list[Production]]  # cfg.rules of the rules, in order
    helpers: list[tuple[str, list[Production], object]]  # (name, productions, origin), in creation order
    symbol_spans: list  # cfg.symbol_spans' items, in insertion order
    counted: list
    counters: dict[str, int]
    class_cache: dict
    automata: dict

    def restore(self, lowerer: _Lowerer, rules: list[tree.Rule]) -> None:
        cfg = lowerer.cfg
        for rule, productions in zip(self.rules, self.productions):
            cfg.rules[rule.name] = list(productions)
        for name, productions, origin in self.helpers:
            cfg.rules[name] = list(productions)
            cfg.origins[name] = origin
        cfg.symbol_spans = {name: list(spans) for name, spans in self.symbol_spans}
        cfg.counted = dict(self.counted)
        lowerer.counters = dict(self.counters)
        lowerer.class_cache = dict(self.class_cache)
        lowerer.automata = dict(self.automata)


_PREFIXES: list[_Prefix] = []
_PREFIXES_KEPT = 8
_PREFIX_MIN = 4  # rules: shorter shared prefixes are not worth keeping
_LAST: dict[tuple, tuple[list[tree.Rule], str]] = {}  # per key: the rules and text of the last grammar lowered


def _shared(rules: list[tree.Rule], other) -> int:
    """How many first rules ``rules`` and ``other`` share, by identity."""
    n = 0
    for a, b in zip(rules, other):
        if a is not b:
            break
        n += 1
    return n


def _kept_prefix(rules: list[tree.Rule], key: tuple) -> _Prefix | None:
    """The longest kept prefix that ``rules`` starts with (same objects, same key)."""
    best = None
    for kept in _PREFIXES:
        n = len(kept.rules)
        if kept.key == key and n <= len(rules) and (best is None or n > len(best.rules)):
            if _shared(rules, kept.rules) == n:
                best = kept
    return best


def _keep_prefix(lowerer: _Lowerer, rules: list[tree.Rule], all_rules: dict, key: tuple) -> None:
    """Keep the lowering's state after ``rules`` (the first of ``all_rules``) in :data:`_PREFIXES`."""
    cfg = lowerer.cfg
    # The nonterminals made so far (after every rule name in cfg.rules), in creation order.
    helpers = [(n, list(p), cfg.origins[n]) for n, p in cfg.rules.items() if n not in all_rules]
    kept = _Prefix(
        rules=tuple(rules),
        key=key,
        origins=[cfg.origins[rule.name] for rule in rules],
        productions=[list(cfg.rules[rule.name]) for rule in rules],
        helpers=helpers,
        symbol_spans=[(n, list(spans)) for n, spans in cfg.symbol_spans.items()],
        counted=list(cfg.counted.items()),
        counters=dict(lowerer.counters),
        class_cache=dict(lowerer.class_cache),
        automata=dict(lowerer.automata),
    )
    _PREFIXES.append(kept)
    del _PREFIXES[:-_PREFIXES_KEPT]
