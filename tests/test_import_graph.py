"""The package's layering (issue 32): no long import circle, few upward imports, and a grammar
compiled without the mask engine.

The graph is read from the source by ``scripts/import_graph.py`` (its docstring says how edges
are counted); ``python scripts/import_graph.py`` prints what these tests count.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from paths import REPO

_SPEC = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(_SPEC)
sys.modules["import_graph"] = import_graph  # dataclasses look their module up by name
_SPEC.loader.exec_module(import_graph)

PACKAGE = REPO / "cfgzip_lab"
MAX_CIRCLE = 3
MAX_UPWARD = 3

# The mask engine: what serves masks at decode time. A compiled grammar needs none of it.
MASK_ENGINE_PREFIXES = (
    "cfgzip_lab.native.",
    "cfgzip_lab.expand",
    "cfgzip_lab.kernels",
    "cfgzip_lab.engine",
    "cfgzip_lab.batch_rows",
)
EXTENSION = "cfgzip_lab._native"  # the compiled core, which a grammar's build uses


@pytest.mark.parametrize("eager_only", [False, True], ids=["every_import", "eager_only"])
def test_no_import_circle_longer_than_three_files(eager_only):
    report = import_graph.report(PACKAGE, eager_only=eager_only)
    too_long = [circle for circle in report["circles"] if len(circle) > MAX_CIRCLE]
    assert not too_long, f"import circles over {MAX_CIRCLE} files: {too_long}"


def test_at_most_three_upward_imports():
    upward = import_graph.report(PACKAGE, eager_only=False)["upward"]
    assert len(upward) <= MAX_UPWARD, "\n".join(edge["text"] for edge in upward)


def test_every_module_is_on_a_layer():
    """The layer table names each top-level module or package; none falls to the facade by
    accident (only the package root is the facade)."""
    facade = len(import_graph.LAYERS) - 1 - [name for name, _ in import_graph.LAYERS][::-1].index("facade")
    strays = [
        m for m in import_graph.discover_modules(PACKAGE) if import_graph.layer_of(m) == facade and m != "cfgzip_lab"
    ]
    assert not strays


def test_the_graph_sees_lazy_and_type_checking_imports():
    """The counts hold for the imports a reader sees, not only those that run at import time."""
    graph = import_graph.build_graph(PACKAGE)
    assert any(edge.lazy for edge in graph.edges)
    assert any(edge.type_checking for edge in graph.edges)
    eager = import_graph.build_graph(PACKAGE, eager_only=True)
    assert len(eager.edges) < len(graph.edges)


_COMPILE_AND_LIST_MODULES = """
import json, sys
from cfgzip_lab.pipeline import compile_grammar
compiled = compile_grammar('root ::= "a" root | "b"')
assert compiled.gnf is not None
print(json.dumps(sorted(name for name in sys.modules if name.startswith("cfgzip_lab"))))
"""


@pytest.mark.parametrize("kernel", ["1", "0"], ids=["compiled", "python"])
def test_compile_grammar_loads_no_mask_engine_module(kernel):
    env = {"CFGZIP_NATIVE_KERNEL": kernel, "PATH": "", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE_AND_LIST_MODULES], capture_output=True, text=True, check=True, env=env
    ).stdout
    loaded = json.loads(out.splitlines()[-1])
    engine = [m for m in loaded if m.startswith(MASK_ENGINE_PREFIXES) and m != EXTENSION]
    assert "cfgzip_lab.grammar.gnf" in loaded
    assert not engine, f"compile_grammar imported the mask engine: {engine}"
