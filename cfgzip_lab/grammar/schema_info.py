"""What XGrammar made of a JSON Schema, in the schema's own terms.

``xgrammar.Grammar.from_json_schema`` turns a schema into EBNF with rules named by where they
come from (``root_prop_5``, ``root_prop_1_additional_case_0``, ``defs_Person``); an author reads
JSON pointers (``/properties/attendees``). It also leaves some keywords unenforced, weakens
others and adds rules JSON Schema does not have. This module says all of that for one schema,
each claim measured against the installed XGrammar (0.2.8 and 0.2.9 alike; ``tests/test_schema_info.py`` feeds
XGrammar an instance that breaks each listed keyword and checks that it is accepted):

- :func:`rule_pointers`: every rule of the EBNF → the JSON pointer of the subschema it enforces
  (a helper XGrammar invents, such as the tail of a property list, gets its owner's pointer);
- :func:`unenforced_keywords`: keywords XGrammar ignores (``not``, ``uniqueItems``,
  ``dependentRequired``, ``if``/``then``/``else``, unknown ``format``s, external ``$ref``,
  ``multipleOf`` on a number or beside a range) or weakens (``allOf`` of several schemas becomes
  any value, ``minLength``/``maxLength`` beside a ``pattern`` are dropped), and what XGrammar does
  stricter than JSON Schema (no extra properties);
- :data:`PROPERTY_ORDER`: properties must come in the order the schema lists them;
- :func:`costly_keywords`: the subschemas whose rules make the normal form big, with the
  keyword that does it (``maxLength: 120`` is a 121-way repetition) and the measured share;
- :func:`xgrammar_warnings`: what XGrammar itself printed while building the grammar.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass

__all__ = [
    "SchemaNote",
    "rule_pointers",
    "unenforced_keywords",
    "costly_keywords",
    "xgrammar_warnings",
    "PROPERTY_ORDER",
    "STRICT_OBJECTS",
    "FORMATS_ENFORCED",
]

#: The rule an author of a schema must know (measured: ``{"b": 1, "a": 2}`` is refused for
#: ``properties: {a, b}``, both required).
PROPERTY_ORDER = (
    "properties must come in the order the schema lists them: XGrammar's grammar refuses "
    '{"b": …, "a": …} when the schema lists a before b (optional ones may be left out)'
)
#: XGrammar's strict mode (measured: ``{"a": 1, "z": 2}`` is refused for ``properties: {a}``).
STRICT_OBJECTS = (
    "no other properties than the listed ones, unless the schema gives additionalProperties or "
    "patternProperties (XGrammar's strict mode; JSON Schema allows any by default)"
)
#: ``format`` values XGrammar 0.2.8 enforces (measured); any other ``format`` is ignored.
FORMATS_ENFORCED = frozenset(
    {
        "date",
        "time",
        "date-time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
        "json-pointer",
        "relative-json-pointer",
    }
)


@dataclass(frozen=True, slots=True)
class SchemaNote:
    """One fact about a keyword at ``pointer``: ``effect`` is ``"ignored"``, ``"weakened"``,
    ``"stricter"`` or ``"costly"``; ``message`` says what XGrammar does instead."""

    pointer: str
    keyword: str
    effect: str
    message: str

    def describe(self) -> str:
        return f"{show_pointer(self.pointer)} {self.keyword}: {self.message}"


def show_pointer(pointer: str) -> str:
    """A JSON pointer for reading: ``""`` (the whole document) as ``(the whole schema)``."""
    return pointer if pointer else "(the whole schema)"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _resolve(schema, pointer: str):
    node = schema
    if not pointer:
        return node
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            raise KeyError(pointer)
    return node


# Suffixes of XGrammar's rule names (json_schema_converter.cc), longest first where one is a
# prefix of another; each moves the pointer (or keeps it, for a helper of the same subschema).
_SEGMENTS = [
    (re.compile(r"_prop_(\d+)"), "property"),
    (re.compile(r"_item_(\d+)"), "prefixItems"),
    (re.compile(r"_case_(\d+)"), "case"),
    (re.compile(r"_additional_properties"), "additionalProperties"),
    (re.compile(r"_additional"), "items"),
    (re.compile(r"_addl"), "additionalProperties"),
    (re.compile(r"_suffix_(\d+)"), "same"),
    (re.compile(r"_part_(\d+)"), "same"),
    (re.compile(r"_items"), "items"),
    (re.compile(r"_properties"), "same"),
    (re.compile(r"_characters"), "same"),
    (re.compile(r"_key"), "same"),
    (re.compile(r"_prop"), "patternProperties"),
    (re.compile(r"_(\d+)"), "same"),
]
_BASES = re.compile(r"(?:(?P<root>root)|(?P<defs>defs|definitions|\$defs)_(?P<name>[^_]+(?:_[^_]+)*?))(?=_|$)")
_RULE = re.compile(r"^([A-Za-z_.\-][A-Za-z0-9_.\-]*)\s*::=", re.MULTILINE)
_REF = re.compile(r"[A-Za-z_.\-][A-Za-z0-9_.\-]*")


def _walk_name(schema, name: str) -> str | None:
    """The pointer a rule name spells, or None when the name is not one of XGrammar's patterns."""
    if name == "root":
        return ""
    if re.fullmatch(r"root(_\d+)+", name):
        return None  # numbered helpers (a format's regex, any-order properties): placed by use
    if name.startswith("root"):
        pointer, rest = "", name[4:]
    else:
        for defs in ("$defs", "definitions", "defs"):
            key = "$defs" if defs == "defs" else defs
            table = schema.get(key) if isinstance(schema, dict) else None
            if not isinstance(table, dict):
                continue
            prefix = ("defs" if defs == "$defs" else defs) + "_"
            if not name.startswith(prefix):
                continue
            # the longest definition name that the rule name starts with
            for def_name in sorted(table, key=len, reverse=True):
                if name[len(prefix) :].startswith(def_name) and name[len(prefix) + len(def_name) :][:1] in ("", "_"):
                    pointer, rest = f"/{key}/{_escape(def_name)}", name[len(prefix) + len(def_name) :]
                    break
            else:
                continue
            break
        else:
            return None
    while rest:
        for pattern, kind in _SEGMENTS:
            m = pattern.match(rest)
            if not m:
                continue
            try:
                node = _resolve(schema, pointer)
            except (KeyError, IndexError, ValueError, TypeError):
                return None
            if kind == "property":
                keys = list((node.get("properties") or {}) if isinstance(node, dict) else {})
                i = int(m.group(1))
                if i >= len(keys):
                    return None
                pointer += f"/properties/{_escape(keys[i])}"
            elif kind == "prefixItems":
                pointer += f"/prefixItems/{m.group(1)}"
            elif kind == "case":
                key = next((k for k in ("anyOf", "oneOf") if isinstance(node, dict) and k in node), None)
                if key is None:
                    return None
                pointer += f"/{key}/{m.group(1)}"
            elif kind in ("items", "additionalProperties", "patternProperties"):
                if isinstance(node, dict) and isinstance(node.get(kind), (dict, bool)):
                    pointer += f"/{kind}"
            rest = rest[m.end() :]
            break
        else:
            return None
    return pointer


