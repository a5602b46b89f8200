"""A grammar's test list: sample strings with what the author expects of each, in a small JSON
file beside the grammar, run by the workbench on every check and by ``cfgzip-lab test``.

regex101 keeps unit tests beside a pattern ("should match", "should not match"); a grammar
author needs three expectations, since a string can also be a valid *prefix* (every character
fits, the end is missing: what a decoder sees mid-way)::

    {
      "grammar": "robot.ebnf",
      "tests": [
        {"text": "turn left", "expect": "accept"},
        {"text": "turnleft", "expect": "reject", "note": "words must be apart"},
        {"text": "turn", "expect": "prefix"},
        {"text": "right", "expect": "accept", "start": "turn"}
      ]
    }

A test with ``start`` is judged from that rule instead of the root (the language of one rule:
a ``value`` of a JSON grammar, one ``statement``), by both referees
(:meth:`~cfgzip_lab.pipeline.CompiledGrammar.from_rule`, XGrammar's ``root_rule_name``).

:func:`tests_path_for` names the file beside a grammar (``robot.ebnf`` → ``robot.tests.json``).
:func:`run_tests` judges each test with the GNF (``GNF.accepts``, the referee classing relies
on); a second referee (XGrammar, in-process for the CLI or in the workbench's child process) can
be passed as ``xgrammar``, and a test whose two verdicts differ fails whatever it expected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import CfgzipError
from .diagnostics import GrammarError

__all__ = [
    "EXPECTATIONS",
    "GrammarTest",
    "TestOutcome",
    "TestListError",
    "load_tests",
    "save_tests",
    "tests_path_for",
    "run_tests",
    "verdict_of",
]

#: what a test can expect of its string
EXPECTATIONS = ("accept", "reject", "prefix")
_WORDS = {"accept": "should accept", "reject": "should reject", "prefix": "valid prefix"}
FORMAT = "cfgzip-tests/1"


class TestListError(CfgzipError, ValueError):
    """A tests file that cannot be read (bad JSON, an unknown expectation), with where."""

    __test__ = False


@dataclass(frozen=True, slots=True)
class GrammarTest:
    """One test: the string and what it should be: ``accept`` (a sentence), ``reject`` (not even
    a valid prefix) or ``prefix`` (a valid prefix that is not a sentence yet)."""

    text: str
    expect: str = "accept"
    note: str = ""
    start: str = ""  # the rule it is parsed from; "" for the grammar's root

    __test__ = False  # not a pytest test class, whatever its name

    def __post_init__(self) -> None:
        if self.expect not in EXPECTATIONS:
            raise TestListError(f"unknown expectation {self.expect!r}: expected one of {', '.join(EXPECTATIONS)}")

    @property
    def words(self) -> str:
        return _WORDS[self.expect]

    def start_or(self, root: str) -> str:
        """The rule this test is parsed from (``root`` when it names none)."""
        return self.start or root


@dataclass(frozen=True, slots=True)
class TestOutcome:
    """A test and what the grammar made of it: ``got`` is ``accepted``, ``prefix`` or
    ``rejected`` (our GNF), or ``no rule`` when the test's start rule is not in the grammar and
    ``no language`` when no string derives from it (it then fails, ``detail`` says why); ``xgrammar`` the same from XGrammar when it was asked;
    ``passed`` when ``got`` is what the test expects and the referees agree. ``position``: bytes
    that fit."""

    test: GrammarTest
    got: str
    position: int
    xgrammar: str | None = None
    detail: str = ""

    __test__ = False

    @property
    def agree(self) -> bool | None:
        return None if self.xgrammar is None else self.xgrammar == self.got

    @property
    def passed(self) -> bool:
        wanted = {"accept": "accepted", "reject": "rejected", "prefix": "prefix"}[self.test.expect]
        return self.got == wanted and self.agree is not False

    def describe(self) -> str:
        if self.got in ("no rule", "no language"):
            return f"{self.test.words}, but {self.detail}"
        got = {"accepted": "accepted", "prefix": "a valid prefix", "rejected": "rejected"}[self.got]
        if self.agree is False:
            return f"referees differ: cfgzip says {got}, XGrammar says {self.xgrammar}"
        return f"{self.test.words}, got {got}" + (f" ({self.detail})" if self.detail else "")


def verdict_of(gnf, data: bytes) -> tuple[str, int]:
    """``("accepted" | "prefix" | "rejected", bytes that fit)`` by the GNF, with the longest
    viable prefix found by bisection (viable prefixes are closed under taking prefixes)."""
    if gnf.accepts(data):
        return "accepted", len(data)
    if gnf.accepts(data, prefix=True):
        return "prefix", len(data)
    lo, hi = 0, len(data)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if gnf.accepts(data[:mid], prefix=True):
            lo = mid
        else:
            hi = mid - 1
    return "rejected", lo


def run_tests(
    compiled,
    tests: Sequence[GrammarTest],
    *,
    xgrammar: Callable[..., list[tuple[int, bool]]] | None = None,
) -> list[TestOutcome]:
    """Judge every test under ``compiled`` (a :class:`~cfgzip_lab.pipeline.CompiledGrammar`),
    each from its start rule (the root unless the test names another).

    ``xgrammar(datas)``: the second referee, one ``(accepted bytes, complete)`` per string
    (what :meth:`XGrammarChecker.check` and ``xgrammar.GrammarMatcher`` give), or None. It is
    called once per start rule: ``xgrammar(datas)`` for the root's tests, ``xgrammar(datas,
    start=rule)`` for another rule's."""
    root = compiled.ast.root
    groups: dict[str, list[int]] = {}
    for i, test in enumerate(tests):
        groups.setdefault(test.start_or(root), []).append(i)
    out: list[TestOutcome | None] = [None] * len(tests)
    for rule, indices in groups.items():
        try:
            grammar = compiled.from_rule(rule)
        except GrammarError as exc:  # a rule no string derives from
            for i in indices:
                out[i] = TestOutcome(tests[i], "no language", 0, None, exc.diagnostics[0].message)
            continue
        except CfgzipError as exc:  # a rule renamed or removed since the test was written
            for i in indices:
                out[i] = TestOutcome(tests[i], "no rule", 0, None, str(exc).split(" (its rules")[0])
            continue
        datas = [tests[i].text.encode("utf-8") for i in indices]
        theirs = None
        if xgrammar is not None:
            theirs = xgrammar(datas) if rule == root else xgrammar(datas, start=rule)
        for j, (i, data) in enumerate(zip(indices, datas)):
            out[i] = _outcome(grammar, tests[i], data, theirs[j] if theirs is not None else None)
    return out


