"""Token-level macros: ``Token(i, …)``, ``ExcludeToken(i, …)`` and ``TokenTagDispatch(…)``, exactly.

These macros of XGrammar's EBNF name *vocabulary ids*, not bytes. Their meaning in xgrammar
0.2.8 (0.2.9 changed it: see :func:`stop_tokens_as_terminals`, what cfgzip refuses there)
(``cpp/grammar_matcher.cc`` ``AcceptToken``, ``cpp/earley_parser.cc`` ``ScanAtomicToken``,
``cpp/grammar_compiler.cc`` ``GetTokenEdgeAcceptedIndices``; each point checked against the
installed binary, ``tests/test_token_macros.py``):

- A token is read along two paths from the same state and the results are merged: its bytes
  one by one (byte edges only), and the whole token as one *atomic* step (token edges only).
  ``Token(3, 4)`` is a token edge taking token 3 or 4, whatever their bytes;
  ``ExcludeToken(3)`` takes any token but 3. A string fed by ``accept_string`` never takes
  a token edge.
- Only normal tokens take token edges: a stop token is always the stop token, a special
  token (empty text, padding) is never accepted. So ``Token(<eos id>)`` never matches, and
  ``ExcludeToken(…)`` never takes a stop or special token.
- ``TokenTagDispatch((t1, r1), …, loop_after_dispatch=true, excludes=(x, …))`` is the
  automaton ``S → ε | ExcludeToken(t…, x…) S | Token(ti) ri (S, or the end without loop)``
  (``BuildTokenTagDispatch``): any tokens but the triggers and excludes, until a trigger;
  then its rule; then again (loop, the default) or nothing more.
- Ids are checked only when the grammar is compiled for a tokenizer: an id at or past its
  ``vocab_size`` is XGrammar's error "Token id … is out of the vocabulary range"; a grammar
  with token ids is therefore exact only for the vocabulary whose ids it names. Ids above
  2**31 - 1 wrap silently in XGrammar (``Token(4294967297)`` is ``Token(1)``): refused.

How cfgzip stays byte-level (docs/token_macros.md): a :class:`~.tree.TokenSet` lowers to a
*token terminal*, a :class:`~.cfg.ByteSet` whose bits from :data:`~.cfg.TOKEN_BASE` on are
pseudo-bytes: bit 256 stands for "any normal token the grammar does not name" (:data:`OTHER`),
bit 257 + i for token id i. Bytes never reach them, so the GNF treats each group of them as
one more atom (``byte_classes`` partitions them like bytes), and every byte-level stage is
unchanged. A token t then has the displacement

    Δ(t) = Δ(bytes of t)  ∪  Δ(atom of t)

(the atom of a named id, or the OTHER atom for every other normal token), because XGrammar
merges the two paths and Δ distributes over that union. Equal Δ is still interchangeability,
so classes stay exact and may even mix a named token with unnamed ones when the grammar
cannot tell them apart. What each stage adds, through :class:`TokenPaths`:

- classing unions every normal token's byte node with its atom's node (:func:`add_token_paths`);
- the native σ_in index and walk read a token's Δ the same way (index: its union node; walk:
  a state advanced by the bytes, unioned with the state advanced by the atom);
- XGrammar over the representatives gets the grammar with every id rewritten to the class of
  which it is the representative (:func:`rewrite_for_representatives`): class k's
  representative then behaves in the K-token vocabulary exactly as in the full one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import CfgzipError
from .cfg import TOKEN_BASE, ByteSet
from .tree import Automaton, Choice, Expr, GrammarAST, Repeat, RuleRef, Sequence, Span, TokenSet

if TYPE_CHECKING:
    import numpy as np

    from ..classes.displacement import Displacer
    from .gnf import GNF
    from .macro_args import MacroArguments

__all__ = [
    "OTHER",
    "MAX_TOKEN_ID",
    "TokenIdError",
    "stop_tokens_as_terminals",
    "TOKEN_REGION_REFUSAL",
    "TokenAtoms",
    "TokenPaths",
    "token_bit",
    "token_set",
    "token_tag_dispatch",
    "named_ids",
    "token_terminal",
    "token_universe",
    "token_atoms",
    "token_paths",
    "add_token_paths",
    "check_token_ids",
    "check_vocabulary",
    "describe_named_tokens",
    "guide_token_ids",
    "rewrite_for_representatives",
    "has_token_macros",
    "named_id_bound",
]

OTHER = TOKEN_BASE
"""The pseudo-byte of every normal token the grammar does not name."""
MAX_TOKEN_ID = 2**31 - 1
"""XGrammar stores token ids as int32 and wraps larger ones."""
_MACROS = ("Token", "ExcludeToken", "TokenTagDispatch")


def token_bit(token_id: int) -> int:
    """The pseudo-byte of a named token id."""
    return TOKEN_BASE + 1 + token_id


class TokenIdError(CfgzipError, ValueError):
    """The grammar names token ids that the vocabulary does not have (or, from XGrammar 0.2.9, a
    stop token, see :func:`stop_tokens_as_terminals`)."""


def stop_tokens_as_terminals() -> bool:
    """Whether the installed XGrammar lets token edges take stop tokens (0.2.9 and newer).

    XGrammar 0.2.9 changed what a token edge takes (``cpp/grammar_matcher.cc``): a stop token is
    taken by a ``Token``/``ExcludeToken`` edge when that completes the grammar
    (``CanAcceptStopTokenAsTerminal``: ``Token(<eos>)`` allows the stop token, ``ExcludeToken(5)``
    does too), and a token whose first bytes end a literal right before an ``ExcludeToken`` edge is
    taken whole by that edge (``FindMidTokenExcludeEdgeRow``: after ``"a" ExcludeToken(5)`` the
    token ``ab`` is allowed at the start). Neither is mirrored yet, so under 0.2.9 cfgzip refuses
    ``ExcludeToken``/``TokenTagDispatch`` (at the construct) and a ``Token`` naming a stop id (with
    the vocabulary), rather than serve a mask that differs. 0.2.8 keeps the meaning above.
    Asked only where a grammar has token macros: reading the version costs nothing elsewhere."""
    from .. import xgrammar_version  # importlib.metadata: ~60 ms, paid only here

    return xgrammar_version.at_least("0.2.9")


#: Why, appended to the front end's refusal (:data:`.ebnf.REFUSAL`).
TOKEN_REGION_REFUSAL = (
    "from XGrammar 0.2.9 a token-level region also takes stop tokens that complete the grammar and tokens "
    "that start inside the literal before it, which cfgzip does not reproduce yet (XGrammar 0.2.8 is served)"
)


# -- the front end ---------------------------------------------------------------------------
def _ids(values, what: str, message: str) -> list[int]:
    from .macro_args import MacroArgumentError

    out = []
    for value in values:
        if value.kind != "integer":
            raise MacroArgumentError(message, value.span)
        token_id = int(value.token.value)
        if token_id > MAX_TOKEN_ID:
            raise MacroArgumentError(
                f"{what} {token_id} is past XGrammar's 32-bit token ids (it would silently become "
                f"{(token_id + 2**31) % 2**32 - 2**31})",
                value.span,
            )
        out.append(token_id)
    return out


def token_set(name: str, arguments: MacroArguments, span: Span) -> TokenSet:
    """``Token(i, …)`` or ``ExcludeToken(i, …)`` from its arguments, checked as XGrammar 0.2.8's
    parser checks them (``ParseTokenSet`` / ``ParseExcludeToken``, its messages)."""
    from .macro_args import MacroArgumentError

    if arguments.named:
        raise MacroArgumentError(f"{name}() does not accept named arguments", next(iter(arguments.name_spans.values())))
    if not arguments.positional:
        raise MacroArgumentError(f"{name}() requires at least one integer argument", span)
    ids = _ids(arguments.positional, "token id", f"{name}() arguments must be non-negative integers")
    return TokenSet(tuple(sorted(set(ids))), exclude=name == "ExcludeToken", span=span)


def token_tag_dispatch(arguments: MacroArguments, span: Span) -> Expr:
    """``TokenTagDispatch((id, rule), …, loop_after_dispatch=…, excludes=(…))`` as the expression
    of XGrammar's automaton (``BuildTokenTagDispatch``), checked as ``ParseTokenTagDispatch``
    checks it::

        loop:     ( ExcludeToken(triggers, excludes) | Token(t1) r1 | … )*
        no loop:  ExcludeToken(triggers, excludes)* ( Token(t1) r1 | … )?
    """
    from .macro_args import MacroArgumentError

    for key, at in arguments.name_spans.items():
        if key not in ("loop_after_dispatch", "excludes"):
            raise MacroArgumentError(f"Unknown named argument for TokenTagDispatch: {key}", at)
    triggers: list[tuple[int, RuleRef, Span]] = []
    for value in arguments.positional:
        if value.kind != "tuple" or len(value.elements) != 2:
            raise MacroArgumentError("Each TokenTagDispatch element must be a pair (token_id, rule)", value.span)
        trigger, rule = value.elements
        (token_id,) = _ids([trigger], "token trigger id", "Token trigger ID must be a non-negative integer")
        if rule.kind != "identifier":
            raise MacroArgumentError("Rule reference must be an identifier", rule.span)
        triggers.append((token_id, RuleRef(rule.token.value, rule.span), value.span))
    loop = arguments.named.get("loop_after_dispatch")
    if loop is not None and loop.kind != "boolean":
        raise MacroArgumentError("loop_after_dispatch must be a boolean", loop.span)
    excludes: list[int] = []
    listed = arguments.named.get("excludes")
    if listed is not None:
        if listed.kind != "tuple":
            raise MacroArgumentError("excludes must be a tuple", listed.span)
        excludes = _ids(listed.elements, "exclude token id", "Exclude token ID must be a non-negative integer")
        for value, excluded in zip(listed.elements, excludes):
            if any(t == excluded for t, _, _ in triggers):
                raise MacroArgumentError(
                    f"Token trigger ID {excluded} must not overlap with exclude token ID", value.span
                )
    free = TokenSet(tuple(sorted({t for t, _, _ in triggers} | set(excludes))), exclude=True, span=span)
    dispatches = [Sequence((TokenSet((t,), span=at), rule), at) for t, rule, at in triggers]
    if loop is None or loop.boolean:
        return Repeat(Choice((free, *dispatches), span) if dispatches else free, 0, None, span)
    free_text = Repeat(free, 0, None, span)
    if not dispatches:
        return free_text
    chosen = Choice(tuple(dispatches), span) if len(dispatches) > 1 else dispatches[0]
    return Sequence((free_text, Repeat(chosen, 0, 1, span)), span)


def _token_sets(ast: GrammarAST) -> Iterable[TokenSet]:
    if ast.text and "Token" not in ast.text:
        # Every macro is spelled Token(...), ExcludeToken(...) or TokenTagDispatch(...): a text
        # without the word has none, and the walk over the whole tree (~0.2 ms of an object
        # schema's 1.8 ms lowering, and again when classing checks the vocabulary) is not needed.
        return
    todo: list[Expr] = [rule.body for rule in ast.rules.values()]
    while todo:
        e = todo.pop()
        if isinstance(e, TokenSet):
            yield e
        elif isinstance(e, Sequence):
            todo += e.items
        elif isinstance(e, Choice):
            todo += e.options
        elif isinstance(e, Repeat):
            todo.append(e.item)
        elif isinstance(e, Automaton):
            todo += [label for _, label, _ in e.edges if not isinstance(label, tuple)]


def named_ids(ast: GrammarAST) -> frozenset[int]:
    """Every token id a ``Token``/``ExcludeToken``/``TokenTagDispatch`` of ``ast`` names."""
    return frozenset(i for node in _token_sets(ast) for i in node.ids)


# -- lowering ----------------------------------------------------------------------------------
def token_terminal(node: TokenSet, named: frozenset[int]) -> ByteSet:
    """The token terminal of ``node``: its ids' pseudo-bytes, or for ``ExcludeToken`` the
    other named ids' and :data:`OTHER` (``named`` is :func:`named_ids` of the grammar)."""
    ids = named - set(node.ids) if node.exclude else node.ids
    bits = 1 << OTHER if node.exclude else 0
    for i in ids:
        bits |= 1 << token_bit(i)
    return ByteSet(bits)


