"""Exactness at scale: every grammar × every tokenizer × every engine, checked against plain XGrammar.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/sweep.py [--tokenizers llama3,qwen3,smollm2]
        [--engines compressed,native] [--target-steps 1000] [--max-seconds 60] [--walks 2] [--steps 64]
        [--max-doc-tokens 120] [--engine-memory-gb 4] [--workers 2] [--json sweep.json] [GRAMMAR ...]
    .venv/bin/python benchmarks/sweep.py --random-grammars 5000    # the random-grammar property, longer
    .venv/bin/python benchmarks/sweep.py --arbitrate sweep.json    # who is wrong at each first mismatch
    nice -n 10 .venv/bin/python benchmarks/sweep.py --corpora all --json docs/sweep.json   # the shared corpora
        [--sample N] [--items CORPUS/NAME ...] [--item-seconds 60] [--item-memory-gb 1.5] [--verify-seconds 10]
    .venv/bin/python benchmarks/sweep.py --corpus-table docs/sweep.json [--readme docs/reference/measurements.md]   # the coverage table

For each grammar (default: the 7 bundled ones and the 40 of ``../shared/grammars/third_party``)
and tokenizer, one job builds the displacement classes and runs :func:`cfgzip_lab.verify.verify_engines`
for each engine: rounds of seeded random walks driven by plain XGrammar (with rollbacks and
refused tokens) until ``--target-steps`` steps or ``--max-seconds`` of CPU (plain fills cost 1 ms on
small grammars and 50-500 ms on C-like ones), and, for the bundled grammars, their sample
documents replayed token by token; at every step the engine's expanded mask must equal plain
XGrammar's bit for bit, stop bits and termination included. Jobs run in parallel processes (``--workers``). Prints one row per
grammar × tokenizer × engine (steps checked, mismatching steps, seconds) and the totals, and
writes the same table as JSON (``--json``). Exit status 1 when any step mismatches or a job fails.

A mismatch is against plain XGrammar's token mask, which xgrammar 0.2.8 sometimes gets wrong
(recursion through an empty alternative: the mask refuses tokens its own ``accept_token``
takes). Each row's first mismatch is therefore arbitrated (:func:`arbitrate`): "xgrammar mask
contradicts its matcher" or "engine differs from xgrammar".

Engines are looked up by name in :data:`ENGINES`: ``compressed`` (XGrammar over the class
representatives) always; ``native`` (``cfgzip_lab.native``, masks from the displacements
without XGrammar) when that package is importable. A new engine is one more entry: a function
from the job's compiled objects to a factory of fresh matchers with the Engine interface.

Plain XGrammar fills cost 0.3-0.5 s each over the large vocabularies on the SMILES grammars,
so their jobs walk ``--slow-fraction`` of the steps (and never replay documents).

``--corpora`` checks the shared corpora instead (``../shared/corpora``: the JSON-Schema-Test-Suite,
XGrammar's own test grammars, the regressions; :mod:`corpora`), one tokenizer (the first of
``--tokenizers``, default Llama-3): each item in a forked child with a wall-clock and a memory
budget (:mod:`item_check`): XGrammar's verdict first, then ours stage by stage (front end, GNF,
classing, XGrammar's compiles, the native index) with times and peak memory, then both engines
verified against plain XGrammar (the instance replayed where there is one, then seeded walks). An
item past a budget is "over budget" with the stage it was in. The JSON keeps every item under
``corpora`` (other keys of an existing file stay), and ``--corpus-table`` prints the README's
coverage table from it (:mod:`corpus_report`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora, item_check, corpus_report beside this file
from corpus import REPO, all_grammars, grammar_name  # noqa: E402
from item_check import ENGINES as ITEM_ENGINES  # noqa: E402

DEFAULT_TOKENIZERS = ("llama3", "qwen3", "smollm2")
#: The sweep JSON's key holding one corpus sweep per XGrammar release (``"0.2.9"`` → its block);
#: ``corpora``, the key of sweeps made before releases were told apart, is still read (as its
#: machine's release).
BY_XGRAMMAR = "corpora_by_xgrammar"
_REEXEC_ENV = "CFGZIP_SWEEP_XGRAMMAR"  # set in a sweep re-executed under another release
SLOW_PARTS = ("SMILES",)  # path parts of grammars whose plain fills take ~0.4 s each


@dataclass
class JobContext:
    """What one grammar × tokenizer job has built, handed to an engine's factory."""

    compiled: Any  # cfgzip_lab.pipeline.CompiledGrammar
    vocab: Any  # cfgzip_lab.vocab.VocabTable
    classing: Any  # cfgzip_lab.classes.classing.ClassingResult
    engines: Any  # cfgzip_lab.engine.CompiledEngines (the plain oracle and the compressed engine)


def _compressed(ctx: JobContext) -> Callable[[], Any]:
    return ctx.engines.compressed


def _native(ctx: JobContext) -> Callable[[], Any]:
    from cfgzip_lab.native import build_native_engine

    engine = build_native_engine(ctx.compiled, ctx.vocab, ctx.classing.classes, classing=ctx.classing)
    return engine.matcher


