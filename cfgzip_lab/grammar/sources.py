"""Other grammar inputs → XGrammar's EBNF: JSON Schema, structural tags, Lark and regexes (XGrammar
builds them) and llama.cpp's GBNF.

cfgzip classes tokens for the language XGrammar enforces, so every input kind ends as EBNF
text that ``xgrammar.Grammar.from_ebnf`` reads with the same meaning:

- **JSON Schema**: ``xgrammar.Grammar.from_json_schema`` builds the grammar (XGrammar's
  defaults: any whitespace, strict mode) and its printed EBNF (``str(grammar)``) is what we
  class and what the plain engine compiles. A schema's ``pattern`` prints as
  ``Regex("...", json_string=true)``, which :mod:`.regex` lowers exactly. (Measured on
  0.2.8: with a ``pattern``, XGrammar drops ``minLength``/``maxLength``; we class what it
  enforces.) Warnings about XGrammar's own helper rules are folded into one note.
- **Structural tag** (tool calling, as vLLM and SGLang send it): XGrammar builds the grammar
  (``Grammar.from_structural_tag``) and its printed EBNF is classed; see :mod:`.structural_tag`
  (errors placed at the bad part of the spec).
- **Lark** and a bare **regex**: ``xgrammar.Grammar.from_lark`` / ``from_regex`` build the
  grammar and its printed EBNF is classed, errors placed at XGrammar's line and column in the
  author's text (:mod:`.lark_regex`).
- **GBNF** (llama.cpp's dialect, ``llama-grammar.cpp``): converted token by token with the
  exact meaning kept. Differences from XGrammar's EBNF that the conversion takes care of:
  ``\\x`` takes exactly two hex digits (``"\\x41BC"`` is ``"ABC"``, where XGrammar would read
  U+41BC); escapes are only ``\\x \\u \\U \\t \\r \\n \\\\ \\" \\[ \\]``; a rule body ends at
  a newline unless inside parentheses; an alternative may be empty (``ws ::= | " "``); ``.``
  is any character; rule names may start with a digit; a quantifier may follow another
  (``a**``); strings and classes may hold a raw newline. The root rule is ``root``.
  Beyond llama.cpp: ``_`` is accepted in names (two corpus files use it; it means nothing
  else in GBNF). Refused rather than guessed: an inverted range (llama.cpp matches nothing
  there) and a rule defined twice (llama.cpp silently keeps the last definition).

Errors are :class:`~.diagnostics.GrammarError` (a ``CfgzipError``) whose diagnostics point
into the user's own text: the JSON error position, the GBNF position, or, for a problem
found later in the converted EBNF, the GBNF position it came from (:meth:`GrammarSource.remap`).
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any

from .diagnostics import Diagnostic, GrammarError, position_of
from .ebnf import check_ebnf, decode_ebnf_string
from .lark_regex import lark_to_ebnf, looks_like_lark, regex_to_ebnf
from .printed import printed_ebnf
from .structural_tag import looks_like_structural_tag, read_structural_tag

__all__ = ["GrammarSource", "NotesAfterParse", "to_ebnf", "to_ebnf_and_grammar", "check_source", "detect_kind", "KINDS"]

KINDS = ("ebnf", "gbnf", "json_schema", "structural_tag", "lark", "regex")
_FROM_JSON = ("json_schema", "structural_tag")  # XGrammar builds the EBNF; Regex(...) calls come from schemas
_FROM_XGRAMMAR = (*_FROM_JSON, "lark", "regex")  # XGrammar builds the EBNF from the user's text


@dataclass(frozen=True, slots=True)
class _Piece:
    """One stretch of the output and the stretch of the input it came from."""

    out_start: int
    out_end: int
    src_start: int
    src_end: int
    verbatim: bool  # copied character for character, so offsets inside map one to one


@dataclass
class GrammarSource:
    """A grammar as the user gave it and as XGrammar's EBNF.

    ``ebnf`` is what the pipeline parses and the engines compile; ``text`` is the user's own
    text (a schema, a GBNF file or the EBNF itself); ``notes`` say what the conversion did.
    """

    ebnf: str
    kind: str
    notes: list[str] = field(default_factory=list)
    text: str = ""
    name: str | None = None
    _pieces: list[_Piece] = field(default_factory=list, repr=False)

    @property
    def written_by_xgrammar(self) -> bool:
        """XGrammar wrote the EBNF (a JSON Schema, a structural tag, a Lark grammar, a regex): its
        helper rules are not the user's, and no diagnostic about them is shown (:meth:`remap`)."""
        return self.kind in _FROM_XGRAMMAR

    def remap(self, diagnostic: Diagnostic) -> Diagnostic | None:
        """A diagnostic about ``ebnf`` moved to where its cause is in ``text``.

        GBNF: through the conversion's position map. JSON Schema: a diagnostic inside a
        ``Regex("...")`` call moves to that pattern's string in the schema (to the very
        character when the schema spells the pattern as ``json.dumps`` would); any other is
        about XGrammar's own rules and has no place in the schema: None. Lark and regex: None
        (XGrammar's rules, which XGrammar checked against the author's text already). EBNF:
        unchanged.
        """
        if self.kind in ("lark", "regex"):
            return None
        if diagnostic.span is None or self.kind == "ebnf":
            return diagnostic if self.kind not in _FROM_JSON else None
        if self.kind in _FROM_JSON:
            start = self._schema_offset(diagnostic.span[0])
            if start is None:
                return None
            end = start + 1
        else:
            start = self._src_offset(diagnostic.span[0])
            end = max(start, self._src_offset(diagnostic.span[1]))
        line, column = position_of(self.text, start)
        return replace(diagnostic, line=line, column=column, span=(start, end))

    def remap_error(self, error: GrammarError) -> GrammarError:
        """The same error with its diagnostics moved into ``text`` (see :meth:`remap`); left in
        EBNF terms (with the EBNF as its text) when an error cannot be placed in ``text``."""
        if self.kind == "ebnf":
            return error
        moved = [self.remap(d) for d in error.diagnostics]
        if any(m is None for m, d in zip(moved, error.diagnostics) if d.severity == "error"):
            return error
        return GrammarError([m for m in moved if m is not None], self.text, error.source)

    def user_diagnostics(self, diagnostics: list[Diagnostic], hidden: int = 0) -> list[Diagnostic]:
        """Warnings of the EBNF stage, in the user's terms: remapped; for a schema, those about
        XGrammar's own rules (unreachable helpers, dropped lookaheads) become one note. ``hidden``:
        how many more of those the parse did not make (``GrammarAST.hidden_warnings``)."""
        moved = [self.remap(d) for d in diagnostics]
        dropped = sum(m is None for m in moved) + hidden
        if dropped:
            self.notes.append(
                f"{dropped} warnings about XGrammar's generated rules not shown (unreachable helper rules, "
                "rule lookaheads dropped: they only restrict the language, and verify checks the classes)"
            )
        return [m for m in moved if m is not None]

    def _schema_offset(self, ebnf_offset: int) -> int | None:
        """Where the schema writes the pattern of the ``Regex`` call around ``ebnf_offset``."""
        for match in _REGEX_CALL.finditer(self.ebnf):
            body_start = match.start("body")
            if not match.start() <= ebnf_offset <= match.end():
                continue
            pattern = decode_ebnf_string(match.group("body"))
            before = decode_ebnf_string(match.group("body")[: max(0, ebnf_offset - body_start)])
            for literal in _JSON_STRING.finditer(self.text):
                try:
                    value = json.loads(literal.group())
                except json.JSONDecodeError:
                    continue
                if value != pattern:
                    continue
                inner = literal.start() + 1
                if literal.group()[1:-1] == json.dumps(pattern, ensure_ascii=False)[1:-1] and pattern.startswith(
                    before
                ):
                    return inner + len(json.dumps(before, ensure_ascii=False)) - 2
                return inner
            return None
        return None

    def _src_offset(self, out: int) -> int:
        starts = [p.out_start for p in self._pieces]
        i = max(0, bisect.bisect_right(starts, out) - 1)
        piece = self._pieces[i]
        if piece.verbatim:
            return min(piece.src_start + (out - piece.out_start), piece.src_end)
        return piece.src_start


