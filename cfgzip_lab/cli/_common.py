"""What every ``cfgzip-lab`` command shares: the usage error, the ``--json`` flag and record,
reading a grammar (XGrammar EBNF, a llama.cpp GBNF file or a JSON Schema), a tokenizer and
documents, and parsing comma-separated lists.

Every helper turns bad input into :class:`UsageError`, which :func:`cfgzip_lab.cli.main`
prints as one message with exit status 2: a user never sees a traceback for a typo.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import CfgzipError

if TYPE_CHECKING:
    from ..pipeline import CompiledGrammar
    from ..vocab import VocabTable

__all__ = [
    "UsageError",
    "add_json_flag",
    "emit",
    "peak_rss_mb",
    "add_grammar_arguments",
    "grammar_argument",
    "read_grammar",
    "load_vocab",
    "read_docs",
    "parse_list",
    "named_token_lines",
]

T = TypeVar("T")


class UsageError(CfgzipError):
    """Bad input: printed as is, exit status 2."""


def add_json_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give a command the ``--json`` flag every command has; returns the parser."""
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return parser


def emit(args: argparse.Namespace, human: list[str], record: dict[str, Any]) -> None:
    """Print the human lines, then (with ``--json``) the record as the last line."""
    for line in human:
        print(line)
    if args.json:
        print(json.dumps(record))


def peak_rss_mb() -> float:
    """Peak resident memory of this process or of its largest finished child (classing workers)."""
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return round(peak / 1024, 1)


def named_token_lines(compiled: CompiledGrammar, vocab: VocabTable) -> list[str]:
    """For a grammar with ``Token(...)`` macros: what its ids are in this tokenizer (ids belong to
    one tokenizer; a stop or special token there is never taken whole, the likely sign of a
    grammar written for another one)."""
    from ..grammar.token_macros import describe_named_tokens

    described = describe_named_tokens(compiled.gnf, vocab)
    if not described:
        return []
    lines = [f"  token ids the grammar names, in {vocab.name}: " + ", ".join(described)]
    if any("never taken" in d for d in described):
        lines.append(
            f"  note: ids that are stop or special tokens in {vocab.name} are never taken as a whole token; "
            "if the grammar was written for another tokenizer, its ids name other tokens here"
        )
    return lines


