"""``cfgzip-lab verify`` and ``cfgzip-lab bench``: the engine commands.

Thin views over :mod:`cfgzip_lab.verify` and :mod:`cfgzip_lab.bench`. Both share
:func:`._classes.engine_inputs` (grammar, vocabulary, classes, documents: every bad input a usage error);
an engine choice (a flag such as ``--engine`` or ``--engines a,b``, parsed with
:func:`._common.parse_list`) goes in :func:`register` and is read in the ``cmd_*``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..errors import CfgzipError
from ._classes import add_cache_flag, args_native_engine, engine_inputs
from ._common import (
    UsageError,
    add_grammar_arguments,
    add_json_flag,
    emit,
    grammar_argument,
    grammar_text,
    load_vocab,
    named_token_lines,
    parse_list,
    read_docs,
)

__all__ = ["register", "cmd_verify", "cmd_bench"]


def cmd_verify(args) -> int:
    from ..engine import GrammarCompileError, compile_engines
    from ..grammar.tag_dispatch import dispatch_triggers
    from ..grammar.token_macros import guide_token_ids
    from ..verify import verify_engines

    t0 = time.perf_counter()
    path, compiled, vocab, classes, docs, source = engine_inputs(args)
    native = None
    try:
        engines = compile_engines(compiled.text, vocab, classes)
        candidate = None
        if args.engine == "native":
            native = args_native_engine(args, compiled, vocab, classes, engines)
            candidate = native.matcher
        report = verify_engines(
            engines,
            walks=args.walks,
            steps=args.steps,
            seed=args.seed,
            docs=docs,
            max_doc_tokens=args.max_doc_tokens,
            candidate=candidate,
            candidate_name=args.engine,
            allow_xgrammar_disagreements=args.allow_xgrammar_disagreements,
            guides=dispatch_triggers(compiled.ast),  # walks that type TagDispatch's tags
            token_guides=guide_token_ids(compiled.gnf, vocab),  # ...and take the tokens Token(...) names
        )
    except GrammarCompileError as exc:
        raise UsageError(f"XGrammar refuses grammar {path}: {exc}") from None
    seconds = time.perf_counter() - t0
    verdict = (
        "LOSSLESS on every checked step" if report.ok and not report.mismatches else f"{report.mismatches} MISMATCHES"
    )
    if report.xgrammar_disagreements:
        verdict += f", {report.xgrammar_disagreements} XGRAMMAR DISAGREEMENTS"
    human = [
        f"{path} × {vocab.name}: {classes.num_classes} classes for {vocab.vocab_size} tokens, {args.engine} engine",
        f"  {report.walks} walks (≤{args.steps} steps, seed {args.seed}), {report.docs} {source} documents, "
        f"{report.rollbacks} rollbacks, {report.rejections_checked} rejections, {report.stops_reached} stops"
        + (f", {report.guides_typed} TagDispatch strings typed" if report.guides_typed else "")
        + (f", {report.guide_tokens_taken} named tokens taken" if report.guide_tokens_taken else ""),
        f"  {report.steps_checked} steps checked: {verdict} ({seconds:.1f} s)",
    ]
    human += named_token_lines(compiled, vocab)
    for rejected in report.docs_rejected:
        human.append(f"  note: document {rejected['doc']} is refused by the grammar at token {rejected['position']}")
    if report.first_mismatch is not None:
        m = report.first_mismatch
        human.append(
            f"  first mismatch: {m.get('walk')} step {m.get('step')} ({m.get('check')}), prefix {m.get('prefix')!r}"
        )
    record = {
        "grammar": str(path),
        "tokenizer": vocab.name,
        "steps_checked": report.steps_checked,
        "mismatches": report.mismatches,
        "first_mismatch": report.first_mismatch,
    }
    if report.xgrammar_disagreements:  # reported apart: XGrammar's mask against its own matcher
        x = report.xgrammar_disagreement_examples[0]
        human.append(
            f"  {report.xgrammar_disagreements} steps where XGrammar's mask contradicts its own accept_token "
            f"(the {args.engine} engine sides with the matcher), e.g. {x['walk']} step {x['step']}: "
            f"mask only {[t['bytes'] for t in x['xgrammar_mask_only']]}, engine only {[t['bytes'] for t in x['engine_only']]}"
            + (
                f", taken outside both masks {[t['bytes'] for t in x['taken_outside_both_masks']]}"
                if x["taken_outside_both_masks"]
                else ""
            )
            + ("" if args.allow_xgrammar_disagreements else " — not a pass (--allow-xgrammar-disagreements)")
        )
        record["xgrammar_disagreements"] = report.xgrammar_disagreements
        record["xgrammar_disagreement_examples"] = report.xgrammar_disagreement_examples
    if native is not None:  # the default record stays as it was; a native run says so
        stats = native.stats()
        record["engine"] = "native"
        fallback = "XGrammar itself" if native.xgrammar_fallback else "the compressed engine"
        human.append(
            f"  native: {stats['fallbacks']} requests fell back to {fallback}, σ_in trie "
            f"{stats['trie_nodes']} nodes ({stats['index_source']}, {stats['index_build_seconds']:.2f} s)"
        )
        if native.unavailable:  # why every request fell back (a nested root, an index past its bound)
            human.append(f"  native engine unavailable: {native.unavailable}")
        record["native_fallbacks"] = stats["fallbacks"]
        record["native_index_source"] = stats["index_source"]
    emit(args, human, record)
    return 0 if report.ok else 1


def _parse_batches(text: str) -> list[int]:
    sizes = parse_list(text, int, "--batch", "sizes separated by commas, like 1,8,16")
    if not sizes or min(sizes) < 1:
        raise UsageError(f"--batch sizes must be positive integers (got {text!r})")
    return sizes


def _e2e_prompt(path: Path, docs: list[str]) -> str:
    head = docs[0][:300] if docs else ""
    example = f" like this one:\n{head}" if head else "."
    return f"Write a short document in the language of the grammar {path.stem}{example}"


def _load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "?"


def cmd_startup(args) -> int:
    """``bench --startup``: XGrammar's compile and our ready time, cold and warm, side by side."""
    from ..bench import machine_info, sample_docs
    from ..grammar.diagnostics import GrammarError
    from ..startup import format_rows, measure_startup

    name, kind = grammar_argument(args)
    path, text = grammar_text(name, kind)
    if kind == "auto":
        from ..grammar.sources import detect_kind

        kind = detect_kind(text, str(path))
    vocab = load_vocab(args.tokenizer)
    docs = read_docs(args.docs)
    if not docs:
        instance = path.with_name(path.stem + ".instance.json")  # the JSON-Schema-Test-Suite layout
        docs = [instance.read_text(encoding="utf-8")] if instance.is_file() else sample_docs(path)
    load_before = _load_average()
    try:
        result = measure_startup(text, vocab, kind=kind, name=path.stem, docs=docs, steps=args.startup_steps)
    except GrammarError as exc:
        raise UsageError(f"grammar {path} has errors:\n{exc.render()}") from None
    load_after = _load_average()
    machine = machine_info()
    human = [
        f"{path} × {vocab.name} ({vocab.vocab_size} tokens), {result.kind}: start-up in ms, this process, side by side",
        *format_rows([result]),
        f"ours ÷ XGrammar's compile_{'json_schema' if result.kind == 'json_schema' else 'grammar'}; cold = nothing "
        f"cached (writing the cache entry after: {result.cold_write_s * 1e3:.1f} ms), warm = from the cache directory; "
        f"steps: median mask + accept over {result.steps} tokens; {result.classes} classes, index {result.index_source}",
        f"load average {load_before} before, {load_after} after; machine: {machine['cpu']}, {machine['cores']} cores, "
        f"xgrammar {machine['xgrammar']}",
    ]
    emit(args, human, {**result.to_dict(), "load_before": load_before, "load_after": load_after, "machine": machine})
    return 0