#: Engine name → (module that must be importable, factory of a matcher factory).
ENGINES: dict[str, tuple[str, Callable[[JobContext], Callable[[], Any]]]] = {
    "compressed": ("cfgzip_lab.engine", _compressed),
    "native": ("cfgzip_lab.native", _native),
}


def present_engines() -> list[str]:
    """The engines whose module can be imported here, in :data:`ENGINES` order."""
    return [name for name, (module, _) in ENGINES.items() if importlib.util.find_spec(module) is not None]


@dataclass
class Job:
    grammar: str  # a path
    tokenizer: str
    engines: tuple[str, ...]
    walks: int
    steps: int
    max_doc_tokens: int | None
    seed: int
    target_steps: int
    max_seconds: float
    memory_gb: float


@dataclass
class Row:
    """One grammar × tokenizer × engine: what was checked and what differed."""

    grammar: str
    tokenizer: str
    engine: str
    steps: int = 0
    mismatches: int = 0
    walks: int = 0
    docs: int = 0
    rollbacks: int = 0
    rejections: int = 0
    stops: int = 0
    classes: int = 0
    seconds: float = 0.0
    setup_seconds: float = 0.0
    error: str | None = None
    first_mismatch: dict[str, Any] | None = field(default=None)
    first_mismatch_verdict: str | None = None  # see arbitrate()
    note: str | None = None  # the native engine: no index (why), or requests handed to the compressed engine


_VOCABS: dict[str, Any] = {}  # per worker process: each vocabulary loads once


class _AddressSpaceCap:
    """Within the block, the process may map at most ``gb`` more GB than it has now (RLIMIT_AS).

    An engine that grows without bound (the native engine's index build took 8.6 GB and was
    still growing on llama.cpp's java.gbnf with Llama-3) then fails with MemoryError, which
    becomes its row's error, instead of taking the machine's memory from everyone else.
    """

    def __init__(self, gb: float) -> None:
        self.gb = gb

    def __enter__(self) -> None:
        import resource

        self.before = resource.getrlimit(resource.RLIMIT_AS)
        if self.gb > 0:
            with open("/proc/self/status") as f:
                vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
            limit = vm + int(self.gb * 2**30)
            hard = self.before[1]
            resource.setrlimit(
                resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
            )

    def __exit__(self, *exc) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, self.before)


def run_job(job: Job) -> list[Row]:
    """Classes for one grammar and tokenizer, then every engine verified; errors become rows."""
    import torch

    from cfgzip_lab.bench import sample_docs
    from cfgzip_lab.bundled import bundled_dir
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    path = Path(job.grammar)
    name = grammar_name(path)
    rows: list[Row] = []
    t0 = time.perf_counter()
    torch.set_num_threads(1)  # one core per worker
    try:
        vocab = _VOCABS.get(job.tokenizer)
        if vocab is None:
            vocab = _VOCABS[job.tokenizer] = load_vocab(job.tokenizer)
        text = path.read_text(encoding="utf-8")
        compiled = compile_grammar(text, source=str(path))
        classing = build_classes(compiled, vocab)
        engines = compile_engines(text, vocab, classing.classes)
        engines.plain()  # compiles plain XGrammar once (seconds on large grammars): setup, not checking time
        ctx = JobContext(compiled, vocab, classing, engines)
        slow = any(part in path.parts for part in SLOW_PARTS)
        bundled = path.resolve().parent == bundled_dir().resolve()  # samples belong to the bundled grammars only
        docs = sample_docs(path) if bundled and not slow else []
    except Exception as exc:  # a job that cannot start is a row with its error, not a dead sweep
        return [
            Row(name, job.tokenizer, e, error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0)
            for e in job.engines
        ]
    for engine in job.engines:
        row = Row(name, job.tokenizer, engine, classes=classing.classes.num_classes)
        t1 = time.perf_counter()
        try:
            with _AddressSpaceCap(job.memory_gb):
                _check_engine(engine, ctx, job, row, docs)
        except MemoryError:
            row.error = f"MemoryError: the engine needed more than {job.memory_gb:g} GB more memory"
        except Exception as exc:
            row.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        row.seconds = round(time.perf_counter() - t1 - row.setup_seconds, 2)
        rows.append(row)
    return rows


