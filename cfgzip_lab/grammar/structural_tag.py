"""Structural tags (the JSON spec vLLM and SGLang send for tool calling) → XGrammar's EBNF.

A structural tag describes output as formats: free text with ``triggered_tags`` (each tag a
``begin`` string, a content such as a JSON Schema, an ``end`` string), ``token`` formats
naming vocabulary ids, sequences, ``or``, repetitions... XGrammar builds the grammar
(``xgrammar.Grammar.from_structural_tag``, the grammar ``compile_structural_tag`` compiles) and
its printed EBNF — ``TagDispatch``, ``TokenTagDispatch``, ``Token``, JSON Schema rules — is what
cfgzip classes and what both engines compile, so the language is XGrammar's by construction.

Two spellings are read, as the serving engines send them:

- ``{"type": "structural_tag", "format": {...}}`` (XGrammar's ``StructuralTag``);
- the legacy ``{"structures": [{"begin": ..., "schema": {...}, "end": ...}], "triggers": [...]}``
  (vLLM's and SGLang's older form, optionally with ``"type": "structural_tag"`` and
  ``"at_least_one"``), turned into the first by ``StructuralTag.from_legacy_structural_tag``
  as SGLang does.

XGrammar's errors name no place in the spec (``"One tag does not match any trigger in a
triggered tags format"``), so an error is placed by asking XGrammar again about each part: the
innermost format (an object with a ``"type"``) that XGrammar refuses alone with the same message
is the bad part, and a field the message names (``"begin field must be a string"``) narrows it to
that field's value. JSON syntax errors are at their character.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .diagnostics import Diagnostic, GrammarError, position_of

__all__ = ["StructuralTagSpec", "read_structural_tag", "looks_like_structural_tag", "json_spans"]

Path = tuple[str | int, ...]
_XGRAMMAR_LOG_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")


@dataclass(frozen=True)
class StructuralTagSpec:
    """A read structural tag: XGrammar's EBNF for it, the spec as XGrammar took it (JSON text,
    legacy form converted) and notes on what was done."""

    ebnf: str
    spec: str
    notes: list[str]


def looks_like_structural_tag(value: object) -> bool:
    """A JSON object in either spelling (a JSON Schema never has ``"type": "structural_tag"``,
    nor ``structures`` together with ``triggers``)."""
    if not isinstance(value, dict):
        return False
    return value.get("type") == "structural_tag" or ("structures" in value and "triggers" in value)


def read_structural_tag(text: str, source: str = "<structural tag>") -> StructuralTagSpec:
    """``text`` (a structural tag as JSON) → XGrammar's EBNF; :class:`GrammarError` placed in ``text``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise _error(text, source, (error.pos, error.pos + 1), f"not valid JSON: {error.msg}") from None
    if not isinstance(value, dict):
        raise _error(text, source, (0, 0), f"a structural tag is a JSON object, not a JSON {type(value).__name__}")
    spans = json_spans(text)
    notes: list[str] = []
    legacy = "structures" in value
    if legacy:
        spec_value = _from_legacy(value, text, source, spans)
        notes.append(
            "legacy structures/triggers read as XGrammar's triggered_tags (StructuralTag.from_legacy_structural_tag)"
        )
    else:
        spec_value = value
    spec = json.dumps(spec_value)
    try:
        ebnf = _build(spec)
    except _Refused as refused:
        if legacy:  # placed in the converted spec, then in the user's structures and triggers
            path = _legacy_path(_locate_path(spec_value, refused.message), refused.message)
        else:
            path = _locate_path(value, refused.message)
        where = spans.get(path, spans[()])
        message = f"XGrammar refuses this structural tag: {refused.message}"
        if "Token string resolution requires tokenizer_info" in refused.message:
            at = _token_string(spec_value)
            where = spans.get(at, where) if at and not legacy else where
            message = (
                "a token given by its text needs a tokenizer to be resolved to an id, and cfgzip reads a "
                "structural tag without one: give the token's id in the tokenizer you decode with "
                "(ids belong to one tokenizer)"
            )
        raise _error(text, source, where, message) from None
    notes.insert(
        0, f"grammar built by XGrammar from the structural tag; {ebnf.count('::=')} rules of its EBNF are classed"
    )
    return StructuralTagSpec(ebnf, spec, notes)


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _build(spec: str) -> str:
    import xgrammar as xgr

    try:
        return str(xgr.Grammar.from_structural_tag(spec))
    except Exception as error:  # InvalidStructuralTagError, InvalidJSONError, RuntimeError (schemas, regexes)
        lines = str(error).strip().splitlines()
        message = _XGRAMMAR_LOG_PREFIX.sub("", lines[0] if lines else type(error).__name__)
        message = message.removeprefix("Invalid structural tag error: ")
        raise _Refused(message) from None


def _from_legacy(value: dict, text: str, source: str, spans: dict[Path, tuple[int, int]]) -> dict:
    import xgrammar as xgr

    structures, triggers = value.get("structures"), value.get("triggers")
    if not isinstance(structures, list):
        raise _error(
            text, source, spans.get(("structures",), (0, 0)), "structures must be a list of {begin, schema, end}"
        )
    if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
        raise _error(text, source, spans.get(("triggers",), (0, 0)), "triggers must be a list of strings")
    items = []
    for i, s in enumerate(structures):
        for key in ("begin", "end"):
            if not isinstance(s, dict) or not isinstance(s.get(key), str):
                raise _error(
                    text, source, spans.get(("structures", i), (0, 0)), f"structure {i} needs a string {key!r}"
                )
        schema = s.get("schema") or {}  # a missing schema means {} (SGLang's XGrammar backend)
        items.append(xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(schema), end=s["end"]))
    tag = xgr.StructuralTag.from_legacy_structural_tag(items, triggers)
    tag.format.at_least_one = bool(value.get("at_least_one", False))
    return json.loads(tag.model_dump_json())