def token_universe(named: frozenset[int]) -> ByteSet:
    """Every named id's pseudo-byte: the lowering hands it to ``byte_classes`` (``CFG.tokens``)
    so that a named id no terminal takes (``ExcludeToken(5)`` alone) still gets an atom of its
    own, with no productions, instead of passing for an unnamed token."""
    bits = 0
    for i in named:
        bits |= 1 << token_bit(i)
    return ByteSet(bits)


# -- atoms, paths and classing -------------------------------------------------------------------
@dataclass(frozen=True)
class TokenAtoms:
    """Which GNF atom a whole token reads: ``named[id]`` for an id the grammar names, ``other``
    for every other normal token (None: the grammar has no ``ExcludeToken``, such a token has
    no atomic path)."""

    named: dict[int, int]
    other: int | None

    def atom_of(self, token_id: int) -> int | None:
        got = self.named.get(token_id)
        return self.other if got is None else got

    @property
    def max_id(self) -> int:
        return max(self.named, default=-1)


def token_atoms(gnf: GNF) -> TokenAtoms | None:
    """The token atoms of ``gnf`` (read off its atoms' pseudo-bytes); None when it has none."""
    named: dict[int, int] = {}
    other = None
    for k, atom in enumerate(gnf.atoms):
        high = atom.bits >> TOKEN_BASE
        if not high:
            continue
        for b in ByteSet(high):
            if b == 0:
                other = k
            else:
                named[b - 1] = k
    if not named and other is None:
        return None
    return TokenAtoms(named, other)


