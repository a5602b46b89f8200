"""A memory bound for classing: a cap on the displacement DAG, and the error that names the rule.

Classing interns every configuration set it meets as nodes of one hash-consed DAG
(:class:`cfgzip_lab.grammar.words.WordStore`), and that DAG is what grows with the grammar.
Measured on the grammar ``tests/test_limits.py`` builds to blow up (a precedence chain over
nullable whitespace and comments, cyclic nullable rules, a 64-space literal) against Llama-3's
vocabulary, peak resident size of the whole process: 10 levels and 16 nullable rules, 851,966
nodes, 469 MB; 14 levels and 24 rules, 1,654,978 nodes, 927 MB: about 600 bytes per node with
the memo tables. The per-token budget (``DEFAULT_TOKEN_BUDGET``) turns a single explosive token
into a singleton class; this cap bounds the whole run: past ``max_dag_nodes`` classing stops
with :class:`ClassingLimitError`, whose message names the token being walked and the grammar
rules on its stacks, instead of growing until the machine runs out of memory.
"""

from __future__ import annotations

from collections import Counter

from ..errors import CfgzipError
from ..grammar.provenance import rules_of
from ..grammar.words import WordStore

__all__ = [
    "DEFAULT_MAX_DAG_NODES",
    "BYTES_PER_DAG_NODE",
    "ClassingLimitError",
    "busiest_rules",
    "largest_rules",
    "example_bytes",
    "limit_message",
]

#: Measured bytes per displacement DAG node, memo tables included (see the module docstring).
BYTES_PER_DAG_NODE = 600
#: Default cap on the classing DAG: about 1.4 GB at the measured cost per node. Every bundled
#: and third-party grammar classes far below it (the largest, c_like with Llama-3, stays
#: under 220 MB in all).
DEFAULT_MAX_DAG_NODES = 2_500_000


class ClassingLimitError(CfgzipError):
    """Classing stopped at its memory cap (``max_dag_nodes``); the message names the rules to look at."""


def _rules_of(gnf, symbol: int) -> tuple[str, ...]:
    """The source rules GNF nonterminal ``symbol`` comes from: its provenance, or, for a GNF made
    without it, the rule its name starts with (``e3@2`` → ``e3``; none for lifted terminals)."""
    if symbol >= len(gnf.names) and getattr(gnf, "families", None):
        from ..grammar.counted import is_family_symbol, split_family_symbol

        if is_family_symbol(symbol):  # a counted repetition's member: its rule
            return rules_of(gnf.families[split_family_symbol(symbol)[0]].origins)
        return ()
    if not 0 <= symbol < len(gnf.names):
        return ()
    rules = gnf.rules_of(symbol)
    if rules:
        return rules
    name = gnf.names[symbol]
    if not name or name[0] in "'[\"" or name == "S0":
        return ()
    return (name.split("@", 1)[0],)


def busiest_rules(store: WordStore, node: int, gnf, *, words: int = 200, top: int = 3) -> list[str]:
    """The source rules that occur most often in (a sample of) the stacks of ``node``."""
    counts: Counter[str] = Counter()
    for word in store.words(node, words):
        for symbol in word:
            counts.update(_rules_of(gnf, symbol))
    return [rule for rule, _ in counts.most_common(top)]


def largest_rules(gnf, *, top: int = 3) -> list[str]:
    """The source rules whose normal form lists the most productions (where stacks come from)."""
    sizes: Counter[str] = Counter()
    for a, row in enumerate(gnf.table):
        rules = _rules_of(gnf, a)
        if rules:
            size = sum(gnf.store.count(tail) for tail in set(row.values()))
            for rule in rules:
                sizes[rule] += size
    return [rule for rule, _ in sizes.most_common(top)]


def example_bytes(gnf, key: bytes) -> bytes:
    """A byte string of the byte-class string ``key`` (each class's smallest byte): the token, or one like it."""
    return bytes(min(gnf.atoms[atom]) for atom in key)


def limit_message(max_nodes: int, token: bytes, rules: list[str]) -> str:
    """The text of :class:`ClassingLimitError`: the cap, the token, the rules to look at first."""
    names = ", ".join(repr(r) for r in rules) or "(none named)"
    return (
        (
            f"classing stopped at its memory cap: the displacement DAG reached {max_nodes:,} nodes "
            f"(about {max_nodes * BYTES_PER_DAG_NODE / 2**20:,.0f} MB) while walking the token {token!r}; "
            f"rule {rules[0]!r} and its neighbours grow it ({names}: most frequent on the stacks there, "
            f"else largest in normal form). Deep precedence chains over nullable rules and long runs of "
            f"one byte do this: simplify those rules, or raise max_dag_nodes"
        )
        if rules
        else (
            f"classing stopped at its memory cap: the displacement DAG reached {max_nodes:,} nodes "
            f"(about {max_nodes * BYTES_PER_DAG_NODE / 2**20:,.0f} MB) while walking the token {token!r}; "
            f"simplify the grammar or raise max_dag_nodes"
        )
    )
