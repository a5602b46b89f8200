"""``cfgzip-lab test``: run a grammar's test list (``NAME.tests.json``, see
:mod:`cfgzip_lab.grammar.testlist`): each string should be accepted, rejected or a valid prefix.

Both referees judge every test: cfgzip's GNF and XGrammar itself (compiled here with a vocabulary
of the 256 bytes, the strings fed byte by byte, as the workbench's XGrammar child does); a test
passes when the GNF gives what it expects and XGrammar agrees. A test with ``"start": RULE`` is
judged from that rule instead of the root, by both. Exit status 0 when all pass, 1
when one fails, 2 on bad input (a grammar or tests file that cannot be read).
"""

from __future__ import annotations

import argparse

from ._common import UsageError, add_grammar_arguments, add_json_flag, emit, grammar_argument, read_grammar

__all__ = ["register", "cmd_test", "xgrammar_matches"]


def xgrammar_matches(ebnf: str, datas: list[bytes], *, start: str = "root") -> list[tuple[int, bool]]:
    """``(bytes XGrammar accepts, whole string a sentence)`` for each string, in this process,
    from rule ``start`` (a test's start rule; XGrammar's ``root_rule_name``)."""
    import xgrammar as xgr

    stop = 256
    vocab = [bytes([b]) for b in range(256)] + [b""]
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=[stop]))
    compiled = compiler.compile_grammar(xgr.Grammar.from_ebnf(ebnf, root_rule_name=start))
    out = []
    for data in datas:
        matcher = xgr.GrammarMatcher(compiled)
        for i in range(len(data)):
            if not matcher.accept_string(data[i : i + 1]):
                out.append((i, False))
                break
        else:
            out.append((len(data), matcher.accept_token(stop)))
    return out


def cmd_test(args: argparse.Namespace) -> int:
    from ..grammar.testlist import TestListError, load_tests, run_tests

    path, compiled = read_grammar(*grammar_argument(args))
    try:
        tests = load_tests(args.tests)
    except TestListError as exc:
        raise UsageError(str(exc)) from None
    referee = (
        None if args.no_xgrammar else (lambda datas, start="root": xgrammar_matches(compiled.text, datas, start=start))
    )
    outcomes = run_tests(compiled, tests, xgrammar=referee)
    human = []
    for i, o in enumerate(outcomes, 1):
        shown = o.test.text if len(o.test.text) <= 60 else o.test.text[:57] + "…"
        rule = f" (from {o.test.start})" if o.test.start else ""
        human.append(f"{'ok  ' if o.passed else 'FAIL'} {i:>3}  {shown!r:<64} {o.describe()}{rule}")
    failed = [o for o in outcomes if not o.passed]
    human.append(f"{path}: {len(outcomes) - len(failed)} of {len(outcomes)} tests pass ({args.tests})")
    emit(
        args,
        human,
        {
            "grammar": str(path),
            "tests": str(args.tests),
            "passed": len(outcomes) - len(failed),
            "failed": len(failed),
            "results": [
                {"text": o.test.text, "expect": o.test.expect, "got": o.got, "xgrammar": o.xgrammar, "passed": o.passed}
                | ({"start": o.test.start} if o.test.start else {})
                for o in outcomes
            ],
        },
    )
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    t = add_json_flag(
        sub.add_parser("test", help="run a grammar's test list: strings it should accept, reject or take as a prefix")
    )
    add_grammar_arguments(t)
    t.add_argument("tests", help='a tests file (JSON: {"tests": [{"text": ..., "expect": "accept|reject|prefix"}]})')
    t.add_argument("--no-xgrammar", action="store_true", help="judge with cfgzip's GNF only (no XGrammar referee)")
    t.set_defaults(func=cmd_test)