def _check_engine(engine: str, ctx: JobContext, job: Job, row: Row, docs: list[str]) -> None:
    """One engine of a job: its set-up, then documents and rounds of walks (fills ``row``).

    The documents one by one, then rounds of ``walks`` walks (seeds seed, seed+1, ...) until
    the job has checked ``target_steps`` steps or used ``max_seconds`` of CPU: cheap grammars
    get many steps, expensive ones (plain fills of 50-500 ms) bounded time.
    """
    from cfgzip_lab.verify import verify_engines

    t0 = time.perf_counter()
    factory = ENGINES[engine][1](ctx)
    factory()  # the engine's own set-up (a native index, a compiled grammar) is not checking time
    row.setup_seconds = round(time.perf_counter() - t0, 2)
    c1 = time.process_time()
    calls = [dict(walks=0, docs=[doc]) for doc in docs]
    calls += [dict(walks=job.walks, seed=job.seed * 10_000 + r) for r in range(10_000)]
    for call in calls:
        report = verify_engines(
            ctx.engines, steps=job.steps, max_doc_tokens=job.max_doc_tokens, candidate=factory,
            candidate_name=engine, **call,
        )  # fmt: skip
        row.steps += report.steps_checked
        row.mismatches += report.mismatches
        row.walks, row.docs, row.rollbacks = (
            row.walks + report.walks,
            row.docs + report.docs,
            row.rollbacks + report.rollbacks,
        )
        row.rejections, row.stops = row.rejections + report.rejections_checked, row.stops + report.stops_reached
        row.first_mismatch = row.first_mismatch or report.first_mismatch
        if row.steps >= job.target_steps or time.process_time() - c1 >= job.max_seconds:
            break
    if row.first_mismatch is not None:
        row.first_mismatch_verdict = arbitrate(ctx.engines, row.first_mismatch)
    owner = getattr(factory, "__self__", None)  # the native engine behind engine.matcher
    unavailable, fallbacks = getattr(owner, "unavailable", None), getattr(owner, "fallbacks", 0)
    if unavailable:
        row.note = f"no native index, all {fallbacks} requests on the compressed engine: {unavailable}"
    elif fallbacks:
        row.note = f"{fallbacks} requests past the state budget, on the compressed engine"


def arbitrate(engines: Any, mismatch: dict[str, Any]) -> str:
    """Who is wrong at a mask mismatch, where XGrammar can be asked twice.

    XGrammar 0.2.8's token mask can contradict its own ``accept_token`` (recursion through an
    empty alternative, see ``tests/test_random_grammars.py``). Replays the mismatch's prefix in
    plain XGrammar and asks ``accept_token`` about each token listed on one side only: when it
    answers against XGrammar's own mask, the mask is wrong ("xgrammar mask contradicts its
    matcher"); otherwise the engine under test is ("engine differs from xgrammar").
    """
    if mismatch.get("check") != "mask":
        return f"not a mask mismatch ({mismatch.get('check')}): engine differs from xgrammar"
    listed = [(t["id"], False) for t in mismatch.get("compressed_only", [])] + [
        (t["id"], True) for t in mismatch.get("plain_only", [])
    ]
    contradictions = 0
    for token, plain_mask_allows in listed:
        matcher = engines.plain()
        for t in mismatch["prefix_ids"]:
            matcher.accept_token(int(t))
        if matcher.accept_token(int(token)) != plain_mask_allows:
            contradictions += 1
    if listed and contradictions == len(listed):
        return "xgrammar mask contradicts its matcher"
    return "engine differs from xgrammar" + (
        f" ({contradictions}/{len(listed)} contradictions)" if contradictions else ""
    )


def _print_row(row: Row) -> None:
    status = "ERROR " + row.error.splitlines()[0] if row.error else ("ok" if row.mismatches == 0 else "MISMATCH")
    if row.first_mismatch_verdict:
        status += f" (first: {row.first_mismatch_verdict})"
    if row.note:
        status += f" [{row.note}]"
    print(
        f"{row.grammar:<42} {row.tokenizer:<8} {row.engine:<10} {row.classes:>6} {row.steps:>7} "
        f"{row.mismatches:>6} {row.seconds:>8.1f}  {status}",
        flush=True,
    )


def run_random_grammars(examples: int) -> int:
    """The random-grammar property test of the test suite with ``examples`` examples."""
    env = {**os.environ, "CFGZIP_RANDOM_GRAMMAR_EXAMPLES": str(examples), "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        str(REPO / "tests" / "test_random_grammars.py"),
    ]
    return subprocess.call(cmd, cwd=REPO, env=env)


