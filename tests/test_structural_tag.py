"""Structural tags (tool calling, as vLLM and SGLang send them) as an input: XGrammar's grammar for
them, errors at the bad part of the spec, the CLI, and both engines exact on a two-tool spec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import xgrammar as xgr
from paths import REPO

from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.sources import check_source, detect_kind, to_ebnf
from cfgzip_lab.grammar.structural_tag import json_spans
from cfgzip_lab.grammar.token_macros import stop_tokens_as_terminals

TOOLS = REPO / "docs" / "examples" / "tools_structural_tag.json"


def test_a_two_tool_spec_reads_as_xgrammar_builds_it() -> None:
    text = TOOLS.read_text()
    assert detect_kind(text) == "structural_tag" and detect_kind('{"type": "object"}') == "json_schema"
    source = to_ebnf(text)
    assert source.kind == "structural_tag" and source.text == text
    assert source.ebnf == str(xgr.Grammar.from_structural_tag(text))
    assert "TagDispatch(" in source.ebnf


def test_the_legacy_form_reads_as_its_triggered_tags() -> None:
    """vLLM's and SGLang's older ``structures``/``triggers`` spelling, converted as SGLang does."""
    legacy = {"structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}], "triggers": ["<a"]}
    items = [xgr.StructuralTagItem(begin="<a>", schema='{"type": "integer"}', end="</a>")]
    expected = str(xgr.Grammar.from_structural_tag(items, ["<a"]))
    assert to_ebnf(json.dumps(legacy)).ebnf == expected
    assert to_ebnf(json.dumps({"type": "structural_tag", **legacy}), "structural_tag").ebnf == expected


def tag(fmt: dict) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt})


# spec, the text of the spec the error points at, a piece of the message
SPEC_ERRORS = [
    (tag({"type": "sequence", "elements": [{"type": "const_string", "value": "a"}, {"type": "nope"}]}),
     '{"type": "nope"}', "Format type not recognized: nope"),
    (tag({"type": "tag", "begin": 3, "content": {"type": "any_text"}, "end": "x"}), "3",
     "Tag format's begin field must be a string"),
    (tag({"type": "triggered_tags", "triggers": ["<x"],
          "tags": [{"type": "tag", "begin": "<y>", "content": {"type": "const_string", "value": "a"}, "end": "</y>"}]}),
     '["<x"]', "One tag does not match any trigger"),
    (tag({"type": "or", "elements": [{"type": "const_string", "value": "q"},
                                     {"type": "json_schema", "json_schema": {"type": "string", "pattern": "a(b"}}]}),
     '"a(b"', "Regex parsing error at position 4"),
    (tag({"type": "json_schema", "json_schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}),
     '{"type": "object", "properties": {"a": {"type": "strin"}}}', 'Unsupported type "strin"'),
    (tag({"type": "grammar", "grammar": 'root ::= "a'}), '"root ::= \\"a"', "EBNF lexer error"),
    (json.dumps({"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": ["<b"]}), '["<b"]',
     "One tag does not match any trigger"),
    ('{"type": "structural_tag",\n "format" {}}', "{", "not valid JSON: Expecting ':' delimiter"),
    # XGrammar resolves a token's text with a tokenizer only (compile_structural_tag)
    (tag({"type": "tag", "begin": {"type": "token", "token": 7}, "content": {"type": "any_text"},
          "end": {"type": "token", "token": "</x>"}}), '"</x>"', "a token given by its text needs a tokenizer"),
]  # fmt: skip


@pytest.mark.parametrize("spec__at__message", SPEC_ERRORS, ids=lambda r: r[2][:36])
def test_spec__at__message(spec__at__message) -> None:
    spec, at, message = spec__at__message
    with pytest.raises(GrammarError) as raised:
        to_ebnf(spec)
    (error,) = raised.value.errors
    assert message in error.message
    assert spec[error.span[0] : error.span[1]] == at
    assert check_source(spec) == raised.value.diagnostics  # the live editor sees the same


def test_json_spans_find_every_value() -> None:
    text = '{"a": [1, {"b": "x\\"y"}, true], "c": {}, "a2": null}'
    spans = json_spans(text)
    value = json.loads(text)
    for path, (start, end) in spans.items():
        node = value
        for key in path:
            node = node[key]
        assert json.loads(text[start:end]) == node
    assert len(spans) == 8


def cli(*args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )


def test_cli_reads_a_structural_tag_and_points_at_a_bad_one(tmp_path) -> None:
    proc = cli("gnf", "--structural-tag", str(TOOLS), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["gnf_nonterminals"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text(tag({"type": "tag", "begin": 3, "content": {"type": "any_text"}, "end": "x"}))
    proc = cli("gnf", "--structural-tag", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{bad}:1:63: error: XGrammar refuses this structural tag: Tag format's begin field" in proc.stderr


@pytest.mark.slow
def test_two_tools_verify_compressed_and_native_with_smollm2() -> None:
    """The issue's check: a two-tool spec compiles from the CLI and verifies, walks typing the tags."""
    for engine in ("compressed", "native"):
        proc = cli(
            "verify", "--structural-tag", str(TOOLS), "--tokenizer", "smollm2", "--walks", "4", "--steps", "48",
            "--engine", engine, "--json",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        record = json.loads(proc.stdout.strip().splitlines()[-1])
        assert record["mismatches"] == 0 and record["steps_checked"] > 100
        assert "TagDispatch strings typed" in proc.stdout


def test_a_spec_with_token_formats_is_exact() -> None:
    """``token`` and ``token_triggered_tags`` formats print Token/TokenTagDispatch (ids of one
    tokenizer, here a small one): both engines verify against XGrammar, taking those tokens."""
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.grammar.token_macros import guide_token_ids
    from cfgzip_lab.native.engine import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.verify import verify_engines
    from cfgzip_lab.vocab import vocab_from_bytes

    vocab = vocab_from_bytes([b"a", b"b", b"<call>", b"{", b"}", b"</call>", b"1", b"12", b"", b"</s>"],
                             stop_ids=[9], special_ids=[8], name="tiny")  # fmt: skip
    call = {"type": "tag", "begin": {"type": "token", "token": 2},
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}}, "end": {"type": "token", "token": 5}}  # fmt: skip
    spec = tag({"type": "token_triggered_tags", "trigger_tokens": [2], "tags": [call], "exclude_tokens": [4]})
    if stop_tokens_as_terminals():  # XGrammar >= 0.2.9: TokenTagDispatch refused (test_xgrammar_differences)
        with pytest.raises(GrammarError, match="TokenTagDispatch"):
            compile_grammar(spec, kind="structural_tag")
        return
    compiled = compile_grammar(spec, kind="structural_tag")
    assert "TokenTagDispatch(" in compiled.text and "Token(5)" in compiled.text
    result = build_classes(compiled, vocab)
    engines = compile_engines(compiled.text, vocab, result.classes)
    native = build_native_engine(compiled, vocab, result.classes, classing=result, xgrammar_engines=engines)
    guides = guide_token_ids(compiled.gnf, vocab)
    for candidate in (None, native.matcher):
        report = verify_engines(engines, walks=12, steps=12, seed=3, token_guides=guides, candidate=candidate)
        assert report.mismatches == 0 and report.guide_tokens_taken > 0 and report.steps_checked > 60