class TokenPaths:
    """The atomic path of tokens under one displacer: the token atoms and what reading each
    does from the start (Δ of the atom alone, memoised by the displacer's step table)."""

    def __init__(self, displacer: Displacer, atoms: TokenAtoms) -> None:
        self.displacer = displacer
        self.atoms = atoms

    def atom_of(self, token_id: int) -> int | None:
        return self.atoms.atom_of(token_id)

    def node(self, token_id: int, byte_node: int) -> int:
        """Δ(t) = Δ(bytes) ∪ Δ(atom): ``byte_node`` is the byte path's displacement node."""
        atom = self.atoms.atom_of(token_id)
        if atom is None:
            return byte_node
        d = self.displacer
        return d.store.union(byte_node, d.step(d.initial, atom))

    def advance(self, step, state: int, token_id: int, byte_state: int) -> int:
        """A parser state after the token: the byte path's ``byte_state`` ∪ ``step(state, atom)``."""
        atom = self.atoms.atom_of(token_id)
        if atom is None:
            return byte_state
        return self.displacer.store.union(byte_state, step(state, atom))


def token_paths(displacer: Displacer) -> TokenPaths | None:
    """:class:`TokenPaths` for ``displacer``'s grammar, or None when it names no tokens."""
    atoms = token_atoms(displacer.gnf)
    return None if atoms is None else TokenPaths(displacer, atoms)