def cmd_bench(args) -> int:
    if args.spec and args.startup:
        raise UsageError("--spec and --startup are two measurements: give one")
    if args.startup:
        return cmd_startup(args)
    if args.spec:
        from .spec import cmd_spec

        return cmd_spec(args)
    from ..bench import (
        ENGINE_NAMES,
        NEVER,
        bench_e2e,
        bench_engines,
        break_even,
        machine_info,
        one_off_seconds,
        pays_text,
    )
    from ..engine import GrammarCompileError

    batches = _parse_batches(args.batch)
    names = parse_list(
        args.engines, str, "--engines", f"engine names separated by commas, from {','.join(ENGINE_NAMES)}"
    )
    bad = [n for n in names if n not in ENGINE_NAMES]
    if bad or not names:
        raise UsageError(f"--engines takes names from {', '.join(ENGINE_NAMES)} (got {args.engines!r})")
    names = list(dict.fromkeys(names))
    fill_untimed = (
        parse_list(args.fill_untimed, str, "--fill-untimed", "engine names separated by commas")
        if args.fill_untimed
        else []
    )
    if any(n not in ENGINE_NAMES for n in fill_untimed):
        raise UsageError(f"--fill-untimed takes names from {', '.join(ENGINE_NAMES)} (got {args.fill_untimed!r})")
    path, compiled, vocab, classes, docs, source = engine_inputs(args)
    try:
        from ..engine import compile_engines

        engines = compile_engines(compiled.text, vocab, classes)
        # Does it pay? Each engine's one-off cost beyond plain XGrammar's, timed here: the
        # compressed grammar's XGrammar compile (first use; cached per process afterwards)
        # and the native engine (its index built, or read with the classes), plus classing
        # (from the classes' metadata) or the cache's load (timed again here: a warm re-read,
        # a lower bound). The native engine compiles no XGrammar grammar unless a request
        # falls back (then on first need), so its one-off leaves the compressed compile out.
        started = time.perf_counter()
        _ = engines.compressed_grammar
        compile_s = {"compressed": time.perf_counter() - started}
        started = time.perf_counter()
        native = args_native_engine(args, compiled, vocab, classes, engines) if "native" in names else None
        compile_s["native"] = time.perf_counter() - started
        cache_load_s = None
        if args.classes:
            from ..cache.format import load_classes

            started = time.perf_counter()
            load_classes(args.classes, grammar_text=compiled.text, vocab=vocab)
            cache_load_s = time.perf_counter() - started
        elif args.classes_for.source == "cache":
            cache_load_s = args.classes_for.seconds  # the cache directory's entry, read and checked
        classing_s = float(classes.metadata.get("classing_seconds") or 0.0) + sum(compiled.seconds.values())
        result = bench_engines(
            compiled.text,
            vocab,
            classes,
            docs=docs,
            source=source,
            batch_sizes=batches,
            steps=args.steps,
            seed=args.seed,
            engines=engines,
            engine_names=names,
            native=native,
            fill_untimed=fill_untimed,
        )
    except GrammarCompileError as exc:
        raise UsageError(f"XGrammar refuses grammar {path}: {exc}") from None
    machine = machine_info()
    human = [
        f"{path} × {vocab.name}: {vocab.vocab_size} tokens → {classes.num_classes} classes; "
        f"{result.path_tokens} tokens replayed from {result.paths} {result.source} paths, "
        f"{result.batches[0].steps} steps timed (spread evenly over them)",
        f"{'batch':>5} {'steps':>5} | {'plain fill':>19} {'plain+apply':>19} | {'comp. fill':>19} {'comp.+expand':>19} "
        f"{'comp.+expand+apply':>19} | {'fill ratio':>19} {'total ratio':>19}",
        f"{'':>5} {'':>5} | {'median / p90 µs':>19} {'median / p90 µs':>19} | {'median / p90 µs':>19} {'median / p90 µs':>19} "
        f"{'median / p90 µs':>19} | {'median / p90':>19} {'median / p90':>19}",
    ]
    for b in result.batches:

        def q(x):
            return f"{x.median_us:8.1f} / {x.p90_us:8.1f}"

        human.append(
            f"{b.batch:>5} {b.steps:>5} | {q(b.plain_fill):>17} {q(b.plain_total):>17} | {q(b.compressed_fill):>17} "
            f"{q(b.compressed_expanded):>19} {q(b.compressed_total):>19} | "
            f"{b.speedup_median:>8.2f}x / {b.speedup_p90:>7.2f}x {b.speedup_total_median:>8.2f}x / {b.speedup_total_p90:>7.2f}x"
        )
    human.append(
        "fill ratio = plain fill ÷ compressed (fill + expand); total ratio = plain (fill + apply) ÷ compressed (fill + expand + apply)"
    )
    if names != ["plain", "compressed"]:
        human.append(
            f"per engine: packed vocabulary mask (median / p90 µs) and accept_token (median µs), {', '.join(names)}:"
        )
        for b in result.batches:
            summary = b.summary(names)
            cells = [
                f"{e} {summary[f'{e}_mask_median_us']:.1f} / {summary[f'{e}_mask_p90_us']:.1f}, "
                f"accept {summary[f'{e}_accept_median_us']:.1f}"
                for e in names
            ]
            ratios = [f"{k} {v:.2f}x" for k, v in summary.items() if k.startswith("native_vs")]
            human.append(f"  batch {b.batch}: " + "; ".join(cells + ratios))
        if native is not None:
            st = native.stats()
            human.append(
                f"  native: σ_in trie {st['trie_nodes']} nodes ({st['index_source']}, {st['index_build_seconds']:.2f} s), "
                f"{st['fallbacks']} fallbacks to the compressed engine"
            )
    for b in result.batches:
        e = b.expansion
        if e:
            human.append(
                f"expansion alone, batch {b.batch}: to_vocab_bitmask {e['to_vocab_bitmask']['median_us']:.1f} µs, "
                f"mask_logits_ {e['mask_logits_']['median_us']:.1f} µs (median, {e['vocab_size']} tokens)"
            )
    record = {
        "grammar": str(path),
        "tokenizer": vocab.name,
        "batch": result.batches[0].batch,
        "plain_fill_median_us": round(result.batches[0].plain_fill.median_us, 2),
        "compressed_total_median_us": round(result.batches[0].compressed_expanded.median_us, 2),
        "speedup_median": round(result.batches[0].speedup_median, 3),
        "speedup_p90": round(result.batches[0].speedup_p90, 3),
        "batches": [
            {
                "batch": b.batch,
                "steps": b.steps,
                "plain_fill_median_us": round(b.plain_fill.median_us, 2),
                "plain_fill_p90_us": round(b.plain_fill.p90_us, 2),
                "plain_applied_median_us": round(b.plain_total.median_us, 2),
                "compressed_fill_median_us": round(b.compressed_fill.median_us, 2),
                "compressed_expanded_median_us": round(b.compressed_expanded.median_us, 2),
                "compressed_expanded_p90_us": round(b.compressed_expanded.p90_us, 2),
                "compressed_applied_median_us": round(b.compressed_total.median_us, 2),
                "compressed_applied_p90_us": round(b.compressed_total.p90_us, 2),
                "speedup_median": round(b.speedup_median, 3),
                "speedup_p90": round(b.speedup_p90, 3),
                "speedup_applied_median": round(b.speedup_total_median, 3),
                "speedup_applied_p90": round(b.speedup_total_p90, 3),
                "expansion_median_us": round(b.expansion["mask_logits_"]["median_us"], 2) if b.expansion else None,
            }
            for b in result.batches
        ],
        "classes": classes.num_classes,
        "engines": names,
        "fill_untimed": fill_untimed,
        "machine": machine,
    }

    # JSON keys per engine E: E_total_median_us / E_total_p90_us = the packed vocabulary mask
    # (fill + expansion: the measure the project reports), E_applied_* = that mask applied to
    # float32 logits, E_accept_median_us; native_vs_* are ratios of E_total_*.
    def json_keys(summary: dict) -> dict:
        return {k.replace("_total_", "_applied_").replace("_mask_", "_total_"): v for k, v in summary.items()}

    record.update(json_keys(result.batches[0].summary(names)))
    for entry, b in zip(record["batches"], result.batches):
        entry.update(json_keys(b.summary(names)))
    if native is not None:
        record["native_stats"] = native.stats()
    first = result.batches[0]
    plain_s = first.mask_quantiles("plain").median_us * 1e-6
    record["one_off_seconds"] = {}
    for e in (e for e in names if e != "plain" and "plain" in names):
        one_off = one_off_seconds(classing_s=classing_s, compile_s=compile_s[e], cache_load_s=cache_load_s)
        engine_s = first.mask_quantiles(e).median_us * 1e-6
        steps = break_even(one_off, plain_s, engine_s)
        tokens = steps if steps == NEVER else steps * first.batch  # a step decodes one token per row
        record[f"{e}_pays_after_tokens"] = None if tokens == NEVER else tokens
        record["one_off_seconds"][e] = round(one_off, 6)  # µs: the break-even can be re-derived from it
        if len(record["one_off_seconds"]) == 1:
            how = f"cache load {cache_load_s:.3f} s" if cache_load_s is not None else f"classing {classing_s:.2f} s"
            human.append(
                f"does it pay? (batch {first.batch}, median mask per step vs plain; one-off = {how} + compile)"
            )
        human.append(
            f"  {e}: one-off {one_off:.2f} s (compile {compile_s[e]:.2f} s), {pays_text(tokens, plain_s, engine_s)}"
        )
    if args.e2e:
        try:
            e2e = bench_e2e(compiled.text, _e2e_prompt(path, docs), max_new_tokens=32)
        except CfgzipError as exc:  # missing model package, conversion failure
            raise UsageError(f"end-to-end benchmark needs SmolLM2: {exc}") from None
        human.append(
            f"end to end, {e2e.model} on {e2e.device}, greedy, {e2e.max_new_tokens} new tokens, 1 torch thread:"
        )
        for name, rate in e2e.tokens_per_second.items():
            human.append(
                f"  {name:<10} {rate:8.1f} tokens/s  ({e2e.tokens[name]} tokens, mask {e2e.mask_ms_median[name]:.2f} ms median)"
            )
        human.append(f"  plain and compressed texts identical: {e2e.same_text}")
        record["e2e"] = e2e.to_dict()
    human.append(
        f"machine: {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, xgrammar {machine['xgrammar']}"
    )
    emit(args, human, record)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    v = add_json_flag(
        sub.add_parser("verify", help="check that compressed masks equal plain XGrammar masks, bit for bit")
    )
    add_grammar_arguments(v)
    v.add_argument("--tokenizer", required=True)
    v.add_argument("--walks", type=int, default=20, help="random constrained walks")
    v.add_argument("--steps", type=int, default=64, help="tokens per walk, at most")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--docs", nargs="+", metavar="FILE", help="documents to replay (default: the grammar's samples)")
    v.add_argument(
        "--classes", metavar="CACHE", help="a class cache from `compress` (default: the cache directory, or class now)"
    )
    add_cache_flag(v)
    v.add_argument("--max-doc-tokens", type=int, default=None, help="replay at most this many tokens per document")
    v.add_argument(
        "--engine",
        choices=("compressed", "native"),
        default="compressed",
        help="the engine checked against plain XGrammar (default compressed)",
    )
    v.add_argument(
        "--allow-xgrammar-disagreements",
        action="store_true",
        help="pass when the only differences are steps where XGrammar's mask contradicts its own matcher",
    )
    v.set_defaults(func=cmd_verify)

    b = add_json_flag(sub.add_parser("bench", help="per-step mask time, plain XGrammar vs compressed, side by side"))
    add_grammar_arguments(b)
    b.add_argument("--tokenizer", required=True)
    b.add_argument("--batch", default="1", help="batch sizes, comma separated (default 1)")
    b.add_argument("--docs", nargs="+", metavar="FILE", help="documents to replay (default: the grammar's samples)")
    b.add_argument(
        "--classes", metavar="CACHE", help="a class cache from `compress` (default: the cache directory, or class now)"
    )
    add_cache_flag(b)
    b.add_argument(
        "--steps",
        type=int,
        default=200,
        help="steps timed per batch size, spread evenly over the whole documents (0: every step)",
    )
    b.add_argument("--seed", type=int, default=0, help="seed of the random walks (grammars without documents)")
    b.add_argument("--e2e", action="store_true", help="also end-to-end tokens/s with SmolLM2")
    b.add_argument(
        "--engines",
        default="plain,compressed",
        help="engines to time, comma separated, from plain,compressed,native (default plain,compressed)",
    )
    b.add_argument(
        "--startup",
        action="store_true",
        help="time start-up instead: XGrammar's compile vs our ready time (cold and from the cache), break-even",
    )
    b.add_argument(
        "--startup-steps", type=int, default=48, help="tokens timed per engine for the break-even (--startup)"
    )
    b.add_argument(
        "--fill-untimed",
        default="",
        help="engines that also fill (untimed) at every step between timed ones, as a decode loop does "
        "(e.g. compressed,native: their memos stay as warm as in decoding)",
    )
    from .spec import add_spec_arguments

    add_spec_arguments(b)
    b.set_defaults(func=cmd_bench)
