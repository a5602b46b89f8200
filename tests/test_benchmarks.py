"""The benchmark scripts run and print their table (never an assertion on times)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cfgzip_lab.bench import NEVER, break_even, one_off_seconds, pays_text, timed_positions

REPO = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``benchmarks/<script> args`` offline, its output captured; it must exit 0 (its stderr's tail shown if not)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_timed_positions_spread_over_every_document():
    paths = [[0] * 50, [0] * 10, [0] * 40]  # 100 tokens
    timed = timed_positions(paths, 10)
    assert sum(map(len, timed)) == 10
    assert [len(t) for t in timed] == [5, 1, 4]  # in proportion to length, not the heads
    assert min(timed[0]) == 0 and max(timed[2]) == 39  # first and last token of all
    assert all(0 <= i < len(p) for p, t in zip(paths, timed) for i in t)


@pytest.mark.parametrize("steps", [0, -1, 100, 1000])
def test_timed_positions_time_every_step_when_asked_or_short(steps):
    paths = [[0] * 60, [0] * 40]
    assert timed_positions(paths, steps) == [set(range(60)), set(range(40))]


# one_off_s, plain_step_s, engine_step_s, expected tokens
BREAK_EVEN_TABLE = [
    (2.0, 300e-6, 100e-6, 10_000),  # 2 s paid back at 200 µs a token
    (2.0, 300e-6, 250e-6, 40_000),  # exact in decimals, not in floats
    (1.0, 3e-3, 0.0, 334),  # rounds up: 333 tokens save 0.999 s
    (0.0, 300e-6, 100e-6, 0),  # nothing to pay back
    (2.0, 50e-6, 80e-6, NEVER),  # slower per step (JSON with SmolLM2 today)
    (2.0, 80e-6, 80e-6, NEVER),  # as fast: the one-off is never paid back
    (0.0, 80e-6, 80e-6, NEVER),
]


@pytest.mark.parametrize("one_off, plain, engine, expected", BREAK_EVEN_TABLE)
def test_break_even(one_off, plain, engine, expected):
    assert break_even(one_off, plain, engine) == expected


@pytest.mark.parametrize("bad", [(-1.0, 1e-4, 1e-5), (1.0, float("nan"), 1e-5), (1.0, 1e-4, float("inf"))])
def test_break_even_refuses_negative_or_non_finite_times(bad):
    with pytest.raises(ValueError, match="finite, non-negative"):
        break_even(*bad)


def test_one_off_is_classing_plus_compile_or_cache_load_plus_compile():
    assert one_off_seconds(classing_s=3.0, compile_s=0.5) == 3.5
    assert one_off_seconds(classing_s=3.0, compile_s=0.5, cache_load_s=0.1) == 0.6  # a cache replaces classing


def test_pays_text_says_tokens_or_never():
    assert pays_text(12345, 3e-4, 1e-4) == "pays after 12,345 tokens"
    assert pays_text(NEVER, 5e-5, 8e-5).startswith("never pays: 80.0 µs per step against plain 50.0 µs")


def test_bench_engines_script_prints_a_row_per_grammar_and_batch():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_engines.py"), "--steps", "6", "--batch", "1,2", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("json ")]
    assert [int(r.split()[2]) for r in rows] == [1, 2]  # batch sizes
    for row in rows:
        ratios = re.findall(r"(\d+\.\d+)x", row)
        assert len(ratios) == 4 and all(float(r) > 0 for r in ratios)
    assert "machine:" in proc.stdout


def test_front_end_script_prints_a_row_per_grammar():
    """benchmarks/front_end.py: the stages' times beside XGrammar's from_ebnf, and a fresh process's first parse."""
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "front_end.py"),
            "--repeat",
            "2",
            "json",
            "arithmetic_left_recursive",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("json ", "arithmetic_left_recursive "))]
    assert len(rows) == 2
    for row in rows:
        assert len(re.findall(r"\d+\.\d+ / +\d+\.\d+", row)) == 5 and float(row.split()[-1].rstrip("x")) > 0
    assert "first parse (json)" in proc.stdout and "machine:" in proc.stdout


