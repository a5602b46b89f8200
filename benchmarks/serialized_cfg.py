"""The byte CFG from XGrammar's grammar object (``grammar/serialized.py``) beside the text path, per schema.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --sample 300 --seed 11     # time + check
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --all --suite                 # check all
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --middle-of artifacts/mb200   # median files
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/serialized_cfg.py --ttfm --sample 200 --seed 11   # first masks

For each JSON Schema (a stratified MaskBench sample, ``--all`` of it, the middle half by TTFM of a
``maskbench.py`` run, ``--suite`` the JSON-Schema-Test-Suite too): XGrammar builds the grammar once,
then, in turn (alternating which goes first), the text path (``parse_ebnf`` of the printed EBNF +
``lower``) and the serialized path (``serialize_json`` + ``json.loads`` +
:func:`~cfgzip_lab.grammar.serialized.cfg_from_serialized`), each a first build of that schema in this
process (thread time). The two CFGs are compared whole: start, text, rules and their order, origins,
symbol spans, counted repetitions, token atoms. Prints the medians, the per-file saving and every
mismatch; never asserts on time. Exit status 1 when a CFG differs. ``--ttfm`` times the whole first
mask through each path instead (:func:`ttfm_side_by_side`) and compares the masks.
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


def ttfm_side_by_side(named: list[tuple[str, str]], tokenizer: str) -> int:
    """``--ttfm``: each schema's time to first mask (``matcher_for`` with the disk cache off, and the first
    ``fill_next_token_bitmask``; thread time) through the serialized path and through the text path
    (``pipeline._serialized_cfg`` answering None), in turn in this one process (the vocabulary's scan cache
    shared, which goes first alternating), and the first masks compared (sha256)."""
    import hashlib

    import cfgzip_lab as cz
    from cfgzip_lab import pipeline

    serialized = pipeline._serialized_cfg
    vocab = cz.load_vocab(tokenizer)
    clock = time.thread_time

    def first_mask(schema: str) -> tuple[float, str]:
        t0 = clock()
        matcher = cz.matcher_for(schema, vocab, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
        bitmask = matcher.allocate_bitmask(1)
        matcher.fill_next_token_bitmask(bitmask)
        seconds = clock() - t0
        return seconds, hashlib.sha256(bitmask.numpy().tobytes()).hexdigest()

    for warm in ('{"type": "object", "properties": {"a": {"type": "string"}}}', '{"type": "array"}'):
        first_mask(warm)
    print(f"load {os.getloadavg()[0]:.2f}", flush=True)
    rows, differ = [], []
    for n, (name, schema) in enumerate(named):
        got = {}
        for which in ("text", "serialized") if n % 2 else ("serialized", "text"):
            pipeline._serialized_cfg = serialized if which == "serialized" else (lambda *args: None)
            try:
                got[which] = first_mask(schema)
            except Exception:  # refused (both paths alike: the same CFG)
                break
        pipeline._serialized_cfg = serialized
        if len(got) < 2 or max(t for t, _ in got.values()) > 2.0:  # refused, or the tail: not this step's
            continue
        if got["text"][1] != got["serialized"][1]:
            differ.append(name)
        rows.append((1e3 * got["text"][0], 1e3 * got["serialized"][0]))
    saving = [a - b for a, b in rows]
    q = statistics.quantiles(saving, n=4)
    print(
        f"{len(rows)} schemas, first masks differ on {len(differ)} {differ[:5]}; TTFM (thread time) median "
        f"text path {statistics.median(a for a, _ in rows):.3f} ms, serialized {statistics.median(b for _, b in rows):.3f} ms; "
        f"per-file saving median {statistics.median(saving):.3f} ms (quartiles {q[0]:.3f}, {q[2]:.3f}), "
        f"serialized/text median {statistics.median(b / a for a, b in rows):.3f}; load {os.getloadavg()[0]:.2f}"
    )
    return 1 if differ else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--all", action="store_true", help="every MaskBench file")
    ap.add_argument("--middle-of", type=Path, default=None, help="the middle half by TTFM of a maskbench.py run")
    ap.add_argument("--suite", action="store_true", help="the JSON-Schema-Test-Suite's schemas too")
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    ap.add_argument("--max-chars", type=int, default=0, help="skip EBNF texts longer than this (0: none)")
    ap.add_argument("--ttfm", action="store_true", help="time to first mask through each path instead")
    ap.add_argument("--tokenizer", default="llama3")
    args = ap.parse_args(argv)
    if args.ttfm:
        return ttfm_side_by_side(schemas(args), args.tokenizer)
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
