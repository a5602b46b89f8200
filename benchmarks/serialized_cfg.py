"""The byte CFG from XGrammar's grammar object (``grammar/serialized.py``) beside the text path, per schema.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --sample 300 --seed 11     # time + check
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --all --suite                 # check all
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --middle-of artifacts/mb200   # median files

For each JSON Schema (a stratified MaskBench sample, ``--all`` of it, the middle half by TTFM of a
``maskbench.py`` run, ``--suite`` the JSON-Schema-Test-Suite too): XGrammar builds the grammar once,
then, in turn (alternating which goes first), the text path (``parse_ebnf`` of the printed EBNF +
``lower``) and the serialized path (``serialize_json`` + ``json.loads`` +
:func:`~cfgzip_lab.grammar.serialized.cfg_from_serialized`), each a first build of that schema in this
process (thread time). The two CFGs are compared whole: start, text, rules and their order, origins,
symbol spans, counted repetitions, token atoms. Prints the medians, the per-file saving and every
mismatch; never asserts on time. Exit status 1 when a CFG differs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402 (the benchmark's data reader, beside this file)

SUITE = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpora" / "json-schema-test-suite"


def cfg_difference(a, b) -> str | None:
    """Where two byte CFGs differ (None when equal in every field later stages read)."""
    for name in ("start", "text", "counted", "tokens"):
        if getattr(a, name) != getattr(b, name):
            return name
    for name in ("rules", "origins", "symbol_spans"):
        x, y = getattr(a, name), getattr(b, name)
        if list(x) != list(y):
            return f"{name}: order or names"
        for key in x:
            if x[key] != y[key]:
                return f"{name}[{key!r}]: {x[key]!r} != {y[key]!r}"[:400]
    return None


def middle_of_run(run: Path) -> set[str]:
    """The names of a ``maskbench.py`` run's cfgzip files whose TTFM is in its middle half (the median files)."""
    ttfm = {}
    for f in (run / "cfgzip").glob("*.json"):
        r = json.loads(f.read_text())
        if r.get("status") == "ok":
            ttfm[f.stem] = r["ttfm_us"]
    ranked = sorted(ttfm, key=ttfm.get)
    return set(ranked[len(ranked) // 4 : len(ranked) * 3 // 4])


def schemas(args) -> list[tuple[str, str]]:
    out = []
    rows = maskbench.read_maskbench(args.data)
    if args.middle_of is not None:
        wanted = middle_of_run(args.middle_of)
        rows = [row for row in rows if row["name"].removesuffix(".json") in wanted]
    elif not args.all:
        rows = maskbench.stratified_sample(rows, args.sample, args.seed)
    out += [(row["name"], json.dumps(row["schema"])) for row in rows]
    if args.suite:
        root = Path(os.environ.get("CFGZIP_SHARED", SUITE.parents[1])) / "corpora" / "json-schema-test-suite"
        out += [(f"suite/{p.stem}", p.read_text()) for p in sorted(root.glob("[0-9][0-9][0-9][0-9].json"))]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--all", action="store_true", help="every MaskBench file")
    ap.add_argument("--middle-of", type=Path, default=None, help="the middle half by TTFM of a maskbench.py run")
    ap.add_argument("--suite", action="store_true", help="the JSON-Schema-Test-Suite's schemas too")
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    ap.add_argument("--max-chars", type=int, default=0, help="skip EBNF texts longer than this (0: none)")
    args = ap.parse_args(argv)
    import xgrammar

    from cfgzip_lab import xgrammar_version
    from cfgzip_lab.grammar.ebnf import parse_ebnf
    from cfgzip_lab.grammar.lower import lower
    from cfgzip_lab.grammar.printed import printed_ebnf
    from cfgzip_lab.grammar.serialized import Unsupported, cfg_from_serialized

    clock = time.thread_time
    times, unsupported, refused, mismatches = [], {}, 0, []
    print(f"xgrammar {xgrammar_version.installed()}, load {os.getloadavg()[0]:.2f}", flush=True)
    gc.disable()  # as a build does (cfgzip_lab._gc)
    for n, (name, schema) in enumerate(schemas(args)):
        try:
            grammar = xgrammar.Grammar.from_json_schema(schema)
            text = printed_ebnf(grammar)
        except Exception:
            refused += 1
            continue
        if args.max_chars and len(text) > args.max_chars:
            continue
        runs = {}
        for which in ("text", "fast") if n % 2 else ("fast", "text"):
            t0 = clock()
            try:
                if which == "text":
                    got = lower(parse_ebnf(text, reachable_only=True, warn_unreachable=False))
                else:
                    got = cfg_from_serialized(json.loads(grammar.serialize_json()), text)
            except Unsupported as error:
                unsupported[str(error)[:80]] = unsupported.get(str(error)[:80], 0) + 1
                got = None
            except Exception as error:  # a refusal (text path) or a failure (serialized path)
                got = error
            runs[which] = (clock() - t0, got)
        text_cfg, fast_cfg = runs["text"][1], runs["fast"][1]
        if isinstance(fast_cfg, Exception):  # the pipeline takes the text path then, which says why
            unsupported[type(fast_cfg).__name__] = unsupported.get(type(fast_cfg).__name__, 0) + 1
            continue
        if fast_cfg is None:
            continue
        if isinstance(text_cfg, Exception):
            mismatches.append(name)
            print(f"MISMATCH {name}: the text path refuses it ({text_cfg!r:.200}), the serialized path does not")
            continue
        why = cfg_difference(text_cfg, fast_cfg)
        if why is not None:
            mismatches.append(name)
            print(f"MISMATCH {name}: {why}", flush=True)
            continue
        times.append((runs["text"][0], runs["fast"][0]))
        gc.collect() if n % 200 == 199 else None
    gc.enable()
    print(
        f"compared {len(times)}, mismatches {len(mismatches)}, unsupported {sum(unsupported.values())} "
        f"{unsupported}, refused by XGrammar or the parse {refused}"
    )
    if times:
        text_ms = [1e3 * a for a, _ in times]
        fast_ms = [1e3 * b for _, b in times]
        saving = [a - b for a, b in zip(text_ms, fast_ms)]
        q = lambda xs: statistics.quantiles(xs, n=4)  # noqa: E731
        print(
            f"text path (parse + lower) median {statistics.median(text_ms):.3f} ms, "
            f"serialized (serialize_json + loads + convert) {statistics.median(fast_ms):.3f} ms; "
            f"per-file saving median {statistics.median(saving):.3f} ms (quartiles {q(saving)[0]:.3f}, "
            f"{q(saving)[2]:.3f}); sums {sum(text_ms):.0f} / {sum(fast_ms):.0f} ms; load {os.getloadavg()[0]:.2f}"
        )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
