"""``cfgzip-lab compress`` and ``cfgzip-lab inspect``: build a class cache, read one back."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ._common import (
    UsageError,
    add_grammar_arguments,
    add_json_flag,
    classing_options,
    emit,
    load_vocab,
    peak_rss_mb,
    read_grammar_arguments,
)

__all__ = ["register", "cmd_compress", "cmd_inspect"]


def cmd_compress(args: argparse.Namespace) -> int:
    from ..classes.cache import save_classes
    from ..pipeline import build_classes

    t0 = time.perf_counter()
    path, compiled = read_grammar_arguments(args)
    vocab = load_vocab(args.tokenizer)
    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=1, unit="prefix", desc="classing", leave=False)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

    result = build_classes(
        compiled, vocab, budget=args.budget, progress=progress, workers=args.workers, **classing_options(args)
    )
    classes = result.classes
    classes.metadata["build_seconds"] = round(time.perf_counter() - t0, 4)
    index = None
    if not args.no_native_index:
        from ..native import build_index

        # The native engine's σ_in index, read off the classing result (c_like: ~1 s).
        index = build_index(
            compiled.gnf, classes, vocab.token_bytes, token_node=result.token_node, displacer=result.displacer
        )
    out = save_classes(classes, args.output, grammar_text=compiled.text, vocab=vocab, native_index=index)
    seconds = time.perf_counter() - t0
    meta = classes.metadata
    human = [
        f"{path} × {vocab.name}: {classes.vocab_size} tokens → {classes.num_classes} classes "
        f"({classes.compression_ratio:.1f}:1), {meta['dead_tokens']} dead, {meta['fallback_singletons']} budget "
        f"fallbacks, {seconds:.2f} s, peak {peak_rss_mb()} MB → {out}"
    ]
    emit(
        args,
        human,
        {
            "grammar": str(path),
            "tokenizer": vocab.name,
            "vocab_size": classes.vocab_size,
            "classes": classes.num_classes,
            "dead_tokens": meta["dead_tokens"],
            "fallback_singletons": meta["fallback_singletons"],
            "seconds": round(seconds, 4),
            "peak_rss_mb": peak_rss_mb(),
        },
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..classes.cache import CacheError, load_classes

    try:
        classes = load_classes(args.cache)
    except CacheError as exc:
        raise UsageError(str(exc)) from None
    meta = classes.metadata
    sizes = classes.class_sizes()
    human = [
        f"{args.cache}: {classes.vocab_size} tokens, {classes.num_classes} classes ({classes.compression_ratio:.1f}:1)"
    ]
    for key in sorted(meta):
        human.append(f"  {key}: {meta[key]}")
    top = sizes.argsort()[::-1][: args.top]
    human.append(f"largest {len(top)} classes (id: size, representative id):")
    human += [f"  {int(k)}: {int(sizes[k])}, rep {int(classes.representatives[k])}" for k in top]
    emit(
        args,
        human,
        {
            "cache": str(args.cache),
            "vocab_size": classes.vocab_size,
            "classes": classes.num_classes,
            **{k: meta[k] for k in meta if k not in ("vocab_size", "classes")},
        },
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..classes.classing import DEFAULT_TOKEN_BUDGET

    c = add_json_flag(
        sub.add_parser("compress", help="class a tokenizer's vocabulary under a grammar and save the cache")
    )
    add_grammar_arguments(c)
    c.add_argument("--tokenizer", required=True, help="llama3, qwen3, o200k, smollm2, gemma3, or a tokenizer folder")
    c.add_argument("-o", "--output", required=True, help="cache file (.npz)")
    c.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_TOKEN_BUDGET,
        help="new DAG nodes per token before it becomes a singleton class",
    )
    c.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="processes for classing (default: 2 where there are 2 cores; same classes either way)",
    )
    c.add_argument(
        "--no-native-index",
        action="store_true",
        help="do not store the native engine's σ_in index in the cache (it is then built on load)",
    )
    c.set_defaults(func=cmd_compress)

    i = add_json_flag(sub.add_parser("inspect", help="show a class cache's metadata and largest classes"))
    i.add_argument("cache")
    i.add_argument("--top", type=int, default=10)
    i.set_defaults(func=cmd_inspect)
