"""Railroad diagrams of the source rules: one SVG per rule, showing what the author wrote."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from cfgzip_lab.grammar.railroad import DIAGRAM_CSS, grammar_svgs, rule_svg
from cfgzip_lab.pipeline import compile_grammar
from tests.paths import BUNDLED, grammar_id

TEXT = """root ::= "{" pair ("," pair)* "}" | "[]"
pair ::= key ":" [0-9]{1,3} "!"? key+
key ::= [a-z_] | ""
"""


def texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter("text")]


def test_rule_diagram_shows_terminals_references_and_loops():
    ast = compile_grammar(TEXT).ast
    svgs = grammar_svgs(ast)
    assert list(svgs) == ["root", "pair", "key"]
    root = texts(svgs["root"])
    assert root == ['"{"', "pair", '","', "pair", '"}"', '"[]"']
    pair = texts(svgs["pair"])
    assert pair == ["key", '":"', "[0-9]", "1 to 3 times", '"!"', "key"]
    assert texts(svgs["key"]) == ["[a-z_]"]
    assert "<title>rule pair</title>" in svgs["root"]
    for svg in svgs.values():
        root_el = ET.fromstring(svg)  # well-formed XML
        assert root_el.tag == "svg" and float(root_el.get("width")) > 0


def test_escapes_and_quotes_stay_readable():
    ast = compile_grammar('root ::= "\\"\\n<" [^"\\\\]\n').ast
    assert texts(rule_svg(ast.rules["root"], ast.text)) == ['"\\"\\n<"', '[^"\\\\]']


@pytest.mark.parametrize("path", BUNDLED, ids=[grammar_id(p) for p in BUNDLED])
def test_every_bundled_rule_draws(path):
    ast = compile_grammar(path.read_text(encoding="utf-8")).ast
    svgs = grammar_svgs(ast)
    assert list(svgs) == list(ast.rules)
    for name, svg in svgs.items():
        ET.fromstring(svg)
        refs = set(re.findall(r"<title>rule ([^<]+)</title>", svg))
        assert refs <= set(ast.rules), name


def test_css_is_scoped():
    assert "svg.railroad-diagram" in DIAGRAM_CSS