class NotesAfterParse(GrammarSource):
    """A :class:`GrammarSource` whose EBNF the pipeline did not parse (its byte CFG came from XGrammar's
    grammar object, :mod:`.serialized`): the parse adds a note (:meth:`user_diagnostics`: the warnings
    about XGrammar's rules not shown), so reading ``notes`` runs that parse first, once
    (``pending.parse(self)``, :class:`cfgzip_lab.pipeline.PendingParse`), and the notes are those of the
    text path, in its order."""

    @classmethod
    def of(cls, source: GrammarSource, pending: Any) -> NotesAfterParse:
        later = cls(source.ebnf, source.kind, source.notes, source.text, source.name, source._pieces)
        later.__dict__["_pending"] = pending
        return later

    @property  # type: ignore[override]
    def notes(self) -> list[str]:
        pending = self.__dict__.pop("_pending", None)
        if pending is not None:
            pending.parse(self)
        return self.__dict__["_notes"]

    @notes.setter
    def notes(self, value: list[str]) -> None:
        self.__dict__["_notes"] = value


def detect_kind(text: str, name: str | None = None) -> str:
    """``"structural_tag"`` for a JSON object that is one (``"type": "structural_tag"``, or
    legacy ``structures`` with ``triggers``), ``"json_schema"`` for any other JSON object (or a
    ``.json`` file), ``"gbnf"`` for a ``.gbnf`` file, ``"lark"`` for a ``.lark`` file or a text
    that reads as Lark (:func:`.lark_regex.looks_like_lark`: no ``::=``, a ``start:`` rule or a
    ``%import``/``%ignore``), ``"regex"`` for a ``.regex`` file, else ``"ebnf"``. EBNF can never
    start with ``{``, so a leading brace means JSON. A bare regex is never guessed from its text
    (``a|b`` could be anything): name the kind."""
    suffix = PurePath(name).suffix.lower() if name else ""
    if suffix == ".json" or text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return "json_schema"
        return "structural_tag" if looks_like_structural_tag(value) else "json_schema"
    if suffix in (".gbnf", ".lark", ".regex"):
        return suffix[1:]
    if looks_like_lark(text):
        return "lark"
    return "ebnf"


