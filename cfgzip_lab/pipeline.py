"""Grammar text → AST → byte CFG → GNF, and grammar + vocabulary → TokenClasses.

The one place that strings the core stages together, so the CLI, the workbench
and the benchmarks build exactly the same objects. A JSON Schema's byte CFG is read from the grammar
object XGrammar built (:mod:`.grammar.serialized`, the same CFG), and its EBNF parsed only when the
syntax tree is asked for (:class:`ParsedLaterGrammar`); every other input goes through the text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import xgrammar_version
from ._gc import gc_paused
from .bundled import bundled_grammars
from .classes.classing import DEFAULT_TOKEN_BUDGET, ClassingResult, compute_classes, grammar_sha256
from .classes.limits import DEFAULT_MAX_DAG_NODES
from .deadline import BuildBudgetError, Deadline
from .errors import CfgzipError
from .grammar.cfg import CFG
from .grammar.counted import COUNTED_THRESHOLD
from .grammar.dead_ends import dead_ends, keep_dead_ends, productive_nonterminals
from .grammar.diagnostics import Diagnostic, GrammarError, position_of
from .grammar.ebnf import parse_ebnf
from .grammar.gnf import DEFAULT_MAX_GNF_NODES, GNF, NormalFormTooLarge, to_gnf
from .grammar.large_repeat import large_repeat_in_text
from .grammar.lower import lower
from .grammar.nested_root import mentions_root_again, nested_root_in_text, nested_root_reference
from .grammar.sources import GrammarSource, NotesAfterParse, to_ebnf_and_grammar
from .grammar.token_macros import check_vocabulary, describe_named_tokens
from .grammar.tree import GrammarAST
from .grammar.words import WordStore

if TYPE_CHECKING:
    from .vocab import VocabTable


class ServedByXGrammar(CfgzipError):
    """:func:`compile_grammar` with ``stop_where_xgrammar_serves`` stopped early: XGrammar's masks for this
    grammar are not the ones cfgzip's walks make (a nested root, :class:`NestedRootFound`; a class
    repeated past 128 that XGrammar's lookahead misreads, :mod:`~.grammar.large_repeat`), or there is nothing
    for them to walk (a JSON Schema with an empty language, :class:`EmptyLanguage`), so XGrammar itself
    serves it and the byte CFG, normal form and classes would be built for nothing.

    ``reason`` says why (:func:`xgrammar_serves_reason`'s text), ``ebnf`` is the EBNF XGrammar compiles and
    ``grammar_source`` the user's input it came from."""

    def __init__(self, reason: str, ebnf: str, grammar_source: GrammarSource | None) -> None:
        super().__init__(reason)
        self.reason, self.ebnf, self.grammar_source = reason, ebnf, grammar_source


class NestedRootFound(ServedByXGrammar):
    """The root rule is used inside the grammar with input after it (:mod:`~.grammar.nested_root`)."""


class EmptyLanguage(ServedByXGrammar):
    """A JSON Schema whose language is empty (a rule that never ends): XGrammar serves it, and no output
    completes. :func:`compile_grammar` without ``stop_where_xgrammar_serves`` raises the
    :class:`~.grammar.diagnostics.GrammarError` naming the rules instead."""


def _empty_language_reason(diagnostics: list[Diagnostic]) -> str:
    """``engine.unavailable`` of an empty-language schema: the first rule that never ends, and what follows."""
    first = diagnostics[0].message
    more = f" (and {len(diagnostics) - 1} more such rules)" if len(diagnostics) > 1 else ""
    return (
        f"served by XGrammar itself: {first}{more}; XGrammar compiles it and lets decoding in, "
        "but no output can ever complete"
    )


@dataclass
class CompiledGrammar:
    """Every stage of one grammar text, with timings."""

    text: str
    ast: GrammarAST
    cfg: CFG
    gnf: GNF
    seconds: dict[str, float] = field(default_factory=dict)
    #: The user's input (JSON Schema, GBNF or EBNF) and its conversion notes; ``text`` is the EBNF.
    grammar_source: GrammarSource | None = None

    @property
    def sha256(self) -> str:
        return grammar_sha256(self.text)

    @property
    def input_sha256(self) -> str:
        """sha256 of what the user gave (the schema or GBNF text; the EBNF itself otherwise):
        what the workbench's stamps compare with the text being edited."""
        given = self.grammar_source.text if self.grammar_source is not None else ""
        return grammar_sha256(given) if given else self.sha256

    @property
    def warnings(self):
        return self.ast.warnings

    def from_rule(self, rule: str) -> CompiledGrammar:
        """This grammar started from ``rule`` (:func:`compile_from_rule`), built once per rule."""
        kept = self.__dict__.setdefault("_from_rule", {})
        if rule not in kept:
            kept[rule] = compile_from_rule(self, rule)
        return kept[rule]

    def stats(self) -> dict:
        return {
            "rules": len(self.ast.rules),
            "cfg_nonterminals": len(self.cfg.rules),
            "cfg_productions": self.cfg.num_productions,
            "gnf_nonterminals": self.gnf.num_nonterminals,
            "gnf_productions": self.gnf.num_productions,
            "gnf_dag_nodes": self.gnf.dag_nodes,
            "byte_classes": len(self.gnf.atoms),
        }


@gc_paused()  # a build never pays a full collection (cfgzip_lab._gc)
def compile_grammar(
    text: str,
    *,
    source: str = "<grammar>",
    kind: str = "ebnf",
    counted_threshold: int = COUNTED_THRESHOLD,
    max_gnf_nodes: int = DEFAULT_MAX_GNF_NODES,
    compiled_store: bool | None = None,
    root: str = "root",
    deadline: Deadline | None = None,
    stop_where_xgrammar_serves: bool = False,
    vocab: VocabTable | None = None,
) -> CompiledGrammar:
    """Parse, lower and normalise ``text``; raises ``GrammarError`` with diagnostics.

    ``compiled_store`` (default: where the kernel is built and the grammar has no token atoms; counted
    repetitions too, :data:`~cfgzip_lab.grammar.compiled_words.COUNTED_IN_COMPILED_STORE`) builds the
    normal form in the compiled word store, which classing, the index and
    the native walk then continue (:func:`cfgzip_lab.grammar.compiled_words.new_word_store`; the same nodes
    as a WordStore). ``False`` keeps the Python WordStore, the reference.

    ``kind`` is ``"ebnf"`` (XGrammar's EBNF), ``"gbnf"``, ``"json_schema"`` or ``"auto"``:
    other kinds go through :func:`~.grammar.sources.to_ebnf` first, the result's ``text``
    is the EBNF and ``source`` keeps the user's input; GBNF errors point into the GBNF text.
    ``counted_threshold``: repetitions with a larger bound stay counted (never unrolled, see
    :mod:`.grammar.counted`); 0 counts every bounded repetition (tests and ablations).
    ``max_gnf_nodes`` bounds the normal form's memory (past it: a ``GrammarError`` naming
    the step and the rule, see :func:`~.grammar.gnf.to_gnf`).
    ``root``: the start rule (XGrammar's ``root_rule_name``); another rule than ``root`` keeps only
    the rules it reaches, so the language is that rule's (a test or a sample of one rule,
    :func:`compile_from_rule`). ``deadline`` (:class:`~cfgzip_lab.deadline.Deadline`): the build's
    time budget, checked between the stages and inside the normal form (past it:
    :class:`~cfgzip_lab.deadline.BuildBudgetError`). ``stop_where_xgrammar_serves``: raise :class:`ServedByXGrammar`
    as soon as the EBNF shows a class repeated past 128 that XGrammar's lookahead misreads (with ``vocab``,
    only where that vocabulary holds such a token: :mod:`~.grammar.large_repeat`), or right after parsing
    where the root is nested with input after it (:class:`NestedRootFound`), or where a JSON Schema's language
    is empty (:class:`EmptyLanguage`) (the serving path, which then hands
    the grammar to XGrammar itself, :class:`~cfgzip_lab.cache.grammars.GrammarCache`). Past ``max_gnf_nodes``
    the error is a :class:`~.grammar.gnf.NormalFormTooLarge` (a ``GrammarError``).
    """
    try:
        return _compile_grammar(
            text,
            source,
            kind,
            counted_threshold,
            max_gnf_nodes,
            compiled_store,
            root,
            deadline,
            stop_where_xgrammar_serves,
            vocab,
        )
    except RecursionError:
        # Python's recursion limit (set high in grammar/words.py), not a crash: say what to change.
        message = (
            "the grammar nests too deeply for cfgzip (parentheses, rules or a literal thousands of levels deep "
            "exceed its recursion limit); flatten the deepest part"
        )
        raise GrammarError([Diagnostic(1, 1, message)], text=text, source=source) from None


def _compile_grammar(
    text: str,
    source: str,
    kind: str,
    counted_threshold: int,
    max_gnf_nodes: int,
    compiled_store: bool | None,
    root: str = "root",
    deadline: Deadline | None = None,
    stop_where_xgrammar_serves: bool = False,
    vocab: VocabTable | None = None,
) -> CompiledGrammar:
    t0 = time.perf_counter()
    xgrammar_version.warn_if_unsupported()
    origin = grammar = None
    if kind != "ebnf":
        origin, grammar = to_ebnf_and_grammar(text, kind, name=source)
        text = origin.ebnf
    if stop_where_xgrammar_serves:
        found = large_repeat_in_text(text, vocab)
        if found is not None:
            raise ServedByXGrammar(_nested_reason_text(found, origin), text, origin)
    xgrammars = origin is not None and origin.written_by_xgrammar
    # another start rule: the rules it does not reach are no part of its language, nor their notes
    sub = root != "root"
    cfg = pending = ast = None
    if grammar is not None and not sub:
        # XGrammar's grammar object at hand (a JSON Schema's): the byte CFG from its arrays, the EBNF parsed
        # only when something asks for the syntax tree (PendingParse); the text path where it cannot be read
        if stop_where_xgrammar_serves and mentions_root_again(text):
            # parsed for the check (the root's name stands in the text twice): the text path is as cheap now
            grammar = None
        else:
            t1 = time.perf_counter()
            if deadline is not None:
                deadline.check("the front end (after parsing)")  # as the text path: XGrammar has read the schema
            cfg = _serialized_cfg(grammar, text, counted_threshold, deadline)
            if cfg is not None:
                pending = PendingParse(text, source)
                origin = NotesAfterParse.of(origin, pending)
    if cfg is None:
        ast = _parse(text, root, source, origin, reachable_only=xgrammars or sub, deadline=deadline)
        if stop_where_xgrammar_serves:
            found = nested_root_reference(ast)
            if found is not None:
                raise NestedRootFound(_nested_reason_text(found, origin), text, origin)
        t1 = time.perf_counter()
        if deadline is not None:
            deadline.check("the front end (after parsing)")
        cfg = lower(ast, counted_threshold=counted_threshold, deadline=deadline)
    t2 = time.perf_counter()
    if deadline is not None:
        deadline.check("the front end (after lowering)")
    # Both refusals come before the normal form, which a refused grammar need not pay for.
    productive = productive_nonterminals(cfg)
    if deadline is not None:
        deadline.check("the front end (after the productive rules)")
    if cfg.start not in productive:
        # Nothing to class, and XGrammar 0.2.8 can crash on such grammars (unbounded
        # recursion with no way out): say so at the root rule instead.
        # Point at the rules that never end (issue 21), not only at the root that uses them.
        from .grammar.authoring import never_ending

        ast = ast if ast is not None else pending.parse(origin)
        culprits = never_ending(ast)
        culprits = [ast.root] if ast.root in culprits or not culprits else culprits
        diagnostics = []
        for name in culprits[:5]:
            rule = ast.rules[name]
            line, column = position_of(text, rule.span[0] if rule.span else 0)
            why = (
                f"the language of {ast.root!r} is empty: every derivation recurses forever, no string derives from it"
                if name == ast.root
                else f"the language of {ast.root!r} is empty because rule {name!r} never ends: every alternative "
                "of it needs itself again (or a class that matches nothing), so no string derives from it"
            )
            diagnostics.append(Diagnostic(line, column, why, span=rule.span))
        if stop_where_xgrammar_serves and kind == "json_schema":
            # XGrammar compiles such a schema and serves it (0.2.8 and 0.2.9 alike: its converter's rules begin
            # with a literal, so none recurses without input): refusing it would refuse a request XGrammar
            # serves (MaskBench Github_medium o74424, every object requiring itself). Its masks are XGrammar's;
            # no output ever completes, which the reason says. The explicit build APIs still raise.
            raise EmptyLanguage(_empty_language_reason(diagnostics), text, origin)
        error = GrammarError(diagnostics, text=text, source=source)
        raise (origin.remap_error(error) if origin else error) from None
    dead = dead_ends(cfg, productive)
    if dead:
        # Kept exactly (XGrammar lets decoding in, see .grammar.dead_ends): the author is warned.
        notes = []
        for d in dead[:5]:
            line, column = position_of(text, d.span[0]) if d.span else (1, 1)
            notes.append(Diagnostic(line, column, d.describe(cfg), "warning", span=d.span))
        if pending is not None:
            pending.dead_ends = notes  # added when the syntax tree is made, as below
        else:
            ast.warnings = list(ast.warnings) + (origin.user_diagnostics(notes) if origin else notes)
    if len(productive) < len(cfg.rules):
        if pending is not None:  # the serialized path's CFG is kept for the next build of this text
            from .grammar.serialized import copy_of

            cfg = copy_of(cfg)
        keep_dead_ends(cfg, productive)
    t3 = time.perf_counter()
    if deadline is not None:
        deadline.check("the front end (after the dead ends)")
    try:
        gnf = _normal_form(cfg, max_gnf_nodes, compiled_store, deadline)
    except NormalFormTooLarge as error:
        error = NormalFormTooLarge(error.diagnostics, text=text, source=source)
        placed = origin.remap_error(error) if origin else error
        # still the budget's own type, with what XGrammar would compile instead (the serving path's fallback)
        raise NormalFormTooLarge(placed.diagnostics, placed.text, placed.source, text, origin) from None
    except GrammarError as error:
        error = GrammarError(error.diagnostics, text=text, source=source)
        raise (origin.remap_error(error) if origin else error) from None
    t4 = time.perf_counter()
    seconds = {"parse": t1 - t0, "lower": t2 - t1, "gnf": t4 - t3}
    if pending is not None:
        return ParsedLaterGrammar(text, cfg, gnf, seconds, origin, pending)
    return CompiledGrammar(text, ast, cfg, gnf, seconds, origin or GrammarSource(text, "ebnf", [], text, source))


def _parse(
    text: str,
    root: str,
    source: str,
    origin: GrammarSource | None,
    reachable_only: bool,
    deadline: Deadline | None = None,
) -> GrammarAST:
    """The text path's parse: XGrammar's EBNF of a schema (``reachable_only``) has its unused basic_*
    helpers skipped, and the warnings about them, never shown (remap places no diagnostic outside a
    Regex call), counted but not made; the warnings put in the user's terms."""
    try:
        ast = parse_ebnf(
            text,
            root=root,
            source=source,
            reachable_only=reachable_only,
            warn_unreachable=not reachable_only,
            deadline=deadline,
        )
    except GrammarError as error:
        if origin is None:
            raise
        raise origin.remap_error(error) from None
    if origin is not None:
        ast.warnings = origin.user_diagnostics(ast.warnings, ast.hidden_warnings)
    return ast


def _serialized_cfg(grammar, text: str, counted_threshold: int, deadline: Deadline | None = None) -> CFG | None:
    """The byte CFG from XGrammar's grammar object (:mod:`.grammar.serialized`), or None where it cannot
    be read there: the text path then runs, and says what is wrong if anything is. Past ``deadline``:
    :class:`~cfgzip_lab.deadline.BuildBudgetError`, never the text path."""
    from .grammar.serialized import cfg_from_grammar

    try:
        return cfg_from_grammar(grammar, text, counted_threshold=counted_threshold, deadline=deadline)
    except BuildBudgetError:
        raise
    except Exception:  # Unsupported, or anything unforeseen: the text path is the referee
        return None


class PendingParse:
    """The parse of a grammar's EBNF that the serialized path did not need (:mod:`.grammar.serialized`),
    made when something first asks for the syntax tree (warnings, diagnostics, the workbench) or the
    notes: the same parse, warnings and notes as the text path, in its order. Shared by the compiled
    grammar and its :class:`~.grammar.sources.NotesAfterParse`, holding neither (no reference cycle)."""

    __slots__ = ("text", "source", "dead_ends", "ast", "busy")

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.dead_ends: list[Diagnostic] = []  # the dead-end warnings, put in the user's terms after the parse's
        self.ast: GrammarAST | None = None
        self.busy = False  # inside parse(): the notes it appends to are read, and must not parse again

    def parse(self, origin: GrammarSource) -> GrammarAST | None:
        """The syntax tree, the parse's warnings and notes made the first time (None while that runs)."""
        if self.ast is None and not self.busy:
            self.busy = True
            try:
                ast = _parse(self.text, "root", self.source, origin, reachable_only=True)
                if self.dead_ends:
                    ast.warnings = list(ast.warnings) + origin.user_diagnostics(self.dead_ends)
                self.ast = ast
            finally:
                self.busy = False
        return self.ast


def compile_from_rule(compiled: CompiledGrammar, rule: str, **options) -> CompiledGrammar:
    """The grammar of ``compiled`` started from ``rule`` instead of its root: the language of one
    rule, for a sample or a test written for that rule alone (a ``value`` of a JSON grammar, one
    ``statement`` of a language). Built from ``compiled.text`` (the EBNF XGrammar compiles, so a
    schema's or a Lark file's rules as XGrammar named them); ``rule == compiled.ast.root`` returns
    ``compiled`` itself.

    Raises
    ------
    CfgzipError
        ``rule`` is not a rule of the grammar (a test file that names a renamed rule).
    GrammarError
        The rule's language is empty.

    Examples
    --------
    >>> g = compile_grammar('root ::= "turn " turn\\nturn ::= "left" | "right"')
    >>> compile_from_rule(g, "turn").gnf.accepts(b"left")
    True
    """
    if rule == compiled.ast.root:
        return compiled
    if rule not in compiled.ast.rules:
        names = list(compiled.ast.rules)
        more = ", …" if len(names) > 12 else ""
        raise CfgzipError(f"no rule {rule!r} in the grammar (its rules: {', '.join(names[:12])}{more})")
    return compile_grammar(compiled.text, source=f"<rule {rule}>", kind="ebnf", root=rule, **options)


def _normal_form(cfg: CFG, max_nodes: int, compiled: bool | None, deadline: Deadline | None = None):
    """``to_gnf`` in the store :func:`compile_grammar` chose; where the compiled store cannot go on
    (``Unsupported``: a set operation nesting past its recursion depth), the normal form is built
    again in a WordStore, the reference (same nodes, same ids)."""
    sets = cfg.byte_sets()  # (read in C: csrc/cfg_passes.c)
    if compiled is False:
        return to_gnf(cfg, max_nodes=max_nodes, store=WordStore(), byte_sets=sets, deadline=deadline)
    from .grammar.compiled_words import Unsupported, as_word_store, new_word_store, symbol_widths

    tokens = any(s.bits >> 256 for s in sets)  # token-level macros' pseudo-bytes (issue 19)
    store = new_word_store(counted=bool(getattr(cfg, "counted", None)), tokens=tokens)
    if isinstance(store, WordStore):
        return to_gnf(cfg, max_nodes=max_nodes, store=store, byte_sets=sets, deadline=deadline)
    try:
        gnf = to_gnf(cfg, max_nodes=max_nodes, store=store, byte_sets=sets, deadline=deadline)
    except Unsupported:
        return to_gnf(cfg, max_nodes=max_nodes, store=WordStore(), byte_sets=sets, deadline=deadline)
    if gnf.families and symbol_widths(gnf) is None:
        # counted symbols past the compiled store's packing: classing takes the Python step, in a WordStore
        # holding the same nodes (a compiled store cannot take that step, classes/compiled_displacement.py)
        gnf = replace(gnf, store=as_word_store(store), _family_rows={})
    return gnf


@gc_paused()  # a build never pays a full collection (cfgzip_lab._gc)
def build_classes(
    compiled: CompiledGrammar,
    vocab,
    *,
    budget: int = DEFAULT_TOKEN_BUDGET,
    progress=None,
    cancel=None,
    workers: int = 1,
    max_dag_nodes: int = DEFAULT_MAX_DAG_NODES,
) -> ClassingResult:
    """Displacement classes of ``vocab`` (a VocabTable) under ``compiled``, with full metadata.

    ``workers > 1`` forks processes (see :func:`compute_classes`); keep 1 in threads.
    ``max_dag_nodes`` is the memory cap (:mod:`.classes.limits`): past it,
    :class:`~.classes.limits.ClassingLimitError` names the rules that grow the DAG. A grammar
    naming token ids past ``vocab`` (``Token(...)``) gets a
    :class:`~.grammar.token_macros.TokenIdError` at the first such macro.
    """
    check_vocabulary(compiled, vocab)
    result = compute_classes(
        compiled.gnf,
        vocab.token_bytes,
        vocab.kinds,
        budget=budget,
        progress=progress,
        cancel=cancel,
        workers=workers,
        max_dag_nodes=max_dag_nodes,
        trie=vocab.byte_trie,
    )
    result.classes.metadata.update(
        {
            "grammar_sha256": compiled.sha256,
            "vocab_fingerprint": vocab.fingerprint,
            "tokenizer": vocab.name,
            "gnf_seconds": round(compiled.seconds.get("gnf", 0.0), 4),
        }
    )
    named = describe_named_tokens(compiled.gnf, vocab)  # Token(...): what the ids are in this tokenizer
    if named:
        result.classes.metadata["named_tokens"] = named
    return result


def xgrammar_serves_reason(compiled: CompiledGrammar, vocab: VocabTable | None = None) -> str | None:
    """Why XGrammar itself must make ``compiled``'s masks (a class repeated past 128 that XGrammar's
    lookahead misreads in ``vocab``, :mod:`~.grammar.large_repeat`, or :func:`nested_root_reason`), with line
    and column; None where cfgzip's walks make XGrammar's masks. The native engine then serves through XGrammar itself."""
    found = large_repeat_in_text(compiled.text, vocab)
    if found is not None:
        return _nested_reason_text(found, compiled.grammar_source)
    return nested_root_reason(compiled)


def nested_root_reason(compiled: CompiledGrammar) -> str | None:
    """Why the native walk cannot make ``compiled``'s masks, where its root rule is nested with input
    after it (:func:`~.grammar.nested_root.nested_root_reference`: XGrammar's masks leave the
    language there), as the diagnostic's text with line and column; None otherwise. The native
    engine then serves through XGrammar itself over the whole vocabulary."""
    if isinstance(compiled, LoadedGrammar) and compiled._front_end is None:
        # read back from a cache: its rules parsed, not the whole front end its ``ast`` would run
        found = nested_root_in_text(compiled.text)
    elif isinstance(compiled, ParsedLaterGrammar) and not compiled.parsed:
        # the same parse as its ``ast``'s, made only where the root's name stands in the text twice
        found = nested_root_reference(compiled.ast) if mentions_root_again(compiled.text) else None
    else:
        found = nested_root_reference(compiled.ast)
    if found is None:
        return None
    return _nested_reason_text(found, compiled.grammar_source)


def _nested_reason_text(found: Diagnostic, origin: GrammarSource | None) -> str:
    """:func:`xgrammar_serves_reason`'s text of the diagnostic ``found``, in the EBNF of ``origin``."""
    return f"line {found.line}, column {found.column}: {found.message}" + (
        f" (in the EBNF XGrammar wrote for the {origin.kind})" if origin is not None and origin.kind != "ebnf" else ""
    )


def resolve_grammar(name_or_path: str) -> Path:
    """A path as given, or a bundled grammar by name (``json``, ``c_like``...)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    bundled = bundled_grammars()
    if name_or_path in bundled:
        return bundled[name_or_path]
    raise FileNotFoundError(f"no grammar file {name_or_path!r} (bundled grammars: {', '.join(bundled) or 'none'})")


class LoadedGrammar(CompiledGrammar):
    """A :class:`CompiledGrammar` read back from a class cache: the EBNF text and its GNF as they
    were stored (:mod:`cfgzip_lab.grammar.gnf_arrays`), so a process gets the normal form without
    the front end (c_like: 0.55 s). ``ast`` and ``cfg``, which only views and diagnostics read,
    are computed from the text on first use. ``gnf`` None: a grammar XGrammar itself serves, whose normal
    form was never built (:mod:`cfgzip_lab.cache.xgrammar_only`).
    """

    def __init__(
        self, text: str, gnf: GNF | None, grammar_source: GrammarSource | None = None, seconds: dict | None = None
    ) -> None:
        self.text = text
        self.gnf = gnf
        self.grammar_source = grammar_source or GrammarSource(text, "ebnf", [], text, None)
        self.seconds = dict(seconds or {})
        self._front_end: CompiledGrammar | None = None

    def _compiled(self) -> CompiledGrammar:
        if self._front_end is None:
            self._front_end = compile_grammar(self.text)
        return self._front_end

    @property
    def ast(self) -> GrammarAST:  # type: ignore[override]
        return self._compiled().ast

    @property
    def cfg(self) -> CFG:  # type: ignore[override]
        return self._compiled().cfg

    def __repr__(self) -> str:
        gnf = "no normal form" if self.gnf is None else f"{self.gnf.num_nonterminals} GNF nonterminals"
        return f"LoadedGrammar({self.grammar_source.kind}, sha256 {self.sha256[:12]}…, {gnf})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__


class ParsedLaterGrammar(CompiledGrammar):
    """A :class:`CompiledGrammar` whose byte CFG came from XGrammar's grammar object
    (:mod:`.grammar.serialized`: a JSON Schema's), not from parsing its EBNF. ``ast`` (and with it
    ``warnings`` and the source's notes) is the parse of ``text``, made on first use
    (:class:`PendingParse`): the build of a first mask reads none of them."""

    def __init__(
        self, text: str, cfg: CFG, gnf: GNF, seconds: dict, grammar_source: GrammarSource, pending: PendingParse
    ) -> None:
        self.text = text
        self.cfg = cfg
        self.gnf = gnf
        self.seconds = seconds
        self.grammar_source = grammar_source
        self._pending = pending

    @property
    def parsed(self) -> bool:
        """Whether the syntax tree has been made."""
        return self._pending.ast is not None

    @property
    def ast(self) -> GrammarAST:  # type: ignore[override]
        return self._pending.parse(self.grammar_source)

    def __repr__(self) -> str:
        return f"ParsedLaterGrammar({self.grammar_source.kind}, sha256 {self.sha256[:12]}…, {self.gnf.num_nonterminals} GNF nonterminals)"

    __eq__ = object.__eq__
    __hash__ = object.__hash__
