"""Grammar test tools shared by the test modules: XGrammar as referee, and a sampler.

XGrammar's own matcher decides every language question in the tests; the sampler
draws random members of a grammar AST's language for cross-checks.
"""

from __future__ import annotations

import math
import random

import xgrammar

from cfgzip_lab.grammar.tree import Automaton, CharClass, Choice, Expr, GrammarAST, Literal, Repeat, RuleRef, Sequence


def xgrammar_accepts_ebnf(text: str) -> bool:
    try:
        xgrammar.Grammar.from_ebnf(text)
    except Exception:  # XGrammar raises RuntimeError, sometimes other types
        return False
    return True


def xgrammar_matcher(text: str) -> xgrammar.GrammarMatcher:
    """A matcher that accepts raw bytes (an empty vocabulary; we only call accept_string)."""
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False)
    compiled = compiler.compile_grammar(xgrammar.Grammar.from_ebnf(text))
    return xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)


def xgrammar_matches(matcher: xgrammar.GrammarMatcher, data: bytes) -> bool:
    matcher.reset()
    return matcher.accept_string(data) and matcher.is_terminated()


def utf8(text: str) -> bytes:
    # XGrammar matches a surrogate code point as its 3-byte encoding, as the lowering does.
    return text.encode("utf-8", "surrogatepass")


PROBES = sorted(set(range(0x80)) | {0xA0, 0xE9, 0xFC, 0xFF, 0x100, 0x41A, 0x41B, 0x4E2D, 0x1F600, 0x10FFFF})


def min_heights(ast: GrammarAST) -> dict[str, float]:
    """Least derivation height of each rule (inf if it derives nothing): a fixpoint."""
    heights = {name: math.inf for name in ast.rules}
    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            height = expr_height(rule.body, heights)
            if height < heights[name]:
                heights[name], changed = height, True
    return heights


def expr_height(expr: Expr, heights: dict[str, float]) -> float:
    if isinstance(expr, Literal):
        return 0
    if isinstance(expr, CharClass):
        return 0 if class_members(expr) else math.inf
    if isinstance(expr, RuleRef):
        return heights[expr.name] + 1
    if isinstance(expr, Sequence):
        return max((expr_height(item, heights) for item in expr.items), default=0)
    if isinstance(expr, Choice):
        return min(expr_height(option, heights) for option in expr.options)
    if isinstance(expr, Automaton):
        return 0 if _final_distances(expr, heights)[expr.start] is not None else math.inf
    assert isinstance(expr, Repeat)
    return 0 if expr.min == 0 else expr_height(expr.item, heights)


def _final_distances(automaton: Automaton, heights: dict[str, float] | None = None) -> list[int | None]:
    """Edges from each state to a final one (None: none reachable); sub-expression edges count 1
    when their own language is not empty (a rule reference, TagDispatch's, by ``heights``)."""
    dist: list[int | None] = [None] * automaton.num_states
    for q in automaton.finals:
        dist[q] = 0
    usable = [
        (s, t)
        for s, label, t in automaton.edges
        if isinstance(label, tuple) or expr_height(label, heights or {}) < math.inf
    ]
    changed = True
    while changed:
        changed = False
        for s, t in usable:
            if dist[t] is not None and (dist[s] is None or dist[t] + 1 < dist[s]):
                dist[s], changed = dist[t] + 1, True
    return dist


def sample_automaton(
    automaton: Automaton, rng: random.Random, generate, *, free: bool, heights: dict[str, float] | None = None
) -> str:
    """A random member of the automaton's language (walking its byte edges), as a str.

    XGrammar's automata can take bytes that are no UTF-8 (overlong forms of ``.``): such walks
    are drawn again; after a few tries the shortest way to a final state is taken.
    """
    dist = _final_distances(automaton, heights)
    assert dist[automaton.start] is not None, "the language is empty"
    out_edges: dict[int, list] = {}
    for s, label, t in automaton.edges:
        if dist[t] is not None and (isinstance(label, tuple) or expr_height(label, heights or {}) < math.inf):
            out_edges.setdefault(s, []).append((label, t))
    for attempt in range(12):
        wander = free and attempt < 11
        data, q, steps = bytearray(), automaton.start, 0
        while True:
            options = out_edges.get(q, [])
            if q in automaton.finals and (not options or not wander or steps > 8 or rng.random() < 0.3):
                break
            if wander and steps <= 8:
                label, q = rng.choice(options)
            else:
                label, q = min(options, key=lambda option: dist[option[1]])
            if isinstance(label, tuple):
                data.append(rng.randint(*label) if wander else label[0])
            else:
                data += generate(label).encode("utf-8", "surrogatepass")
            steps += 1
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
    raise AssertionError("no UTF-8 sentence found")


