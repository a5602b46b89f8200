"""The compiled core's C reads in pieces (issue 32): no function in ``csrc/`` over 150 lines, one
file per concept, the extension's glue alone in ``module.c``.

``python scripts/c_function_lengths.py`` prints what these tests count (``--all``: every function).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from paths import REPO

_SPEC = importlib.util.spec_from_file_location("c_function_lengths", REPO / "scripts" / "c_function_lengths.py")
c_function_lengths = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(c_function_lengths)

CSRC = REPO / "csrc"


def test_no_c_function_over_150_lines():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "c_function_lengths.py")], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 function(s) over 150 lines" in result.stderr


@pytest.mark.parametrize(
    "source__expected",
    [
        ("static int f(void) {\n    return 0;\n}\n", [("f", 1, 3)]),
        # a struct, an initializer and a prototype are no functions; comments and strings hide braces
        (
            "typedef struct {\n    int a;\n} S;\nstatic int t[] = {1, 2};\nint g(int);\n"
            '/* h() { */\nint h(int x)\n{\n    const char *s = "}{";\n    return x;\n}\n',
            [("h", 7, 11)],
        ),
        # a macro's braces are not code, and a function's head may span lines
        ("#define M(x) \\\n    { x; }\nPyObject *\nk(PyObject *self,\n  PyObject *args) {\n}\n", [("k", 3, 6)]),
    ],
    ids=["one_function", "not_functions", "macro_and_long_head"],
)
def test_functions_are_counted_from_their_head_to_their_closing_brace(tmp_path, source__expected):
    source, expected = source__expected
    path = tmp_path / "x.c"
    path.write_text(source)
    assert [(f.name, f.first, f.last) for f in c_function_lengths.functions(path)] == expected


def test_a_long_function_is_listed_and_fails(tmp_path, capsys):
    path = tmp_path / "long.c"
    path.write_text("int long_one(void) {\n" + "    ;\n" * 160 + "}\nint short_one(void) { return 1; }\n")
    assert c_function_lengths.main([str(path)]) == 1
    assert "long_one" in capsys.readouterr().out
    assert c_function_lengths.main([str(path), "--limit", "200"]) == 0


def test_module_c_holds_only_the_glue():
    """module.c defines the init and the helper that adds the types, nothing that computes."""
    names = {f.name for f in c_function_lengths.functions(CSRC / "module.c")}
    assert names == {"add_types", "PyInit__native"}


def test_one_trie_mask_walk():
    """trie_mask (a Python store's node list) and Words.trie_mask (a compiled store) share one walk."""
    walks = [
        (path.name, f.name)
        for path in sorted(CSRC.glob("*.c"))
        for f in c_function_lengths.functions(path)
        if "trie_walk" in f.name
    ]
    assert walks == [("trie.c", "trie_walk")]