def _outcome(compiled, test: GrammarTest, data: bytes, theirs: tuple[int, bool] | None) -> TestOutcome:
    got, position = verdict_of(compiled.gnf, data)
    other = None
    if theirs is not None:
        accepted, complete = theirs
        other = "accepted" if complete else ("prefix" if accepted == len(data) else "rejected")
    detail = ""
    if got == "rejected":
        before = data[:position].decode("utf-8", "ignore")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        detail = f"at line {line}, column {column}"
    return TestOutcome(test, got, position, other, detail)


def tests_path_for(grammar_path: str | Path) -> Path:
    """The tests file beside a grammar file: ``dir/robot.ebnf`` → ``dir/robot.tests.json``."""
    return Path(grammar_path).with_suffix(".tests.json")


def save_tests(path: str | Path, tests: Sequence[GrammarTest], *, grammar: str | None = None) -> Path:
    """Write ``tests`` as a tests file (JSON, UTF-8, one test per line for readable diffs)."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"format": FORMAT}
    if grammar:
        head["grammar"] = str(grammar)
    rows = [{k: v for k, v in asdict(t).items() if v or k not in ("note", "start")} for t in tests]
    lines = ",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in rows)
    body = json.dumps(head, ensure_ascii=False)[:-1] + ', "tests": [\n' + lines + ("\n" if rows else "") + "]}\n"
    path.write_text(body, encoding="utf-8")
    return path


def load_tests(path: str | Path) -> list[GrammarTest]:
    """The tests of a tests file (a JSON object with ``tests``, or a bare list of tests)."""
    path = Path(path).expanduser()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TestListError(f"cannot read tests file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TestListError(f"tests file {path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise TestListError(
            f"tests file {path}: not JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    rows = data.get("tests") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise TestListError(f'tests file {path}: expected {{"tests": [...]}} or a list of tests')
    tests = []
    for i, row in enumerate(rows, 1):
        if isinstance(row, str):
            row = {"text": row}
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise TestListError(f'tests file {path}: test {i} needs a "text" string')
        try:
            start = row.get("start", "")
            if not isinstance(start, str):
                raise TestListError(f'"start" must name a rule, not {start!r}')
            tests.append(GrammarTest(row["text"], str(row.get("expect", "accept")), str(row.get("note", "")), start))
        except TestListError as exc:
            raise TestListError(f"tests file {path}: test {i}: {exc}") from None
    return tests
