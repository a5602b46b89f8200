"""Test lists (cfgzip_lab.grammar.testlist) and ``cfgzip-lab test``: the file round-trips, bad
files are named, each expectation is judged by the GNF and XGrammar, the CLI exits 0/1/2."""

from __future__ import annotations

import json

import pytest

from cfgzip_lab.cli import main
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
