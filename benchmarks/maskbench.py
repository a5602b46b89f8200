"""MaskBench, run here: time to first mask and time between masks on real-world JSON Schemas.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/maskbench.py --sample 400 --seed 0 \\
        [--engines cfgzip,xgrammar,xgrammar-compact,llguidance] [--tokenizer llama3] [--file-seconds 60] \\
        [--file-memory-gb 4] [--out artifacts/maskbench] [--figure artifacts/maskbench/maskbench.html] [--names ...]
    .venv/bin/python benchmarks/maskbench.py --summarize artifacts/maskbench     # the table again, from the files

MaskBench is the benchmark of the JSONSchemaBench authors on which llguidance and XGrammar publish
(``../shared/corpora/maskbench``, README there; its runner is ``maskbench/maskbench/runner.py`` in
guidance-ai/jsonschemabench, whose method this follows, written anew here):

- per schema, **TTFM**: the engine's compile call for a schema it has never seen (the first mask is
  the first TBM sample, as MaskBench counts it);
- per instance, ``json.dumps(data, indent=None, ensure_ascii=False)`` tokenised without special
  tokens, then per token **TBM**: fill the next-token mask and commit the token, timed together; a
  valid instance must be accepted to its last token, an invalid one refused at some token (a
  *wrong verdict* otherwise, per schema).

Each engine runs in one warm worker process (imports, the vocabulary and each engine's tokenizer
object loaded before any clock starts), the parent sends it one schema at a time with the same token
ids for every engine (tokenised once, in the parent) and enforces a per-file wall-clock and memory
budget: a worker past either is killed, the file recorded as timed out or over memory, and a fresh
worker started. Engines:

- ``cfgzip``: the native engine through :func:`cfgzip_lab.matcher_for` with the disk cache off
  (every schema built from scratch, as a server meets a new schema), under a build budget of
  :data:`BUILD_SHARE` of ``--file-seconds`` (``GrammarCache(build_seconds=)``): a schema past it is
  refused with ``BuildBudgetError`` (its stage named) instead of timing out;
- ``xgrammar``: ``GrammarCompiler.compile_json_schema`` with the options cfgzip serves (any
  whitespace, strict): the same grammar as ``cfgzip``, so its masks are the referee: every step's
  mask is digested (outside the timed region) and ``cfgzip``'s compared with it (*mask
  disagreements*);
- ``xgrammar-compact``: the same with ``any_whitespace=False``, MaskBench's own XGrammar setting;
- ``cfgzip@base`` (``--baseline DIR``): ``cfgzip`` again, its worker importing ``cfgzip_lab`` from the
  checkout at DIR first (``git worktree add DIR <commit>``, the kernel built or copied there): before
  and after a change, side by side in one run, both compared with ``xgrammar``'s masks;
- ``llguidance``: ``LLMatcher`` over ``grammar_from_json_schema`` (optional: skipped with a note
  where llguidance is not installed). Its grammar differs (llguidance's JSON semantics), so its
  masks are not compared, only its verdicts.

Prints the machine, then one row per engine: files, refused, timed out, TTFM p50/p90/p99/max,
TBM p50/p99/p99.9/max, wrong verdicts (schemas), mask disagreements with ``xgrammar`` (steps and
schemas); writes one JSON per file and engine under ``--out`` and ``summary.json``, and, where
plotly is installed, ``--figure``: the TTFM and TBM distributions per engine on log axes. Never
asserts on time: ratios are read side by side from one run on one machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import select
import subprocess
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "corpora" / "maskbench" / "maskbench.jsonl.gz"
ENGINES = ("cfgzip", "xgrammar", "xgrammar-compact", "llguidance")
REFEREE = "xgrammar"
"""The engine whose masks the others with the same grammar are compared with."""
SAME_GRAMMAR_AS_REFEREE = ("cfgzip", "cfgzip@base")
BASELINE = "cfgzip@base"
"""``--baseline DIR``: the cfgzip engine again, imported from another checkout (before/after in one run)."""


# -- the data -------------------------------------------------------------------------------------


def split_of(name: str) -> str:
    """MaskBench's split of a file: ``Github_hard---o9836.json`` → ``Github_hard``,
    ``BFCL_simple_12.json`` → ``BFCL_simple``."""
    if "---" in name:
        return name.split("---", 1)[0]
    return name.rsplit("_", 1)[0] if name.startswith("BFCL_") else "other"


def read_maskbench(path: Path = DATA) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def stratified_sample(rows: Sequence[dict], n: int, seed: int) -> list[dict]:
    """``n`` rows (all of them for ``n <= 0``), each split represented in proportion to its size
    and by at least one file, seeded; the result keeps the data's order."""
    if n <= 0 or n >= len(rows):
        return list(rows)
    by_split: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_split[split_of(row["name"])].append(i)
    total = len(rows)
    # largest remainder: floors first, then the splits with the largest fractions
    exact = {s: n * len(ids) / total for s, ids in by_split.items()}
    quota = {s: int(q) for s, q in exact.items()}
    for s in sorted(exact, key=lambda s: (quota[s] - exact[s], s))[: n - sum(quota.values())]:
        quota[s] += 1
    # every split by at least one file when n allows, taken from the split most over its share
    for s in sorted(by_split):
        if quota[s] == 0 and n >= len(by_split):
            donor = max((d for d in quota if quota[d] > 1), key=lambda d: (quota[d] - exact[d], d))
            quota[donor] -= 1
            quota[s] += 1
    rng = random.Random(seed)
    chosen = sorted(i for s, ids in by_split.items() for i in rng.sample(ids, quota[s]))
    return [rows[i] for i in chosen]