def test_the_workbench_input_menu_reads_a_structural_tag(checker) -> None:
    """The editor's Input menu: "structural tag" reads the text as one (auto too), XGrammar's
    verdict on its grammar comes back, and a bad spec's error is at its place in the spec."""
    from cfgzip_lab.widgets.app import Workbench

    app = Workbench("", draft=False, editor="textarea", tokenizer="smollm2")
    try:
        editor = app.editor
        assert ("structural tag", "structural_tag") in editor.kind.options
        editor.text.value = TOOLS.read_text()
        assert editor.set_input_kind("structural_tag") and app.session.kind == "structural_tag"
        assert "structural tag → EBNF" in editor.status.value
        app.session.jobs["xgrammar"].wait(60)
        assert app.session.xgrammar is not None and app.session.xgrammar.ok, app.session.xgrammar
        editor.kind.value = "auto"  # the dropdown, as a click sets it
        assert app.session.grammar_ok and app.session.kind == "structural_tag"
        editor.text.value = tag({"type": "tag", "begin": 3, "content": {"type": "any_text"}, "end": "x"})
        assert not editor.compile()
        error = next(d for d in app.session.diagnostics if d.severity == "error")
        assert (error.line, error.column) == (1, 63) and "begin field must be a string" in error.message
    finally:
        app.close()
        app.session.wait(30)
