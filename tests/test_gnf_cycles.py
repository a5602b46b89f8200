"""A build leaves no cyclic garbage (issue 33).

The normal form's recursive closures held their own cells, so every build left the word store
and its memo dicts in reference cycles (60 MaskBench builds through the Python store: ~1.7 million
objects for the collector to sweep; see ``CYCLES`` in ``cfgzip_lab/grammar/gnf.py``). Here a
build is followed by a collection that must find nothing unreachable.
"""

from __future__ import annotations

import gc
import json

import pytest
from paths import maskbench_row

from cfgzip_lab.bundled import bundled_grammars
from cfgzip_lab.pipeline import compile_grammar

#: A schema with counted repetitions ({m,n} bounds, the Python store's families) and nesting.
COUNTED_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "minLength": 3, "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 12},
        "child": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    "required": ["id", "tags"],
}


def _maskbench_schema(name: str) -> str:
    return json.dumps(maskbench_row(name)["schema"])


def _cyclic_garbage_of(build) -> int:
    """Objects a collection finds unreachable after ``build()`` (the collector paused meanwhile)."""
    build()  # first use: imports and module caches settle outside the count
    enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        build()
        return gc.collect()
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize("grammar", ["json", "c_like"])
@pytest.mark.parametrize("compiled_store", [False, None])
def test_bundled_grammar_build_leaves_no_cyclic_garbage(grammar, compiled_store):
    text = bundled_grammars()[grammar].read_text()
    assert _cyclic_garbage_of(lambda: compile_grammar(text, compiled_store=compiled_store)) == 0


@pytest.mark.parametrize("compiled_store", [False, None])
def test_schema_with_counted_repetitions_leaves_no_cyclic_garbage(compiled_store):
    schema = json.dumps(COUNTED_SCHEMA)
    build = lambda: compile_grammar(schema, kind="json_schema", compiled_store=compiled_store)  # noqa: E731
    assert _cyclic_garbage_of(build) == 0


def test_maskbench_schema_build_leaves_no_cyclic_garbage():
    schema = _maskbench_schema("JsonSchemaStore---nodemon.json")
    for compiled_store in (False, None):
        build = lambda: compile_grammar(schema, kind="json_schema", compiled_store=compiled_store)  # noqa: E731
        assert _cyclic_garbage_of(build) == 0, compiled_store