def check_token_ids(max_id: int, vocab_size: int, *, where: str = "", vocab_name: str = "") -> None:
    """Raise :class:`TokenIdError` when the grammar names an id the vocabulary does not have."""
    if max_id >= vocab_size:
        tokenizer = f"tokenizer {vocab_name!r}" if vocab_name else "the vocabulary"
        raise TokenIdError(
            f"{where}the grammar names token id {max_id}, but {tokenizer} has ids 0..{vocab_size - 1} "
            "(XGrammar: out of the vocabulary range). Token ids belong to one tokenizer: a grammar "
            "with Token(...)/ExcludeToken(...)/TokenTagDispatch(...) is exact only with the tokenizer "
            "whose ids it names."
        )


def check_vocabulary(compiled, vocab) -> None:
    """Raise :class:`TokenIdError` when ``compiled`` (a pipeline ``CompiledGrammar``) names a token
    id past ``vocab``, at the first ``Token``/``ExcludeToken``/``TokenTagDispatch`` naming one."""
    atoms = token_atoms(compiled.gnf)
    if atoms is not None and stop_tokens_as_terminals():
        stops = set(vocab.stop_ids)
        named_stops = [node for node in _token_sets(compiled.ast) if stops.intersection(node.ids)]
        if named_stops:
            from .diagnostics import position_of

            node = min(named_stops, key=lambda n: n.span or (0, 0))
            line, column = position_of(compiled.text, node.span[0] if node.span else 0)
            raise TokenIdError(
                f"line {line}, column {column}: the grammar names the stop token id "
                f"{min(stops.intersection(node.ids))} of {vocab.name!r}; from XGrammar 0.2.9 a stop token is taken "
                "by a Token(...) edge that completes the grammar, which cfgzip does not reproduce yet"
            )
    if atoms is None or atoms.max_id < vocab.vocab_size:
        return
    where = ""
    bad = [node for node in _token_sets(compiled.ast) if node.ids and max(node.ids) >= vocab.vocab_size]
    if bad:
        from .diagnostics import position_of

        node = min(bad, key=lambda n: n.span or (0, 0))
        line, column = position_of(compiled.text, node.span[0] if node.span else 0)
        where = f"line {line}, column {column}: "
    check_token_ids(atoms.max_id, vocab.vocab_size, where=where, vocab_name=vocab.name)


