"""Writes xgrammar_cases.json from XGrammar's tests/python/test_lark.py (SOURCES.md says which commit).

Every ``pytest.param(GRAMMAR, ACCEPTED, ...)`` whose grammar is a string literal, with its id and
its accepted strings (when they are a literal list of strings): the grammars XGrammar's own tests
hold up as Lark it reads. Kept only when the installed XGrammar builds it with no tokenizer (a case
that names special tokens needs one; a newer XGrammar may read more). Run from the repository root:

    .venv/bin/python tests/data/lark/make_xgrammar_cases.py path/to/test_lark.py
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import xgrammar


def literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def cases(source: str) -> list[dict]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "param" and node.args):
            continue
        grammar = literal(node.args[0])
        if not isinstance(grammar, str) or not grammar.strip():
            continue
        accepted = literal(node.args[1]) if len(node.args) > 1 else None
        if not (isinstance(accepted, list) and all(isinstance(a, str) for a in accepted)):
            accepted = []
        ids = [literal(k.value) for k in node.keywords if k.arg == "id"]
        found.append({"id": ids[0] if ids else f"line{node.lineno}", "grammar": grammar, "accepted": accepted})
    return found


def main(path: str) -> None:
    kept, dropped = [], []
    for case in cases(Path(path).read_text()):
        try:
            xgrammar.Grammar.from_lark(case["grammar"])
        except Exception:
            dropped.append(case["id"])
            continue
        kept.append(case)
    out = Path(__file__).with_name("xgrammar_cases.json")
    out.write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(kept)} cases kept, {len(dropped)} refused by this XGrammar without a tokenizer -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