def arbitrate_file(path: Path) -> int:
    """Add :func:`arbitrate`'s verdict to every mismatching row of a sweep's JSON that lacks one."""
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    table = json.loads(path.read_text())
    paths = {grammar_name(p): p for p in all_grammars()}
    for row in table["rows"]:
        if row.get("first_mismatch") and not row.get("first_mismatch_verdict"):
            text = paths[row["grammar"]].read_text(encoding="utf-8")
            vocab = _VOCABS.get(row["tokenizer"]) or _VOCABS.setdefault(row["tokenizer"], load_vocab(row["tokenizer"]))
            classes = build_classes(compile_grammar(text), vocab).classes
            row["first_mismatch_verdict"] = arbitrate(compile_engines(text, vocab, classes), row["first_mismatch"])
            print(
                f"{row['grammar']} {row['tokenizer']} {row['engine']}: {row['mismatches']} mismatching steps; "
                f"first: {row['first_mismatch_verdict']}",
                flush=True,
            )
    path.write_text(json.dumps(table, indent=1, default=str))
    return 0


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _compact(value: Any) -> Any:
    """Without the null and empty fields (an item's dataclass defaults fill them back in)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def dump_sweep_json(table: dict[str, Any]) -> str:
    """The sweep's JSON, indented, with each corpus item on one line (944 lines, not 78,000: diffs
    between two sweeps stay readable), under ``corpora`` and each release of ``corpora_by_xgrammar``."""
    markers: dict[str, list[dict[str, Any]]] = {}

    def marked(block: dict[str, Any]) -> dict[str, Any]:
        if "items" not in block:
            return block
        marker = f"@@corpus items {len(markers)}@@"
        markers[marker] = block["items"]
        return {**block, "items": marker}

    shown = dict(table)
    if isinstance(table.get("corpora"), dict):
        shown["corpora"] = marked(table["corpora"])
    if isinstance(table.get(BY_XGRAMMAR), dict):
        shown[BY_XGRAMMAR] = {release: marked(block) for release, block in table[BY_XGRAMMAR].items()}
    text = json.dumps(shown, indent=1, default=str)
    for marker, items in markers.items():
        lines = ",\n".join("  " + json.dumps(_compact(item), ensure_ascii=False, default=str) for item in items)
        text = text.replace(json.dumps(marker), "[\n" + lines + "\n ]")
    return text


def _git_commit(*paths: str) -> str:
    """HEAD's short hash, or the last commit that touched ``paths`` (``cfgzip_lab``: the code swept)."""
    try:
        cmd = ["git", "-C", str(REPO), "log", "-1", "--format=%h", "--", *paths]
        out = subprocess.run(cmd, capture_output=True, text=True)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def _print_item(result: Any) -> None:
    """One line per corpus item: verdict, stage, classes, steps and mismatches, times, memory, why."""
    from corpus_report import build_cpu_seconds, grown_mb

    d = result.to_dict()
    steps = "/".join(str(c["steps"]) for c in d["checks"] if c["engine"] in ITEM_ENGINES) or "-"
    mism = "/".join(str(c["mismatches"]) for c in d["checks"] if c["engine"] in ITEM_ENGINES) or "-"
    verdict = d["verdict"] if d["xgrammar"] == "accepts" else f"XGrammar {d['xgrammar']}"
    why = d["reason"] or ""
    if d["verdict"] in ("over budget", "failed", "crashed"):
        why = d["error"].splitlines()[0] if d["error"] else why
    notes = [c["engine"] + ": " + c["note"].split(":")[0] for c in d["checks"] if c.get("note")]
    notes += [f"{c['engine']} error: {c['error'].splitlines()[0]}" for c in d["checks"] if c.get("error")]
    if any(c["mismatches"] for c in d["checks"]):
        why = "MISMATCH " + why
    print(
        f"{result.corpus + '/' + result.name:<62} {verdict:<12} {d['stage'] or '':<16} "
        f"{d['stats'].get('classes', ''):>6} {steps:>9} {mism:>7} {build_cpu_seconds(d):>7.2f} "
        f"{grown_mb(d):>7.0f}  {why} {' '.join(f'[{n}]' for n in notes)}".rstrip(),
        flush=True,
    )


