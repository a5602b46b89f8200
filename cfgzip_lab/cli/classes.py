"""``cfgzip-lab compress`` and ``cfgzip-lab inspect``: build a class cache, read one back.

``compress`` goes through the cache directory (:mod:`._classes`): a grammar classed before on
this machine (by any command or the API) is read from there, a new one is written there, and
``-o`` (optional) writes a copy to share. ``--no-cache`` classes afresh and writes only ``-o``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ._classes import add_cache_flag, classes_for
from ._common import (
    UsageError,
    add_grammar_arguments,
    add_json_flag,
    classing_options,
    emit,
    load_vocab,
    named_token_lines,
    peak_rss_mb,
    read_grammar_arguments,
)

__all__ = ["register", "cmd_compress", "cmd_inspect"]


def cmd_compress(args: argparse.Namespace) -> int:
    from ..cache.format import save_classes

    t0 = time.perf_counter()
    if not args.output and args.no_cache:
        raise UsageError("--no-cache writes no cache directory entry: give -o FILE")
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

    got = classes_for(
        args,
        compiled,
        vocab,
        budget=args.budget,
        progress=progress,
        workers=args.workers,
        options=classing_options(args),
    )
    classes = got.classes
    if got.source == "built":
        classes.metadata["build_seconds"] = round(time.perf_counter() - t0, 4)
    out = got.path
    if args.output:
        # The σ_in index and the GNF go along (format 4): a fresh process then rebuilds nothing.
        index = None if args.no_native_index else got.index
        out = str(save_classes(classes, args.output, vocab=vocab, native_index=index, compiled=compiled))
    if out is None:
        raise UsageError("the class cache directory could not be written (see the warning above): give -o FILE")
    seconds = time.perf_counter() - t0
    meta = classes.metadata
    how = "read from the cache directory" if got.source == "cache" else "classed"
    human = [
        f"{path} × {vocab.name}: {classes.vocab_size} tokens → {classes.num_classes} classes "
        f"({classes.compression_ratio:.1f}:1), {meta['dead_tokens']} dead, {meta['fallback_singletons']} budget "
        f"fallbacks, {how} in {seconds:.2f} s, peak {peak_rss_mb()} MB → {out}"
    ] + named_token_lines(compiled, vocab)
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
            "source": got.source,
            "output": out,
        },
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..cache.format import CacheError, load_classes

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
    c.add_argument("-o", "--output", help="cache file (.npz) to write (default: only the cache directory's entry)")
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
        help="do not store the native engine's σ_in index in the -o file (it is then built on load)",
    )
    add_cache_flag(c)
    c.set_defaults(func=cmd_compress)

    i = add_json_flag(sub.add_parser("inspect", help="show a class cache's metadata and largest classes"))
    i.add_argument("cache")
    i.add_argument("--top", type=int, default=10)
    i.set_defaults(func=cmd_inspect)
