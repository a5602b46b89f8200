"""Headless tests of the author-facing views: Samples (failure context, expected bytes, generated
strings, never stale), Structure (railroad diagrams, NULLABLE/FIRST, per-rule GNF sizes) and
Classes (why in source terms, compare, token search, out-of-date marks). Real XGrammar (child
process), real tokenizers (llama3, smollm2)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from cfgzip_lab.pipeline import resolve_grammar  # noqa: E402
from cfgzip_lab.widgets.session import WorkbenchError, WorkbenchSession  # noqa: E402

EXPR = """root ::= expr
expr ::= term (ws ("+" | "-") ws term)*
term ::= [0-9]+ | "(" ws expr ws ")"
ws ::= [ \\n]*
"""


@pytest.fixture
def session(checker):
    s = WorkbenchSession(EXPR, source="expr", tokenizer="llama3", checker=checker)
    s.compile(xgrammar=False)
    yield s
    s.close()
    s.wait(30)


# ------------------------------------------------------------------------------------ samples


def test_rejected_sample_marks_the_character_and_lists_expected_bytes(session):
    from cfgzip_lab.widgets.samples import SamplesPanel

    panel = SamplesPanel(session)
    panel.set_samples(["1 + 2", "1 +", "1 + * 2", "12\n+ (3 +)"])
    results = panel.check_samples()
    assert [r.ours.kind for r in results] == ["accepted", "prefix", "rejected", "rejected"]
    assert all(r.agree for r in results)
    star = results[2]
    assert star.expected == "\\n, ' ', '(', '0'–'9'" and not star.can_end
    assert re.search(r"line 1: 1 \+ <mark[^>]*>\*</mark> 2", panel.output.value)
    assert 'expected there: <span class="cfgzip-code">\\n, &#x27; &#x27;, &#x27;(&#x27;' in panel.output.value
    second_line = results[3]
    assert (second_line.ours.line, second_line.ours.column) == (2, 7)
    assert re.search(r"line 2: \+ \(3 \+<mark[^>]*>\)</mark>", panel.output.value)
    assert "may come next" in panel.output.value  # the valid prefix "1 +"


def test_generated_strings_are_valid_for_both_referees(session):
    from cfgzip_lab.widgets.samples import SamplesPanel, split_samples

    panel = SamplesPanel(session)
    first = panel.generate_samples(6)
    assert len(first) == 6 and all(r.ours.kind == "accepted" and r.agree for r in first)
    again = panel.generate_samples(6)
    assert [r.text for r in again] != [r.text for r in first]  # a new seed per press
    assert [r.text for r in panel.generate_samples(6, seed=1)] == [r.text for r in first]
    assert "Generated valid strings" in panel.generated_output.value
    panel.set_samples(["1"])
    panel.add_generated()
    assert len(split_samples(panel.text.value)) == 7 and len(panel.results) == 7


def test_samples_are_rechecked_when_the_grammar_changes(session):
    from cfgzip_lab.widgets.samples import SamplesPanel

    panel = SamplesPanel(session)
    panel.set_samples(["1 + 2", "1 * 2"])
    assert [r.ours.kind for r in panel.check_samples()] == ["accepted", "rejected"]
    session.compile(EXPR.replace('("+" | "-")', '("+" | "-" | "*")'), xgrammar=False)
    assert [r.ours.kind for r in panel.results] == ["accepted", "accepted"] and panel.results_current
    session.compile(EXPR.replace("ws ::=", "ws :="), xgrammar=False)  # broken
    assert panel.results == [] and "out of date" in panel.output.value
    session.compile(EXPR, xgrammar=False)
    assert [r.ours.kind for r in panel.results] == ["accepted", "rejected"]


# ---------------------------------------------------------------------------------- structure


def test_structure_shows_railroad_sets_and_rule_sizes(session):
    from cfgzip_lab.widgets.structure import StructurePanel

    panel = StructurePanel(session)
    assert panel.rule_picker.value == "root" and "<svg" in panel.diagram.value
    svg = panel.show_rule("term")
    assert "&quot;(&quot;" in svg and "[0-9]" in svg and panel.rule_picker.value == "term"
    # FIRST as the grammar's own terminals, then as characters
    assert 'starts with: <span class="cfgzip-code">[0-9] | &quot;(&quot;</span>' in panel.diagram.value
    assert '(characters: <span class="cfgzip-code">&#x27;(&#x27;, &#x27;0&#x27;–&#x27;9&#x27;' in panel.diagram.value
    assert "can be followed by:" in panel.diagram.value and "shortest sentence:" in panel.diagram.value
    rows = {r["rule"]: r for r in panel.rule_rows}
    assert rows["ws"]["nullable"] and not rows["term"]["nullable"]
    assert rows["expr"]["left_corners"] == ("term",) and not rows["expr"]["left_recursive"]
    sizes = [r["gnf_productions"] for r in panel.rule_rows]
    assert sizes == sorted(sizes, reverse=True)
    assert "Rules, largest in GNF first" in panel.rules_table.value
    # GNF nonterminals are listed with the source they stand for, not bare internal names
    assert "the repetition (ws (&quot;+&quot; | &quot;-&quot;) ws term)* in rule expr (line 2)" in panel.symbols.value
    panel.more.selected_index = 0
    assert panel.all_diagrams.value.count("<svg") == 4


def test_structure_numbers_have_thousands_separators(session):
    from cfgzip_lab.widgets.structure import StructurePanel

    panel = StructurePanel(session)
    session.compile(resolve_grammar("c_like").read_text(encoding="utf-8"), xgrammar=False)
    gnf = session.compiled.gnf
    assert gnf.num_productions > 1_000_000
    assert f"{gnf.num_productions:,}" in panel.stats.value and str(gnf.num_productions) not in panel.stats.value
    biggest = panel.rule_rows[0]
    assert biggest["gnf_productions"] > 1_000_000
    assert f"{biggest['gnf_productions']:,}" in panel.rules_table.value
    assert panel.figure.layout.yaxis.tickformat == ",d"


# ------------------------------------------------------------------------------------ classes


@pytest.fixture(scope="module")
def classed(checker):
    s = WorkbenchSession(
        resolve_grammar("json").read_text(encoding="utf-8"), source="json", tokenizer="llama3", checker=checker
    )
    s.compile(xgrammar=False)
    assert s.run_classing(wait=True).status == "done", s.errors
    yield s
    s.close()


@pytest.mark.parametrize(
    "typed, expected",
    [
        ("\\n", b"\n"),
        ("\\t", b"\t"),
        ("\\\\", b"\\"),
        ("\\x41\\xff", b"A\xff"),
        ("\\u00e9", "é".encode()),
        ("a b", b"a b"),
        ('\\"', b'"'),
    ],
)
def test_search_escapes_read_as_promised(typed, expected):
    from cfgzip_lab.widgets.classes_panel import decode_escapes

    assert decode_escapes(typed) == expected


@pytest.mark.parametrize("typed", ["\\q", "\\x4", "\\u12", "end\\"])
def test_bad_escapes_are_named(typed):
    from cfgzip_lab.widgets.classes_panel import decode_escapes

    with pytest.raises(WorkbenchError, match="escape"):
        decode_escapes(typed)


def test_token_search_space_number_and_escapes(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    vocab = classed.vocab
    (space,) = panel.search(" ")
    assert vocab.token_bytes[space["token_id"]] == b" "
    (by_id,) = panel.search("12")
    assert by_id["token_id"] == 12 and by_id["match"] == "token id 12"
    (text,) = panel.also_results
    assert vocab.token_bytes[text["token_id"]] == b"12" and "whose text is '12'" in text["match"]
    assert "(token id 12)" in panel.search_output.value and "whose text is" in panel.search_output.value
    panel.search("#12")
    assert panel.also_results == []
    (newline,) = panel.search("\\n")
    assert vocab.token_bytes[newline["token_id"]] == b"\n"
    assert [vocab.token_bytes[r["token_id"]] for r in panel.also_results] == [b"\\n"]
    (raw,) = panel.search("\\xff")
    assert vocab.token_bytes[raw["token_id"]] == b"\xff"
    with pytest.raises(WorkbenchError, match="unknown escape"):
        panel.search("\\q")


def test_why_in_source_terms_with_sigma_details(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    (hit,) = panel.search("'5'")
    assert "are interchangeable: all can come where" in hit["sentence"]
    assert "integer" in hit["rules"]
    assert not re.search(r"@\d|\bS0\b", hit["sentence"])
    out = panel.search_output.value
    assert "In the grammar's terms:" in out
    # bullet lines, not one long sentence; plain words for why it is a class (issue 35.4)
    assert hit["lines"] and out.count("<li>") >= len(hit["lines"]) and "Comes where" in out
    assert "pair(s)" not in out and "fit the grammar in exactly the same" in hit["why"]
    # the exact pairs are behind the details toggle, with a legend from GNF name to source
    details = out[out.index("<details") : out.index("</details>")]
    assert "σ<sub>in</sub>" in details and "stands for" in details and "@" in details


def test_explain_a_class(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    k = int(classed.classes.class_of[classed.vocab.token_bytes.index(b"7")])
    info = panel.explain_class(k)
    assert info["class"] == k and "interchangeable" in info["sentence"]
    assert f"(class {k}, through its representative)" in panel.search_output.value
    with pytest.raises(WorkbenchError, match="does not exist"):
        panel.explain_class(classed.classes.num_classes)


def test_compare_two_tokens(classed):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    panel = ClassesPanel(classed)
    same = panel.compare("1", "7")
    assert same.same and "interchangeable" in same.sentence
    assert (
        classed.classes.class_of[classed.vocab.token_bytes.index(b"1")]
        == classed.classes.class_of[classed.vocab.token_bytes.index(b"7")]
    )
    differ = panel.compare("true", "false")
    assert not differ.same and "are in different classes" in differ.sentence
    assert "[0-9A-Fa-f] in rule escape" in differ.sentence  # 'f' can be a hex digit of \\uXXXX, 't' cannot
    assert "<details>" in panel.compare_output.value and "only &#x27;false&#x27;" in panel.compare_output.value


def test_search_is_marked_out_of_date_then_recomputed(checker):
    from cfgzip_lab.widgets.classes_panel import ClassesPanel

    text = resolve_grammar("json").read_text(encoding="utf-8")
    s = WorkbenchSession(text, source="json", tokenizer="llama3", checker=checker)
    try:
        s.compile(xgrammar=False)
        assert s.run_classing(wait=True).status == "done"
        panel = ClassesPanel(s)
        panel.search("true")
        panel.compare("true", "null")
        assert "out of date" not in panel.search_output.value
        s.compile(text.replace('"null"', '"nil"'), xgrammar=False)
        assert "out of date (made for another version of the grammar" in panel.search_output.value
        assert "out of date" in panel.compare_output.value
        s.compile(text, xgrammar=False)  # the edit undone: current again, the mark goes
        assert "out of date" not in panel.search_output.value and "out of date" not in panel.compare_output.value
        s.compile(text.replace('"null"', '"nil"'), xgrammar=False)
        assert "out of date" in panel.search_output.value
        assert s.run_classing("smollm2", wait=True).status == "done"  # another grammar AND tokenizer
        assert panel.search_stamp.tokenizer == "smollm2" and s.is_current(panel.search_stamp)
        assert "out of date" not in panel.search_output.value
        assert s.is_current(panel.compare_stamp) and "out of date" not in panel.compare_output.value
        (hit,) = panel.search_results
        assert s.vocab.token_bytes[hit["token_id"]] == b"true"
    finally:
        s.close()
        s.wait(30)
