"""The "use it in your code" snippet that Export shows (and the README prints) runs as written:
an exported cache and grammar, SmolLM2 on the CPU, a few greedy tokens, text the grammar accepts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("transformers")

from cfgzip_lab.pipeline import bundled_grammars, compile_grammar  # noqa: E402
from cfgzip_lab.widgets.export import ExportPanel, grammar_path_for, usage_snippet  # noqa: E402
from cfgzip_lab.widgets.session import WorkbenchSession  # noqa: E402
from cfgzip_lab.widgets.xgrammar_worker import XGrammarChecker  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The README's snippet: the same paths Export uses for the bundled JSON grammar and SmolLM2.
README_GRAMMAR, README_CACHE = "exports/json-smollm2.ebnf", "exports/json-smollm2.npz"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """json × smollm2 classes exported by the workbench's Export panel into ``<tmp>/exports``."""
    root = tmp_path_factory.mktemp("snippet")
    checker = XGrammarChecker()
    try:
        session = WorkbenchSession(checker=checker, tokenizer="smollm2")  # the bundled json grammar
        session.compile(xgrammar=False)
        assert session.run_classing(wait=True).status == "done", session.errors
        panel = ExportPanel(session, folder=root / "exports")
        cache = panel.export_cache("json-smollm2.npz")
    finally:
        checker.close()
    assert grammar_path_for(cache).read_text(encoding="utf-8") == session.text
    assert str(cache.resolve()) in panel.snippet.value  # the snippet shown names the real files
    return root, session.text


def test_snippet_is_ten_lines_of_code():
    code = [line for line in usage_snippet(README_GRAMMAR, README_CACHE).splitlines() if line.strip()]
    assert len(code) == 10
    assert "cz.load_classes(" in code[4] and "model.generate(" in code[8]


@pytest.mark.slow
def test_snippet_runs_with_smollm2_on_cpu(exported):
    root, text = exported
    env = dict(os.environ, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", usage_snippet(README_GRAMMAR, README_CACHE)],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    generated = proc.stdout.rstrip("\n")
    assert generated.strip(), proc.stdout
    assert compile_grammar(text).gnf.accepts(generated.encode("utf-8"), prefix=True), generated


def test_readme_snippet_is_the_tested_one():
    """The workbench guide (docs/reference/workbench-guide.md, moved from the README) shows the snippet
    exactly as it is run above."""
    readme = (REPO / "docs" / "reference" / "workbench-guide.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert usage_snippet(README_GRAMMAR, README_CACHE) + "\n" in blocks
    assert bundled_grammars()["json"].is_file()