def instance_text(data: Any) -> str:
    """An instance as MaskBench feeds it: compact separators, non-ASCII kept."""
    return json.dumps(data, indent=None, ensure_ascii=False)


# -- the workers ----------------------------------------------------------------------------------


class Worker:
    """One engine in a warm process; :meth:`run` sends it one file, with a time and memory budget."""

    def __init__(self, engine: str, tokenizer: str, pythonpath: Path | None = None) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self.pythonpath = pythonpath  # a checkout whose cfgzip_lab the worker imports first (--baseline)
        self.proc: subprocess.Popen | None = None
        self.ready: dict = {}

    def start(self) -> dict:
        env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        if self.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.pythonpath), env.get("PYTHONPATH")]))
        worker = "cfgzip" if self.engine == BASELINE else self.engine
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", worker, "--tokenizer", self.tokenizer],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.engine} worker did not start (exit {self.proc.wait()})")
        self.ready = json.loads(line)
        return self.ready

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run(self, job: dict, seconds: float, memory_bytes: float) -> dict:
        """The worker's result for ``job``, or ``{"status": "timeout" | "memory" | "crash"}``."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        import psutil

        proc = self.proc
        ps = psutil.Process(proc.pid)
        base = ps.memory_info().rss
        proc.stdin.write(json.dumps({**job, "build_seconds": round(BUILD_SHARE * seconds, 3)}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + seconds
        peak = base
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 0.05)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    self.stop()
                    return {"status": "crash"}
                result = json.loads(line)
                result["peak_rss_growth_mb"] = round((peak - base) / 2**20, 1)
                return result
            try:
                peak = max(peak, ps.memory_info().rss)
            except psutil.NoSuchProcess:
                self.stop()
                return {"status": "crash"}
            if peak - base > memory_bytes:
                self.stop()
                return {"status": "memory", "peak_rss_growth_mb": round((peak - base) / 2**20, 1)}
            if time.monotonic() > deadline:
                self.stop()
                return {"status": "timeout"}


def _digest(words: np.ndarray, tail: int) -> int:
    """crc32 of a packed vocabulary mask with the bits past the vocabulary cleared (XGrammar leaves
    them as they were, the native engine writes zeros)."""
    words = words.copy()
    words[-1] &= tail
    return zlib.crc32(words.tobytes())


BUILD_SHARE = 0.75
"""cfgzip's build budget, as a share of the per-file limit (the rest: the overshoot of its checks)."""