def to_ebnf(text: str, kind: str = "auto", *, name: str | None = None) -> GrammarSource:
    """The grammar ``text`` of the given kind as XGrammar EBNF, with notes.

    Parameters
    ----------
    text : str
        A JSON Schema (a JSON object), a structural tag (a JSON object, :mod:`.structural_tag`),
        a GBNF grammar, a Lark grammar, a regex (the whole text), or XGrammar EBNF.
    kind : str
        ``"auto"`` (see :func:`detect_kind`), ``"ebnf"``, ``"gbnf"``, ``"json_schema"``,
        ``"structural_tag"``, ``"lark"`` or ``"regex"``.
    name : str, keyword-only
        A file name: used by ``"auto"`` (``.gbnf``, ``.json``, ``.lark``, ``.regex``) and in
        rendered diagnostics.

    Returns
    -------
    GrammarSource

    Raises
    ------
    GrammarError
        For a bad schema (JSON syntax error at its line and column, or XGrammar's message)
        a GBNF syntax error, or XGrammar's message about a Lark grammar or a regex, with positions in
        ``text``.
    ValueError
        For an unknown ``kind``.
    """
    return to_ebnf_and_grammar(text, kind, name=name)[0]


def to_ebnf_and_grammar(text: str, kind: str = "auto", *, name: str | None = None) -> tuple[GrammarSource, Any]:
    """:func:`to_ebnf`, and the ``xgrammar.Grammar`` its EBNF was printed from where that is at hand (a
    JSON Schema's), else None: the pipeline reads the byte CFG from that object's arrays instead of
    parsing the EBNF (:mod:`.serialized`)."""
    if kind == "auto":
        kind = detect_kind(text, name)
    source = name or "<grammar>"
    if kind == "ebnf":
        return GrammarSource(text, "ebnf", [], text, name), None
    if kind == "json_schema":
        return _from_json_schema(text, source, name)
    return _to_ebnf(text, kind, source, name), None


