"""The public API: every name in ``cfgzip_lab.__all__`` resolves, importing the package pulls
in neither torch nor xgrammar, and the README's Python example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import cfgzip_lab

# The Python guide, moved from the README (the README's own short example runs in tests/test_docs.py).
README = Path(__file__).resolve().parents[1] / "docs" / "reference" / "python-api.md"


@pytest.mark.parametrize("name", sorted(set(cfgzip_lab.__all__) - {"__version__"}))
def test_name_resolves(name):
    value = getattr(cfgzip_lab, name)
    assert getattr(value, "__name__", name) == name  # the object, not a module of that name
    assert name in dir(cfgzip_lab)


def test_all_lists_exactly_the_lazy_names():
    assert cfgzip_lab.__all__ == ["__version__", *cfgzip_lab._API]


def test_errors_share_one_base():
    for name in cfgzip_lab.__all__:
        if name.endswith("Error"):
            assert issubclass(getattr(cfgzip_lab, name), cfgzip_lab.CfgzipError)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cfgzip_lab.nope  # noqa: B018


def test_import_is_cheap():
    code = "import sys, cfgzip_lab; print(sorted(m for m in ('torch', 'xgrammar', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_readme_python_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README has a Python example"
    # The Export snippet (it needs an exported cache and a model) is run by tests/test_snippet.py.
    blocks = [b for b in blocks if "cz.CompressedLogitsProcessor(engines)  # a transformers" not in b]
    assert blocks, "the README has a Python example besides the export snippet"
    for block in blocks:
        assert re.findall(r"^(?:from|import) (\S+)", block, flags=re.M) == ["cfgzip_lab"]
        code = block.replace("/tmp/json-llama3.npz", str(tmp_path / "json-llama3.npz"))
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            timeout=600,
            cwd=tmp_path,
            env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
        )
