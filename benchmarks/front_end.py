"""cfgzip's front end, stage by stage, beside XGrammar's own front end, per grammar.

    .venv/bin/python benchmarks/front_end.py [--repeat 20] [GRAMMAR ...]

For each grammar (default: every bundled one): the EBNF parse (``parse_ebnf``), the lowering to
the byte CFG, the checks before the normal form (empty language, dead ends), the GNF, and
XGrammar 0.2.8's ``Grammar.from_ebnf`` (its parser and normalisation: the like-for-like
reference for our parse), each the minimum and the median over ``--repeat`` runs in this one
process (the minimum is the steadier number on a shared machine; the load is printed). Also the
first parse of the process (nothing warmed up) and the import of the parser. Never asserts.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _times(function, repeat: int) -> tuple[float, float]:
    """(min, median) seconds of ``function()`` over ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        runs.append(time.perf_counter() - start)
    return min(runs), statistics.median(runs)


def _first_parse() -> str:
    """Import and first parse in a fresh interpreter (what a new process pays)."""
    code = (
        "import time; t0 = time.perf_counter(); from cfgzip_lab.grammar.ebnf import parse_ebnf; "
        "t1 = time.perf_counter(); from cfgzip_lab.bundled import bundled_grammars; "
        "text = bundled_grammars()['json'].read_text(); t2 = time.perf_counter(); parse_ebnf(text); "
        "t3 = time.perf_counter(); print(f'{1e3 * (t1 - t0):.1f} {1e3 * (t3 - t2):.2f}')"
    )
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, check=True)
    imported, first = out.stdout.split()
    return f"fresh process: import cfgzip_lab.grammar.ebnf {imported} ms, first parse (json) {first} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*", help="bundled names or files (default: every bundled grammar)")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)

    from importlib.metadata import version

    import xgrammar

    from cfgzip_lab.bundled import bundled_grammars
    from cfgzip_lab.grammar.dead_ends import dead_ends, productive_nonterminals
    from cfgzip_lab.grammar.ebnf import parse_ebnf
    from cfgzip_lab.grammar.gnf import to_gnf
    from cfgzip_lab.grammar.lower import lower
    from cfgzip_lab.pipeline import resolve_grammar

    print(_first_parse())
    names = args.grammars or sorted(bundled_grammars())
    head = (
        f"{'grammar':<26} {'lines':>5} | {'parse ms':>13} | {'lower ms':>13} | {'checks ms':>13} | "
        f"{'GNF ms':>15} | {'XGrammar from_ebnf':>18} | {'parse / XG':>10}"
    )
    print(f"min / median of {args.repeat} runs each")
    print(head)
    print("-" * len(head))
    for name in names:
        path = resolve_grammar(name)
        text = path.read_text(encoding="utf-8")
        ast = parse_ebnf(text)
        cfg = lower(ast)
        parse = _times(lambda: parse_ebnf(text), args.repeat)
        lowering = _times(lambda: lower(ast), args.repeat)
        checks = _times(lambda: dead_ends(cfg, productive_nonterminals(cfg)), args.repeat)
        gnf = _times(lambda: to_gnf(cfg), max(1, args.repeat // 4))
        xg = _times(lambda: xgrammar.Grammar.from_ebnf(text), args.repeat)
        cells = " | ".join(f"{1e3 * lo:>5.2f} / {1e3 * mid:>5.2f}" for lo, mid in (parse, lowering, checks))
        print(
            f"{path.stem:<26} {text.count(chr(10)):>5} | {cells} | {1e3 * gnf[0]:>6.1f} / {1e3 * gnf[1]:>6.1f} | "
            f"{1e3 * xg[0]:>7.2f} / {1e3 * xg[1]:>7.2f} | {parse[0] / xg[0]:>9.2f}x",
            flush=True,
        )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load}, "
        f"python {platform.python_version()}, xgrammar {version('xgrammar')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