def add_token_paths(displacer: Displacer, token_bytes, kinds: np.ndarray, node_of: np.ndarray) -> TokenPaths | None:
    """Union every normal token's displacement node (``node_of``, in place) with its atom's.

    Tokens with the same byte node and the same atom get the same union, so it is computed
    once per distinct (node, atom) pair. Fallback tokens (node -1, past the budget) keep -1, as
    do the tokens classing gives no node (not normal, or empty: ``kinds`` says no more than that).
    Raises :class:`TokenIdError` when a named id is past the vocabulary.
    """
    import numpy as np

    paths = token_paths(displacer)
    if paths is None:
        return None
    check_token_ids(paths.atoms.max_id, len(token_bytes))
    named = paths.atoms.named
    # Classing gives a node to the normal, non-empty tokens only (the others, and fallbacks, keep -1).
    ids = np.flatnonzero(node_of >= 0)
    is_named = np.isin(ids, np.fromiter(named, np.int64, len(named)))
    for tid in ids[is_named].tolist():
        node_of[tid] = paths.node(tid, int(node_of[tid]))
    others = ids[~is_named]
    if paths.atoms.other is not None and others.size:
        # each distinct byte node once, in ascending order (the order the unions are made in):
        # node ids are dense, so a table over them instead of a sort of the vocabulary's
        at = node_of[others]
        seen = np.zeros(int(at.max()) + 1, dtype=bool)
        seen[at] = True
        nodes = np.flatnonzero(seen)
        union_of = np.zeros(seen.size, dtype=np.int64)
        union_of[nodes] = np.fromiter((paths.node(-1, int(n)) for n in nodes.tolist()), np.int64, nodes.size)
        node_of[others] = union_of[at]
    return paths


def guide_token_ids(gnf: GNF, vocab) -> list[int]:
    """The normal tokens of ``vocab`` the grammar names by id: what verification walks should
    take now and then (a random walk over 49,152 tokens rarely picks token 10 by chance)."""
    atoms = token_atoms(gnf)
    if atoms is None:
        return []
    from ..vocab import TokenKind

    kinds = vocab.kinds
    return [i for i in sorted(atoms.named) if i < vocab.vocab_size and int(kinds[i]) == TokenKind.NORMAL]


def describe_named_tokens(gnf: GNF, vocab, *, limit: int = 12) -> list[str]:
    """What the grammar's token ids are in ``vocab``: ``"10 → '<tool_call>'"``, and a note for
    an id that is a stop or special token there (never matched by a token edge)."""
    atoms = token_atoms(gnf)
    if atoms is None:
        return []
    from ..vocab import TokenKind

    out = []
    for i in sorted(atoms.named)[:limit]:
        if i >= vocab.vocab_size:
            out.append(f"{i} → (not in {vocab.name})")
            continue
        kind = TokenKind(int(vocab.kinds[i]))
        data = bytes(vocab.token_bytes[i])
        if kind == TokenKind.NORMAL:
            out.append(f"{i} → {data.decode('utf-8', 'replace')!r}")
        else:
            shown = f"{data.decode('utf-8', 'replace')!r}, " if data else ""
            out.append(f"{i} → {shown}a {kind.name.lower()} token (never taken as a whole token)")
    if len(atoms.named) > limit:
        out.append(f"and {len(atoms.named) - limit} more ids")
    return out


# -- XGrammar over the representatives -------------------------------------------------------
def has_token_macros(text: str) -> bool:
    """Whether ``text`` may use a token-level macro (a cheap test before lexing)."""
    return "Token" in text


