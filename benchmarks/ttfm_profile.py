"""Where a new JSON Schema's time to first mask goes, stage by stage (issue 33).

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/ttfm_profile.py --from-run artifacts/maskbench \\
        [--quantiles 50 90 99] [--repeat 5] [--tokenizer llama3]
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/ttfm_profile.py --names Github_easy---o66187 [...]

``--from-run`` reads a ``benchmarks/maskbench.py`` run's ``cfgzip`` files and picks, per quantile, the
file whose TTFM is nearest it (the median file, the p99 file...); ``--names`` takes MaskBench names.
Each file is built ``--repeat`` times from scratch in this process (the collector paused, as
``matcher_for`` does), the stages of ``GrammarCache._build`` timed one by one, and the median per
stage printed:

- ``convert``: XGrammar's JSON Schema → EBNF conversion (``sources.to_ebnf``);
- ``parse``: our EBNF parser over that text (0 where the byte CFG comes from XGrammar's grammar object,
  ``grammar/serialized.py``, and the text is parsed only when something asks for the syntax tree);
- ``lower``: the byte CFG (the lowering, or reading XGrammar's grammar object) and the productive /
  dead-end checks;
- ``gnf``: the Greibach normal form, with its store (``compiled`` or ``python``: token atoms keep the
  Python word store, and so do counted repetitions whose packed symbols do not fit the compiled one);
- ``classing``: displacement classes over the whole vocabulary (``build_classes``);
- ``index``: the σ_in trie (``build_index_or_reason``) and its arrays form;
- ``engine``: the kept grammar, the native engine and a matcher;
- ``first fill``: the first ``fill_next_token_bitmask``;

then ``sum`` and ``matcher_for``: the same schema through ``matcher_for`` with the disk cache off and its
first fill, timed whole (what ``maskbench.py`` calls TTFM, plus the fill). Prints the machine and load;
never asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402 (the benchmark's data reader, beside this file)

STAGES = ("convert", "parse", "lower", "gnf", "classing", "index", "engine", "first fill")


def pick_from_run(run: Path, quantiles: Sequence[float]) -> list[tuple[str, float]]:
    """``(name, ttfm ms)`` of the cfgzip file nearest each TTFM quantile of a maskbench run."""
    rows = []
    for f in sorted((run / "cfgzip").glob("*.json")):
        r = json.loads(f.read_text())
        if r.get("status") == "ok":
            rows.append((f.stem, r["ttfm_us"] / 1000))
    if not rows:
        raise SystemExit(f"no cfgzip results under {run}")
    ttfm = np.array([t for _, t in rows])
    picked = []
    for q in quantiles:
        want = float(np.percentile(ttfm, q))
        i = int(np.argmin(np.abs(ttfm - want)))
        picked.append(rows[i])
    return picked


def profile_once(schema: str, vocab) -> dict[str, float]:
    """One build of ``schema`` from scratch, stage by stage (seconds)."""
    from cfgzip_lab import pipeline
    from cfgzip_lab.cache.grammars import ReadyGrammar, _kept_grammar
    from cfgzip_lab.grammar.ebnf import parse_ebnf
    from cfgzip_lab.grammar.sources import to_ebnf
    from cfgzip_lab.native.index import SigmaInIndex, build_index_or_reason
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    origin = to_ebnf(schema, "json_schema")
    out["convert"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    parse_ebnf(origin.ebnf, reachable_only=True, warn_unreachable=False)  # as compile_grammar reads XGrammar's
    out["parse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compile_grammar(schema, kind="json_schema")
    total = time.perf_counter() - t0
    if isinstance(compiled, getattr(pipeline, "ParsedLaterGrammar", ())):
        out["parse"] = 0.0  # the byte CFG from XGrammar's grammar object (grammar/serialized.py): no parse
    s = compiled.seconds  # its "parse" is the conversion (and the text path's parse), timed apart here
    # the byte CFG (lowering, or serialized.py's reading) and the checks between it and the normal form
    out["lower"] = total - s["parse"] - s["gnf"]
    out["gnf"] = s["gnf"]
    out["of gnf: merging"] = sum(st.seconds for st in compiled.gnf.steps if st.name.startswith("merging"))
    t0 = time.perf_counter()
    result = build_classes(compiled, vocab)
    out["classing"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    index, unavailable = build_index_or_reason(
        compiled.gnf, result.classes, vocab.token_bytes, rep_nodes=result.rep_nodes, displacer=result.displacer
    )
    if index is not None and not index.arrays_only:
        index = SigmaInIndex.from_arrays(index.to_arrays(), index.metadata())
    out["index"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    kept, displacer = _kept_grammar(compiled, result.displacer)
    ready = ReadyGrammar(None, kept, result.classes, vocab, index, unavailable, displacer=displacer)
    matcher = ready.matcher()
    bitmask = matcher.allocate_bitmask(1)
    out["engine"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    matcher.fill_next_token_bitmask(bitmask)
    out["first fill"] = time.perf_counter() - t0
    out["sum"] = sum(out[s] for s in STAGES)
    out["store"] = "compiled" if type(compiled.gnf.store).__name__ != "WordStore" else "python"
    out["classes"] = result.classes.num_classes
    out["trie nodes"] = index.num_nodes if index is not None else 0
    return out


def matcher_for_once(schema: str, vocab) -> tuple[float, float]:
    """``matcher_for`` from scratch (disk cache off), then its first fill: seconds of each."""
    import cfgzip_lab as cz

    t0 = time.perf_counter()
    matcher = cz.matcher_for(schema, vocab, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    built = time.perf_counter() - t0
    bitmask = matcher.allocate_bitmask(1)
    t0 = time.perf_counter()
    matcher.fill_next_token_bitmask(bitmask)
    return built, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-run", type=Path, default=None, help="a maskbench.py --out folder")
    ap.add_argument("--quantiles", type=float, nargs="+", default=[50, 99])
    ap.add_argument("--names", nargs="+", default=None, help="MaskBench names instead")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    args = ap.parse_args(argv)
    import cfgzip_lab as cz
    from cfgzip_lab.bench import machine_info

    if args.from_run is not None:
        picked = pick_from_run(args.from_run, args.quantiles)
        labels = [f"p{q:g} ({ms:.1f} ms in the run)" for q, (_, ms) in zip(args.quantiles, picked)]
        names = [n for n, _ in picked]
    elif args.names:
        names, labels = [n.removesuffix(".json") for n in args.names], ["" for _ in args.names]
    else:
        ap.error("--from-run or --names")
    schemas = {
        r["name"].removesuffix(".json"): json.dumps(r["schema"])
        for r in maskbench.read_maskbench(args.data)
        if r["name"].removesuffix(".json") in names
    }
    vocab = cz.load_vocab(args.tokenizer)
    # warm-up: every stage's first-use imports and caches outside the measurements
    cz.matcher_for('{"type": "integer"}', vocab, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    profile_once('{"type": "object", "properties": {"a": {"type": "string"}}}', vocab)
    print(f"machine: {machine_info()}, load {os.getloadavg()[0]:.2f}, tokenizer {args.tokenizer}")
    for name, label in zip(names, labels):
        runs, whole = [], []
        gc.collect()
        gc.disable()  # as matcher_for's build does (cfgzip_lab._gc)
        try:
            for _ in range(args.repeat):
                runs.append(profile_once(schemas[name], vocab))
                whole.append(matcher_for_once(schemas[name], vocab))
        finally:
            gc.enable()
        last = runs[-1]
        print(
            f"\n{name} {label}: {len(schemas[name]):,} bytes of schema, {last['store']} store, "
            f"{last['classes']:,} classes, {last['trie nodes']:,} trie nodes; median of {args.repeat}"
        )
        total = statistics.median(r["sum"] for r in runs)
        print("| stage | ms | share |\n|---|---:|---:|")
        for stage in (*STAGES[:4], "of gnf: merging", *STAGES[4:], "sum"):
            ms = statistics.median(r[stage] for r in runs) * 1000
            print(f"| {stage} | {ms:.2f} | {ms / (total * 1000):.0%} |")
        built = statistics.median(b for b, _ in whole) * 1000
        fill = statistics.median(f for _, f in whole) * 1000
        print(f"| matcher_for (disk cache off) + first fill | {built:.2f} + {fill:.2f} | |")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