_TOKEN_FIELDS = {"token": "token", "exclude_token": "exclude_tokens", "any_tokens": "exclude_tokens",
                 "token_triggered_tags": "trigger_tokens"}  # fmt: skip


def _token_string(value: Any) -> Path | None:
    """The path of the first token written as text (``{"type": "token", "token": "<x>"}``)."""
    todo: list[tuple[Path, Any]] = [((), value)]
    while todo:
        path, node = todo.pop(0)
        if isinstance(node, dict):
            field = _TOKEN_FIELDS.get(node.get("type"))
            got = node.get(field) if field else None
            if isinstance(got, str):
                return path + (field,)
            if isinstance(got, list):
                for i, t in enumerate(got):
                    if isinstance(t, str):
                        return path + (field, i)
            todo += [(path + (k,), v) for k, v in node.items()]
        elif isinstance(node, list):
            todo += [(path + (i,), v) for i, v in enumerate(node)]
    return None


def _legacy_path(path: Path, message: str) -> Path:
    """A path of the converted legacy spec as a path of the user's: tag i is structure i."""
    if path[:3] == ("format", "tags") + path[2:3] and len(path) >= 3:
        rest = path[3:]
        if rest[:2] == ("content", "json_schema"):
            return ("structures", path[2], "schema") + rest[2:]
        return ("structures", path[2]) + tuple(k for k in rest[:1] if k in ("begin", "end"))
    return ("triggers",) if "trigger" in message else ()


def _locate_path(value: dict, message: str) -> Path:
    """The path of the innermost format XGrammar refuses alone with ``message`` (a field of it
    when the message names one, the bad ``pattern`` of a schema); the whole spec when none does."""
    best: Path = ()
    todo: list[tuple[Path, Any]] = [((), value)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, dict):
            if path and isinstance(node.get("type"), str) and len(path) > len(best) and _refuses_alone(node, message):
                best = path
            todo += [(path + (k,), v) for k, v in node.items() if k != "json_schema"]
        elif isinstance(node, list):
            todo += [(path + (i,), v) for i, v in enumerate(node)]
    node = _at(value, best)
    field = re.search(r"(\w+) field", message)
    if field and isinstance(node, dict) and field.group(1) in node:
        return best + (field.group(1),)
    if "trigger" in message and isinstance(node, dict) and "triggers" in node:
        return best + ("triggers",)
    if "EBNF" in message and isinstance(node, dict) and "grammar" in node:
        return best + ("grammar",)
    if isinstance(node, dict) and "json_schema" in node:
        best = best + ("json_schema",)
        if "Regex parsing error" in message:
            best = _bad_pattern(node["json_schema"], best) or best
    return best


def _bad_pattern(schema: Any, path: Path) -> Path | None:
    """The path of the first ``pattern`` in ``schema`` XGrammar's regex parser refuses."""
    import xgrammar as xgr

    todo: list[tuple[Path, Any]] = [(path, schema)]
    while todo:
        at, node = todo.pop(0)
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                try:
                    xgr.Grammar.from_regex(node["pattern"])
                except Exception:  # its RuntimeError: the pattern the message is about
                    return at + ("pattern",)
            todo += [(at + (k,), v) for k, v in node.items()]
        elif isinstance(node, list):
            todo += [(at + (i,), v) for i, v in enumerate(node)]
    return None


def _refuses_alone(node: dict, message: str) -> bool:
    """Whether XGrammar refuses ``node`` as the whole format with the same message."""
    try:
        _build(json.dumps({"type": "structural_tag", "format": node}))
    except _Refused as refused:
        return refused.message == message
    return False


def _at(value: Any, path: Path) -> Any:
    for key in path:
        value = value[key]
    return value


def _error(text: str, source: str, span: tuple[int, int], message: str) -> GrammarError:
    line, column = position_of(text, span[0])
    return GrammarError([Diagnostic(line, column, message, span=span)], text, source)


# -- where each JSON value is written --------------------------------------------------------
_SPACE = re.compile(r"[ \t\n\r]*")


def json_spans(text: str) -> dict[Path, tuple[int, int]]:
    """``{path: (start, end)}`` of every value in a JSON text (keys and list indexes as in
    ``json.loads``' result; the last of repeated keys wins, as there). Valid JSON only."""
    spans: dict[Path, tuple[int, int]] = {}
    decoder = json.JSONDecoder()

    def value(i: int, path: Path) -> int:
        i = _SPACE.match(text, i).end()
        start = i
        c = text[i]
        if c == "{":
            i = _SPACE.match(text, i + 1).end()
            if text[i] == "}":
                i += 1
            else:
                while True:
                    key, i = decoder.raw_decode(text, _SPACE.match(text, i).end())
                    i = _SPACE.match(text, i).end() + 1  # ':'
                    i = _SPACE.match(text, value(i, path + (key,))).end()
                    if text[i] == "}":
                        i += 1
                        break
                    i += 1  # ','
        elif c == "[":
            i = _SPACE.match(text, i + 1).end()
            if text[i] == "]":
                i += 1
            else:
                n = 0
                while True:
                    i = _SPACE.match(text, value(i, path + (n,))).end()
                    n += 1
                    if text[i] == "]":
                        i += 1
                        break
                    i += 1
        else:
            _, i = decoder.raw_decode(text, i)
        spans[path] = (start, i)
        return i

    value(0, ())
    return spans
