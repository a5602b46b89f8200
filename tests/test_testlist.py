"""Test lists (cfgzip_lab.grammar.testlist) and ``cfgzip-lab test``: the file round-trips, bad
files are named, each expectation is judged by the GNF and XGrammar, the CLI exits 0/1/2."""

from __future__ import annotations

import json

import pytest

from cfgzip_lab.cli import main
from cfgzip_lab.errors import CfgzipError
from cfgzip_lab.grammar import testlist
from cfgzip_lab.grammar.testlist import GrammarTest, TestListError, load_tests, run_tests, save_tests
from cfgzip_lab.pipeline import compile_grammar

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""
TESTS = [
    GrammarTest("turn left"),
    GrammarTest("turnleft", "reject", "words must be apart"),
    GrammarTest("turn", "prefix"),
    GrammarTest("go 12; turn right"),
    GrammarTest("go 12;\nturn right", "reject", "no newlines"),
    GrammarTest("é", "reject"),
]


def test_a_tests_file_round_trips_beside_its_grammar(tmp_path):
    grammar = tmp_path / "robot.ebnf"
    path = testlist.tests_path_for(grammar)
    assert path == tmp_path / "robot.tests.json"
    save_tests(path, TESTS, grammar=grammar.name)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["grammar"] == "robot.ebnf" and data["tests"][1] == {
        "text": "turnleft",
        "expect": "reject",
        "note": "words must be apart",
    }
    assert "note" not in data["tests"][0]  # empty notes are left out
    assert load_tests(path) == TESTS
    bare = tmp_path / "bare.json"
    bare.write_text('["a", {"text": "b", "expect": "prefix"}]', encoding="utf-8")
    assert load_tests(bare) == [GrammarTest("a"), GrammarTest("b", "prefix")]


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not JSON at line 1"),
        ('{"tests": 3}', 'expected {"tests": [...]}'),
        ('{"tests": [{"expect": "accept"}]}', 'test 1 needs a "text" string'),
        ('{"tests": [{"text": "a", "expect": "maybe"}]}', "test 1: unknown expectation 'maybe'"),
    ],
)
def test_a_bad_tests_file_is_named(tmp_path, content, message):
    path = tmp_path / "t.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TestListError, match=message.replace("[", r"\[").replace("{", r"\{")):
        load_tests(path)


def test_each_expectation_is_judged():
    compiled = compile_grammar(ROBOT)
    outcomes = run_tests(compiled, TESTS)
    assert [o.got for o in outcomes] == ["accepted", "accepted", "prefix", "accepted", "rejected", "rejected"]
    assert [o.passed for o in outcomes] == [True, False, True, True, True, True]
    assert outcomes[1].describe() == "should reject, got accepted"
    assert outcomes[4].detail == "at line 1, column 7" and outcomes[5].detail == "at line 1, column 1"
    # a second referee that disagrees makes a test fail whatever it expected
    disagree = run_tests(compiled, TESTS[:1], xgrammar=lambda datas: [(0, False)])
    assert not disagree[0].passed and "referees differ" in disagree[0].describe()


def test_cli_test_runs_the_file_with_both_referees(tmp_path, capsys):
    grammar = tmp_path / "robot.ebnf"
    grammar.write_text(ROBOT, encoding="utf-8")
    tests = save_tests(testlist.tests_path_for(grammar), TESTS)
    assert main(["test", str(grammar), str(tests), "--json"]) == 1  # turnleft is accepted: a failure
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("FAIL") and "should reject, got accepted" in out[1]
    record = json.loads(out[-1])
    assert record["passed"] == 5 and record["failed"] == 1
    assert [r["xgrammar"] for r in record["results"]] == [
        "accepted",
        "accepted",
        "prefix",
        "accepted",
        "rejected",
        "rejected",
    ]
    passing = save_tests(tmp_path / "ok.tests.json", [t for t in TESTS if t.text != "turnleft"])
    assert main(["test", str(grammar), str(passing)]) == 0
    assert "5 of 5 tests pass" in capsys.readouterr().out
    assert main(["test", str(grammar), str(tmp_path / "missing.json")]) == 2
    assert "cannot read tests file" in capsys.readouterr().err


# Tests of one rule (issue 35: a start-rule picker): judged from that rule by both referees.
RULE_TESTS = [
    GrammarTest("left", start="turn"),
    GrammarTest("turn left", "reject", start="turn"),
    GrammarTest("lef", "prefix", start="turn"),
    GrammarTest("12", start="number"),
    GrammarTest("turn left"),  # from the root, beside them
    GrammarTest("left", "reject"),  # the same string from the root: not a command
]


def test_a_test_is_judged_from_its_start_rule_by_both_referees():
    from cfgzip_lab.cli.testing import xgrammar_matches

    compiled = compile_grammar(ROBOT)
    called = []

    def referee(datas, start="root"):
        called.append(start)
        return xgrammar_matches(compiled.text, datas, start=start)

    outcomes = run_tests(compiled, RULE_TESTS, xgrammar=referee)
    assert [o.got for o in outcomes] == ["accepted", "rejected", "prefix", "accepted", "accepted", "rejected"]
    assert [o.xgrammar for o in outcomes] == [o.got for o in outcomes]  # XGrammar from the same rule
    assert all(o.passed for o in outcomes), [o.describe() for o in outcomes]
    assert sorted(called) == ["number", "root", "turn"]  # one XGrammar compile per start rule
    # the root's grammar never sees them: from the root "left" is refused at its first character
    assert outcomes[5].detail == "at line 1, column 1"


def test_a_start_rule_the_grammar_lacks_fails_and_says_so():
    outcomes = run_tests(compile_grammar(ROBOT), [GrammarTest("left", start="direction"), GrammarTest("turn left")])
    assert outcomes[0].got == "no rule" and not outcomes[0].passed
    assert outcomes[0].describe() == "should accept, but no rule 'direction' in the grammar"
    assert outcomes[1].passed  # the other tests still run
    endless = compile_grammar('root ::= "a" | loop\nloop ::= "b" loop\n')
    (outcome,) = run_tests(endless, [GrammarTest("b", start="loop")])
    assert outcome.got == "no language" and not outcome.passed
    assert outcome.describe().startswith("should accept, but the language of 'loop' is empty")


def test_a_start_rule_round_trips_in_the_tests_file(tmp_path):
    path = save_tests(tmp_path / "robot.tests.json", RULE_TESTS)
    rows = json.loads(path.read_text(encoding="utf-8"))["tests"]
    assert rows[0] == {"text": "left", "expect": "accept", "start": "turn"}
    assert "start" not in rows[4]  # the root's tests name none
    assert load_tests(path) == RULE_TESTS
    bad = tmp_path / "bad.json"
    bad.write_text('{"tests": [{"text": "a", "start": 3}]}', encoding="utf-8")
    with pytest.raises(TestListError, match=r"test 1: \"start\" must name a rule"):
        load_tests(bad)


def test_cli_test_honours_each_tests_start_rule(tmp_path, capsys):
    grammar = tmp_path / "robot.ebnf"
    grammar.write_text(ROBOT, encoding="utf-8")
    tests = save_tests(tmp_path / "robot.tests.json", RULE_TESTS)
    assert main(["test", str(grammar), str(tests), "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok") and out[0].endswith("(from turn)")
    record = json.loads(out[-1])
    assert record["passed"] == 6 and record["results"][0]["start"] == "turn"
    assert [r["xgrammar"] for r in record["results"]] == [
        "accepted",
        "rejected",
        "prefix",
        "accepted",
        "accepted",
        "rejected",
    ]
    # the same strings without their start rule: the rule's own strings fail from the root
    save_tests(tests, [GrammarTest(t.text, t.expect) for t in RULE_TESTS])
    assert main(["test", str(grammar), str(tests)]) == 1
    assert "2 of 6 tests pass" in capsys.readouterr().out


def test_a_rule_parses_as_its_own_start():
    from cfgzip_lab.grammar.earley import EarleyGrammar
    from cfgzip_lab.pipeline import compile_from_rule

    compiled = compile_grammar(ROBOT)
    turn = compile_from_rule(compiled, "turn")
    assert turn.gnf.accepts(b"right") and not turn.gnf.accepts(b"turn right")
    assert compiled.from_rule("turn") is compiled.from_rule("turn")  # built once per rule
    assert compile_from_rule(compiled, "root") is compiled
    parse = EarleyGrammar(compiled.ast).parse("go 7", start="command")
    assert parse.accepted and parse.tree.label == "command" and parse.tree.bracketed("go 7").startswith("command[go")
    with pytest.raises(CfgzipError, match="no rule 'nope'"):
        compile_from_rule(compiled, "nope")