def named_id_bound(text: str) -> int:
    """1 + the largest token id the macros of ``text`` name (1 without any): a vocabulary size
    for which XGrammar compiles the grammar (ids are checked against it; a probe's vocabulary)."""
    if not has_token_macros(text):
        return 1
    from .ebnf_syntax import tokens

    toks = list(tokens(text, 0, len(text)))
    bound = 0
    for i, tok in enumerate(toks):
        if tok.type == "MACRO" and tok.value in _MACROS and i + 1 < len(toks) and toks[i + 1].type == "LPAR":
            try:
                end = _matching(toks, i + 1)
            except ValueError:
                break
            bound = max([bound] + [int(t.value) for t in toks[i + 2 : end] if t.type == "INT"])
    return min(bound, MAX_TOKEN_ID) + 1


def rewrite_for_representatives(text: str, representatives, class_kind) -> str:
    """``text`` with every token id rewritten for the vocabulary of class representatives.

    In that vocabulary (``engine.compressed_tokenizer_info``) id k is class k, whose bytes are
    its representative's (a stop id for the STOP class, a special one for BLOCKED). For each
    class to behave there as its representative does in the full vocabulary, an id list keeps
    the classes whose representative it lists: ``Token(i, …)`` → ``Token(k, …)`` for every k
    with ``representatives[k] in (i, …)``; ``ExcludeToken`` likewise; a TokenTagDispatch
    trigger whose id is no representative is dropped (no class can take it). A list left
    empty names the STOP or BLOCKED class, which no token edge ever takes; without either,
    ``Token`` becomes ``[]`` and ``ExcludeToken`` ``Token(every NORMAL class)``.
    """
    if not has_token_macros(text):
        return text
    from .ebnf_syntax import tokens

    kinds = [int(k) for k in class_kind]
    never = next((k for k, kind in enumerate(kinds) if kind != 0), None)  # STOP or BLOCKED
    normal = [k for k, kind in enumerate(kinds) if kind == 0]
    class_of_rep = {int(r): k for k, r in enumerate(representatives)}
    toks = list(tokens(text, 0, len(text)))
    out: list[str] = []
    at = 0
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.type == "MACRO" and tok.value in _MACROS and i + 1 < len(toks) and toks[i + 1].type == "LPAR":
            end = _matching(toks, i + 1)
            out.append(text[at : tok.start_pos])
            out.append(_rewrite_call(tok.value, text, toks[i + 2 : end], class_of_rep, never, normal))
            at = toks[end].end_pos
            i = end + 1
            continue
        i += 1
    out.append(text[at:])
    return "".join(out)


def _matching(toks, open_index: int) -> int:
    depth = 0
    for j in range(open_index, len(toks)):
        if toks[j].type == "LPAR":
            depth += 1
        elif toks[j].type == "RPAR":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced parentheses in a token macro")  # the grammar parsed: cannot happen


def _mapped(ids: Iterable[int], class_of_rep: dict[int, int]) -> list[int]:
    return sorted({class_of_rep[i] for i in ids if i in class_of_rep})


def _rewrite_call(
    name: str, text: str, inner, class_of_rep: dict[int, int], never: int | None, normal: list[int]
) -> str:
    """One macro call, rewritten (``inner``: the tokens between its parentheses)."""
    if name != "TokenTagDispatch":
        ids = _mapped((int(t.value) for t in inner if t.type == "INT"), class_of_rep)
        if not ids and never is None:  # no class that token edges never take: say it otherwise
            if name == "Token" or not normal:
                return "[]"
            return "Token(" + ", ".join(map(str, normal)) + ")"
        return f"{name}(" + ", ".join(map(str, ids or [never])) + ")"
    # Top-level arguments: split at depth-0 commas.
    parts: list[list] = [[]]
    depth = 0
    for t in inner:
        if t.type == "LPAR":
            depth += 1
        elif t.type == "RPAR":
            depth -= 1
        if t.type == "COMMA" and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    pieces = []
    for part in parts:
        if not part:
            continue
        if part[0].type == "LPAR":  # (id, rule)
            trigger = next(t for t in part if t.type == "INT")
            rule = next(t for t in part if t.type in ("NAME", "MACRO"))
            k = class_of_rep.get(int(trigger.value))
            if k is not None:
                pieces.append(f"({k}, {rule.value})")
        elif part[0].value == "excludes":
            ids = _mapped((int(t.value) for t in part if t.type == "INT"), class_of_rep)
            pieces.append("excludes=(" + "".join(f"{k}, " for k in ids) + ")")
        else:  # loop_after_dispatch=…
            pieces.append(text[part[0].start_pos : part[-1].end_pos])
    return "TokenTagDispatch(" + ", ".join(pieces) + ")"
