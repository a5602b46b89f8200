"""Time to first mask stage by stage, a baseline checkout and this one side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ttfm_side_by_side.py --baseline /path/to/worktree \\
        --names Snowplow---sp_333_Normalized Github_medium---o9906 [--repeat 2] [--out rows.jsonl]

Two persistent worker processes, one importing ``cfgzip_lab`` from ``--baseline`` (a ``git worktree`` of the
earlier commit with its extension built in place), one from this checkout; each builds a MaskBench schema in
turn (:func:`ttfm_profile.profile_once`, after one warm-up schema), the files alternated and the side that goes
first swapped per file, so that both see the same load. Every stage is timed in the worker's thread time
(``time.perf_counter`` stands for ``time.thread_time`` there: the 2-core machine's other work moves wall
time by more than most changes), the whole build in wall time too. Prints per file the median over the repeats
of the stages before → after and the ratio of the sums, then the ratios' median and quartiles, and the machine
and load; never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = ("convert", "lower", "gnf", "classing", "index", "engine", "sum", "wall")


def worker() -> None:
    """One side: MaskBench names on stdin, one JSON line of stage seconds each on stdout."""
    sys.path.insert(0, str(HERE))
    import gc

    import maskbench
    import ttfm_profile

    import cfgzip_lab

    schemas = {
        r["name"].removesuffix(".json"): json.dumps(r["schema"]) for r in maskbench.read_maskbench(maskbench.DATA)
    }
    vocab = cfgzip_lab.load_vocab(os.environ.get("TTFM_TOKENIZER", "llama3"))
    wall = time.perf_counter
    time.perf_counter = time.thread_time  # every stage in this thread's CPU time
    ttfm_profile.profile_once('{"type": "object", "properties": {"a": {"type": "string"}}}', vocab)
    gc.disable()  # as matcher_for's build does
    print(json.dumps({"ready": cfgzip_lab.__file__}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        t0 = wall()
        try:
            row = ttfm_profile.profile_once(schemas[name], vocab)
        except Exception as error:  # noqa: BLE001 (a refusal is a row too)
            row = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
        row["wall"] = wall() - t0
        gc.collect()
        print(json.dumps({"name": name, **row}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout with its extension built in place")
    ap.add_argument("--names", nargs="+", required=True, help="MaskBench names")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="append every build's row here (JSON lines)")
    args = ap.parse_args(argv)
    sides = {"before": args.baseline.resolve(), "after": HERE.parent}
    procs = {}
    for side, checkout in sides.items():
        env = dict(os.environ, PYTHONPATH=str(checkout))
        procs[side] = subprocess.Popen(
            [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    for side, proc in procs.items():
        print(f"{side}: {json.loads(proc.stdout.readline())['ready']}")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    rows: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    out = args.out.open("a") if args.out else None
    turn = 0
    for repeat in range(args.repeat):
        for name in args.names:
            for side in ("before", "after") if turn % 2 == 0 else ("after", "before"):
                procs[side].stdin.write(name + "\n")
                procs[side].stdin.flush()
                row = json.loads(procs[side].stdout.readline())
                rows[name][side].append(row)
                if out:
                    out.write(json.dumps({**row, "side": side, "repeat": repeat}) + "\n")
            turn += 1
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print("| file | " + " | ".join(f"{s} ms before → after" for s in STAGES) + " | sum after/before |")
    print("|---|" + "---:|" * (len(STAGES) + 1))
    ratios = []
    medians: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name in args.names:
        before, after = rows[name]["before"], rows[name]["after"]
        if any("error" in r for r in before + after):
            print(f"| {name} | refused: {before[0].get('error')} / {after[0].get('error')} |")
            continue
        med = {
            (side, s): statistics.median(r[s] for r in rs) * 1000
            for side, rs in (("b", before), ("a", after))
            for s in STAGES
        }
        ratios.append(med["a", "sum"] / med["b", "sum"])
        for key, value in med.items():
            medians[key].append(value)
        cells = " | ".join(f"{med['b', s]:.1f} → {med['a', s]:.1f}" for s in STAGES)
        print(f"| {name} | {cells} | {ratios[-1]:.2f} |")
    if ratios:
        print(f"per stage, the median over {len(ratios)} files of each file's median (ms, before → after):")
        for s in STAGES:
            print(f"  {s:10s} {statistics.median(medians['b', s]):7.3f} → {statistics.median(medians['a', s]):7.3f}")
    if len(ratios) > 1:
        q = statistics.quantiles(ratios, n=4)
        print(
            f"sum after/before over {len(ratios)} files: median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}, {q[2]:.3f})"
        )
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker()
    else:
        raise SystemExit(main())
