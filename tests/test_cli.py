"""The ``cfgzip-lab`` command line: JSON records, exit codes, bad-input messages, and the
lossless check over every bundled and third-party grammar.

The CLI runs as a subprocess (``python -m cfgzip_lab.cli``, the same ``main`` as the
``cfgzip-lab`` script); the big verify table calls :func:`verify_lossless` in-process to
avoid one process start (and one vocabulary load) per grammar. Nothing asserts on times.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from paths import BUILTIN_JSON, BUNDLED, BUNDLED_DIR, bundled_samples, grammar_id, third_party_grammars
from paths import THIRD_PARTY as THIRD_PARTY_DIR

REPO = Path(__file__).resolve().parents[1]
THIRD_PARTY = third_party_grammars()
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
SMALL = dict(walks=2, steps=12, max_doc_tokens=24)
# Plain XGrammar (the oracle) takes 0.3-0.5 s per fill over Llama-3 on the SMILES grammars,
# growing along a walk (the compressed engine: 1-20 ms): one short walk there.
SMALLER = dict(walks=1, steps=6, max_doc_tokens=12)


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ENV,
        timeout=timeout,
    )


def last_json(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_usage_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def json_cache(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cache") / "json.npz"
    proc = cli("compress", "json", "--tokenizer", "llama3", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return out


# -- JSON records ---------------------------------------------------------------------
def test_gnf_json_last_line_keys():
    proc = cli("gnf", "json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert set(last_json(proc)) >= {
        "grammar",
        "rules",
        "cfg_productions",
        "gnf_productions",
        "gnf_nonterminals",
        "gnf_dag_nodes",
        "seconds",
    }


def test_gnf_symbols_say_what_each_nonterminal_stands_for():
    proc = cli("gnf", "c_like", "--symbols", "400")
    assert proc.returncode == 0, proc.stderr
    assert "the whole grammar (rule root)" in proc.stdout
    assert re.search(r"\S+@\d+ +the repetition .* in rule \w+ \(line \d+\)", proc.stdout), proc.stdout[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"standing for \d{1,3}(,\d{3})+ productions", summary), summary  # separators


def test_compress_json_keys_and_the_cache_loads(json_cache):
    from cfgzip_lab.cache.format import load_classes
    from cfgzip_lab.vocab_sources import load_vocab

    proc = cli("compress", "json", "--tokenizer", "llama3", "-o", str(json_cache), "--json")
    record = last_json(proc)
    assert set(record) == {
        "grammar",
        "tokenizer",
        "vocab_size",
        "classes",
        "dead_tokens",
        "fallback_singletons",
        "seconds",
        "peak_rss_mb",
        "source",
        "output",
    }
    assert record["source"] in ("built", "cache") and record["output"] == str(json_cache)
    vocab = load_vocab("llama3")
    classes = load_classes(json_cache, grammar_text=(BUNDLED_DIR / "json.ebnf").read_text(), vocab=vocab)
    assert classes.num_classes == record["classes"]
    assert classes.vocab_size == record["vocab_size"] == vocab.vocab_size


def test_verify_json_record_with_cache(json_cache):
    proc = cli(
        "verify",
        "json",
        "--tokenizer",
        "llama3",
        "--classes",
        str(json_cache),
        "--walks",
        "2",
        "--steps",
        "12",
        "--max-doc-tokens",
        "24",
        "--json",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = last_json(proc)
    assert set(record) == {"grammar", "tokenizer", "steps_checked", "mismatches", "first_mismatch"}
    assert record["mismatches"] == 0 and record["first_mismatch"] is None
    assert record["steps_checked"] > 24


def test_verify_with_given_docs(tmp_path):
    doc = tmp_path / "doc.json"
    doc.write_text('{"a": [1, 2.5, true, null, "x\\n"]}')
    proc = cli("verify", "json", "--tokenizer", "llama3", "--walks", "0", "--docs", str(doc), "--json")
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc)["steps_checked"] >= 10


def test_verify_exits_1_on_a_mismatch(tmp_path):
    """A cache whose partition merges ``{`` with ``[`` (told apart by JSON) must fail."""
    from cfgzip_lab.cache.format import save_classes
    from cfgzip_lab.classes.classing import TokenClasses
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab("llama3")
    text = (BUNDLED_DIR / "json.ebnf").read_text()
    classes = build_classes(compile_grammar(text), vocab).classes
    a, b = vocab.encode("{")[0], vocab.encode("[")[0]
    class_of = classes.class_of.copy()
    class_of[b] = class_of[a]
    used, class_of = np.unique(class_of, return_inverse=True)
    class_of = class_of.astype(np.int32)
    reps = np.array([np.flatnonzero(class_of == k)[0] for k in range(used.size)], dtype=np.int32)
    reps[class_of[a]] = a
    wrong = TokenClasses(class_of, reps, classes.class_kind[used].astype(np.uint8), metadata=dict(classes.metadata))
    path = save_classes(wrong, tmp_path / "wrong.npz", grammar_text=text, vocab=vocab)
    proc = cli(
        "verify",
        "json",
        "--tokenizer",
        "llama3",
        "--classes",
        str(path),
        "--walks",
        "2",
        "--steps",
        "8",
        "--max-doc-tokens",
        "8",
        "--json",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    record = last_json(proc)
    assert record["mismatches"] > 0 and record["first_mismatch"] is not None


def test_bench_json_keys_only():
    proc = cli("bench", "json", "--tokenizer", "llama3", "--steps", "8", "--batch", "1,2", "--json")
    assert proc.returncode == 0, proc.stderr
    record = last_json(proc)
    assert {
        "grammar",
        "tokenizer",
        "batch",
        "plain_fill_median_us",
        "compressed_total_median_us",
        "speedup_median",
        "speedup_p90",
    } <= set(record)
    assert record["batch"] == 1
    assert [b["batch"] for b in record["batches"]] == [1, 2]
    assert "machine:" in proc.stdout


# -- bad input: exit 2, a message, no traceback ----------------------------------------
BAD_GRAMMAR = 'root ::= "a" value\nvalue ::= "b" | (\n'


def test_missing_grammar_file():
    for command in (["verify"], ["bench"], ["compress", "-o", "/tmp/never.npz"]):
        proc = cli(*command, "/nonexistent/grammar.ebnf", "--tokenizer", "llama3")
        assert_usage_error(proc, "cannot read grammar", "/nonexistent/grammar.ebnf")


def test_grammar_error_names_line_and_column(tmp_path):
    path = tmp_path / "bad.ebnf"
    path.write_text(BAD_GRAMMAR)
    for command in ("verify", "bench"):
        proc = cli(command, str(path), "--tokenizer", "llama3")
        assert_usage_error(proc, f"{path}:2:")


def test_unknown_tokenizer():
    proc = cli("verify", "json", "--tokenizer", "no-such-tokenizer")
    assert_usage_error(proc, "cannot load tokenizer 'no-such-tokenizer'")


def test_missing_docs_file():
    proc = cli("verify", "json", "--tokenizer", "llama3", "--docs", "/nonexistent/doc.txt")
    assert_usage_error(proc, "cannot read document")


def test_bad_batch_sizes():
    proc = cli("bench", "json", "--tokenizer", "llama3", "--batch", "1,x")
    assert_usage_error(proc, "--batch")


def test_corrupt_cache(tmp_path):
    path = tmp_path / "corrupt.npz"
    path.write_bytes(b"PK\x03\x04 this is not a zip archive")
    proc = cli("verify", "json", "--tokenizer", "llama3", "--classes", str(path))
    assert_usage_error(proc, str(path))


def test_cache_built_for_another_grammar(json_cache):
    proc = cli("verify", "xml", "--tokenizer", "llama3", "--classes", str(json_cache))
    assert_usage_error(proc, "another grammar")


def test_cache_built_for_another_vocabulary(json_cache):
    proc = cli("verify", "json", "--tokenizer", "smollm2", "--classes", str(json_cache))
    assert_usage_error(proc, "another vocabulary")


def test_xgrammar_refusing_the_grammar(monkeypatch, capsys):
    """XGrammar refusing a grammar our front end accepts: exit 2 and its message, no traceback.

    In-process, with XGrammar's refusal simulated (every grammar we ship and all 40
    third-party ones are accepted by XGrammar 0.2.8, so there is no real one to use).
    """
    import cfgzip_lab.verify
    from cfgzip_lab import cli as cli_module
    from cfgzip_lab.engine import GrammarCompileError

    def refuse(*args, **kwargs):
        raise GrammarCompileError("EBNF parser error at line 1, column 10: simulated refusal")

    monkeypatch.setattr(cfgzip_lab.verify, "verify_engines", refuse)  # what `verify` calls
    status = cli_module.main(["verify", "json", "--tokenizer", "llama3", "--walks", "1", "--steps", "2"])
    err = capsys.readouterr().err
    assert status == 2
    assert "XGrammar refuses grammar" in err and "line 1, column 10" in err


# -- lossless on every grammar -----------------------------------------------------------
@cache
def _vocab(name: str):
    from cfgzip_lab.vocab_sources import load_vocab

    return load_vocab(name)


def _verify_in_process(path: Path, tokenizer: str, docs: int = 2):
    from cfgzip_lab.grammar.diagnostics import GrammarError
    from cfgzip_lab.grammar.nested_root import nested_root_reference
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.verify import verify_lossless

    text = path.read_text(encoding="utf-8")
    vocab = _vocab(tokenizer)
    compiled = compile_grammar(text, source=str(path))
    classes = build_classes(compiled, vocab).classes
    if nested_root_reference(compiled.ast) is not None:  # balanced_parentheses: the root nested
        with pytest.raises(GrammarError, match="the compressed engine refuses this grammar"):
            verify_lossless(text, vocab, classes, walks=1, steps=1, seed=0)
        return None
    samples = [p.read_text(encoding="utf-8") for p in bundled_samples(path.stem)][:docs]
    if path.parent != BUNDLED_DIR:
        samples = []  # samples belong to the bundled grammars only
    settings = SMALLER if "SMILES" in path.parts else SMALL
    report = verify_lossless(text, vocab, classes, docs=samples, seed=0, **settings)
    assert report.mismatches == 0, report.first_mismatch
    assert report.steps_checked > 0
    return report


@pytest.mark.slow
@pytest.mark.parametrize("path", BUNDLED + THIRD_PARTY, ids=grammar_id)
def test_path__llama3__lossless(path):
    _verify_in_process(path, "llama3")


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["qwen3", "smollm2"])
@pytest.mark.parametrize("path", BUNDLED + THIRD_PARTY, ids=grammar_id)
def test_path__tokenizer__lossless(path, tokenizer):
    """Every grammar with the other two vocabularies too (Qwen3: 151k ids, its own
    pre-tokenizer and added tokens; SmolLM2: 49k ids), at the same modest size."""
    _verify_in_process(path, tokenizer, docs=1)


def test_third_party_grammars_are_all_there():
    assert len(THIRD_PARTY) == 40 or not THIRD_PARTY_DIR.exists()
    if THIRD_PARTY_DIR.exists():
        assert THIRD_PARTY_DIR / "xgrammar_builtin_json.ebnf" in THIRD_PARTY


@pytest.mark.parametrize("grammar", ["c_like", os.path.relpath(BUILTIN_JSON, REPO)])
def test_verify_cli__grammar(grammar):
    if grammar.startswith("..") and not (REPO / grammar).exists():
        pytest.skip("third-party grammars not present")
    proc = cli(
        "verify", grammar, "--tokenizer", "llama3", "--walks", "2", "--steps", "10", "--max-doc-tokens", "12", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_json(proc)["mismatches"] == 0


# -- other grammar inputs: JSON Schema and GBNF ------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["id"],
}
GBNF = 'root ::= "<" item+ ">"\nitem ::= | [\\x41-\\x43] "\\x41BC" # \\x takes two hex digits in GBNF\n'


def test_compress_and_verify_a_json_schema(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    cache = tmp_path / "schema.npz"
    proc = cli("compress", "--json-schema", str(schema), "--tokenizer", "smollm2", "-o", str(cache), "--json")
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc)["classes"] < last_json(proc)["vocab_size"]
    proc = cli(
        "verify", "--json-schema", str(schema), "--tokenizer", "smollm2", "--classes", str(cache), "--walks", "3",
        "--steps", "16", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_json(proc)["mismatches"] == 0 and last_json(proc)["steps_checked"] > 10


def test_gnf_reads_gbnf_by_flag_and_by_file_name(tmp_path):
    path = tmp_path / "g.gbnf"
    path.write_text(GBNF)
    for args in (["--gbnf", str(path)], [str(path)]):
        proc = cli("gnf", *args, "--json")
        assert proc.returncode == 0, proc.stderr
        assert last_json(proc)["kind"] == "gbnf"


def test_bad_schema_and_bad_gbnf_name_their_line_and_column(tmp_path):
    schema = tmp_path / "bad.json"
    schema.write_text('{"type": "string",\n "pattern": "ab(?<=a)c"}')
    assert_usage_error(cli("gnf", "--json-schema", str(schema)), f"{schema}:2:14:", "Lookbehind")
    # a mid-pattern anchor is XGrammar's no-op, mirrored: a warning at the anchor itself
    schema.write_text('{"type": "string",\n "pattern": "ab^c"}')
    done = cli("gnf", "--json-schema", str(schema))
    assert done.returncode == 0 and f"{schema}:2:16: warning:" in done.stderr and "anchor '^'" in done.stderr
    schema.write_text('{"type": "string",\n "pattern": "a"')
    assert_usage_error(cli("compress", "--json-schema", str(schema), "--tokenizer", "smollm2", "-o", "x.npz"), ":2:16:")
    gbnf = tmp_path / "bad.gbnf"
    gbnf.write_text('root ::= "a"\nitem ::= "\\q"\n')
    assert_usage_error(cli("gnf", "--gbnf", str(gbnf)), f"{gbnf}:2:11:", "unknown escape \\q")


def test_one_grammar_exactly(tmp_path):
    path = tmp_path / "g.gbnf"
    path.write_text(GBNF)
    assert_usage_error(cli("gnf", "json", "--gbnf", str(path)), "give one grammar")
    assert_usage_error(cli("verify", "--tokenizer", "smollm2"), "give one grammar")


# ---- Lark and regex inputs (cfgzip_lab.grammar.lark_regex) -----------------------------------


def test_gnf_reads_lark_and_regex_and_places_their_errors(tmp_path, capsys):
    from cfgzip_lab.cli import main

    lark = tmp_path / "tool.lark"
    lark.write_text('start: "a" NUMBER\nNUMBER: /[0-9]+/\n')
    assert main(["gnf", "--lark", str(lark)]) == 0
    assert main(["gnf", "--regex", "[a-z]+@x\\.com"]) == 0
    capsys.readouterr()
    lark.write_text('start: "a"\nb: "é" c\n')
    assert main(["gnf", "--lark", str(lark)]) == 2
    assert f"{lark}:2:8: error: XGrammar cannot read this Lark grammar: unknown name 'c'" in capsys.readouterr().err
    assert main(["gnf", "--regex", "é(?<=x)a"]) == 2
    assert "<regex>:1:4: error: XGrammar cannot read this regex: Lookbehind" in capsys.readouterr().err
    assert main(["gnf", "--regex", "a", "--lark", str(lark)]) == 2
    assert "--lark FILE or --regex PATTERN" in capsys.readouterr().err