def _to_ebnf(text: str, kind: str, source: str, name: str | None) -> GrammarSource:
    if kind == "structural_tag":
        tag = read_structural_tag(text, source)
        return GrammarSource(tag.ebnf, "structural_tag", tag.notes, text, name)
    if kind == "gbnf":
        return _GbnfConverter(text, source, name).convert()
    if kind == "lark":
        return lark_to_ebnf(text, source, name)
    if kind == "regex":
        return regex_to_ebnf(text, source, name)
    raise ValueError(f"unknown grammar kind {kind!r}: expected 'auto' or one of {', '.join(KINDS)}")


def check_source(text: str, kind: str = "auto", *, name: str | None = None) -> list[Diagnostic]:
    """Every error and warning of ``text`` (any kind), placed in ``text``; never raises (for a
    live editor). A diagnostic of the EBNF stage that has no place in ``text`` (XGrammar's own
    rules of a schema) is left out, except an error, which is kept at line 1 so none is lost."""
    try:
        source = to_ebnf(text, kind, name=name)
    except GrammarError as error:
        return list(error.diagnostics)
    except Exception as error:  # a bug must not take the editor down
        return [Diagnostic(1, 1, f"internal error reading the grammar: {error!r}")]
    out = []
    for diagnostic in check_ebnf(source.ebnf):
        moved = source.remap(diagnostic)
        if moved is None and diagnostic.severity == "error":
            moved = replace(
                diagnostic, line=1, column=1, span=(0, 0), message=f"in XGrammar's grammar: {diagnostic.message}"
            )
        if moved is not None:
            out.append(moved)
    return out


# A Regex macro call in XGrammar's printed EBNF, and a JSON string literal in a schema.
_REGEX_CALL = re.compile(r'Regex\(\s*"(?P<body>(?:[^"\\\r\n]|\\[^\r\n])*)"[^)\r\n]*\)')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


# ---- JSON Schema ------------------------------------------------------------------------------

# XGrammar's messages start with "[hh:mm:ss] /project/cpp/file.cc:123: ".
_XGRAMMAR_LOG_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")


def _from_json_schema(text: str, source: str, name: str | None) -> tuple[GrammarSource, Any]:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        offset = error.pos
        line, column = position_of(text, offset)
        message = f"not valid JSON: {error.msg}"
        raise GrammarError([Diagnostic(line, column, message, span=(offset, offset + 1))], text, source) from None
    if not isinstance(schema, (dict, bool)):
        message = f"a JSON Schema is an object (or true/false), not a JSON {type(schema).__name__}"
        raise GrammarError([Diagnostic(1, 1, message, span=(0, 0))], text, source)
    import xgrammar

    try:
        grammar = xgrammar.Grammar.from_json_schema(text)
    except Exception as error:  # XGrammar raises RuntimeError with a C++ log prefix
        message = _XGRAMMAR_LOG_PREFIX.sub("", str(error).strip().splitlines()[0] if str(error).strip() else "")
        at = _bad_pattern_offset(text, schema) if "Regex parsing error" in message else None
        line, column = position_of(text, at or 0)
        message = f"XGrammar cannot build a grammar from this schema: {message}"
        raise GrammarError([Diagnostic(line, column, message, span=(at or 0, at or 0))], text, source) from None
    ebnf = printed_ebnf(grammar)
    notes = [
        "grammar built by XGrammar from the JSON Schema (any whitespace, strict mode); "
        f"{sum('::=' in line for line in ebnf.splitlines())} rules of XGrammar's EBNF are classed"
    ]
    if "Regex(" in ebnf:
        notes.append("the schema's patterns are Regex(...) rules, lowered exactly (json_string: no \", \\ or controls)")
    return GrammarSource(ebnf, "json_schema", notes, text, name), grammar