@pytest.mark.slow
def test_gpu_e2e_tiny_runs_every_mode_on_cpu_and_writes_json(tmp_path):
    """The GPU benchmark's --tiny mode: the whole script on CPU (a 2-layer model), JSON written."""
    import json

    out = tmp_path / "e2e.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_e2e.py"),
            "--tiny",
            "--grammars",
            "json",
            "--steps",
            "3",
            "--expansion-calls",
            "3",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    modes = {r["mode"] for r in result["e2e"]}
    assert {"none", "plain", "compressed", "compressed_overlap", "none_again"} <= modes
    assert {r["batch"] for r in result["e2e"]} == {1, 2}
    assert {r["backend"] for r in result["expansion"]} == {"numpy", "torch"}  # no CUDA here
    assert "end to end, tokens/s" in proc.stdout and not result["skipped"]


@pytest.mark.slow
def test_gil_probe_prints_a_row_per_worker():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gil_probe.py"), "--grammar", "json", "--seconds", "0.2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for worker in ("sha256 (releases the GIL)", "pure Python (holds the GIL)", "xgrammar fill, compressed"):
        assert worker in proc.stdout


@pytest.mark.slow
def test_sweep_checks_every_engine_and_writes_its_table(tmp_path):
    """benchmarks/sweep.py: a row per grammar x tokenizer x engine, JSON totals; unknown engines are bad input."""
    import json

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    sweep = str(REPO / "benchmarks" / "sweep.py")
    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [sys.executable, sweep, "--tokenizers", "smollm2", "--engines", "compressed", "--target-steps", "60",
         "--max-doc-tokens", "10", "--workers", "1", "--json", str(out), "json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    table = json.loads(out.read_text())
    (row,) = table["rows"]
    assert (row["grammar"], row["tokenizer"], row["engine"]) == ("json", "smollm2", "compressed")
    assert row["steps"] >= 60 and row["mismatches"] == 0 and row["docs"] > 0 and row["error"] is None
    assert table["totals"]["steps"] == row["steps"]
    bad = subprocess.run(
        [sys.executable, sweep, "--engines", "nonesuch", "json"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "nonesuch" in bad.stderr


@pytest.mark.slow
def test_sweep_runs_an_item_under_each_supported_xgrammar(tmp_path):
    """``--xgrammar-version R``: the sweep re-run by R's interpreter, one block per release in the JSON,
    one coverage table per release; a release no interpreter here has is one clear error."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import sweep

    from cfgzip_lab.xgrammar_version import SUPPORTED

    missing = [r for r in SUPPORTED if sweep.interpreter_for(r) is None]
    if missing:
        pytest.skip(f"no interpreter for XGrammar {missing}: bash scripts/setup.sh --test makes the overlays")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    script, out = str(REPO / "benchmarks" / "sweep.py"), tmp_path / "sweep.json"
    for release in SUPPORTED:
        proc = subprocess.run(
            [sys.executable, script, "--xgrammar-version", release, "--items", "json-schema-test-suite/0000",
             "--tokenizers", "smollm2", "--verify-seconds", "1", "--target-steps", "20", "--workers", "1",
             "--json", str(out)],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"XGrammar {release}: 1 corpus items" in proc.stdout
    blocks = json.loads(out.read_text())[sweep.BY_XGRAMMAR]
    assert list(blocks) == list(SUPPORTED)
    for release, block in blocks.items():
        assert block["machine"]["xgrammar"] == release
        (item,) = block["items"]
        assert item["verdict"] == "served"
        assert {c["engine"]: c["mismatches"] for c in item["checks"]} == {
            "compressed": 0, "native": 0, "xgrammar-schema": 0
        }  # fmt: skip
    table = subprocess.run([sys.executable, script, "--corpus-table", str(out)], capture_output=True, text=True)
    assert table.returncode == 0 and all(f"**XGrammar {r}**" in table.stdout for r in SUPPORTED), table.stdout
    bad = subprocess.run(
        [sys.executable, script, "--xgrammar-version", "0.1.0", "--items", "regressions/jsb_0038"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and "no interpreter here runs XGrammar 0.1.0" in bad.stderr


def test_cli_bench_says_whether_each_engine_pays():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", "bench", "json", "--tokenizer", "smollm2", "--steps", "8"]
        + ["--engines", "plain,compressed,native", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    *human, last = proc.stdout.strip().splitlines()
    record = json.loads(last)
    text = "\n".join(human)
    assert "does it pay?" in text
    for engine in ("compressed", "native"):
        tokens = record[f"{engine}_pays_after_tokens"]
        one_off = record["one_off_seconds"][engine]
        assert one_off > 0  # classing and the engine's compile are never free
        plain, mine = record["plain_total_median_us"], record[f"{engine}_total_median_us"]
        if tokens is None:  # never: not faster per step
            assert mine >= plain - 0.01
            assert re.search(rf"{engine}: one-off .* never pays: ", text)
        else:
            # the record rounds one-off to 1 µs and medians to 0.01 µs: the break-even must lie
            # between the bounds those roundings allow (a 4-digit one-off once failed a 1% margin)
            batch = record["batch"]
            low = (one_off - 5e-7) / ((plain - mine + 0.01) * 1e-6)
            high = (one_off + 5e-7) / (max(plain - mine - 0.01, 1e-9) * 1e-6)
            assert mine < plain and math.floor(low) * batch <= tokens <= math.ceil(high) * batch
            assert f"{engine}: one-off" in text and f"pays after {tokens:,} tokens" in text


# ours_s, xgrammar_s, plain_step_s, native_step_s, pays after, behind after
STARTUP_TABLE = [
    (0.010, 0.100, 50e-6, 10e-6, 0, None),  # ready first and faster per step: ahead from the first token
    (0.010, 0.100, 10e-6, 40e-6, 0, 3_000),  # ready first, slower per step: caught up after 3,000 tokens
    (1.100, 0.100, 300e-6, 100e-6, 5_000, None),  # 1 s later, 200 µs a token back
    (1.100, 0.100, 10e-6, 40e-6, NEVER, None),  # later and slower: never
]


@pytest.mark.parametrize("ours, xgr, plain, native, pays, behind", STARTUP_TABLE)
def test_startup_break_even(ours, xgr, plain, native, pays, behind):
    from cfgzip_lab.startup import behind_after, pays_after

    assert pays_after(ours, xgr, plain, native) == pays
    assert behind_after(ours, xgr, plain, native) == behind


def test_startup_script_runs_both_sides_on_one_tiny_input(tmp_path):
    """benchmarks/startup.py → cfgzip-lab bench --startup in a process of its own: XGrammar's compile,
    our cold and warm ready times, the break-even, the machine and the load."""
    grammar = tmp_path / "tiny.ebnf"
    grammar.write_text('root ::= "[" [a-z]+ ("," [a-z]+)* "]"\n')
    out = tmp_path / "startup.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "startup.py"), "--tokenizer", "smollm2", "--steps", "8"]
        + ["--json", str(out), str(grammar)],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("tiny "))
    assert len(re.findall(r"\d+\.\d+x", row)) == 2  # cold and warm ratios
    assert "machine:" in proc.stdout and "load average" in proc.stdout and "median:" in proc.stdout
    (record,) = json.loads(out.read_text())["inputs"]
    assert record["kind"] == "ebnf" and record["index_source"] == "cache" and record["steps"] > 0
    assert set(record["cold"]) == {"front_end", "classes", "index", "compact", "engine", "first_mask"}
    assert set(record["warm"]) == {"load", "engine", "first_mask"}
    assert all(record[k] > 0 for k in ("xgrammar_compile_s", "cold_ready_s", "warm_ready_s", "plain_step_us"))
    assert record["cold_pays_after_tokens"] == NEVER or record["cold_pays_after_tokens"] >= 0


def test_maskbench_sample_keeps_every_split_in_proportion():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import maskbench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    rows = [
        {"name": f"{split}---o{i}.json"}
        for split, count in (("A", 50), ("B", 30), ("C", 2), ("D", 1))
        for i in range(count)
    ]
    for n, expected in (
        (4, {"A": 1, "B": 1, "C": 1, "D": 1}),
        (12, {"A": 6, "B": 4, "C": 1, "D": 1}),
        (2, {"A": 1, "B": 1}),
    ):
        chosen = maskbench.stratified_sample(rows, n, seed=3)
        assert len(chosen) == n and chosen == sorted(chosen, key=rows.index)  # the data's order kept
        assert {s: sum(maskbench.split_of(r["name"]) == s for r in chosen) for s in expected} == expected
    assert maskbench.stratified_sample(rows, 0, seed=3) == rows
    assert maskbench.stratified_sample(rows, 3, seed=3) == maskbench.stratified_sample(rows, 3, seed=3)


@pytest.mark.slow
def test_maskbench_script_times_cfgzip_beside_xgrammar_and_compares_masks(tmp_path):
    """Two MaskBench files through benchmarks/maskbench.py: a row per engine, every cfgzip mask
    compared with XGrammar's, the figure written; ``--baseline`` (here this checkout again) adds the
    ``cfgzip@base`` row, its worker importing cfgzip_lab from there."""
    out = tmp_path / "mb"
    proc = run_benchmark(
        "maskbench.py",
        *("--engines", "cfgzip,xgrammar", "--tokenizer", "smollm2", "--sample", "2", "--seed", "1"),
        *("--file-seconds", "120", "--out", str(out), "--baseline", str(REPO)),
        timeout=900,
    )
    assert "| cfgzip | 2 |" in proc.stdout and "| xgrammar | 2 |" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["engine"]: row for row in summary["rows"]}
    assert rows["cfgzip"]["compared_steps"] > 0 and rows["cfgzip"]["mask_disagreements"] == 0
    assert "| cfgzip@base | 2 |" in proc.stdout and f"cfgzip@base: cfgzip_lab from {REPO / 'cfgzip_lab'}" in proc.stdout
    assert rows["cfgzip@base"]["compared_steps"] == rows["cfgzip"]["compared_steps"]
    assert rows["cfgzip@base"]["mask_disagreements"] == 0
    assert rows["cfgzip"]["tbm_p50_us"] > 0 and rows["xgrammar"]["ttfm_p50_ms"] > 0
    assert (out / "maskbench.html").stat().st_size > 0


def test_spec_bench_times_both_engines_and_their_masks_agree(tmp_path):
    """benchmarks/spec_bench.py with tiny settings: a row per call for each engine, every draft and
    tree mask row of the native matcher equal to XGrammar's."""
    out = tmp_path / "spec.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "spec_bench.py"), "--grammars", "json", "--tokenizer", "llama3"]
        + ["--positions", "2", "--ks", "2,4", "--tree-nodes", "12", "--repeats", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for call in ("fill", "fork", "draft k2", "draft k4", "tree 12"):
        assert re.search(rf"^\| {call} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", proc.stdout, re.M), call
    assert "machine:" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert set(result["ops"]) == {"fill", "fork", "draft k2", "draft k4", "tree 12"}
    assert all(set(by) == {"native", "xgrammar"} for by in result["ops"].values())
    assert result["positions"] == 2 and result["compared_rows"] > 0
    assert result["differing_rows"] == 0


@pytest.mark.slow
def test_classing_many_classes_each_file_once_and_writes_its_digests(tmp_path):
    """benchmarks/classing_many.py: each MaskBench file classed once in one process, the median and the
    vocabulary trie's scan-cache counts printed, each file's time and class digest written (a before and
    an after run must give the same digests)."""
    out = tmp_path / "many.json"
    names = ["Github_easy---o58442", "BFCL_java_17", "Github_easy---o58442"]  # the last: a second scan of its roots
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "classing_many.py"), "--tokenizer", "smollm2"]
        + ["--names", *names, "--json", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^2 files classed once each: median [0-9.]+ ms", proc.stdout, re.M)
    written = json.loads(out.read_text())
    assert set(written["files"]) == set(names) and all(len(f["digest"]) == 16 for f in written["files"].values())
    assert written["scan_cache"]["scans_kept"] >= 0 and "scans_reused" in written["scan_cache"]
    # --ttfm: matcher_for and the first mask instead, the mask's digest written
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "classing_many.py"), "--tokenizer", "smollm2", "--ttfm"]
        + ["--names", names[0], "--json", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^1 first masks: median [0-9.]+ ms", proc.stdout, re.M)
    assert len(json.loads(out.read_text())["files"][names[0]]["digest"]) == 16


def test_ttfm_floor_times_xgrammars_calls_beside_both_engines(tmp_path):
    """benchmarks/ttfm_floor.py: XGrammar's own calls a build needs, their sum, and each engine's whole build,
    a row each with the files it counted (llguidance's only where it is installed)."""
    names = tmp_path / "names.txt"
    names.write_text("Github_easy---o58442\nBFCL_java_17\n")
    proc = run_benchmark("ttfm_floor.py", "--tokenizer", "smollm2", "--names-file", str(names))
    assert "2 schemas" in proc.stdout
    for call in ("json.loads", "from_json_schema", "str(grammar)", "serialize_json", "XGrammar floor", "cfgzip"):
        assert re.search(rf"^\| {re.escape(call)} \| 2 \| [0-9.]+ \| [0-9.]+ \|$", proc.stdout, re.M), call


@pytest.mark.slow
def test_serialized_cfg_compares_both_front_ends_and_their_first_masks():
    """benchmarks/serialized_cfg.py: a few MaskBench files through the text path and the serialized path,
    the CFGs compared (exit 0: none differs) and the times printed; ``--ttfm``: the first masks compared."""
    script = str(REPO / "benchmarks" / "serialized_cfg.py")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, script, "--sample", "6", "--seed", "1"], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^compared [1-9][0-9]*, mismatches 0", proc.stdout, re.M)
    assert re.search(r"per-file saving median -?[0-9.]+ ms", proc.stdout)
    proc = subprocess.run(
        [sys.executable, script, "--ttfm", "--sample", "3", "--seed", "1", "--tokenizer", "smollm2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^[1-9] schemas, first masks differ on 0 ", proc.stdout, re.M)


@pytest.mark.slow
def test_lookahead_scan_counts_the_schemas_xgrammar_must_serve():
    """benchmarks/lookahead_scan.py: o79409 (its name pattern misread with Llama-3) is found by both scans, and
    a schema whose only class past 128 is a maxLength string's (read alike) by the text scan alone."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "lookahead_scan.py"), "--name", "o79409", "--name", "o21089"],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^2 schemas", proc.stdout, re.M), proc.stdout
    assert "(text scan): 2; misread in this vocabulary: 1" in proc.stdout, proc.stdout
    assert "Github_hard---o79409.json: line " in proc.stdout


@pytest.mark.slow
def test_gnf_digest_is_the_same_twice_and_tells_a_changed_grammar(tmp_path):
    """benchmarks/gnf_digest.py: two runs over the same grammars give the same digests (compare exits 0), and
    a grammar whose digest changed makes compare name it and exit 1."""
    runs = []
    for name in ("a.json", "b.json"):
        out = tmp_path / name
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "gnf_digest.py"),
                "--sample",
                "2",
                "--seed",
                "3",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(out)
    digests = json.loads(runs[0].read_text())
    assert len(digests) >= 2 * (2 + 3) and all(len(d) == 64 for d in digests.values())  # 2 schemas + bundled, 2 stores
    script = [sys.executable, str(REPO / "benchmarks" / "gnf_digest.py"), "--compare", str(runs[0])]
    same = subprocess.run([*script, str(runs[1])], capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and " 0 differ" in same.stdout, same.stdout
    key = next(iter(digests))
    changed = tmp_path / "c.json"
    changed.write_text(json.dumps({**digests, key: "0" * 64}))
    differ = subprocess.run([*script, str(changed)], capture_output=True, text=True, timeout=60)
    assert differ.returncode == 1 and f"differs: {key}" in differ.stdout, differ.stdout


def test_cli_bench_spec_times_both_engines_and_their_masks_agree():
    """cfgzip-lab bench --spec (cfgzip_lab.spec_bench, as the script above): the table has a row per call
    with both engines' quantiles, the record every call for both engines, and no mask row differs."""
    proc = subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", "bench", "json", "--tokenizer", "llama3", "--spec"]
        + ["--spec-positions", "2", "--spec-ks", "2,4", "--tree-nodes", "12", "--repeats", "1", "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *human, last = proc.stdout.strip().splitlines()
    text = "\n".join(human)
    calls = ("fill", "fork", "draft k2", "draft k4", "tree 12")
    for call in calls:
        assert re.search(rf"^\| {call} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+x \| [\d.]+ \|$", text, re.M), (
            call
        )
    assert "machine:" in text and "MISMATCH" not in text
    record = json.loads(last)
    assert set(record["ops"]) == set(calls)
    for by in record["ops"].values():
        assert set(by) == {"native", "xgrammar"}
        assert all(q["n"] == record["positions"] and q["p99_us"] >= q["p50_us"] >= 0 for q in by.values())
    assert record["positions"] == 2 and record["source"] == "samples"
    rows = record["compared_rows"]
    assert rows >= 2 * (2 + 1) and f"masks compared: {rows} rows, 0 differ" in text  # each prefix: a tree and 2 drafts
    assert record["differing_rows"] == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--spec-ks", "0,4"], "--spec-ks takes positive draft lengths"),
        (["--spec-ks", "a"], "--spec-ks takes draft lengths"),
        (["--tree-nodes", "0"], "--tree-nodes must be at least 1"),
        (["--startup"], "--spec and --startup are two measurements"),
    ],
)
def test_cli_bench_spec_refuses_bad_settings(flags, message):
    proc = subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", "bench", "json", "--tokenizer", "llama3", "--spec", *flags],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