def add_grammar_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The grammar a command reads: a positional file or bundled name, or ``--json-schema FILE``,
    ``--gbnf FILE``, ``--structural-tag FILE``, ``--lark FILE`` or ``--regex PATTERN`` (exactly one;
    :func:`grammar_argument` checks). Returns the parser."""
    parser.add_argument(
        "grammar",
        nargs="?",
        help="grammar file (XGrammar EBNF; a .gbnf file is read as GBNF, a .json file or a JSON object "
        "as a JSON Schema, a .lark file or a text with a 'start:' rule as Lark), or a bundled grammar name "
        "(json, c_like, ...)",
    )
    parser.add_argument("--json-schema", metavar="FILE", help="a JSON Schema: XGrammar builds the grammar")
    parser.add_argument("--gbnf", metavar="FILE", help="a llama.cpp GBNF grammar (converted with its exact meaning)")
    parser.add_argument(
        "--structural-tag",
        metavar="FILE",
        help="a structural tag as vLLM and SGLang send it for tool calling (JSON): XGrammar builds the grammar",
    )
    parser.add_argument("--lark", metavar="FILE", help="a Lark grammar (rule 'start'): XGrammar builds the grammar")
    parser.add_argument(
        "--regex", metavar="PATTERN", help="a regular expression the whole output matches: XGrammar builds the grammar"
    )
    from ..classes.limits import DEFAULT_MAX_DAG_NODES
    from ..grammar.gnf import DEFAULT_MAX_GNF_NODES

    parser.add_argument(
        "--max-gnf-nodes",
        type=int,
        default=DEFAULT_MAX_GNF_NODES,
        metavar="N",
        help=f"memory bound of the normal form, in DAG nodes (default {DEFAULT_MAX_GNF_NODES:,}, ~600 bytes each)",
    )
    parser.add_argument(
        "--max-dag-nodes",
        type=int,
        default=DEFAULT_MAX_DAG_NODES,
        metavar="N",
        help=f"memory bound of classing, in DAG nodes (default {DEFAULT_MAX_DAG_NODES:,}, ~600 bytes each)",
    )
    return parser


def grammar_argument(args: argparse.Namespace) -> tuple[str, str]:
    """``(name, kind)`` of the one grammar given on the command line (kind: ``auto``,
    ``json_schema``, ``gbnf``, ``structural_tag``, ``lark`` or ``regex``, whose name is the pattern);
    none or several is a usage error."""
    given = [
        (name, kind)
        for name, kind in (
            (args.grammar, "auto"),
            (getattr(args, "json_schema", None), "json_schema"),
            (getattr(args, "gbnf", None), "gbnf"),
            (getattr(args, "structural_tag", None), "structural_tag"),
            (getattr(args, "lark", None), "lark"),
            (getattr(args, "regex", None), "regex"),
        )
        if name
    ]
    if len(given) != 1:
        raise UsageError(
            "give one grammar: a grammar file or bundled name, --json-schema FILE, --gbnf FILE, --structural-tag FILE, "
            "--lark FILE or --regex PATTERN"
        )
    return given[0]


def read_grammar_arguments(args: argparse.Namespace) -> tuple[Path, CompiledGrammar]:
    """:func:`read_grammar` of the grammar given on the command line, under its ``--max-gnf-nodes``."""
    from ..grammar.gnf import DEFAULT_MAX_GNF_NODES

    return read_grammar(*grammar_argument(args), max_gnf_nodes=getattr(args, "max_gnf_nodes", DEFAULT_MAX_GNF_NODES))


def classing_options(args: argparse.Namespace) -> dict:
    """Keyword arguments for :func:`cfgzip_lab.build_classes` from the command line (its memory bound)."""
    from ..classes.limits import DEFAULT_MAX_DAG_NODES

    return {"max_dag_nodes": getattr(args, "max_dag_nodes", DEFAULT_MAX_DAG_NODES)}


def read_grammar(name: str, kind: str = "auto", *, max_gnf_nodes: int | None = None) -> tuple[Path, CompiledGrammar]:
    """A grammar file or bundled grammar name, compiled to GNF; warnings go to stderr.

    ``kind`` as in :func:`cfgzip_lab.grammar.sources.to_ebnf` (``auto`` detects GBNF by a
    ``.gbnf`` name and a JSON Schema by a ``.json`` name or a leading ``{``); errors and
    warnings point into the file as the user wrote it.
    """
    from ..grammar.diagnostics import GrammarError
    from ..pipeline import compile_grammar

    path, text = grammar_text(name, kind)
    try:
        options = {} if max_gnf_nodes is None else {"max_gnf_nodes": max_gnf_nodes}
        compiled = compile_grammar(text, source=str(path), kind=kind, **options)
    except GrammarError as exc:
        raise UsageError(f"grammar {path} has errors:\n{exc.render()}") from None
    for w in compiled.warnings:
        print(w.render(text, str(path)), file=sys.stderr)
    return path, compiled


REGEX_PATH = Path("<regex>")
"""What stands for the file of a ``--regex PATTERN`` in messages and records."""


def grammar_text(name: str, kind: str = "auto") -> tuple[Path, str]:
    """``(path, text)`` of a grammar argument: the file or bundled grammar ``name``, or for
    ``kind="regex"`` the pattern ``name`` itself (path :data:`REGEX_PATH`)."""
    from ..pipeline import resolve_grammar

    if kind == "regex":
        return REGEX_PATH, name
    try:
        path = resolve_grammar(name)
        return path, path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError, PermissionError) as exc:
        raise UsageError(f"cannot read grammar: {exc}") from None


def load_vocab(name: str) -> VocabTable:
    """A registered tokenizer name or a tokenizer folder, as a vocabulary table."""
    from .. import vocab_sources

    try:
        return vocab_sources.load_vocab(name)
    except CfgzipError as exc:  # unknown name, missing package, unreadable folder
        raise UsageError(f"cannot load tokenizer {name!r}: {exc}") from None


def read_docs(files: Sequence[str] | None) -> list[str]:
    """The text of each document file given on the command line."""
    docs = []
    for name in files or []:
        try:
            docs.append(Path(name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read document: {exc}") from None
    return docs


def parse_list(text: str, item: Callable[[str], T], flag: str, syntax: str) -> list[T]:
    """``"1,8,16"`` → ``[1, 8, 16]``, ``item`` converting each part; a ValueError from it is a
    usage error naming ``flag`` and the ``syntax`` expected. Empty parts are skipped, so the
    list may be empty: the caller knows what its flag needs (``--batch``, ``--engines``)."""
    try:
        return [item(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes {syntax} (got {text!r})") from None