def _bad_pattern_offset(text: str, schema: object) -> int | None:
    """Where the schema writes the first ``pattern`` (or ``patternProperties`` key) that our
    reading of XGrammar's regex dialect rejects: XGrammar's message names no place."""
    from .regex import RegexError, regex_to_expr

    patterns: list[str] = []
    todo = [schema]
    while todo:
        node = todo.pop(0)
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                patterns += list(node["patternProperties"])
            todo += list(node.values())
        elif isinstance(node, list):
            todo += node
    for pattern in patterns:
        try:
            regex_to_expr(pattern)
        except RegexError as error:
            if error.refused:
                continue
            for literal in _JSON_STRING.finditer(text):
                try:
                    if json.loads(literal.group()) == pattern:
                        return literal.start() + 1
                except json.JSONDecodeError:
                    continue
    return None


# ---- GBNF -------------------------------------------------------------------------------------

# llama.cpp names are [A-Za-z0-9-]+; "_" is accepted too (two corpus files use it, and it has no
# other meaning in GBNF, so accepting it changes no valid grammar).
_GBNF_NAME = re.compile(r"[A-Za-z0-9_-]+")
_EBNF_NAME = re.compile(r"[A-Za-z_.\-][A-Za-z0-9_.\-]*\Z")
# Names XGrammar reads as something else: booleans and macro calls.
_NOT_A_RULE_NAME = frozenset({"true", "false", "TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken", "Regex"})
_GBNF_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD
_ANY_CHAR = "[\\u0000-\\U0010FFFF]"


