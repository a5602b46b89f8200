"""``cfgzip-lab bench --spec``: the speculative-decoding calls, the native matcher beside XGrammar's.

A thin view over :mod:`cfgzip_lab.spec_bench` (what is timed and compared is said there): the
grammar, vocabulary, classes and documents come as for every ``bench`` (``_classes.engine_inputs``); the
flags below choose the positions, draft lengths, tree size and repeats. Prints the table (p50 and
p99 per call, XGrammar / native, each call in native fills), the mask comparison and the machine;
with ``--json`` the record as the last line. Exits 1 when a mask row differs.
"""

from __future__ import annotations

import argparse

from ._classes import args_native_engine, engine_inputs
from ._common import UsageError, emit, parse_list

__all__ = ["add_spec_arguments", "cmd_spec"]


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` flags of the speculative-decoding measurement."""
    from ..spec_bench import SpecSettings

    default = SpecSettings()
    parser.add_argument(
        "--spec",
        action="store_true",
        help="time the speculative-decoding calls instead (fork, k-position draft fills, a draft tree), "
        "native beside XGrammar, and compare every mask row",
    )
    parser.add_argument(
        "--spec-positions", type=int, default=default.positions, help="prefixes timed (--spec; default %(default)s)"
    )
    parser.add_argument(
        "--spec-ks",
        default=",".join(map(str, default.ks)),
        help="draft lengths, comma separated (--spec; default %(default)s)",
    )
    parser.add_argument(
        "--tree-nodes",
        type=int,
        default=default.tree_nodes,
        help="nodes of the draft tree (--spec; default %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=default.repeats,
        help="timings per call and position (--spec; default %(default)s)",
    )


def _settings(args: argparse.Namespace):
    from ..spec_bench import SpecSettings

    ks = parse_list(args.spec_ks, int, "--spec-ks", "draft lengths separated by commas, like 4,8,16")
    if not ks or min(ks) < 1:
        raise UsageError(f"--spec-ks takes positive draft lengths (got {args.spec_ks!r})")
    for flag, value in (("--spec-positions", args.spec_positions), ("--tree-nodes", args.tree_nodes)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1 (got {value})")
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    return SpecSettings(
        positions=args.spec_positions, ks=tuple(ks), tree_nodes=args.tree_nodes, repeats=args.repeats, seed=args.seed
    )


def cmd_spec(args: argparse.Namespace) -> int:
    from ..bench import machine_info
    from ..engine import GrammarCompileError, compile_engines
    from ..spec_bench import measure_spec, spec_table

    settings = _settings(args)
    path, compiled, vocab, classes, docs, source = engine_inputs(args)
    try:
        engines = compile_engines(compiled.text, vocab, classes)
        native = args_native_engine(args, compiled, vocab, classes, engines)
        result = measure_spec(
            compiled, vocab, classes, docs, name=path.stem, settings=settings, engines=engines, native_engine=native
        )
    except GrammarCompileError as exc:
        raise UsageError(f"XGrammar refuses grammar {path}: {exc}") from None
    machine = machine_info()
    human = [
        f"{path} × {vocab.name}: speculative-decoding calls at {result['positions']} prefixes of the {source}, "
        "native matcher beside XGrammar's (the whole vocabulary), this process",
        spec_table(result),
        f"machine: {machine['cpu']}, {machine['cores']} cores, xgrammar {machine['xgrammar']}; wall time (perf_counter)",
    ]
    if result["differing_rows"]:
        human.append(f"MISMATCH: {result['differing_rows']} mask rows differ from XGrammar's")
    emit(args, human, {**result, "source": source, "machine": machine})
    return 1 if result["differing_rows"] else 0