def class_members(expr: CharClass) -> list[int]:
    """A few code points the class matches (enough to sample from)."""
    ends = {cp for lo, hi in expr.ranges for cp in (lo, hi, (lo + hi) // 2)}
    return [
        cp
        for cp in sorted(set(PROBES) | ends)
        if any(lo <= cp <= hi for lo, hi in expr.ranges) != expr.negated
        and not 0xD800 <= cp <= 0xDFFF  # XGrammar takes them; left out for readable failures
    ]


def sample(ast: GrammarAST, rng: random.Random, *, free_depth: int = 6) -> str:
    """One random string of the AST's language; past ``free_depth`` take the shortest way out."""
    heights = min_heights(ast)
    assert heights[ast.root] < math.inf, "the language is empty"

    def generate(expr: Expr, depth: int) -> str:
        free = depth < free_depth
        if isinstance(expr, Literal):
            return expr.text
        if isinstance(expr, CharClass):
            return chr(rng.choice(class_members(expr)))
        if isinstance(expr, RuleRef):
            return generate(ast.rules[expr.name].body, depth + 1)
        if isinstance(expr, Sequence):
            return "".join(generate(item, depth) for item in expr.items)
        if isinstance(expr, Choice):
            finite = [o for o in expr.options if expr_height(o, heights) < math.inf]
            lowest = min(expr_height(o, heights) for o in finite)
            pool = finite if free else [o for o in finite if expr_height(o, heights) == lowest]
            return generate(rng.choice(pool), depth)
        if isinstance(expr, Automaton):
            return sample_automaton(expr, rng, lambda label: generate(label, depth + 1), free=free, heights=heights)
        assert isinstance(expr, Repeat)
        extra = rng.randint(0, 2) if free else 0
        count = expr.min + extra if expr.max is None else min(expr.max, expr.min + extra)
        if expr_height(expr.item, heights) == math.inf:
            count = 0
        return "".join(generate(expr.item, depth + 1) for _ in range(count))

    return generate(ast.rules[ast.root].body, 0)


def earley_accepts(cfg, data: bytes, *, prefix: bool = False) -> bool:
    """Earley recognizer over a byte-level CFG (Aycock & Horspool's nullable fix).

    Deliberately independent of the GNF code: the tests use it to check that the
    lowered CFG, the GNF and XGrammar agree on every string.
    """
    from cfgzip_lab.grammar.cfg import ByteSet

    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in cfg.rules.items():
            if name not in nullable and any(all(isinstance(s, str) and s in nullable for s in rhs) for rhs in alts):
                nullable.add(name)
                changed = True
    start = ("<start>", (cfg.start,))
    columns: list[set] = [set() for _ in range(len(data) + 1)]
    columns[0].add((start, 0, 0))
    for i in range(len(data) + 1):
        agenda = list(columns[i])
        while agenda:
            (lhs, rhs), dot, origin = agenda.pop()
            if dot < len(rhs):
                sym = rhs[dot]
                if isinstance(sym, ByteSet):
                    if i < len(data) and data[i] in sym:
                        columns[i + 1].add(((lhs, rhs), dot + 1, origin))
                    continue
                for alt in cfg.rules[sym]:
                    new = ((sym, alt), 0, i)
                    if new not in columns[i]:
                        columns[i].add(new)
                        agenda.append(new)
                if sym in nullable:
                    new = ((lhs, rhs), dot + 1, origin)
                    if new not in columns[i]:
                        columns[i].add(new)
                        agenda.append(new)
            else:
                for (plhs, prhs), pdot, porigin in list(columns[origin]):
                    if pdot < len(prhs) and prhs[pdot] == lhs:
                        new = ((plhs, prhs), pdot + 1, porigin)
                        if new not in columns[i]:
                            columns[i].add(new)
                            agenda.append(new)
        if i < len(data) and not columns[i + 1]:
            return False
    if prefix:
        return True
    return ((start, 1, 0)) in columns[len(data)]


def mutations(data: bytes, rng: random.Random, alphabet: bytes, count: int) -> list[bytes]:
    """Single-byte insertions, deletions and replacements of ``data``."""
    out = []
    for _ in range(count):
        if not data:
            out.append(bytes([rng.choice(alphabet)]))
            continue
        i = rng.randrange(len(data))
        op = rng.randrange(3)
        b = bytes([rng.choice(alphabet)])
        out.append(
            data[:i] + b + data[i:]
            if op == 0
            else data[:i] + data[i + 1 :]
            if op == 1
            else data[:i] + b + data[i + 1 :]
        )
    return out
