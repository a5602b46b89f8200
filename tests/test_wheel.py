"""The package works outside the repository: a wheel built from the working tree, installed
into a fresh venv, compresses and verifies a bundled grammar (found as package data) from
another folder.

The fresh venv sees the test venv's site-packages through a ``.pth`` line (torch, xgrammar and
the offline vocabularies are not installed twice) but none of its ``.pth`` hooks, so the
editable install of the checkout is invisible there; the test asserts that ``cfgzip_lab`` and
the bundled grammars come from the wheel. Building needs no network (``--no-build-isolation``
with the setuptools and wheel of the test venv).
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import pytest
from wheel_tools import REPO, build_wheel, make_venv, run


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv with cfgzip_lab installed from a wheel of the working tree; returns its bin/."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    python, site = make_venv(tmp / "venv")
    # The test venv's packages as a plain path entry: its .pth files (the editable hook) do not run.
    (site / "zz_test_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel, cwd=tmp)
    return python.parent


@pytest.mark.slow
def test_wheel_installs_and_runs_compress_and_verify_from_another_folder(wheel_venv, tmp_path):
    where = tmp_path / "elsewhere"
    where.mkdir()
    probe = run(
        wheel_venv / "python",
        "-c",
        "import cfgzip_lab, cfgzip_lab.bundled as b; print(cfgzip_lab.__file__); print(b.bundled_dir()); "
        "print(sorted(b.bundled_grammars())); print(len(b.bundled_samples('json')))",
        cwd=where,
    ).stdout.splitlines()
    venv_root = wheel_venv.parent
    package, grammars, names, samples = Path(probe[0]), Path(probe[1]), probe[2], int(probe[3])
    assert venv_root in package.parents and REPO not in package.parents, package  # from the wheel, not the checkout
    assert venv_root in grammars.parents, grammars
    assert "'c_like'" in names and "'json'" in names and samples >= 3

    cache = where / "X.npz"
    out = run(wheel_venv / "cfgzip-lab", "compress", "json", "--tokenizer", "llama3", "-o", cache, "--json", cwd=where)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert cache.exists() and record["classes"] > 1, record

    out = run(
        wheel_venv / "cfgzip-lab",
        "verify",
        "json",
        "--tokenizer",
        "llama3",
        "--classes",
        cache,
        "--walks",
        "2",
        "--steps",
        "12",
        "--max-doc-tokens",
        "24",
        "--json",
        cwd=where,
    )
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["mismatches"] == 0 and record["steps_checked"] > 0, record
    assert venv_root in Path(record["grammar"]).parents, record["grammar"]  # the wheel's json.ebnf
    assert f"{samples} samples documents" in out.stdout  # and the wheel's sample documents


@pytest.mark.slow
def test_wheel_metadata_has_the_serving_entry_points(wheel_venv, tmp_path):
    """The installed package's metadata carries what SGLang and vLLM load (README "Serving")."""
    code = (
        "import json; from importlib.metadata import distribution; "
        "print(json.dumps(sorted([e.group, e.name, e.value] for e in distribution('cfgzip-lab').entry_points)))"
    )
    found = json.loads(run(wheel_venv / "python", "-c", code, cwd=tmp_path).stdout)
    assert ["sglang.srt.plugins", "cfgzip", "cfgzip_lab.serving.sglang_backend:register"] in found
    assert ["vllm.logits_processors", "cfgzip", "cfgzip_lab.serving.vllm_processor:CfgzipLogitsProcessor"] in found
