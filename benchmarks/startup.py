"""Start-up, side by side, over the bundled grammars and JSON Schemas: XGrammar's compile against our
ready time (front end + classes + native engine + first mask), cold and from the cache.

    .venv/bin/python benchmarks/startup.py --tokenizer llama3 [--schemas 30] [--object-schemas 10] [INPUT ...]

Each input runs in its own process (``cfgzip-lab bench --startup INPUT --json``, see
:mod:`cfgzip_lab.startup`), so no input profits from another's memos; inside that process both
sides run one after the other. Inputs (default): every bundled grammar, a seeded sample of the
shared JSON-Schema-Test-Suite's schemas that XGrammar 0.2.8 accepts (``--schemas``, 0: all 383),
and json-mode-eval-like object schemas (``--object-schemas``: objects of 3-9 typed properties,
nested objects, arrays, enums and required lists, as in the CFGzip paper's JSON task), written
to a temporary folder with an instance each. Prints one row per input, then the medians of each
group, the machine and the load (``/proc/loadavg``) before and after. Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("CFGZIP_SHARED", REPO.parent / "shared"))  # CFGZIP_SHARED: a clone away from ../shared
SUITE = SHARED / "corpora" / "json-schema-test-suite"


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# -- json-mode-eval-like object schemas ---------------------------------------------------------
_WORDS = "name age city email price count active tags score title status date id kind level note".split()


def _property(rng: random.Random, depth: int) -> tuple[dict, object]:
    """One property schema and a valid value for it."""
    choice = rng.choice(["string", "integer", "number", "boolean", "enum", "array"] + (["object"] if depth < 2 else []))
    if choice == "string":
        return {"type": "string"}, rng.choice(["Ada", "Lovelace", "x y"])
    if choice == "integer":
        return {"type": "integer"}, rng.randrange(-50, 5000)
    if choice == "number":
        return {"type": "number"}, round(rng.uniform(-10, 10), 2)
    if choice == "boolean":
        return {"type": "boolean"}, rng.random() < 0.5
    if choice == "enum":
        values = rng.sample(["red", "green", "blue", "small", "large", "none"], 3)
        return {"type": "string", "enum": values}, values[0]
    if choice == "array":
        return {"type": "array", "items": {"type": "string"}}, ["a", "bc"]
    return _object(rng, depth + 1)


def _object(rng: random.Random, depth: int = 0) -> tuple[dict, dict]:
    names = rng.sample(_WORDS, rng.randrange(3, 10 - 3 * depth))
    props, value = {}, {}
    for n in names:
        props[n], value[n] = _property(rng, depth)
    required = sorted(rng.sample(names, rng.randrange(1, len(names) + 1)), key=names.index)
    return {"type": "object", "properties": props, "required": required}, {n: value[n] for n in names}


def object_schemas(folder: Path, count: int, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    paths = []
    for i in range(count):
        schema, instance = _object(rng)
        path = folder / f"object{i:02d}.json"
        path.write_text(json.dumps(schema), encoding="utf-8")
        path.with_name(f"object{i:02d}.instance.json").write_text(json.dumps(instance), encoding="utf-8")
        paths.append(path)
    return paths


def suite_schemas(count: int, seed: int = 0) -> list[Path]:
    """Schemas of the shared suite XGrammar 0.2.8 builds a grammar for (its own verdict file)."""
    verdicts = SUITE / "xgrammar_0.2.8.tsv"
    if not verdicts.is_file():
        return []
    ok = [
        SUITE / f"{line.split()[0]}.json"
        for line in verdicts.read_text().splitlines()
        if not line.startswith(("#", "id")) and line.split("\t")[1:2] == ["ok"]
    ]
    return ok if count <= 0 else sorted(random.Random(seed).sample(ok, min(count, len(ok))))


# -- running and the table ----------------------------------------------------------------------
def run_one(target: str, tokenizer: str, steps: int, timeout: int) -> dict:
    cmd = [sys.executable, "-m", "cfgzip_lab.cli", "bench", "--startup", target, "--tokenizer", tokenizer]
    cmd += ["--startup-steps", str(steps), "--json"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"name": Path(target).stem, "error": f"over {timeout} s"}
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"name": Path(target).stem, "error": message[:160]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="*", help="grammar names or files, schema files (default: see above)")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--schemas", type=int, default=30, help="suite schemas sampled (0: all)")
    ap.add_argument("--object-schemas", type=int, default=10)
    ap.add_argument("--steps", type=int, default=48, help="tokens timed per engine for the break-even")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per input")
    ap.add_argument("--json", metavar="FILE", help="also write every record to FILE")
    args = ap.parse_args(argv)

    from cfgzip_lab.bundled import bundled_grammars
    from cfgzip_lab.startup import StartupResult, format_rows

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="cfgzip-objects-") as tmp:
        if args.inputs:
            groups = {"inputs": list(args.inputs)}
        else:
            groups = {
                "bundled grammars": list(bundled_grammars()),
                "JSON-Schema-Test-Suite": [str(p) for p in suite_schemas(args.schemas)],
                "object schemas": [str(p) for p in object_schemas(Path(tmp), args.object_schemas)],
            }
        records: dict[str, list[dict]] = {}
        for group, targets in groups.items():
            records[group] = []
            for target in targets:
                record = run_one(target, args.tokenizer, args.steps, args.timeout)
                records[group].append(record)
                print(f"  {group}: {record.get('name')} done (load {_load()})", file=sys.stderr, flush=True)
    machine = next((r["machine"] for rs in records.values() for r in rs if "machine" in r), {})
    print(f"start-up with {args.tokenizer}, one process per input, times in ms; ratios are ours ÷ XGrammar's compile")
    fields = set(StartupResult.__dataclass_fields__)
    for group, rs in records.items():
        ok = [StartupResult(**{k: v for k, v in r.items() if k in fields}) for r in rs if "error" not in r]
        print(f"\n{group} ({len(ok)} of {len(rs)} ran)")
        for line in format_rows(ok):
            print(line)
        for r in rs:
            if "error" in r:
                print(f"{r['name'][:28]:<28} refused or failed: {r['error']}")
        if ok:
            cold = median(r.cold_ratio for r in ok)
            warm = median(r.warm_ratio for r in ok)
            pays = [r.pays_after(r.cold_ready_s) for r in ok]
            never = sum(p == "never" for p in pays)
            counted = sorted(p for p in pays if p != "never")
            mid = f"{counted[len(counted) // 2]:,}" if counted else "-"
            print(
                f"median: XGrammar compile {median(r.xgrammar_compile_s for r in ok) * 1e3:.1f} ms, ours cold "
                f"{median(r.cold_ready_s for r in ok) * 1e3:.1f} ms ({cold:.2f}x), from the cache "
                f"{median(r.warm_ready_s for r in ok) * 1e3:.1f} ms ({warm:.2f}x); worst cold {max(r.cold_ratio for r in ok):.2f}x; "
                f"cold pays after {mid} tokens (median of those that pay; {never} never)"
            )
    print(
        f"\nmachine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, xgrammar {machine.get('xgrammar', '?')}; "
        f"load average {load_before} before, {_load()} after"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
