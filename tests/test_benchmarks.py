"""The benchmark scripts run and print their table (never an assertion on times)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cfgzip_lab.bench import timed_positions

REPO = Path(__file__).resolve().parents[1]


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
