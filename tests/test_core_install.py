"""The core install: the wheel with no extra, in a venv holding only what its metadata requires.

No network and no copy of torch: the venv is empty (``--without-pip``, no system site-packages)
but for one ``.pth`` line naming a folder of symlinks to the test venv's distributions that the
wheel's ``Requires-Dist`` lines (no extra) need, transitively (:func:`wheel_tools.core_closure`).
A ``.pth`` line to the whole test venv would not do (JupyterLab and plotly would be importable);
``pip download`` of the core would need the network; building wheels of torch and friends is
slow. pip then installs the wheel *with* dependency resolution and ``--no-index``, so it also
checks that the metadata's core requirements are met by that closure alone.

In that venv: ``matcher_for`` gives a mask equal to plain XGrammar's; the workbench's packages
are absent; a workbench or GGUF path says which extra it needs, from Python and from the CLI.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from wheel_tools import build_wheel, core_closure, link_distributions, make_venv, run, wheel_requirements

WORKBENCH_ONLY = ("jupyterlab", "plotly", "ipywidgets", "anywidget", "railroad", "gguf", "accelerate")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    """A venv with the wheel and its core dependencies only; returns its bin/."""
    tmp = tmp_path_factory.mktemp("core")
    wheel = build_wheel(tmp)
    closure = core_closure(wheel_requirements(wheel))
    assert not set(closure) & {"jupyterlab", "plotly", "ipywidgets", "anywidget", "railroad-diagrams"}, sorted(closure)
    link_distributions(closure, tmp / "core-site")
    python, site = make_venv(tmp / "venv")
    (site / "core_dependencies.pth").write_text(str(tmp / "core-site") + "\n")
    # pip runs from the test venv (--python): the new venv has none
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-index", wheel, cwd=tmp)
    return python.parent


@pytest.mark.slow
def test_core_install_has_no_workbench_packages_and_matcher_for_masks_as_xgrammar(core_venv, tmp_path):
    code = textwrap.dedent(
        """
        import importlib.util, json, sys
        import torch, xgrammar as xgr
        import cfgzip_lab as cz

        absent = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
        # every single byte, a few words, one stop token: small enough to class in a second
        tokens = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'true', b'false', b'null', b'12', b'</s>']
        stop = len(tokens) - 1
        vocab = cz.vocab_from_bytes(tokens, stop_ids=[stop], name="bytes-and-words")
        grammar = 'root ::= "[" (value ("," value)*)? "]"\\nvalue ::= "true" | "false" | "null" | [0-9]+'

        info = xgr.TokenizerInfo([t if i != stop else b"" for i, t in enumerate(tokens)], stop_token_ids=[stop])
        compiled = xgr.GrammarCompiler(info).compile_grammar(grammar)
        plain = xgr.GrammarMatcher(compiled)
        ours = cz.matcher_for(grammar, vocab)
        walk = [ord("["), ord("1"), ord(","), len(tokens) - 5]  # "[", "1", ",", "true"
        equal = []
        for token in [None, *walk]:
            if token is not None:
                assert plain.accept_token(token) and ours.accept_token(token)
            a, b = xgr.allocate_token_bitmask(1, len(tokens)), xgr.allocate_token_bitmask(1, len(tokens))
            plain.fill_next_token_bitmask(a)
            ours.fill_next_token_bitmask(b)
            equal.append(bool(torch.equal(a, b)))
        print(json.dumps({"absent_but_found": absent, "equal": equal, "module": cz.__file__}))
        """
    )
    out = run(core_venv / "python", "-c", code, *WORKBENCH_ONLY, cwd=tmp_path)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["absent_but_found"] == [], record
    assert record["equal"] == [True] * 5, record
    assert str(core_venv.parent) in record["module"], record  # the wheel's package, not the checkout


MISSING_EXTRA_ROWS = [
    # what the core user runs, the extra its message must name
    (("-c", "import cfgzip_lab.widgets"), "workbench"),
    (("-c", "from cfgzip_lab.widgets import Workbench"), "workbench"),
    (("-c", "import cfgzip_lab.grammar.railroad"), "workbench"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args__extra", MISSING_EXTRA_ROWS, ids=lambda row: row[0][1])
def test_python_path_needing_an_extra_names_it(core_venv, tmp_path, args__extra):
    args, extra = args__extra
    proc = run(core_venv / "python", *args, cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert f"needs the [{extra}] extra" in proc.stderr and f"pip install 'cfgzip-lab[{extra}]'" in proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_cli_path_needing_an_extra_prints_one_line_naming_it(core_venv, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF")  # never read: the extra is checked first
    proc = run(core_venv / "cfgzip-lab", "compress", "json", "--tokenizer", fake, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc
    assert "needs the [gguf] extra" in proc.stderr and "pip install 'cfgzip-lab[gguf]'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