def rule_pointers(schema_text: str, ebnf: str) -> dict[str, str]:
    """Every rule of XGrammar's ``ebnf`` for the schema → the JSON pointer of what it enforces
    (``""`` is the whole schema). XGrammar's shared rules (``basic_string``, ``basic_any``, …)
    map to ``"(any JSON string)"``-style descriptions; a helper whose name spells no pointer gets
    the pointer of the first rule that uses it."""
    schema = json.loads(schema_text)
    names = _RULE.findall(ebnf)
    out: dict[str, str] = {}
    for name in names:
        if name.startswith("basic_"):
            out[name] = f"(XGrammar's rule for any JSON {name.removeprefix('basic_').split('_')[0]})"
            continue
        pointer = _walk_name(schema, name)
        if pointer is not None:
            out[name] = pointer
    # helpers: the pointer of the first rule (in a walk from root) that refers to them
    bodies = dict(zip(names, re.split(r"^[A-Za-z_.\-][A-Za-z0-9_.\-]*\s*::=", ebnf, flags=re.MULTILINE)[1:]))
    todo = ["root"] if "root" in bodies else []
    seen = set(todo)
    while todo:
        name = todo.pop(0)
        for ref in _REF.findall(_strip_literals(bodies.get(name, ""))):
            if ref in bodies and ref not in seen:
                seen.add(ref)
                todo.append(ref)
                if ref not in out and name in out:
                    out[ref] = out[name]
    for name in names:
        out.setdefault(name, "(a helper rule of XGrammar's)")
    return out