def run_corpora(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--corpora``: every item (or a seeded sample) of the shared corpora, each bounded in a child."""
    import datetime

    import corpora
    import item_check
    from corpus_report import summarize_all

    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.xgrammar_version import installed

    names = list(corpora.NAMES) if args.corpora in (None, "all") else args.corpora.split(",")
    unknown = [n for n in names if n not in corpora.ALL_NAMES]
    if unknown:
        print(f"unknown corpora {unknown}; known: {', '.join(corpora.ALL_NAMES)}", file=sys.stderr)
        return 2
    release = installed()
    if args.items:
        try:
            items = [corpora.find_item(spec) for spec in args.items]
        except KeyError as exc:
            print(f"no corpus item {exc}", file=sys.stderr)
            return 2
    else:
        per_corpus = []
        for name in names:
            found = corpora.corpus_items(name)
            if args.sample:  # MaskBench by split, in proportion; the others uniformly
                sample = corpora.stratified_sample if name == corpora.MASKBENCH else corpora.seeded_sample
                found = sample(found, args.sample, args.seed)
            per_corpus.append(corpora.seeded_order(found, args.seed) if args.shuffle else found)
        # shuffled: the corpora interleaved in proportion, so a run cut short has sampled each
        items = corpora.interleaved(per_corpus) if args.shuffle else [item for part in per_corpus for item in part]
    sizes = {name: len(corpora.corpus_items(name)) for name in {item.corpus for item in items}}
    if not items:
        print(f"no corpus items found under {corpora.CORPORA}", file=sys.stderr)
        return 2
    engines = tuple(args.engines.split(",")) if args.engines else tuple(present_engines())
    limits = item_check.Limits(
        build_seconds=args.item_seconds,
        verify_seconds=args.verify_seconds,
        memory_gb=args.item_memory_gb,
        walks=args.walks,
        steps=args.steps,
        target_steps=200 if args.target_steps is None else args.target_steps,
        max_doc_tokens=(400 if args.max_doc_tokens is None else args.max_doc_tokens) or None,
        seed=args.seed,
        engines=tuple(e for e in engines if e in item_check.ENGINES),
    )
    tokenizer = args.tokenizers.split(",")[0] if args.tokenizers else "llama3"
    done: dict[str, dict[str, Any]] = {}  # results kept from --checkpoint (same cfgzip_lab commit and XGrammar)
    earlier_wall = 0.0  # the wall time of the runs that made them
    package_commit = _git_commit("cfgzip_lab")
    if args.checkpoint and args.checkpoint.exists():
        for line in args.checkpoint.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                made = d.get("run", d)  # an item's line, or a run's end
                same = (made.get("package_commit"), made.get("xgrammar_release", "0.2.8")) == (package_commit, release)
                if "run" in d:  # a run's end: its wall time counts in the sweep's
                    earlier_wall += d["run"]["wall_seconds"] if same else 0.0
                elif same:
                    for key in ("package_commit", "xgrammar_release"):
                        d.pop(key, None)
                    done[f"{d['corpus']}/{d['name']}"] = d
        print(f"{len(done)} items already done in {args.checkpoint} (cfgzip_lab {package_commit}, XGrammar {release})")
    todo = [item for item in items if item.id not in done]
    stop_at = _deadline_of(args.stop_at) if args.stop_at else None
    t0 = time.perf_counter()
    item_check.prepare(tokenizer)
    print(
        f"XGrammar {release}: {len(items)} corpus items x {tokenizer} x {', '.join(limits.engines)} on "
        f"{args.workers} workers; per item "
        f"{limits.build_seconds:g} s wall and {limits.memory_gb:g} GB for our stages, then up to "
        f"{limits.target_steps} steps or {limits.verify_seconds:g} s CPU per engine (instance up to "
        f"{limits.max_doc_tokens} tokens, rounds of {limits.walks} walks x {limits.steps} steps)"
    )
    print(f"{'item':<62} {'verdict':<12} {'stage':<16} {'K':>6} {'steps':>9} {'mism.':>7} {'cpu s':>7} {'+MB':>7}  why")

    def on_result(result: Any) -> None:
        _print_item(result)
        if args.checkpoint:
            with args.checkpoint.open("a") as f:
                f.write(
                    json.dumps({**result.to_dict(), "package_commit": package_commit, "xgrammar_release": release})
                    + "\n"
                )

    def stop() -> bool:
        return stop_at is not None and time.time() >= stop_at

    results = item_check.run_items(todo, limits, workers=args.workers, on_result=on_result, stop=stop)
    wall = time.perf_counter() - t0
    if args.checkpoint:
        with args.checkpoint.open("a") as f:
            run = {"wall_seconds": round(wall, 1), "package_commit": package_commit, "xgrammar_release": release}
            f.write(json.dumps({"run": run}) + "\n")
    wall += earlier_wall
    order = {item.id: i for i, item in enumerate(items)}
    dicts = [r.to_dict() for r in results] + [d for i, d in done.items() if i in order]
    dicts.sort(key=lambda d: order[f"{d['corpus']}/{d['name']}"])
    swept = {f"{d['corpus']}/{d['name']}" for d in dicts}
    not_run = [item.id for item in items if item.id not in swept]
    if not_run:
        print(f"stopped at {args.stop_at}: {len(not_run)} items not run")
    coverage = {
        corpus: {
            "swept": sum(d["corpus"] == corpus for d in dicts),
            "of": sizes[corpus],
            "sample": (
                "all"
                if sum(d["corpus"] == corpus for d in dicts) == sizes[corpus]
                else f"seeded (seed {args.seed}" + (", cut short at the deadline)" if not_run else ")")
            ),
        }
        for corpus in dict.fromkeys(item.corpus for item in items)
    }
    summary = summarize_all(dicts)
    for corpus, s in summary.items():
        s["corpus_items"] = sizes[corpus]
    for corpus, s in summary.items():
        print(
            f"{corpus}: {s['items']} items, XGrammar accepts {s['xgrammar_accepts']}; served {s['served']}, "
            f"refused {s['refused']}, over budget {s['over_budget']}, failed {s['failed']}, crashed {s['crashed']}; "
            f"compressed {s['compressed']['steps']} steps / {s['compressed']['mismatches']} mismatching, "
            f"native {s['native']['steps']} / {s['native']['mismatches']}"
        )
        for reason, n in s["refusals"].items():
            print(f"    refused {n:>4}: {reason}")
        for stage, n in s["over_budget_stages"].items():
            print(f"    over budget {n:>4}: {stage}")
    print(f"{len(results)} items in {wall:.0f} s wall")
    if args.json:
        run = {
            "command": "benchmarks/sweep.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": datetime.date.today().isoformat(),
            "commit": _git_commit(),
            "package_commit": package_commit,
            "settings": {"tokenizer": tokenizer, "workers": args.workers, **asdict(limits)},
            "machine": machine_info(),
            "wall_seconds": round(wall, 1),
            "load": _load_of(dicts),
        }
        table = _read_json(args.json)
        by_release = table.setdefault(BY_XGRAMMAR, {})
        by_release[release] = merge_corpus_run(by_release.get(release), run, coverage, not_run, dicts)
        args.json.write_text(dump_sweep_json(table))
        print(f"wrote {args.json} ({BY_XGRAMMAR}[{release!r}])")
    bad = sum(s["compressed"]["mismatches"] + s["native"]["mismatches"] for s in summary.values())
    bad += sum(s["failed"] + s["crashed"] + s["over_budget"] for s in summary.values())
    return 0 if bad == 0 else 1


def merge_corpus_run(
    block: dict[str, Any] | None,
    run: dict[str, Any],
    coverage: dict[str, dict[str, Any]],
    not_run: list[str],
    items: list[dict[str, Any]],
) -> dict[str, Any]:
    """One release's corpus sweep with a new run's corpora in it: the run's corpora replace those
    of earlier runs (items, coverage, the run that made them), the others stay.

    ``--corpora all`` then ``--corpora maskbench --sample 1000`` thus leave one block holding all
    four corpora. The run's fields (command, settings, wall time...) are also the block's own,
    as a block made by one run has them; ``runs`` names the run behind each corpus.
    """
    block = dict(block or {})
    swept = set(coverage)
    kept = [d for d in block.get("items", []) if d["corpus"] not in swept]
    runs = {c: r for c, r in block.get("runs", {}).items() if c not in swept}
    runs.update({c: run for c in coverage})
    merged_coverage = {c: v for c, v in block.get("coverage", {}).items() if c not in swept} | coverage
    summary = resummarize({"items": kept + items, "summary": block.get("summary", {})})["summary"]
    for corpus in summary:
        if corpus in coverage:
            summary[corpus]["corpus_items"] = coverage[corpus]["of"]
    earlier_not_run = [i for i in block.get("not_run", []) if i.split("/", 1)[0] not in swept]
    return {
        **run,
        "runs": runs,
        "coverage": merged_coverage,
        "not_run": earlier_not_run + not_run,
        "summary": summary,
        "items": kept + items,
    }


def corpus_blocks(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Release → its corpus sweep, oldest release first: ``corpora_by_xgrammar``, and a sweep JSON's
    older ``corpora`` key as the release its machine ran (where no newer block has that release)."""
    from cfgzip_lab.xgrammar_version import parse

    blocks: dict[str, dict[str, Any]] = {}
    if isinstance(table.get("corpora"), dict) and "items" in table["corpora"]:
        blocks[table["corpora"].get("machine", {}).get("xgrammar") or "0.2.8"] = table["corpora"]
    blocks.update(table.get(BY_XGRAMMAR) or {})
    return dict(sorted(blocks.items(), key=lambda kv: parse(kv[0])))


def corpus_table_text(table: dict[str, Any]) -> str:
    """The README's coverage text of a sweep's JSON: one table per XGrammar release, each under a
    line naming it (a JSON with only an older ``corpora`` key: its one table, as before)."""
    from corpus_report import coverage_table

    blocks = corpus_blocks(table)
    if BY_XGRAMMAR not in table:
        return "\n\n".join(coverage_table(resummarize(b)) for b in blocks.values())
    return "\n\n".join(
        f"**XGrammar {release}**\n\n{coverage_table(resummarize(block))}" for release, block in blocks.items()
    )


def interpreter_for(release: str) -> Path | None:
    """The Python that runs this checkout under XGrammar ``release``: the overlay venv
    ``.venv/overlays/xgrammar-R`` (``scripts/setup.sh --test`` makes one per older supported
    release), or ``.venv`` itself where it holds that release (the newest); None when neither has it."""
    venv = REPO / ".venv"
    overlay = venv / "overlays" / f"xgrammar-{release}" / "bin" / "python"
    if overlay.exists():
        return overlay
    if any(venv.glob(f"lib/python*/site-packages/xgrammar-{release}.dist-info")):
        return venv / "bin" / "python"
    return None


def run_under_release(release: str, argv: list[str]) -> int | None:
    """``--xgrammar-version R``: None when this interpreter's XGrammar is R already (the sweep goes
    on here); otherwise the sweep re-executed by R's interpreter (:func:`interpreter_for`), its
    exit status, or 2 with one message when no interpreter here has R."""
    from cfgzip_lab.xgrammar_version import SUPPORTED, installed, parse

    if parse(installed()) == parse(release):
        return None
    python = interpreter_for(release)
    if python is None or os.environ.get(_REEXEC_ENV) == release:
        print(
            f"--xgrammar-version {release}: no interpreter here runs XGrammar {release} (this one has "
            f"{installed()}; looked for .venv/overlays/xgrammar-{release}/bin/python and .venv's own). "
            f"`bash scripts/setup.sh --test` makes an overlay for each supported release ({', '.join(SUPPORTED)}).",
            file=sys.stderr,
        )
        return 2
    print(f"XGrammar {release}: re-running the sweep with {python.relative_to(REPO)}", flush=True)
    env = {**os.environ, _REEXEC_ENV: release}
    return subprocess.call([str(python), str(Path(__file__).resolve()), *argv], env=env)


def _deadline_of(text: str) -> float:
    """``--stop-at HH:MM`` (UTC, today) as a Unix time."""
    import datetime

    hour, minute = (int(x) for x in text.split(":"))
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()


def _load_of(items: list[dict[str, Any]]) -> dict[str, float]:
    """The 1-minute load average as the items ended: what the wall times were measured under."""
    loads = sorted(d["load"] for d in items if d.get("load") is not None)
    if not loads:
        return {}
    return {"min": loads[0], "median": loads[len(loads) // 2], "max": loads[-1]}


def resummarize(corpora: dict[str, Any]) -> dict[str, Any]:
    """The summary recomputed from the items (with today's grouping of refusal reasons), so a
    table made from an older sweep's JSON reads like a new one."""
    from corpus_report import summarize_all
    from item_check import ItemResult, reason_of

    items = []
    for d in corpora["items"]:
        item = ItemResult.from_dict(d).to_dict()
        if item["verdict"] == "refused" and item["reason"] and item["error"]:
            item["reason"] = reason_of(item["reason"].split(":", 1)[0], item["error"])
        items.append(item)
    summary = summarize_all(items)
    for corpus, s in summary.items():
        if corpus in corpora.get("summary", {}) and "corpus_items" in corpora["summary"][corpus]:
            s["corpus_items"] = corpora["summary"][corpus]["corpus_items"]
    return {**corpora, "summary": summary}


def print_corpus_table(path: Path, readme: Path | None) -> int:
    """``--corpus-table``: the coverage table from a sweep's JSON, printed (and written into README)."""
    from corpus_report import update_readme

    table = _read_json(path)
    if not corpus_blocks(table):
        print(f"{path} has no corpus sweep (run --corpora ... --json {path})", file=sys.stderr)
        return 2
    text = corpus_table_text(table)
    print(text)
    if readme is not None and not update_readme(readme, text):
        print(f"{readme} has no coverage markers", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*", help="grammar files or bundled names (default: all 47)")
    ap.add_argument(
        "--tokenizers", default=None, help=f"default {','.join(DEFAULT_TOKENIZERS)}; corpora: the first only (llama3)"
    )
    ap.add_argument(
        "--engines",
        default=None,
        help=f"engines to check, by name (default: every one present; known: {', '.join(ENGINES)})",
    )
    ap.add_argument(
        "--target-steps",
        type=int,
        default=None,
        help="steps to check per grammar × tokenizer × engine (1000; corpora: 200)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="...unless it has used this many CPU seconds (process time: the same on a busy machine; "
        "corpora: --verify-seconds)",
    )
    ap.add_argument("--walks", type=int, default=2, help="random walks per round (rounds repeat up to the target)")
    ap.add_argument("--steps", type=int, default=64, help="steps per walk (a walk may stop earlier)")
    ap.add_argument(
        "--max-doc-tokens",
        type=int,
        default=None,
        help="tokens replayed per sample document or instance (120; corpora: 400; 0: all)",
    )
    ap.add_argument(
        "--slow-fraction", type=float, default=0.25, help="share of walks and steps for the SMILES grammars"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--engine-memory-gb",
        type=float,
        default=4.0,
        help="more memory each engine may map in a worker before its row fails with MemoryError (0: no cap)",
    )
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--json", type=Path, default=None, help="write the table and totals here")
    ap.add_argument(
        "--random-grammars",
        type=int,
        default=0,
        metavar="N",
        help="instead: run the random-grammar property test with N examples",
    )
    ap.add_argument(
        "--arbitrate",
        type=Path,
        default=None,
        metavar="JSON",
        help="instead: add arbitrate()'s verdict to the mismatching rows of a sweep's JSON",
    )
    ap.add_argument(
        "--xgrammar-version", default=None, metavar="R", help="run under XGrammar release R: re-executed by "
        ".venv/overlays/xgrammar-R/bin/python (or .venv's, which holds the newest); the JSON keeps each "
        f"release's corpus sweep apart ({BY_XGRAMMAR}[R])"
    )  # fmt: skip
    c = ap.add_argument_group("the shared corpora (../shared/corpora)")
    c.add_argument(
        "--corpora", default=None, metavar="NAMES", help="check these corpora instead: 'all' or some of "
        "json-schema-test-suite,xgrammar-tests,regressions,maskbench (not in 'all': 10,282 schemas, sample it)"
    )  # fmt: skip
    c.add_argument("--items", nargs="+", default=None, metavar="CORPUS/NAME", help="only these items")
    c.add_argument(
        "--sample", type=int, default=0, metavar="N", help="a seeded sample of N items per corpus (MaskBench: "
        "stratified by split)"
    )  # fmt: skip
    c.add_argument("--item-seconds", type=float, default=60.0, help="wall seconds for our stages of one item")
    c.add_argument("--item-memory-gb", type=float, default=1.5, help="resident memory one item may grow by (0: no cap)")
    c.add_argument("--verify-seconds", type=float, default=10.0, help="CPU seconds of walks per engine and item")
    c.add_argument(
        "--shuffle", action="store_true", help="each corpus's items in a seeded order, the corpora interleaved in "
        "proportion (a run cut short at --stop-at has then swept a seeded sample of each)"
    )  # fmt: skip
    c.add_argument("--stop-at", default=None, metavar="HH:MM", help="start no item after this time (UTC)")
    c.add_argument(
        "--checkpoint", type=Path, default=None, metavar="JSONL", help="append each item's result here as it ends; "
        "items already there (same cfgzip_lab commit) are not run again, and the runs' wall times add up"
    )  # fmt: skip
    c.add_argument(
        "--corpus-table",
        type=Path,
        default=None,
        metavar="JSON",
        help="instead: print the coverage table of a sweep's JSON",
    )
    c.add_argument("--readme", type=Path, default=None, help="with --corpus-table: write it into this README too")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.xgrammar_version:
        code = run_under_release(args.xgrammar_version, list(argv if argv is not None else sys.argv[1:]))
        if code is not None:
            return code
    if args.arbitrate:
        return arbitrate_file(args.arbitrate)
    if args.random_grammars:
        return run_random_grammars(args.random_grammars)
    if args.corpus_table:
        return print_corpus_table(args.corpus_table, args.readme)
    if args.corpora or args.items:
        return run_corpora(args, argv)
    args.target_steps = 1000 if args.target_steps is None else args.target_steps
    args.tokenizers = args.tokenizers or ",".join(DEFAULT_TOKENIZERS)
    args.max_doc_tokens = 120 if args.max_doc_tokens is None else args.max_doc_tokens

    from cfgzip_lab.pipeline import resolve_grammar

    present = present_engines()
    engines = tuple(args.engines.split(",")) if args.engines else tuple(present)
    unknown = [e for e in engines if e not in ENGINES]
    missing = [e for e in engines if e in ENGINES and e not in present]
    if unknown or missing:
        print(
            f"unknown engines {unknown} / not present here {missing}; known: {list(ENGINES)}, present: {present}",
            file=sys.stderr,
        )
        return 2
    try:
        paths = [resolve_grammar(g) for g in args.grammars] or all_grammars()
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    tokenizers = args.tokenizers.split(",")
    jobs = []
    for tokenizer in tokenizers:
        for path in paths:
            slow = any(part in path.parts for part in SLOW_PARTS)
            f = args.slow_fraction if slow else 1.0
            jobs.append(
                Job(
                    str(path),
                    tokenizer,
                    engines,
                    max(1, math.ceil(args.walks * f)),
                    max(1, math.ceil(args.steps * f)),
                    args.max_doc_tokens or None,
                    args.seed,
                    args.target_steps,
                    args.max_seconds * f,
                    args.engine_memory_gb,
                )
            )
    print(
        f"{len(paths)} grammars x {len(tokenizers)} tokenizers x engines {', '.join(engines)}: {len(jobs)} jobs on "
        f"{args.workers} workers; rounds of {args.walks} walks x {args.steps} steps up to {args.target_steps} steps "
        f"or {args.max_seconds:.0f} s per engine, documents up to {args.max_doc_tokens} tokens"
    )
    print(f"{'grammar':<42} {'tok':<8} {'engine':<10} {'K':>6} {'steps':>7} {'mism.':>6} {'seconds':>8}")
    t0 = time.perf_counter()
    rows: list[Row] = []
    if args.workers > 1:
        import multiprocessing as mp

        # fork: workers inherit the imports; each loads a vocabulary once and keeps it
        with mp.get_context("fork").Pool(args.workers, maxtasksperchild=None) as pool:
            for result in pool.imap_unordered(run_job, jobs):
                for row in result:
                    _print_row(row)
                rows += result
    else:
        for job in jobs:
            result = run_job(job)
            for row in result:
                _print_row(row)
            rows += result
    wall = time.perf_counter() - t0
    totals: dict[str, Any] = {
        "steps": sum(r.steps for r in rows),
        "mismatches": sum(r.mismatches for r in rows),
        "errors": sum(r.error is not None for r in rows),
        "rows": len(rows),
        "wall_seconds": round(wall, 1),
    }
    totals["per_engine"] = {
        e: {
            "steps": sum(r.steps for r in rows if r.engine == e),
            "mismatches": sum(r.mismatches for r in rows if r.engine == e),
        }
        for e in engines
    }
    print(
        f"total: {totals['steps']} steps, {totals['mismatches']} mismatching, {totals['errors']} errors, "
        f"{len(rows)} rows, {wall:.0f} s wall"
    )
    for e, t in totals["per_engine"].items():
        print(f"  {e}: {t['steps']} steps, {t['mismatches']} mismatching")
    if args.json:
        from cfgzip_lab.bench import machine_info

        kept = _read_json(args.json)
        args.json.write_text(
            json.dumps(
                {
                    **{key: kept[key] for key in ("corpora", BY_XGRAMMAR) if key in kept},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "engines": list(engines),
                    "machine": machine_info(),
                    "totals": totals,
                    "rows": sorted(
                        (asdict(r) for r in rows), key=lambda r: (r["grammar"], r["tokenizer"], r["engine"])
                    ),
                },
                indent=1,
                default=str,
            )
        )
        print(f"wrote {args.json}")
    return 0 if totals["mismatches"] == 0 and totals["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