class _Cfgzip:
    def __init__(self, vocab) -> None:
        import cfgzip_lab as cz

        self.cz, self.vocab = cz, vocab
        self.cache = cz.GrammarCache(cache_dir=False)
        self.build_seconds: float | None = None

    def set_build_seconds(self, seconds: float | None) -> None:
        if seconds is None or seconds == self.build_seconds:
            return
        try:
            self.cache = self.cz.GrammarCache(cache_dir=False, build_seconds=seconds)
        except TypeError:  # a checkout from before build budgets (--baseline): its own default
            return
        self.build_seconds = seconds

    def compile(self, schema: str) -> None:
        self.matcher = self.cz.matcher_for(schema, self.vocab, kind="json_schema", cache=self.cache)
        engine = getattr(self.matcher, "engine", None)
        # where XGrammar itself serves the schema (a nested root, a class past 128 its lookahead misreads, a size budget)
        self.served_by = engine.unavailable if getattr(engine, "xgrammar_fallback", False) else None
        self.bitmask = self.matcher.allocate_bitmask(1)
        self.words = self.bitmask.numpy()[0]

    def reset(self) -> None:
        self.matcher.reset()

    def step(self, token: int) -> bool:
        self.matcher.fill_next_token_bitmask(self.bitmask)
        return bool(self.matcher.accept_token(token))


class _XGrammar:
    def __init__(self, vocab, any_whitespace: bool) -> None:
        import xgrammar as xgr

        from cfgzip_lab.engine import plain_tokenizer_info

        self.xgr, self.any_whitespace = xgr, any_whitespace
        self.compiler = xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab.vocab_size)
        self.words = self.bitmask.numpy()[0]

    def compile(self, schema: str) -> None:
        compiled = self.compiler.compile_json_schema(schema, any_whitespace=self.any_whitespace, strict_mode=True)
        self.matcher = self.xgr.GrammarMatcher(compiled)

    def reset(self) -> None:
        self.matcher.reset()

    def step(self, token: int) -> bool:
        self.matcher.fill_next_token_bitmask(self.bitmask)
        return bool(self.matcher.accept_token(token))


class _LLGuidanceTokens:
    """What ``llguidance.LLTokenizer`` reads from a tokenizer: our vocabulary's bytes and ids."""

    def __init__(self, vocab) -> None:
        from cfgzip_lab.vocab import NORMAL

        self.tokens = [bytes(b) for b in vocab.token_bytes]
        self.eos_token_id = int(vocab.stop_ids[0])
        self.bos_token_id = None
        self.special_token_ids = [int(i) for i in np.flatnonzero(np.asarray(vocab.kinds) != NORMAL)]
        self._encode = vocab.encoder
        self.is_tokenizer_wrapper = True

    def __call__(self, text: str | bytes) -> list[int]:
        return list(self._encode(text.decode("utf-8", "replace") if isinstance(text, bytes) else text))


class _LLGuidance:
    def __init__(self, vocab) -> None:
        import llguidance
        import llguidance.numpy

        self.llg = llguidance
        self.fill = llguidance.numpy.fill_next_token_bitmask
        self.tokenizer = llguidance.LLTokenizer(_LLGuidanceTokens(vocab), n_vocab=vocab.vocab_size)
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab.vocab_size)
        self.words = self.bitmask[0]

    def compile(self, schema: str) -> None:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        self.matcher = self.llg.LLMatcher(self.tokenizer, grammar)
        if self.matcher.is_error():
            raise ValueError(self.matcher.get_error())

    def reset(self) -> None:
        self.matcher.reset()

    def step(self, token: int) -> bool:
        self.fill(self.matcher, self.bitmask, 0)
        return bool(self.matcher.consume_token(token))


def _make_engine(name: str, vocab):
    if name == "cfgzip":
        return _Cfgzip(vocab)
    if name in ("xgrammar", "xgrammar-compact"):
        return _XGrammar(vocab, any_whitespace=name == "xgrammar")
    if name == "llguidance":
        return _LLGuidance(vocab)
    raise ValueError(f"unknown engine {name!r}: one of {', '.join(ENGINES)}")


def run_file(engine, job: dict, digests: bool, tail: int) -> dict:
    """One schema: TTFM, then every instance replayed token by token (MaskBench's loop)."""
    result: dict[str, Any] = {"name": job["name"], "status": "ok", "tbm_us": [], "verdicts": [], "digests": []}
    t0 = time.perf_counter_ns()
    try:
        engine.compile(job["schema"])
    except Exception as exc:  # a refused schema: the engine's own error, first line
        result.update(
            status="refused",
            error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}",
        )
        return result
    result["ttfm_us"] = (time.perf_counter_ns() - t0) / 1000
    served_by = getattr(engine, "served_by", None)
    if served_by:
        result["served_by_xgrammar"] = served_by[:300]
    tbm = result["tbm_us"]
    for test in job["tests"]:
        engine.reset()
        accepted, steps = True, []
        try:
            for token in test["tokens"]:
                t = time.perf_counter_ns()
                ok = engine.step(token)
                tbm.append((time.perf_counter_ns() - t) / 1000)
                if digests:
                    steps.append(_digest(engine.words, tail))
                if not ok:
                    accepted = False
                    break
        except Exception as exc:
            result.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}"[:300])
            accepted = False
        result["verdicts"].append(accepted)
        result["digests"].append(steps)
    result["wrong"] = sum(v != t["valid"] for v, t in zip(result["verdicts"], job["tests"]))
    return result


