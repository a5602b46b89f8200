"""``cfgzip-lab``: gnf | compress | verify | bench | inspect | tokenizers.

Bad input (missing file, grammar error, unknown tokenizer, corrupt cache) exits
with status 2 and a message, never a traceback. With ``--json`` the LAST line
printed is one JSON object, so scripts can ``tail -n1``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path


class UsageError(Exception):
    """Bad input: printed as is, exit status 2."""


def _peak_rss_mb() -> float:
    """Peak resident memory of this process or of its largest finished child (classing workers)."""
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return round(peak / 1024, 1)


def _read_grammar(name: str):
    from .grammar.diagnostics import GrammarError
    from .pipeline import compile_grammar, resolve_grammar

    try:
        path = resolve_grammar(name)
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError, PermissionError) as exc:
        raise UsageError(f"cannot read grammar: {exc}") from None
    try:
        compiled = compile_grammar(text, source=str(path))
    except GrammarError as exc:
        raise UsageError(f"grammar {path} has errors:\n{exc.render()}") from None
    for w in compiled.warnings:
        print(w.render(text, str(path)), file=sys.stderr)
    return path, compiled


def _load_vocab(name: str):
    from . import vocab as vocab_mod

    try:
        return vocab_mod.load_vocab(name)
    except Exception as exc:  # unknown name, missing package, unreadable folder
        raise UsageError(f"cannot load tokenizer {name!r}: {exc}") from None


def _emit(args, human: list[str], record: dict) -> None:
    for line in human:
        print(line)
    if args.json:
        print(json.dumps(record))


def cmd_gnf(args) -> int:
    t0 = time.perf_counter()
    path, compiled = _read_grammar(args.grammar)
    seconds = time.perf_counter() - t0
    g = compiled.gnf
    human = [f"{'step':<22} {'nonterminals':>12} {'DAG nodes':>10} {'productions':>14} {'seconds':>8}"]
    for s in g.steps:
        human.append(f"{s.name:<22} {s.nonterminals:>12} {s.dag_nodes:>10} {s.productions:>14} {s.seconds:>8.3f}")
    if args.show:
        human.append(g.to_text(args.show))
    human.append(f"{path}: {len(compiled.ast.rules)} rules, {compiled.cfg.num_productions} byte-CFG productions, "
                 f"GNF {g.num_nonterminals} nonterminals, {g.dag_nodes} DAG nodes standing for {g.num_productions} productions, {seconds:.2f} s")
    _emit(args, human, {
        "grammar": str(path),
        "rules": len(compiled.ast.rules),
        "cfg_productions": compiled.cfg.num_productions,
        "gnf_productions": g.num_productions,
        "gnf_nonterminals": g.num_nonterminals,
        "gnf_dag_nodes": g.dag_nodes,
        "seconds": round(seconds, 4),
    })
    return 0


def cmd_compress(args) -> int:
    from .classes.cache import save_classes
    from .pipeline import build_classes

    t0 = time.perf_counter()
    path, compiled = _read_grammar(args.grammar)
    vocab = _load_vocab(args.tokenizer)
    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=1, unit="prefix", desc="classing", leave=False)

        def progress(done, total):
            bar.total = total
            bar.n = done
            bar.refresh()

    result = build_classes(compiled, vocab, budget=args.budget, progress=progress, workers=args.workers)
    classes = result.classes
    classes.metadata["build_seconds"] = round(time.perf_counter() - t0, 4)
    out = save_classes(classes, args.output, grammar_text=compiled.text, vocab=vocab)
    seconds = time.perf_counter() - t0
    meta = classes.metadata
    human = [
        f"{path} × {vocab.name}: {classes.vocab_size} tokens → {classes.num_classes} classes "
        f"({classes.compression_ratio:.1f}:1), {meta['dead_tokens']} dead, {meta['fallback_singletons']} budget fallbacks, "
        f"{seconds:.2f} s, peak {_peak_rss_mb()} MB → {out}"
    ]
    _emit(args, human, {
        "grammar": str(path),
        "tokenizer": vocab.name,
        "vocab_size": classes.vocab_size,
        "classes": classes.num_classes,
        "dead_tokens": meta["dead_tokens"],
        "fallback_singletons": meta["fallback_singletons"],
        "seconds": round(seconds, 4),
        "peak_rss_mb": _peak_rss_mb(),
    })
    return 0


def cmd_inspect(args) -> int:
    from .classes.cache import CacheError, load_classes

    try:
        classes = load_classes(args.cache)
    except CacheError as exc:
        raise UsageError(str(exc)) from None
    meta = classes.metadata
    sizes = classes.class_sizes()
    human = [f"{args.cache}: {classes.vocab_size} tokens, {classes.num_classes} classes ({classes.compression_ratio:.1f}:1)"]
    for key in sorted(meta):
        human.append(f"  {key}: {meta[key]}")
    top = sizes.argsort()[::-1][: args.top]
    human.append(f"largest {len(top)} classes (id: size, representative id):")
    human += [f"  {int(k)}: {int(sizes[k])}, rep {int(classes.representatives[k])}" for k in top]
    _emit(args, human, {"cache": str(args.cache), "vocab_size": classes.vocab_size, "classes": classes.num_classes, **{k: meta[k] for k in meta if k not in ("vocab_size", "classes")}})
    return 0


def cmd_tokenizers(args) -> int:
    from . import vocab as vocab_mod

    infos = vocab_mod.available_vocabs()
    human = [f"{i.name:<10} {'installed' if i.installed else 'missing  '} {i.description}" for i in infos]
    _emit(args, human, {"tokenizers": [{"name": i.name, "installed": i.installed} for i in infos]})
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cfgzip-lab", description="Token-space compression of grammar-constrained decoding.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--json", action="store_true", help="print one JSON object as the last line")
        return sp

    g = common(sub.add_parser("gnf", help="convert a grammar to Greibach normal form and report sizes per step"))
    g.add_argument("grammar", help="grammar file, or a bundled grammar name (json, c_like, ...)")
    g.add_argument("--show", type=int, default=0, metavar="N", help="also print the first N GNF productions")
    g.set_defaults(func=cmd_gnf)

    c = common(sub.add_parser("compress", help="class a tokenizer's vocabulary under a grammar and save the cache"))
    c.add_argument("grammar")
    c.add_argument("--tokenizer", required=True, help="llama3, qwen3, o200k, smollm2, gemma3, or a tokenizer folder")
    c.add_argument("-o", "--output", required=True, help="cache file (.npz)")
    from .classes.classing import DEFAULT_TOKEN_BUDGET

    c.add_argument("--budget", type=int, default=DEFAULT_TOKEN_BUDGET, help="new DAG nodes per token before it becomes a singleton class")
    c.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes for classing (default: 2 where there are 2 cores; same classes either way)")
    c.set_defaults(func=cmd_compress)

    i = common(sub.add_parser("inspect", help="show a class cache's metadata and largest classes"))
    i.add_argument("cache")
    i.add_argument("--top", type=int, default=10)
    i.set_defaults(func=cmd_inspect)

    t = common(sub.add_parser("tokenizers", help="list the offline tokenizer registry"))
    t.set_defaults(func=cmd_tokenizers)

    try:
        from . import cli_engine
    except ImportError:
        cli_engine = None
    if cli_engine is not None:
        cli_engine.add_commands(sub, common)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"cfgzip-lab {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
