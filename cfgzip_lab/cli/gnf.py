"""``cfgzip-lab gnf``: a grammar to Greibach normal form, with its size after each step."""

from __future__ import annotations

import argparse
import time

from ._common import add_grammar_arguments, add_json_flag, emit, read_grammar_arguments

__all__ = ["register", "cmd_gnf"]


def cmd_gnf(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    path, compiled = read_grammar_arguments(args)
    seconds = time.perf_counter() - t0
    g = compiled.gnf
    human = [f"{'step':<22} {'nonterminals':>12} {'DAG nodes':>10} {'productions':>14} {'seconds':>8}"]
    for s in g.steps:
        human.append(f"{s.name:<22} {s.nonterminals:>12,} {s.dag_nodes:>10,} {s.productions:>14,} {s.seconds:>8.3f}")
    if args.show:
        human.append(g.to_text(args.show))
    if args.symbols:
        # What each GNF nonterminal stands for in the author's grammar (S0, expr@3, 'e' ...).
        human += [f"{i:>6}  {g.names[i]:<24} {g.describe_symbol(i)}" for i in range(min(args.symbols, len(g.names)))]
    source = compiled.grammar_source
    if source is not None and source.kind != "ebnf":
        human += [f"{path} ({source.kind}): {note}" for note in source.notes]
    human.append(
        f"{path}: {len(compiled.ast.rules):,} rules, {compiled.cfg.num_productions:,} byte-CFG productions, "
        f"GNF {g.num_nonterminals:,} nonterminals, {g.dag_nodes:,} DAG nodes standing for {g.num_productions:,} "
        f"productions, {seconds:.2f} s"
    )
    emit(
        args,
        human,
        {
            "grammar": str(path),
            "kind": compiled.grammar_source.kind if compiled.grammar_source else "ebnf",
            "rules": len(compiled.ast.rules),
            "cfg_productions": compiled.cfg.num_productions,
            "gnf_productions": g.num_productions,
            "gnf_nonterminals": g.num_nonterminals,
            "gnf_dag_nodes": g.dag_nodes,
            "seconds": round(seconds, 4),
        },
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    g = add_json_flag(sub.add_parser("gnf", help="convert a grammar to Greibach normal form and report sizes per step"))
    add_grammar_arguments(g)
    g.add_argument("--show", type=int, default=0, metavar="N", help="also print the first N GNF productions")
    g.add_argument(
        "--symbols",
        type=int,
        default=0,
        metavar="N",
        help="also print what the first N GNF nonterminals stand for in the grammar (rule, construct, line)",
    )
    g.set_defaults(func=cmd_gnf)
