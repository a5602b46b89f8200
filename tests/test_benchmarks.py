"""The benchmark scripts run and print their table (never an assertion on times)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_engines_script_prints_a_row_per_grammar_and_batch():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_engines.py"), "--steps", "6", "--batch", "1,2", "json"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("json ")]
    assert [int(r.split()[2]) for r in rows] == [1, 2]  # batch sizes
    for row in rows:
        ratios = re.findall(r"(\d+\.\d+)x", row)
        assert len(ratios) == 4 and all(float(r) > 0 for r in ratios)
    assert "machine:" in proc.stdout
