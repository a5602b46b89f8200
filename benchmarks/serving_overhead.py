"""Per-request overhead of the cfgzip SGLang backend beside SGLang's XGrammar backend, on the CPU.

Both backends are made as SGLang's ``create_grammar_backend`` makes them, on SmolLM2's tokenizer
(49,152 tokens; the offline vocabularies with an HF tokenizer are SmolLM2's; logits padded to
49,216), and timed side by side in one process:

- **compile of a new schema**: ``_init_value_dispatch(("json", schema))`` for schemas neither
  backend has seen (each a fresh set of property names), what a request with a new schema waits
  for before its first token; ours converts with XGrammar, runs our front end, classes the
  vocabulary and builds the σ_in index;
- **a schema classed before on this machine**: a backend with an empty in-process cache over the
  class cache on disk that the first build wrote (what a new server process pays);
- **a cached grammar**: SGLang's cache hit, ``copy()`` of the cached grammar object;
- **fill of a batch** of 8 and 32 rows of mixed grammars (``fill_vocab_mask_batched`` into one
  ``allocate_vocab_mask`` bitmask, as ``SamplingBatchInfo.update_regex_vocab_mask`` does), every
  step of a decode loop whose tokens are drawn from the mask (the draws are not timed).

Run: ``.venv/bin/python benchmarks/serving_overhead.py [--schemas 4] [--steps 40]`` (needs the
serving extra of ``scripts/setup.sh --test``). Prints a table and the machine; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def schema(i: int) -> str:
    """A fresh schema per ``i``: same shape, new property names (no cache on either side can help)."""
    return json.dumps(
        {
            "type": "object",
            "properties": {
                f"name_{i}": {"type": "string", "maxLength": 20},
                f"count_{i}": {"type": "integer", "minimum": 0},
                f"kind_{i}": {"enum": ["alpha", "beta", f"gamma{i}"]},
                f"items_{i}": {"type": "array", "items": {"type": "number"}},
            },
            "required": [f"name_{i}", f"count_{i}"],
        }
    )


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", type=int, default=4, help="new schemas compiled per backend")
    parser.add_argument("--steps", type=int, default=40, help="decode steps timed per batch size")
    args = parser.parse_args()
    # a class cache of its own, so that a "new" schema is new to the disk cache too
    os.environ["CFGZIP_CACHE_DIR"] = tempfile.mkdtemp(prefix="cfgzip-serving-bench-")

    from serving_tools import ARITHMETIC, EMAIL, PADDING, PERSON, pick, smollm2_tokenizer
    from sglang.srt.constrained.base_grammar_backend import GrammarRow
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    from cfgzip_lab.serving.sglang_backend import CfgzipGrammarBackend

    tokenizer = smollm2_tokenizer()
    vocab_size = len(tokenizer) + PADDING
    t0 = time.perf_counter()
    ours = CfgzipGrammarBackend(tokenizer, vocab_size=vocab_size, model_eos_token_ids=[2])
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = XGrammarGrammarBackend(tokenizer, vocab_size=vocab_size, model_eos_token_ids=[2])
    t_theirs = time.perf_counter() - t0
    backends = {"cfgzip": ours, "xgrammar": theirs}
    print(f"backend start-up (token table): cfgzip {t_ours:.2f} s, xgrammar {t_theirs:.2f} s")

    # warm both (imports, XGrammar's first conversion) on a schema not timed
    for backend in backends.values():
        backend._init_value_dispatch(("json", schema(-1)), False)

    compile_s = {name: [] for name in backends}
    for i in range(args.schemas):
        for name, backend in backends.items():
            t0 = time.perf_counter()
            grammar = backend._init_value_dispatch(("json", schema(i)), False)
            compile_s[name].append(time.perf_counter() - t0)
            assert type(grammar).__name__ != "InvalidGrammarObject", grammar

    # the same schemas in a "new process": empty memory, the class cache on disk the first build wrote
    from cfgzip_lab.cache.grammars import GrammarCache

    fresh = CfgzipGrammarBackend(tokenizer, vocab_size=vocab_size, model_eos_token_ids=[2], grammars=GrammarCache())
    disk_s = []
    for i in range(args.schemas):
        t0 = time.perf_counter()
        fresh._init_value_dispatch(("json", schema(i)), False)
        disk_s.append(time.perf_counter() - t0)

    keys = [("json", schema(i)) for i in range(args.schemas)] + [
        ("json", json.dumps(PERSON)),
        ("ebnf", ARITHMETIC),
        ("regex", EMAIL),
    ]
    cached = {
        name: {key: backend._init_value_dispatch(key, False) for key in keys} for name, backend in backends.items()
    }
    copy_us = {}
    for name in backends:
        t0 = time.perf_counter()
        for _ in range(100):
            for key in keys:
                cached[name][key].copy()
        copy_us[name] = (time.perf_counter() - t0) / (100 * len(keys)) * 1e6

    fill_us = {}
    for batch in (8, 32):
        rows = {name: [cached[name][keys[i % len(keys)]].copy() for i in range(batch)] for name in backends}
        rngs = [random.Random(i) for i in range(batch)]
        times = {name: [] for name in backends}
        for step in range(args.steps):
            masks = {}
            for name in backends:
                grammars = rows[name]
                live = [i for i, g in enumerate(grammars) if not g.is_terminated()]
                first = grammars[live[0]]
                mask = first.allocate_vocab_mask(vocab_size=vocab_size, batch_size=batch, device="cpu")
                entries = [GrammarRow(row=i, grammar=grammars[i]) for i in live]
                t0 = time.perf_counter()
                first.fill_vocab_mask_batched(entries, mask)
                times[name].append(time.perf_counter() - t0)
                masks[name] = mask
            for i in range(batch):  # one token per row, the same for both, from XGrammar's mask
                if rows["xgrammar"][i].is_terminated():
                    continue
                token = pick(masks["xgrammar"][i].numpy(), vocab_size, rngs[i], {2}, stop_after=10**9, step=step)
                if token is None:
                    continue
                for name in backends:
                    rows[name][i].accept_token(token)
        fill_us[batch] = {name: (statistics.median(t) * 1e6, percentile(t, 0.9) * 1e6) for name, t in times.items()}

    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"SmolLM2 tokenizer, vocab {vocab_size}; {args.schemas} new schemas; {args.steps} decode steps per batch\n"
    )
    print("| measure | cfgzip (native) | SGLang's XGrammar | XGrammar / cfgzip (medians) |")
    print("|---|---|---|---|")
    c, x = statistics.median(compile_s["cfgzip"]), statistics.median(compile_s["xgrammar"])
    print(f"| compile a new JSON schema, median (s) | {c:.3f} | {x:.3f} | {x / c:.3f} |")
    print(
        f"| the same schema in a new process (class cache on disk), median (s) | {statistics.median(disk_s):.3f} | | |"
    )
    print(
        f"| request of a cached grammar, copy() (µs) | {copy_us['cfgzip']:.1f} | {copy_us['xgrammar']:.1f} | {copy_us['xgrammar'] / copy_us['cfgzip']:.1f} |"
    )
    for batch, by in fill_us.items():
        (om, op), (xm, xp) = by["cfgzip"], by["xgrammar"]
        print(
            f"| fill a batch of {batch} mixed rows, median / p90 (µs) | {om:,.0f} / {op:,.0f} | {xm:,.0f} / {xp:,.0f} | {xm / om:.2f} |"
        )
    print(f"\nengines built by cfgzip: {ours.engines.stats}")


if __name__ == "__main__":
    main()