def _strip_literals(body: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", body)


def unenforced_keywords(schema_text: str, warnings: list[str] | None = None) -> list[SchemaNote]:
    """The keywords of the schema XGrammar 0.2.8 ignores or weakens, each at its JSON pointer, in
    document order, then one note for the objects where it is stricter than JSON Schema.

    ``warnings`` (:func:`xgrammar_warnings`): with them, a ``oneOf`` is listed only when XGrammar
    said it fell back to anyOf semantics; without them every ``oneOf`` is listed as "may"."""
    schema = json.loads(schema_text)
    notes: list[SchemaNote] = []
    strict: list[str] = []
    one_of_weakened = warnings is None or any("oneOf" in w for w in warnings)

    def note(pointer, keyword, effect, message):
        notes.append(SchemaNote(pointer, keyword, effect, message))

    def visit(node, pointer: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                visit(item, f"{pointer}/{i}")
            return
        if not isinstance(node, dict):
            return
        if "not" in node:
            note(pointer, "not", "ignored", "not enforced: an instance that matches the 'not' schema is accepted")
        if node.get("uniqueItems") is True:
            note(pointer, "uniqueItems", "ignored", "not enforced: repeated items are accepted")
        for key in ("dependentRequired", "dependentSchemas", "dependencies"):
            if key in node:
                note(pointer, key, "ignored", "not enforced: the dependent properties may be missing")
        if "if" in node:
            note(pointer, "if/then/else", "ignored", "not enforced: neither 'then' nor 'else' applies")
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt not in FORMATS_ENFORCED and node.get("type", "string") == "string":
            note(pointer, "format", "ignored", f"format {fmt!r} is not one XGrammar knows: any string is accepted")
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            note(pointer, "$ref", "weakened", f"external reference {ref!r} is not followed: any JSON value is accepted")
        if "multipleOf" in node:
            bounded = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in node]
            if node.get("type") != "integer":
                note(pointer, "multipleOf", "ignored", "not enforced on a number (only on an integer without bounds)")
            elif bounded:
                note(
                    pointer,
                    "multipleOf",
                    "ignored",
                    f"dropped beside {' and '.join(bounded)} (XGrammar enforces the range alone)",
                )
        if "pattern" in node and ("minLength" in node or "maxLength" in node):
            keys = " and ".join(k for k in ("minLength", "maxLength") if k in node)
            note(pointer, keys, "ignored", "dropped beside a 'pattern' (XGrammar enforces the pattern alone)")
        if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
            note(
                pointer,
                "allOf",
                "weakened",
                f"allOf of {len(node['allOf'])} schemas: XGrammar accepts any JSON value here",
            )
        if isinstance(node.get("oneOf"), list) and len(node["oneOf"]) > 1 and one_of_weakened:
            note(
                pointer,
                "oneOf",
                "weakened",
                "read as anyOf when XGrammar cannot prove the branches disjoint (an instance may match several)",
            )
        props = node.get("properties")
        if isinstance(props, dict) and "additionalProperties" not in node and "patternProperties" not in node:
            strict.append(pointer)
        for key, value in node.items():
            if key in ("enum", "const", "examples", "default"):
                continue  # values, not subschemas
            if isinstance(value, dict):
                if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                    for name, sub in value.items():
                        visit(sub, f"{pointer}/{key}/{_escape(name)}")
                else:
                    visit(value, f"{pointer}/{key}")
            elif isinstance(value, list) and key in ("anyOf", "oneOf", "allOf", "prefixItems", "items"):
                visit(value, f"{pointer}/{key}")

    visit(schema, "")
    if strict:
        where = ", ".join(show_pointer(p) for p in strict[:3]) + (
            f" and {len(strict) - 3} more" if len(strict) > 3 else ""
        )
        notes.append(SchemaNote(strict[0], "additionalProperties", "stricter", f"{STRICT_OBJECTS}: at {where}"))
    return notes


_BOUNDS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties", "minimum", "maximum",
           "exclusiveMinimum", "exclusiveMaximum", "pattern", "multipleOf")  # fmt: skip


def costly_keywords(
    schema_text: str, pointers: dict[str, str], sizes, *, seconds: float = 0.0, share: float = 0.2
) -> list[SchemaNote]:
    """The subschemas whose rules hold at least ``share`` of the GNF productions, with the
    keywords there that bound a repetition (``maxLength: 120``: up to 120 copies of a character).

    ``sizes``: :func:`cfgzip_lab.grammar.provenance.rule_sizes` of the compiled grammar;
    ``seconds``: what the check took (said in the message). Largest first."""
    schema = json.loads(schema_text)
    total = sum(s.gnf_productions for s in sizes) or 1
    out = []
    for s in sizes:
        part = s.gnf_productions / total
        if part < share or s.gnf_productions < 200:
            continue
        pointer = pointers.get(s.rule, "")
        if pointer.startswith("("):
            continue  # XGrammar's own shared rules: nothing in the schema to change
        try:
            node = _resolve(schema, pointer)
        except (KeyError, IndexError, ValueError, TypeError):
            node = {}
        keys = [f"{k}: {json.dumps(node[k])}" for k in _BOUNDS if isinstance(node, dict) and k in node]
        took = f"; the check took {seconds:.2f} s" if seconds else ""
        out.append(
            SchemaNote(
                pointer,
                ", ".join(keys) or "(this subschema)",
                "costly",
                f"rule {s.rule} is {s.gnf_productions:,} of the grammar's {total:,} GNF productions ({part:.0%}){took}: "
                + (
                    "a bounded repetition is spelled out once per count"
                    if keys
                    else "its rules are large in normal form"
                ),
            )
        )
    return out


def xgrammar_warnings(schema_text: str) -> list[str]:
    """What XGrammar printed while building the grammar of the schema (its C++ log goes to the
    process's stderr, so it is read from there), without the time and file prefix."""
    import xgrammar

    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            xgrammar.Grammar.from_json_schema(schema_text)
        except Exception:  # noqa: BLE001 - a schema XGrammar refuses has its error elsewhere
            pass
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode("utf-8", "replace")
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*", "", line).strip()
        if line and line not in lines:
            lines.append(line.removeprefix("Warning: "))
    return lines
