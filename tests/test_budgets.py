"""Every stage bounded: past its budget, a CfgzipError that names the construct and its line.

Purpose-built inputs with lowered budgets, never by waiting: the normal form (node budget),
classing (DAG cap, see also test_limits.py), the σ_in index (the native engine falls back to
the compressed one), and the native state (per-token budget: the request moves to the
compressed engine, masks stay exact). Counted repetitions keep huge bounds from reaching any
budget at all (test_counted.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from paths import BUNDLED_DIR

from cfgzip_lab.classes.limits import ClassingLimitError
from cfgzip_lab.errors import CfgzipError
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.gnf import DEFAULT_MAX_GNF_NODES
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

C_LIKE = (BUNDLED_DIR / "c_like.ebnf").read_text()


def test_the_normal_form_stops_at_its_budget_and_names_the_rule():
    with pytest.raises(GrammarError) as err:
        compile_grammar(C_LIKE, max_gnf_nodes=3_000)
    (d,) = err.value.diagnostics
    assert isinstance(err.value, CfgzipError)
    assert "normal form grew past 3,000 nodes" in d.message and "in step '" in d.message
    assert "rule " in d.message and "max_gnf_nodes" in d.message
    # the line named is the line of a rule of the grammar, and the message renders with a caret
    assert 1 <= d.line <= C_LIKE.count("\n") + 1 and d.span is not None
    assert "^" in err.value.render()


def test_the_default_budget_leaves_every_bundled_grammar_alone():
    compiled = compile_grammar(C_LIKE)  # the largest bundled normal form (54,848 nodes)
    assert len(compiled.gnf.store) < DEFAULT_MAX_GNF_NODES // 10


def test_a_schema_past_the_budget_points_into_the_schema():
    schema = json.dumps({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(6)}})
    with pytest.raises(GrammarError) as err:
        compile_grammar(schema, kind="json_schema", max_gnf_nodes=300)
    assert "normal form grew past 300 nodes" in str(err.value)


def test_classing_cap_is_a_cfgzip_error_naming_rules():
    toy = vocab_from_bytes([b"a", b"ab", b" ", b"  ", b"(", b"((", b"x"], name="toy")
    compiled = compile_grammar(C_LIKE)
    with pytest.raises(ClassingLimitError) as err:
        build_classes(compiled, toy, max_dag_nodes=len(compiled.gnf.store) + 50)
    assert isinstance(err.value, CfgzipError) and "rule '" in str(err.value)


@pytest.mark.parametrize("command", ["gnf", "compress"])
def test_the_cli_takes_the_budgets_as_flags(tmp_path, command):
    args = [sys.executable, "-m", "cfgzip_lab.cli", command, "c_like", "--max-gnf-nodes", "3000"]
    if command == "compress":
        args += ["--tokenizer", "llama3", "-o", str(tmp_path / "x.npz")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "normal form grew past 3,000 nodes" in done.stderr and "Traceback" not in done.stderr


def test_nesting_too_deep_is_a_grammar_error_not_a_crash():
    text = "root ::= " + "(" * 200_000 + '"a"' + ")" * 200_000
    with pytest.raises(GrammarError, match="nests too deeply"):
        compile_grammar(text)


def test_a_long_literal_compiles_unmerged_and_without_a_crash():
    """A 6,000-byte literal: its per-byte nonterminals would converge one position per merging
    round (quadratic); merging stops at its budget and the normal form stays unmerged (sound).
    Recursing through C (tuple(generator) in a set operation) once overflowed the C stack here."""
    text = 'root ::= "' + "ab" * 3_000 + '" | "x"'
    compiled = compile_grammar(text)
    assert compiled.gnf.steps[-1].name.startswith("merging (skipped")
    assert compiled.gnf.accepts(("ab" * 3_000).encode()) and not compiled.gnf.accepts(("ab" * 2_999).encode())