def worker_main(engine_name: str, tokenizer: str) -> int:
    import gc

    import cfgzip_lab as cz

    vocab = cz.load_vocab(tokenizer)
    try:
        engine = _make_engine(engine_name, vocab)
    except ImportError as exc:
        print(json.dumps({"ready": False, "error": f"{engine_name} is not installed here ({exc})"}), flush=True)
        return 0
    tail_bits = vocab.vocab_size % 32
    tail = np.array(-1 if tail_bits == 0 else (1 << tail_bits) - 1, dtype=np.int32)
    # Warm-up: tiny schemas through every path, so no first-use import lands in a measurement. The second
    # refers to its root ("$ref": "#"), which cfgzip serves through XGrammar itself: its first such schema
    # builds XGrammar's compiler over the whole vocabulary (xgr.TokenizerInfo of Llama-3: ~70 ms), once per
    # process, as the xgrammar worker builds its own before it is ready (Github_easy o58637 took 86.7 ms
    # against XGrammar's 13.5 in the 2,000-file run, ~75 of them that one-time construction).
    for schema in ('{"type": "integer"}', '{"type": "array", "items": {"$ref": "#"}}'):
        run_file(engine, {"name": "warm-up", "schema": schema, "tests": []}, False, tail)
    gc.collect()
    print(json.dumps({"ready": True, "engine": engine_name, "pid": os.getpid(), "cfgzip_lab": cz.__file__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if isinstance(engine, _Cfgzip):
            engine.set_build_seconds(job.get("build_seconds"))
        print(json.dumps(run_file(engine, job, job.get("digests", False), tail)), flush=True)
    return 0


# -- the summary ----------------------------------------------------------------------------------


@dataclass
class EngineSummary:
    engine: str
    files: int = 0
    refused: int = 0
    timed_out: int = 0
    over_memory: int = 0
    crashed: int = 0
    ttfm_us: list[float] = field(default_factory=list)
    tbm_us: list[float] = field(default_factory=list)
    wrong_schemas: int = 0
    disagree_steps: int = 0
    disagree_schemas: int = 0
    compared_steps: int = 0
    served_by_xgrammar: int = 0

    def row(self) -> dict:
        def q(values: list[float], p: float) -> float | None:
            return round(float(np.percentile(values, p)), 1) if values else None

        return {
            "engine": self.engine,
            "files": self.files,
            "refused": self.refused,
            "timed_out": self.timed_out,
            "over_memory": self.over_memory,
            "crashed": self.crashed,
            "ttfm_p50_ms": _ms(q(self.ttfm_us, 50)),
            "ttfm_p90_ms": _ms(q(self.ttfm_us, 90)),
            "ttfm_p99_ms": _ms(q(self.ttfm_us, 99)),
            "ttfm_max_ms": _ms(max(self.ttfm_us) if self.ttfm_us else None),
            "tbm_p50_us": q(self.tbm_us, 50),
            "tbm_p99_us": q(self.tbm_us, 99),
            "tbm_p99_9_us": q(self.tbm_us, 99.9),
            "tbm_max_us": round(max(self.tbm_us), 1) if self.tbm_us else None,
            "tokens": len(self.tbm_us),
            "wrong_verdict_schemas": self.wrong_schemas,
            "mask_disagreements": None if self.engine not in SAME_GRAMMAR_AS_REFEREE else self.disagree_steps,
            "disagreeing_schemas": None if self.engine not in SAME_GRAMMAR_AS_REFEREE else self.disagree_schemas,
            "compared_steps": None if self.engine not in SAME_GRAMMAR_AS_REFEREE else self.compared_steps,
            "served_by_xgrammar": self.served_by_xgrammar,
        }


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000, 2)


def summarize(results: dict[str, dict[str, dict]]) -> list[dict]:
    """Rows per engine from ``results[engine][file] = worker result``."""
    referee = results.get(REFEREE, {})
    rows = []
    for engine, files in results.items():
        s = EngineSummary(engine)
        for name, r in files.items():
            s.files += 1
            status = r.get("status")
            if status != "ok":
                s.refused += status == "refused"
                s.timed_out += status == "timeout"
                s.over_memory += status == "memory"
                s.crashed += status == "crash"
                continue
            s.ttfm_us.append(r["ttfm_us"])
            s.tbm_us.extend(r["tbm_us"])
            s.wrong_schemas += r.get("wrong", 0) > 0
            s.served_by_xgrammar += "served_by_xgrammar" in r
            other = referee.get(name)
            if engine in SAME_GRAMMAR_AS_REFEREE and other is not None and other.get("status") == "ok":
                differ = 0
                for mine, theirs in zip(r["digests"], other["digests"]):
                    shared = min(len(mine), len(theirs))
                    s.compared_steps += shared
                    differ += sum(a != b for a, b in zip(mine[:shared], theirs[:shared]))
                s.disagree_steps += differ
                s.disagree_schemas += differ > 0
        rows.append(s.row())
    return rows


def print_table(rows: list[dict], machine: dict) -> None:
    print(f"machine: {machine}")
    head = (
        "| engine | files | refused | timed out | TTFM p50 | p90 | p99 | max | TBM p50 | p99 | p99.9 | max "
        "| wrong verdicts | mask disagreements |"
    )
    print(head)
    print("|" + "---|" * 14)

    def cell(value: float | None, unit: str) -> str:
        return "–" if value is None else f"{value} {unit}"  # no file compiled, or no instance replayed

    for r in rows:
        dis = "-" if r["mask_disagreements"] is None else f"{r['mask_disagreements']} of {r['compared_steps']} steps"
        ttfm = " | ".join(cell(r[f"ttfm_{k}_ms"], "ms") for k in ("p50", "p90", "p99", "max"))
        tbm = " | ".join(cell(r[f"tbm_{k}_us"], "µs") for k in ("p50", "p99", "p99_9", "max"))
        print(
            f"| {r['engine']} | {r['files']} | {r['refused']} | {r['timed_out'] + r['over_memory'] + r['crashed']} "
            f"| {ttfm} | {tbm} | {r['wrong_verdict_schemas']} | {dis} |"
        )
    for r in rows:
        if r.get("served_by_xgrammar"):
            print(
                f"{r['engine']}: {r['served_by_xgrammar']} files served by XGrammar itself (a nested root, a class "
                "past 128 XGrammar's lookahead misreads, an empty language or a size budget: `served_by_xgrammar` in their JSON)"
            )


def figure(results: dict[str, dict[str, dict]], path: Path) -> Path | None:
    """The TTFM and TBM distributions per engine (log x), as one offline HTML file; None without plotly."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        print("(no figure: plotly is not installed; pip install 'cfgzip-lab[workbench]')")
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to first mask (ms)", "time between masks (µs)"))
    for engine, files in results.items():
        ok = [r for r in files.values() if r.get("status") == "ok"]
        ttfm = [r["ttfm_us"] / 1000 for r in ok]
        tbm = [t for r in ok for t in r["tbm_us"]]
        for col, values in ((1, ttfm), (2, tbm)):
            if values:
                xs = np.sort(np.asarray(values))
                ys = np.arange(1, xs.size + 1) / xs.size
                if xs.size > 5000:  # the ECDF's shape, not every sample
                    keep = np.unique(np.geomspace(1, xs.size, 5000).astype(int) - 1)
                    xs, ys = xs[keep], ys[keep]
                fig.add_trace(
                    go.Scatter(x=xs, y=ys, mode="lines", name=engine, legendgroup=engine, showlegend=col == 1),
                    row=1,
                    col=col,
                )
    fig.update_xaxes(type="log")
    fig.update_yaxes(title_text="fraction ≤ x", row=1, col=1)
    fig.update_layout(title="MaskBench on this machine", height=450, width=1100)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True)
    return path


# -- the parent -----------------------------------------------------------------------------------


def load_results(out: Path) -> dict[str, dict[str, dict]]:
    results: dict[str, dict[str, dict]] = {}
    for engine_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        results[engine_dir.name] = {f.stem: json.loads(f.read_text()) for f in sorted(engine_dir.glob("*.json"))}
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--engines", default="cfgzip,xgrammar,llguidance", help=f"comma-separated, of {', '.join(ENGINES)}")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--sample", type=int, default=0, metavar="N", help="a stratified sample of N files (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--names", nargs="+", default=None, help="only these files (MaskBench names)")
    ap.add_argument("--file-seconds", type=float, default=60.0, help="wall seconds per file and engine")
    ap.add_argument("--file-memory-gb", type=float, default=4.0, help="memory one file may add to a worker")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "maskbench")
    ap.add_argument("--figure", type=Path, default=None, help="default: OUT/maskbench.html")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--stop-at", default=None, metavar="HH:MM", help="start no file after this time (UTC)")
    ap.add_argument("--summarize", type=Path, default=None, metavar="OUT", help="print the table of an earlier run")
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"also run cfgzip from the checkout at DIR (e.g. a git worktree of an earlier commit, its kernel "
        f"built), as engine {BASELINE}: before and after side by side in one run",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.tokenizer)
    if args.summarize:
        results = load_results(args.summarize)
        machine = json.loads((args.summarize / "summary.json").read_text()).get("machine", {})
        print_table(summarize(results), machine)
        return 0

    import cfgzip_lab as cz
    from cfgzip_lab.bench import machine_info

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        ap.error(f"unknown engines {unknown}: choose from {', '.join(ENGINES)}")
    if "cfgzip" in engines and REFEREE not in engines:
        print(f"(no mask comparison: add {REFEREE} to --engines)")
    rows = read_maskbench(args.data)
    if args.names:
        wanted = set(args.names)
        rows = [r for r in rows if r["name"] in wanted or r["name"].removesuffix(".json") in wanted]
    rows = stratified_sample(rows, args.sample, args.seed)
    vocab = cz.load_vocab(args.tokenizer)
    jobs = [
        {
            "name": r["name"].removesuffix(".json"),
            "schema": json.dumps(r["schema"]),
            "tests": [
                {"valid": bool(t["valid"]), "tokens": list(vocab.encoder(instance_text(t["data"])))} for t in r["tests"]
            ],
            "digests": True,
        }
        for r in rows
    ]
    print(
        f"{len(jobs)} files, {sum(len(j['tests']) for j in jobs)} instances, engines {', '.join(engines)}", flush=True
    )
    if args.baseline is not None:
        engines.insert(engines.index("cfgzip") if "cfgzip" in engines else 0, BASELINE)
    workers = {}
    for e in engines:
        w = Worker(e, args.tokenizer, args.baseline.resolve() if e == BASELINE else None)
        ready = w.start()
        if not ready.get("ready"):
            print(f"(skipped {e}: {ready.get('error')})")
            w.stop()
            continue
        if e in SAME_GRAMMAR_AS_REFEREE:
            print(f"({e}: cfgzip_lab from {Path(ready['cfgzip_lab']).parent})")
        workers[e] = w
    results: dict[str, dict[str, dict]] = {e: {} for e in workers}
    for e in workers:
        (args.out / e).mkdir(parents=True, exist_ok=True)
    machine = {**machine_info(), "load": os.getloadavg()[0], "tokenizer": args.tokenizer}
    started = time.time()
    try:
        for i, job in enumerate(jobs):
            if args.stop_at and time.strftime("%H:%M", time.gmtime()) >= args.stop_at:
                print(f"stopping at {args.stop_at} UTC after {i} files")
                break
            for e, w in workers.items():
                r = w.run(job, args.file_seconds, args.file_memory_gb * 2**30)
                r.setdefault("name", job["name"])
                results[e][job["name"]] = r
                (args.out / e / f"{job['name']}.json").write_text(json.dumps(r))
            if (i + 1) % 25 == 0:
                print(f"  {i + 1}/{len(jobs)} files, {time.time() - started:.0f} s", flush=True)
    finally:
        for w in workers.values():
            w.stop()
    machine["load_after"] = os.getloadavg()[0]
    machine["wall_seconds"] = round(time.time() - started, 1)
    table = summarize(results)
    (args.out / "summary.json").write_text(
        json.dumps({"machine": machine, "args": sys.argv[1:], "rows": table}, indent=1)
    )
    print_table(table, machine)
    path = figure(results, args.figure or args.out / "maskbench.html")
    if path is not None:
        print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