class _GbnfConverter:
    """A scanner that follows llama.cpp's recursive-descent GBNF parser and writes EBNF as it goes."""

    def __init__(self, text: str, source: str, name: str | None) -> None:
        self.text = text
        self.source = source
        self.name = name
        self.pos = 0
        self.out: list[str] = []
        self.pieces: list[_Piece] = []
        self.out_len = 0
        self.notes: list[str] = []
        self.names = self._rename_rules()

    # ---- output ------------------------------------------------------------------------------

    def emit(self, piece: str, src_start: int, src_end: int, *, verbatim: bool = False) -> None:
        self.pieces.append(_Piece(self.out_len, self.out_len + len(piece), src_start, src_end, verbatim))
        self.out.append(piece)
        self.out_len += len(piece)

    def wrap_last_item(self, item_index: int) -> None:
        """``a*`` followed by another quantifier: XGrammar needs ``(a*)`` before it."""
        head = "".join(self.out[item_index:])
        src_start = self.pieces[item_index].src_start
        src_end = self.pieces[-1].src_end
        del self.out[item_index:], self.pieces[item_index:]
        self.out_len = sum(map(len, self.out))
        self.emit(f"({head})", src_start, src_end)

    # ---- errors ------------------------------------------------------------------------------

    def fail(self, message: str, at: int | None = None) -> GrammarError:
        at = self.pos if at is None else at
        line, column = position_of(self.text, at)
        return GrammarError([Diagnostic(line, column, message, span=(at, at + 1))], self.text, self.source)

    def peek(self, delta: int = 0) -> str:
        i = self.pos + delta
        return self.text[i] if i < len(self.text) else ""

    # ---- grammar -----------------------------------------------------------------------------

    def _rename_rules(self) -> dict[str, str]:
        """GBNF names that are no XGrammar rule names get a fresh one (``1st`` → ``r-1st``)."""
        heads = set(re.findall(r"^[ \t]*([A-Za-z0-9_-]+)[ \t]*::=", self.text, re.MULTILINE))
        used = {*heads}
        names = {}
        for head in sorted(heads):
            if _EBNF_NAME.match(head) and head not in _NOT_A_RULE_NAME:
                continue
            fresh, n = f"r-{head}", 1
            while fresh in used:
                n += 1
                fresh = f"r{n}-{head}"
            used.add(fresh)
            names[head] = fresh
            self.notes.append(f"GBNF rule {head!r} renamed {fresh!r} (not a valid XGrammar rule name)")
        return names

    def convert(self) -> GrammarSource:
        self.space(newlines=True)
        while self.pos < len(self.text):
            self.rule()
        ebnf = "".join(self.out)
        self.notes.insert(0, "converted from llama.cpp GBNF to XGrammar EBNF with the same meaning")
        return GrammarSource(ebnf, "gbnf", self.notes, self.text, self.name, self.pieces)

    def space(self, *, newlines: bool) -> None:
        """Copy spaces, tabs, comments and (when allowed) newlines verbatim."""
        start = self.pos
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < len(text) and text[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break
        if self.pos > start:
            self.emit(text[start : self.pos], start, self.pos, verbatim=True)

    def rule(self) -> None:
        match = _GBNF_NAME.match(self.text, self.pos)
        if match is None:
            if self.text.startswith("//", self.pos):
                raise self.fail("expected a rule name; comments start with '#' in GBNF")
            raise self.fail("expected a rule name")
        self.emit_name(match)
        self.space(newlines=False)
        if not self.text.startswith("::=", self.pos):
            raise self.fail("expected '::='")
        self.emit("::=", self.pos, self.pos + 3, verbatim=True)
        self.pos += 3
        self.space(newlines=True)
        self.alternates(nested=False)
        if self.peek() in ("\r", "\n"):
            self.space(newlines=True)
        elif self.pos < len(self.text):
            raise self.fail(f"expected a newline or the end of the grammar, got {self.peek()!r}")

    def emit_name(self, match: re.Match[str]) -> None:
        name = match.group()
        self.emit(self.names.get(name, name), match.start(), match.end(), verbatim=name not in self.names)
        self.pos = match.end()

    def alternates(self, *, nested: bool) -> None:
        self.sequence(nested=nested)
        while self.peek() == "|":
            self.emit("|", self.pos, self.pos + 1, verbatim=True)
            self.pos += 1
            self.space(newlines=True)
            self.sequence(nested=nested)

    def sequence(self, *, nested: bool) -> None:
        last_item: int | None = None  # index in self.out where the last element starts
        quantified = False
        while True:
            c = self.peek()
            if c == '"':
                last_item, quantified = len(self.out), False
                self.string()
            elif c == "[":
                last_item, quantified = len(self.out), False
                self.char_class()
            elif c == "(":
                last_item, quantified = len(self.out), False
                self.emit("(", self.pos, self.pos + 1, verbatim=True)
                self.pos += 1
                self.space(newlines=True)
                self.alternates(nested=True)
                if self.peek() != ")":
                    raise self.fail("expected ')'")
                self.emit(")", self.pos, self.pos + 1, verbatim=True)
                self.pos += 1
            elif c == ".":
                last_item, quantified = len(self.out), False
                self.emit(_ANY_CHAR, self.pos, self.pos + 1)
                self.pos += 1
            elif c == "<":
                raise self.fail("token references <...> match token ids, not bytes: cfgzip cannot class them")
            elif c and _GBNF_NAME.match(c):
                last_item, quantified = len(self.out), False
                self.emit_name(_GBNF_NAME.match(self.text, self.pos))  # type: ignore[arg-type]
            elif c in ("*", "+", "?", "{"):
                if last_item is None:
                    raise self.fail(f"expecting an item before {c!r}")
                if quantified:
                    self.wrap_last_item(last_item)
                    last_item = len(self.out) - 1
                self.quantifier(nested=nested)
                quantified = True
            else:
                break
            self.space(newlines=nested)
        if last_item is None:  # an empty alternative: XGrammar spells it ""
            self.emit('""', self.pos, self.pos)

    def quantifier(self, *, nested: bool) -> None:
        c, at = self.peek(), self.pos
        if c != "{":
            self.emit(c, at, at + 1, verbatim=True)
            self.pos += 1
            return
        self.pos += 1
        self.skip_space(nested)
        low = self.integer()
        self.skip_space(nested)
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(nested)
            high = self.integer() if self.peek().isdigit() else None
            self.skip_space(nested)
        if self.peek() != "}":
            raise self.fail("expected ',' or '}' in a repetition")
        self.pos += 1
        if high is not None and high < low:
            raise self.fail(f"invalid repetition bounds {{{low},{high}}}", at)
        if max(low, high or 0) > _MAX_REPETITION:
            raise self.fail(f"llama.cpp refuses more than {_MAX_REPETITION} repetitions", at)
        spelled = f"{{{low}}}" if high == low else f"{{{low},{'' if high is None else high}}}"
        self.emit(spelled, at, self.pos)

    def skip_space(self, newlines: bool) -> None:
        """llama.cpp's parse_space inside ``{m,n}``: blanks, comments, newlines when nested."""
        while self.peek() in (" ", "\t", "#") or (newlines and self.peek() in ("\r", "\n")):
            if self.peek() == "#":
                while self.peek() not in ("\r", "\n", ""):
                    self.pos += 1
            else:
                self.pos += 1

    def integer(self) -> int:
        match = re.compile(r"[0-9]+").match(self.text, self.pos)
        if match is None:
            raise self.fail("expected an integer")
        self.pos = match.end()
        return int(match.group())

    def char(self) -> int:
        """One GBNF character (an escape or a UTF-8 character) as a code point."""
        at = self.pos
        if self.peek() == "\\":
            letter = self.peek(1)
            if letter in _HEX_DIGITS:
                size = _HEX_DIGITS[letter]
                digits = self.text[at + 2 : at + 2 + size]
                if len(digits) < size or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise self.fail(f"\\{letter} takes exactly {size} hex digits in GBNF", at)
                self.pos = at + 2 + size
                return int(digits, 16)
            if letter in _GBNF_ESCAPES:
                self.pos = at + 2
                return ord(_GBNF_ESCAPES[letter])
            raise self.fail(f"unknown escape \\{letter} in GBNF", at)
        if not self.peek():
            raise self.fail("unexpected end of the grammar")
        self.pos += 1
        return ord(self.text[at])

    def string(self) -> None:
        start = self.pos
        self.pos += 1
        code_points = []
        while self.peek() != '"':
            if not self.peek():
                raise self.fail("unterminated string", start)
            code_points.append(self.char())
        self.pos += 1
        self.emit('"' + "".join(_encode(cp, '"\\') for cp in code_points) + '"', start, self.pos)

    def char_class(self) -> None:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        parts = []
        while self.peek() != "]":
            if not self.peek():
                raise self.fail("unterminated character class", start)
            low = self.char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self.char()
                if high < low:
                    raise self.fail("inverted character range", start)
                parts.append(_encode(low, _CLASS_SPECIALS) + "-" + _encode(high, _CLASS_SPECIALS))
            else:
                parts.append(_encode(low, _CLASS_SPECIALS))
        self.pos += 1
        self.emit("[" + ("^" if negated else "") + "".join(parts) + "]", start, self.pos)


_CLASS_SPECIALS = "\\]-^["


def _encode(cp: int, specials: str) -> str:
    """One code point as XGrammar writes it in a string or class: printable characters as they
    are (escaped when special), ``\\n \\t \\r``, and every other one as ``\\uHHHH`` /
    ``\\UHHHHHHHH`` (so no raw U+2028 or control character splits a line of the output)."""
    if cp in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[cp]
    c = chr(cp) if cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF else ""
    if c and c in specials:
        return "\\" + c
    if c and c.isprintable():
        return c
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


_SHORT_ESCAPES = {0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}
