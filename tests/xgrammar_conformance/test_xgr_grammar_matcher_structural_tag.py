# Copied unchanged from XGrammar 0.2.9 (mlc-ai/xgrammar, the xgrammar-0.2.9 sdist on PyPI):
# tests/python/test_grammar_matcher_structural_tag.py, lines 1-971, under the Apache License 2.0 (LICENSE and NOTICE in this folder).
# Run twice by conftest.py: against xgrammar.GrammarMatcher as published, and with the native matcher in its place.
# Line L of the original is line L+4 here; ORIGINS.md lists every test with its original line.
import hashlib
import json
import sys
import threading
import time
from typing import List

import pytest
from pydantic import BaseModel
from tokenizer_utils import load_tokenizer

import xgrammar as xgr
from xgrammar.testing import _get_masked_tokens_from_bitmask, _is_grammar_accept_string


def test_utf8():
    # Test utf8-encoded string with structural tags
    class Schema(BaseModel):
        arg1: str
        arg2: int

    tags = [
        xgr.StructuralTagItem(begin="，，", schema=Schema, end="。"),
        xgr.StructuralTagItem(begin="，！", schema=Schema, end="。。"),
        xgr.StructuralTagItem(begin="，，？", schema=Schema, end="。。。"),
        xgr.StructuralTagItem(begin="｜｜？", schema=Schema, end="｜？｜"),
    ]
    triggers = ["，", "｜｜"]

    grammar = xgr.Grammar.from_structural_tag(tags, triggers)

    accepted_inputs = [
        '这是无用的内容，，{"arg1": "你好，世界！", "arg2": 0}。这是无用的内容',
        '这是无用的内容，！{"arg1": "こんにちは！", "arg2": 1}。。这是无用的内容',
        '这是无用的内容，，？{"arg1": "안녕하세요！", "arg2": 2}。。。这是无用的内容，！{"arg1": "안녕하세요！", "arg2": 3}。。',
        '这是无用的内容｜｜？{"arg1": "။စ်န, ်ပြ！", "arg2": 0}｜？｜｜｜？{"arg1": "။စ်န, ်ပြ", "arg2": 0}｜？｜',
    ]
    for input_str in accepted_inputs:
        assert _is_grammar_accept_string(grammar, input_str, print_time=True)


expected_grammar_test_structural_tag_after_optimization = r"""basic_escape ::= (([\"\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9])) (=(basic_string_sub))
basic_string_sub ::= (("\"") | ([^\0-\x1f\"\\\r\n] basic_string_sub) | ("\\" basic_escape basic_string_sub)) (=([ \n\r\t]* [,}\]:]))
basic_integer ::= (("0") | (basic_integer_1 [1-9] [0-9]*))
basic_string ::= (("\"" basic_string_sub)) (=(root_part_0 [ \n\r\t]* "}"))
root_0 ::= (("{" [ \n\r\t]* "\"arg1\"" [ \n\r\t]* ":" [ \n\r\t]* basic_string root_part_0 [ \n\r\t]* "}"))
root_part_0 ::= (([ \n\r\t]* "," [ \n\r\t]* "\"arg2\"" [ \n\r\t]* ":" [ \n\r\t]* basic_integer)) (=([ \n\r\t]* "}"))
basic_integer_1 ::= ("" | ("-")) (=([1-9] [0-9]*))
basic_escape_1 ::= (([\"\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9])) (=(basic_string_sub_1))
basic_string_sub_1 ::= (("\"") | ([^\0-\x1f\"\\\r\n] basic_string_sub_1) | ("\\" basic_escape_1 basic_string_sub_1)) (=([ \n\r\t]* [,}\]:]))
basic_number_6 ::= ((basic_number_1_1 basic_number_2_1 basic_number_3_1 basic_number_5_1)) (=(root_part_0_1 [ \n\r\t]* "}"))
basic_string_1 ::= (("\"" basic_string_sub_1))
root_1 ::= (("{" [ \n\r\t]* "\"arg3\"" [ \n\r\t]* ":" [ \n\r\t]* basic_number_6 root_part_0_1 [ \n\r\t]* "}")) (=("</function>"))
root_prop_1 ::= (("[" [ \n\r\t]* basic_string_1 root_prop_1_2 [ \n\r\t]* "]") | ("[" [ \n\r\t]* "]"))
root_prop_1_items ::= (([ \n\r\t]* "," [ \n\r\t]* basic_string_1)) (=(root_prop_1_1))
root_part_0_1 ::= (([ \n\r\t]* "," [ \n\r\t]* "\"arg4\"" [ \n\r\t]* ":" [ \n\r\t]* root_prop_1)) (=([ \n\r\t]* "}"))
basic_number_1_1 ::= ("" | ("-")) (=(basic_number_2_1 basic_number_3_1 basic_number_5_1))
basic_number_2_1 ::= (("0") | ([1-9] [0-9]*)) (=(basic_number_3_1 basic_number_5_1))
basic_number_3_1 ::= ("" | ("." basic_number_3_3)) (=(basic_number_5_1))
basic_number_4_1 ::= ("" | ([+\-])) (=(basic_number_3_3))
basic_number_5_1 ::= ("" | ([eE] basic_number_4_1 basic_number_3_3))
triggered_tags_group ::= (("1>" root_0 "</function>") | ("2>" root_0 "</function>"))
triggered_tags_group_1 ::= ((">" root_1 "</function>"))
triggered_tags ::= TagDispatch(
  ("<function=f", triggered_tags_group),
  ("<function=g", triggered_tags_group_1),
  loop_after_dispatch=true,
  excludes=()
)
root ::= ((triggered_tags))
basic_number_3_2 ::= ("" | ([0-9] basic_number_3_2))
basic_number_3_3 ::= (([0-9] basic_number_3_2))
root_prop_1_1 ::= ("" | (root_prop_1_items root_prop_1_1))
root_prop_1_2 ::= ((root_prop_1_1)) (=([ \n\r\t]* "]"))
"""

expected_grammar_test_structural_tag_before_optimization = r"""basic_escape ::= (([\"\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]))
basic_string_sub ::= (("\"") | ([^\0-\x1f\"\\\r\n] basic_string_sub) | ("\\" basic_escape basic_string_sub)) (=([ \n\r\t]* [,}\]:]))
basic_any ::= ((basic_number) | (basic_string) | (basic_boolean) | (basic_null) | (basic_array) | (basic_object))
basic_integer ::= (("0") | (basic_integer_1 [1-9] [0-9]*))
basic_number ::= ((basic_number_1 basic_number_2 basic_number_3 basic_number_5))
basic_string ::= (("\"" basic_string_sub))
basic_boolean ::= (("true") | ("false"))
basic_null ::= (("null"))
basic_array ::= (("[" [ \n\r\t]* basic_any basic_array_items{0, -1} [ \n\r\t]* "]") | ("[" [ \n\r\t]* "]"))
basic_object ::= (("{" [ \n\r\t]* basic_string [ \n\r\t]* ":" [ \n\r\t]* basic_any basic_object_properties{0, -1} [ \n\r\t]* "}") | ("{" [ \n\r\t]* "}"))
basic_number_digits ::= (([0-9]))
basic_array_items ::= (([ \n\r\t]* "," [ \n\r\t]* basic_any))
basic_object_properties ::= (([ \n\r\t]* "," [ \n\r\t]* basic_string [ \n\r\t]* ":" [ \n\r\t]* basic_any))
root_0 ::= (("{" [ \n\r\t]* "\"arg1\"" [ \n\r\t]* ":" [ \n\r\t]* basic_string root_part_0 [ \n\r\t]* "}"))
root_part_0 ::= (([ \n\r\t]* "," [ \n\r\t]* "\"arg2\"" [ \n\r\t]* ":" [ \n\r\t]* basic_integer))
basic_integer_1 ::= ("" | ("-"))
basic_number_1 ::= ("" | ("-"))
basic_number_2 ::= (("0") | ([1-9] [0-9]*))
basic_number_3 ::= ("" | ("." basic_number_digits{1, -1}))
basic_number_4 ::= ("" | ([+\-]))
basic_number_5 ::= ("" | ([eE] basic_number_4 basic_number_digits{1, -1}))
basic_escape_1 ::= (([\"\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]))
basic_string_sub_1 ::= (("\"") | ([^\0-\x1f\"\\\r\n] basic_string_sub_1) | ("\\" basic_escape_1 basic_string_sub_1)) (=([ \n\r\t]* [,}\]:]))
basic_any_1 ::= ((basic_number_6) | (basic_string_1) | (basic_boolean_1) | (basic_null_1) | (basic_array_1) | (basic_object_1))
basic_integer_2 ::= (("0") | (basic_integer_1_1 [1-9] [0-9]*))
basic_number_6 ::= ((basic_number_1_1 basic_number_2_1 basic_number_3_1 basic_number_5_1))
basic_string_1 ::= (("\"" basic_string_sub_1))
basic_boolean_1 ::= (("true") | ("false"))
basic_null_1 ::= (("null"))
basic_array_1 ::= (("[" [ \n\r\t]* basic_any_1 basic_array_items_1{0, -1} [ \n\r\t]* "]") | ("[" [ \n\r\t]* "]"))
basic_object_1 ::= (("{" [ \n\r\t]* basic_string_1 [ \n\r\t]* ":" [ \n\r\t]* basic_any_1 basic_object_properties_1{0, -1} [ \n\r\t]* "}") | ("{" [ \n\r\t]* "}"))
basic_number_digits_1 ::= (([0-9]))
basic_array_items_1 ::= (([ \n\r\t]* "," [ \n\r\t]* basic_any_1))
basic_object_properties_1 ::= (([ \n\r\t]* "," [ \n\r\t]* basic_string_1 [ \n\r\t]* ":" [ \n\r\t]* basic_any_1))
root_1 ::= (("{" [ \n\r\t]* "\"arg3\"" [ \n\r\t]* ":" [ \n\r\t]* basic_number_6 root_part_0_1 [ \n\r\t]* "}"))
root_prop_1 ::= (("[" [ \n\r\t]* basic_string_1 root_prop_1_items{0, -1} [ \n\r\t]* "]") | ("[" [ \n\r\t]* "]"))
root_prop_1_items ::= (([ \n\r\t]* "," [ \n\r\t]* basic_string_1))
root_part_0_1 ::= (([ \n\r\t]* "," [ \n\r\t]* "\"arg4\"" [ \n\r\t]* ":" [ \n\r\t]* root_prop_1))
basic_integer_1_1 ::= ("" | ("-"))
basic_number_1_1 ::= ("" | ("-"))
basic_number_2_1 ::= (("0") | ([1-9] [0-9]*))
basic_number_3_1 ::= ("" | ("." basic_number_digits_1{1, -1}))
basic_number_4_1 ::= ("" | ([+\-]))
basic_number_5_1 ::= ("" | ([eE] basic_number_4_1 basic_number_digits_1{1, -1}))
triggered_tags_group ::= (("1>" root_0 "</function>") | ("2>" root_0 "</function>"))
triggered_tags_group_1 ::= ((">" root_1 "</function>"))
triggered_tags ::= TagDispatch(
  ("<function=f", triggered_tags_group),
  ("<function=g", triggered_tags_group_1),
  loop_after_dispatch=true,
  excludes=()
)
root ::= ((triggered_tags))
"""


def test_structural_tag():
    class Schema1(BaseModel):
        arg1: str
        arg2: int

    class Schema2(BaseModel):
        arg3: float
        arg4: List[str]

    tags = [
        xgr.StructuralTagItem(begin="<function=f1>", schema=Schema1, end="</function>"),
        xgr.StructuralTagItem(begin="<function=f2>", schema=Schema1, end="</function>"),
        xgr.StructuralTagItem(begin="<function=g>", schema=Schema2, end="</function>"),
    ]
    # in real cases, we should use one trigger: "<function=" and dispatch to two tags
    # but here we use two triggers for testing such cases
    triggers = ["<function=f", "<function=g"]

    grammar = xgr.Grammar.from_structural_tag(tags, triggers)
    assert str(grammar) == expected_grammar_test_structural_tag_before_optimization

    accepted_inputs = [
        '<function=f1>{"arg1": "abc", "arg2": 1}</function>',
        '<function=g>{"arg3": 1.23, "arg4": ["a", "b", "c"]}</function>',
        '<function=f2>{"arg1": "abc", "arg2": 1}</function><function=g>{"arg3": 1.23, "arg4": ["a", "b", "c"]}</function>',
        'hhhh<function=g>{"arg3": 1.23, "arg4": ["a", "b", "c"]}</function>haha<function=f1>{"arg1": "abc", "arg2": 1}</function>123',
    ]
    for input in accepted_inputs:
        assert _is_grammar_accept_string(grammar, input, print_time=True)


def test_structural_tag_compiler():
    class Schema1(BaseModel):
        arg1: str
        arg2: int

    class Schema2(BaseModel):
        arg3: float
        arg4: List[str]

    tags = [
        xgr.StructuralTagItem(begin="<function=f1>", schema=Schema1, end="</function>"),
        xgr.StructuralTagItem(begin="<function=f2>", schema=Schema1, end="</function>"),
        xgr.StructuralTagItem(begin="<function=g>", schema=Schema2, end="</function>"),
    ]

    # in real cases, we should use one trigger: "<function=" and dispatch to two tags
    # but here we use two triggers for testing such cases
    triggers = ["<function=f", "<function=g"]

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]))
    compiled_grammar = compiler.compile_structural_tag(tags, triggers)
    assert str(compiled_grammar.grammar) == expected_grammar_test_structural_tag_after_optimization


@pytest.mark.hf_token_required
def test_structural_tag_mask_gen():
    # Define schemas for the test
    class Schema1(BaseModel):
        arg1: str
        arg2: int

    class Schema2(BaseModel):
        arg3: float
        arg4: List[str]

    # Set up grammar from schemas
    tags = [
        xgr.StructuralTagItem(
            begin="<function=f>", schema=json.dumps(Schema1.model_json_schema()), end="</function>"
        ),
        xgr.StructuralTagItem(
            begin="<function=g>", schema=json.dumps(Schema2.model_json_schema()), end="</function>"
        ),
    ]
    triggers = ["<function=f", "<function=g"]

    # Set up tokenizer
    tokenizer_id = "meta-llama/Llama-3.1-8B-Instruct"
    tokenizer = load_tokenizer(tokenizer_id, use_fast=True, trust_remote_code=True)
    tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer)

    # Compile grammar and create matcher
    compiler = xgr.GrammarCompiler(tokenizer_info)
    time_start = time.monotonic_ns()
    compiled_grammar = compiler.compile_structural_tag(tags, triggers)
    matcher = xgr.GrammarMatcher(compiled_grammar)
    time_end = time.monotonic_ns()
    print(f"Time to compile grammar and init GrammarMatcher: {(time_end - time_start) / 1e3} us")

    # Test input string
    accepted_input = (
        'hhhh<function=g>{"arg3": 1.23, "arg4": ["a", "b", "c"]}</function>'
        'haha<function=f>{"arg1": "abc", "arg2": 1}</function>123'
    )
    dont_apply_mask_indices = [
        # fmt: off
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76,
        77, 78, 119, 120, 121, 122
        # fmt: on
    ]
    input_bytes = accepted_input.encode("utf-8")

    # Set up token bitmask for validation
    token_bitmask = xgr.allocate_token_bitmask(1, tokenizer_info.vocab_size)

    # Process input character by character
    for i, c in enumerate(input_bytes):
        # 1. Test token bitmask generation
        time_start = time.monotonic_ns()
        need_apply = matcher.fill_next_token_bitmask(token_bitmask)
        time_end = time.monotonic_ns()
        print(f"Time to fill_next_token_bitmask: {(time_end - time_start) / 1e3} us")
        assert need_apply == (i not in dont_apply_mask_indices)

        # 2. Verify token bitmask correctness
        rejected_token_ids = _get_masked_tokens_from_bitmask(
            token_bitmask, tokenizer_info.vocab_size
        )
        # This checking does not support non-ascii characters for now
        token_id_for_next_char = tokenizer.convert_tokens_to_ids(chr(c))
        assert token_id_for_next_char not in rejected_token_ids

        # 3. Test character acceptance
        print("Accepting char:", bytes([c]))
        time_start = time.monotonic_ns()
        assert matcher.accept_string(bytes([c]))
        time_end = time.monotonic_ns()
        print(f"Time to accept_token: {(time_end - time_start) / 1e3} us")

    # Final verification - check that EOS token is allowed
    time_start = time.monotonic_ns()
    need_apply = matcher.fill_next_token_bitmask(token_bitmask)
    time_end = time.monotonic_ns()
    assert need_apply == (len(input_bytes) not in dont_apply_mask_indices)
    print(f"Time to fill_next_token_bitmask: {(time_end - time_start) / 1e3} us")
    rejected_token_ids = _get_masked_tokens_from_bitmask(token_bitmask, tokenizer_info.vocab_size)
    assert tokenizer.eos_token_id not in rejected_token_ids


def test_empty_tag_dispatch():
    grammar_str = """root ::= TagDispatch(
  loop_after_dispatch=true
)
"""
    grammar = xgr.Grammar.from_ebnf(grammar_str)
    assert _is_grammar_accept_string(grammar, "any string")
    assert _is_grammar_accept_string(grammar, "")
    assert _is_grammar_accept_string(grammar, "好")

    grammar_with_excludes_str = """root ::= TagDispatch(
  excludes=("end"),
  loop_after_dispatch=true
)
"""

    grammar_with_excludes = xgr.Grammar.from_ebnf(grammar_with_excludes_str)

    assert _is_grammar_accept_string(grammar_with_excludes, "any string")
    assert _is_grammar_accept_string(grammar_with_excludes, "好")
    assert not _is_grammar_accept_string(grammar_with_excludes, "any stringend")
    assert not _is_grammar_accept_string(grammar_with_excludes, "endaaa")


@pytest.mark.parametrize("loop", [False, True])
def test_dense_tag_dispatch_end_states(loop: bool):
    """Exercise dense accepting states and the post-dispatch final state."""
    patterns = ["@" + hashlib.sha1(f"sparse-end-{i}".encode()).hexdigest()[:12] for i in range(32)]
    dispatch = {
        "type": "structural_tag",
        "format": {
            "type": "dispatch",
            "rules": [
                [pattern, {"type": "const_string", "value": f"X{i:02d}"}]
                for i, pattern in enumerate(patterns)
            ],
            "loop": loop,
            "excludes": [],
        },
    }
    compiled = xgr.GrammarCompiler(
        xgr.TokenizerInfo([]), cache_enabled=False
    ).compile_structural_tag(dispatch)

    def accepts(input_str: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(input_str) and matcher.is_terminated()

    for index in [0, 15, 31]:
        assert accepts(f"free{patterns[index]}X{index:02d}")
        assert not accepts(f"free{patterns[index]}WRONG")

    repeated = f"free{patterns[0]}X00tail{patterns[31]}X31"
    if loop:
        assert accepts(repeated)
    else:
        assert not accepts(repeated)
        assert not accepts(f"free{patterns[0]}X00tail")


def test_excludes_overlapping_prefixes():
    """An excluded pattern must be found even when its start lies inside an
    already-followed trie branch of another excluded pattern. With excludes
    {"bcd", "abce"}, input "abcd" follows the "abce" branch for "abc"; on 'd' the
    Aho-Corasick failure link must resume at "bc" (a prefix of "bcd") and reject,
    not fall back to the start state and miss the "bcd" match."""
    grammar_str = """root ::= TagDispatch(
  excludes=("bcd", "abce"),
  loop_after_dispatch=true
)
"""
    grammar = xgr.Grammar.from_ebnf(grammar_str)
    assert _is_grammar_accept_string(grammar, "abc")
    assert _is_grammar_accept_string(grammar, "hello")
    assert not _is_grammar_accept_string(grammar, "abcd")
    assert not _is_grammar_accept_string(grammar, "abcdX")
    assert not _is_grammar_accept_string(grammar, "aabce")
    assert not _is_grammar_accept_string(grammar, "abcbcd")

    # The same defect through a structural tag's any_text excludes, with multi-byte
    # UTF-8 patterns sharing an overlapping prefix ("<｜" commits to the second
    # pattern's branch, then "｜DSML｜" must still be found as a suffix).
    tag = {
        "format": {
            "type": "sequence",
            "elements": [
                {
                    "type": "tag",
                    "begin": "<think>",
                    "content": {
                        "type": "any_text",
                        "excludes": ["｜DSML｜", "<｜end▁of▁sentence｜>"],
                    },
                    "end": "</think>",
                },
                {"type": "any_text"},
            ],
        }
    }
    grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
    assert _is_grammar_accept_string(grammar, "<think>clean</think>x", require_termination=True)
    assert not _is_grammar_accept_string(
        grammar, "<think>a ｜DSML｜ b</think>x", require_termination=True
    )
    assert not _is_grammar_accept_string(
        grammar, "<think>a <｜DSML｜tool_calls> b</think>x", require_termination=True
    )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(
    "excludes, invalid, valid",
    [
        (["abc", "xabcq"], ["xabc", "xabcr", "xabcq"], ["xab", "xabxr"]),
        (["bc", "abcq", "xabcde"], ["xabc", "xabcr"], ["xab", "xabr"]),
        (["好", "x好吗"], ["x好", "x好呀"], ["x你", "你"]),
        (["｜DSML｜", "<｜DSML｜ calls>"], ["<｜DSML｜", "<｜DSML｜ callsX>"], ["<｜DS", "hello"]),
    ],
)
def test_excludes_contained_patterns(reverse, excludes, invalid, valid):
    """A redundant longer pattern must not weaken an exclusion, in either entry point."""
    if reverse:
        excludes = list(reversed(excludes))
    grammar_text = (
        "root ::= TagDispatch(excludes=("
        + ", ".join(json.dumps(value, ensure_ascii=False) for value in excludes)
        + "), loop_after_dispatch=false)"
    )
    grammars = [
        xgr.Grammar.from_ebnf(grammar_text),
        xgr.Grammar.from_structural_tag({"format": {"type": "any_text", "excludes": excludes}}),
    ]
    for grammar in grammars:
        for text in invalid:
            assert not _is_grammar_accept_string(grammar, text)
        for text in valid:
            assert _is_grammar_accept_string(grammar, text)


@pytest.mark.parametrize("excludes", [["abc", "xabcq"], ["｜DSML｜", "<｜DSML｜ calls>"]])
def test_contained_excludes_token_masks(excludes):
    vocab = [
        "<eos>",
        "x",
        "a",
        "b",
        "c",
        "q",
        "r",
        "abc",
        "xabc",
        "xabcr",
        "hello",
        "<",
        "｜",
        "DSML",
        "<｜DSML｜",
        "<｜DSML｜ callsX>",
    ]
    info = xgr.TokenizerInfo(vocab, stop_token_ids=0)
    grammar = xgr.Grammar.from_structural_tag(
        {"format": {"type": "any_text", "excludes": excludes}}
    )
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_grammar(grammar)
    mask = xgr.allocate_token_bitmask(1, len(vocab))
    for prefix in ["", "x", "xa", "xab", "<", "<｜", "<｜DSML", "hello"]:
        matcher = xgr.GrammarMatcher(compiled)
        assert matcher.accept_string(prefix)
        matcher.fill_next_token_bitmask(mask)
        for token_id, token in enumerate(vocab):
            expected = token_id == 0 or not any(value in prefix + token for value in excludes)
            allowed = bool((int(mask[0, token_id // 32]) >> (token_id % 32)) & 1)
            assert allowed == expected, (prefix, token)
            assert matcher.fork().accept_token(token_id) == expected, (prefix, token)


@pytest.mark.parametrize("trigger", ["abc", "abcq", "xabc", "xabcq"])
def test_excludes_take_precedence_over_trigger(trigger):
    grammar_text = f'root ::= TagDispatch(("{trigger}", body), excludes=("abc"))\nbody ::= "!"'
    # Exact/prefix conflicts are already rejected by the EBNF parser. A trigger
    # containing a forbidden suffix must not bypass the exclusion either.
    if trigger.startswith("abc"):
        with pytest.raises(RuntimeError, match="Exclude string must not be a prefix"):
            xgr.Grammar.from_ebnf(grammar_text)
        return
    grammar = xgr.Grammar.from_ebnf(grammar_text)
    assert not _is_grammar_accept_string(grammar, trigger + "!")


@pytest.mark.parametrize("end", ["abc", "xabcq"])
def test_contained_excludes_preserve_dispatch_body_and_tag_end(end):
    grammar = xgr.Grammar.from_ebnf(
        'root ::= TagDispatch(("<tool>", body), excludes=("abc", "xabcq"))\n' 'body ::= "abc"'
    )
    # Excludes constrain free text, not the dispatched rule's body.
    assert _is_grammar_accept_string(grammar, "hello<tool>abc")
    assert not _is_grammar_accept_string(grammar, "xabcr<tool>abc")
    tag = {
        "format": {
            "type": "tag",
            "begin": "<think>",
            "content": {"type": "any_text", "excludes": ["abc", "xabcq"]},
            "end": end,
        }
    }
    grammar = xgr.Grammar.from_structural_tag(tag)
    # The enclosing tag still consumes its delimiter outside the AnyText rule.
    assert _is_grammar_accept_string(grammar, "<think>hello" + end)
    assert not _is_grammar_accept_string(grammar, "<think>xabcr" + end)


@pytest.mark.hf_token_required
def test_utf8_structural_tag_begin_end():
    model = "deepseek-ai/DeepSeek-V3-0324"
    tokenizer = load_tokenizer(model)
    tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    compiler = xgr.GrammarCompiler(tokenizer_info)
    structures = [
        xgr.StructuralTagItem(begin="<｜tool▁calls▁begin｜>", schema={}, end="<｜tool▁calls▁end｜>")
    ]
    triggers = ["<｜tool▁calls▁begin｜>"]
    _ = compiler.compile_structural_tag(structures, triggers)


@pytest.mark.hf_token_required
def test_pressure_structural_tag():
    model = "meta-llama/Llama-3.1-8B-Instruct"
    tokenizer = load_tokenizer(model, use_fast=True, trust_remote_code=True)
    tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=1)
    threads = []
    start = "start"
    schema = {"type": "object", "properties": {"arg": {"type": "string"}}}
    end = "end"

    def worker(idx: int):
        tag = xgr.StructuralTagItem(begin=start, schema=schema, end=end)
        triggers = [start]
        stag_grammar = xgr.Grammar.from_structural_tag([tag], triggers)
        start_grammar = xgr.Grammar.from_ebnf("root ::= [a-z] root | [a-z]")
        grammar = start_grammar
        for _ in range(idx):
            grammar = grammar.concat(grammar, start_grammar)
        final_grammar = xgr.Grammar.concat(grammar, stag_grammar)
        _ = compiler.compile_grammar(final_grammar)

    for i in range(128):
        t = threading.Thread(target=worker, args=(i,))
        threads.append(t)
        t.start()

    for t in threads:
        t.join()


_JSON_BODY_RULES = """\
json_body ::= "{" ws kvs ws "}"
kvs ::= kv ("," ws kv)*
kv ::= ["] key_chars ["] ws ":" ws val
key_chars ::= [a-zA-Z_] [a-zA-Z0-9_]*
val ::= ["] val_chars ["] | [0-9]+ | "true" | "false"
val_chars ::= [a-zA-Z0-9 _.+/=]*
ws ::= [ ]*
"""

_tag_dispatch_perf_scenarios = [
    # S1: Long exclude, normal text (baseline - most tokens hit fast path)
    (
        f"""root ::= TagDispatch(("<tool>", json_body), loop_after_dispatch=true, excludes=("</response>"))
{_JSON_BODY_RULES}""",
        (
            "The quick brown fox jumps over the lazy dog. "
            "Machine learning models have revolutionized natural language processing. "
            "Transformers use self-attention mechanisms to capture long-range dependencies. "
            '<tool>{"action": "search", "query": "test"}'
            "After retrieving results we can summarize the findings effectively. "
            "The experiment showed significant improvements across all benchmarks measured."
        ),
    ),
    # S2: Short exclude "\n\n" (many tokens contain \n -> second_slicing_bitset fails often)
    (
        f"""root ::= TagDispatch(("<tool>", json_body), loop_after_dispatch=true, excludes=("\\n\\n"))
{_JSON_BODY_RULES}""",
        (
            "def hello():\n    print('hello')\n"
            "def world():\n    return 42\n"
            "class Foo:\n    def bar(self):\n        pass\n"
            "x = [i for i in range(10)]\n"
            "result = sum(x)\n"
            '<tool>{"action": "run"}'
            "for item in collection:\n    process(item)\n"
            "logger.info('done')\n"
        ),
    ),
    # S3: Single char exclude "|" (extreme short exclude)
    (
        f"""root ::= TagDispatch(("<A>", json_body), loop_after_dispatch=true, excludes=("|"))
{_JSON_BODY_RULES}""",
        (
            "This is a simple text without any pipe characters in the content. "
            "We keep writing more content to have enough tokens for measurement. "
            "The test validates single character exclude performance overhead. "
            '<A>{"tag": "content", "value": "here"}'
            "More text after the tag to continue the sequence to the end."
        ),
    ),
    # S4: Dense partial match (FSM repeatedly enters exclude prefix -> slow path)
    (
        f"""root ::= TagDispatch(("<tool>", json_body), loop_after_dispatch=true, excludes=("</response>"))
{_JSON_BODY_RULES}""",
        (
            "Check </r value. The </re field is important. See </res tag here. "
            "Use </resp element. Read </respo data carefully. Got </respon value. "
            "The </respons info shows. Almost </response but not quite yet here. "
            "Back to normal text. Check </r again. And </re once more. "
            "Field </res appears. Element </resp shows. Data </respo found."
        ),
    ),
    # S5: 8 tags with shared prefix "<tool_" (deep trie, many tokens fail bitset)
    (
        f"""root ::= TagDispatch(
  ("<tool_calc>", tc), ("<tool_search>", ts), ("<tool_code>", tcode),
  ("<tool_file>", tf), ("<tool_web>", tw), ("<tool_db>", tdb),
  ("<tool_api>", tapi), ("<tool_shell>", tsh),
  loop_after_dispatch=true, excludes=("</end>")
)
tc ::= json_body
ts ::= json_body
tcode ::= json_body
tf ::= json_body
tw ::= json_body
tdb ::= json_body
tapi ::= json_body
tsh ::= json_body
{_JSON_BODY_RULES}""",
        (
            "Here is some text before any tags appear in the output. "
            '<tool_calc>{"expr": "2+3"}'
            "The answer is 5. Now let me search for more information. "
            '<tool_search>{"query": "xgrammar benchmarks"}'
            "Found some results. Let me write code to process them. "
            '<tool_code>{"code": "print hello"}'
            "Code executed successfully. Now checking files on disk. "
            '<tool_file>{"path": "data.csv"}'
            "Data loaded. Processing complete with all results verified."
        ),
    ),
    # S6: 8 exclude strings (more excludes -> more tokens hit substring check)
    (
        f"""root ::= TagDispatch(
  ("<tool>", json_body), loop_after_dispatch=true,
  excludes=("</end>", "STOP", "HALT", "QUIT", "EXIT", "ABORT", "CANCEL", "TERMINATE")
)
{_JSON_BODY_RULES}""",
        (
            "Starting the process now. The system is running fine and stable. "
            "Several steps are being executed in proper sequence order. "
            "Have you seen the strategy that was described in the handbook? "
            '<tool>{"action": "compute", "value": 42}'
            "The tool returned a value. Continuing execution of the pipeline. "
            "After checking everything looks correct and verified properly."
        ),
    ),
    # S7: 10 tag dispatch loop cycles (tests loop overhead)
    (
        f"""root ::= TagDispatch(("<t>", json_body), loop_after_dispatch=true, excludes=("</done>"))
{_JSON_BODY_RULES}""",
        (
            'A<t>{"k": "v1"}B<t>{"k": "v2"}C<t>{"k": "v3"}D<t>{"k": "v4"}E<t>{"k": "v5"}'
            'F<t>{"k": "v6"}G<t>{"k": "v7"}H<t>{"k": "v8"}I<t>{"k": "v9"}J<t>{"k": "v10"}K'
        ),
    ),
    # S8: No tags, pure AnyText (lightest TagDispatch, reference baseline)
    (
        """root ::= TagDispatch(loop_after_dispatch=false, excludes=("</end>"))
""",
        (
            "This is purely text without any tags at all in the output. "
            "We are testing the lightest possible TagDispatch configuration. "
            "No tags are defined, only a single exclude string is present. "
            "This serves as the baseline reference measurement for comparison."
        ),
    ),
    # S9: Sustained exclude boundary (FSM stays in exclude prefix -> all tokens slow path)
    (
        f"""root ::= TagDispatch(("<tool>", json_body), loop_after_dispatch=true, excludes=("</response>"))
{_JSON_BODY_RULES}""",
        (
            "Normal text. </respons</respons</respons</respons</respons"
            "</respons</respons</respons</respons</respons</respons"
            "</respons</respons</respons</respons</respons</respons"
            "Back to normal text after the sustained boundary stress test."
        ),
    ),
]


@pytest.mark.hf_token_required
@pytest.mark.parametrize("ebnf, input_str", _tag_dispatch_perf_scenarios)
def test_tag_dispatch_perf(ebnf, input_str):
    import statistics

    tokenizer_id = "meta-llama/Llama-3.1-8B-Instruct"
    tokenizer = load_tokenizer(tokenizer_id, use_fast=True, trust_remote_code=True)
    tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    grammar = xgr.Grammar.from_ebnf(ebnf)
    input_tokens = tokenizer.encode(input_str, add_special_tokens=False)

    warmup, rounds = 2, 10
    compile_times = []
    mask_times_all = []
    accept_times_all = []

    for round_idx in range(warmup + rounds):
        is_measure = round_idx >= warmup
        compiler = xgr.GrammarCompiler(tokenizer_info, cache_enabled=False)

        t0 = time.monotonic_ns()
        compiled = compiler.compile_grammar(grammar)
        t1 = time.monotonic_ns()

        if is_measure:
            compile_times.append((t1 - t0) / 1e6)

        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        token_bitmask = xgr.allocate_token_bitmask(1, tokenizer_info.vocab_size)
        round_mask = []
        round_accept = []

        for tok in input_tokens:
            t_m0 = time.monotonic_ns()
            matcher.fill_next_token_bitmask(token_bitmask)
            t_m1 = time.monotonic_ns()

            t_a0 = time.monotonic_ns()
            ok = matcher.accept_token(tok)
            t_a1 = time.monotonic_ns()

            if is_measure:
                round_mask.append((t_m1 - t_m0) / 1e3)
                round_accept.append((t_a1 - t_a0) / 1e3)

            assert ok, f"token {tok} ({repr(tokenizer.decode([tok]))}) rejected"

        if is_measure:
            mask_times_all.append(round_mask)
            accept_times_all.append(round_accept)

    flat_mask = [t for rnd in mask_times_all for t in rnd]
    flat_accept = [t for rnd in accept_times_all for t in rnd]

    print(f"Tokens: {len(input_tokens)}")
    print(
        f"Compile: {statistics.mean(compile_times):.2f} +/- "
        f"{statistics.stdev(compile_times) if len(compile_times) > 1 else 0:.2f} ms"
    )
    print(f"Mask gen: avg={statistics.mean(flat_mask):.2f} us, max={max(flat_mask):.2f} us")
    print(f"Accept token: avg={statistics.mean(flat_accept):.2f} us, max={max(flat_accept):.2f} us")


# ---------- AnyTextFormat / AnyTokensFormat length budgets ----------

_LENGTH_BUDGET_VOCAB = ["<think>", "a", "b", "c", "de", "中", "a</", "</", "think>", "<eos>"]


def _budget_token_id(token: str) -> int:
    return _LENGTH_BUDGET_VOCAB.index(token)


def _compile_any_text_budget(
    *, max_tokens=None, max_chars=None, compiler=None, cache_enabled=False
):
    tokenizer_info = xgr.TokenizerInfo(
        _LENGTH_BUDGET_VOCAB, stop_token_ids=[_budget_token_id("<eos>")]
    )
    compiler = compiler or xgr.GrammarCompiler(tokenizer_info, cache_enabled=cache_enabled)
    content = {"type": "any_text", "excludes": ["</think>"]}
    if max_tokens is not None:
        content["max_tokens"] = max_tokens
    if max_chars is not None:
        content["max_chars"] = max_chars
    structural_tag = {
        "type": "structural_tag",
        "format": {"type": "tag", "begin": "<think>", "content": content, "end": "</think>"},
    }
    return tokenizer_info, compiler.compile_structural_tag(structural_tag)


def _budget_accepts(compiled, *tokens: str) -> bool:
    matcher = xgr.GrammarMatcher(compiled)
    for token in tokens:
        bitmask = xgr.allocate_token_bitmask(1, len(_LENGTH_BUDGET_VOCAB))
        matcher.fill_next_token_bitmask(bitmask)
        rejected = _get_masked_tokens_from_bitmask(bitmask, len(_LENGTH_BUDGET_VOCAB))
        if _budget_token_id(token) in rejected:
            return False
        if not matcher.accept_token(_budget_token_id(token)):
            return False
    return matcher.is_completed()


def _budget_matcher_mask_allows(matcher, token: str) -> bool:
    bitmask = xgr.allocate_token_bitmask(1, len(_LENGTH_BUDGET_VOCAB))
    matcher.fill_next_token_bitmask(bitmask)
    rejected = _get_masked_tokens_from_bitmask(bitmask, len(_LENGTH_BUDGET_VOCAB))
    return _budget_token_id(token) not in rejected


def _budget_mask_allows(compiled, prefix: List[str], token: str) -> bool:
    matcher = xgr.GrammarMatcher(compiled)
    for prefix_token in prefix:
        assert matcher.accept_token(_budget_token_id(prefix_token))
    bitmask = xgr.allocate_token_bitmask(1, len(_LENGTH_BUDGET_VOCAB))
    matcher.fill_next_token_bitmask(bitmask)
    rejected = _get_masked_tokens_from_bitmask(bitmask, len(_LENGTH_BUDGET_VOCAB))
    return _budget_token_id(token) not in rejected


def test_any_text_max_tokens_forces_multitoken_end():
    _, compiled = _compile_any_text_budget(max_tokens=2)
    assert _budget_accepts(compiled, "<think>", "a", "b", "</", "think>")
    assert _budget_accepts(compiled, "<think>", "a", "</", "think>")
    assert _budget_accepts(compiled, "<think>", "a", "a</", "think>")
    assert not _budget_accepts(compiled, "<think>", "a", "b", "c", "</", "think>")
    assert _budget_mask_allows(compiled, ["<think>", "a", "b"], "</")
    assert not _budget_mask_allows(compiled, ["<think>", "a", "b"], "a")
    assert not _budget_mask_allows(compiled, ["<think>", "a", "b"], "<eos>")


def test_any_text_zero_token_budget_forces_immediate_end():
    _, compiled = _compile_any_text_budget(max_tokens=0)
    assert _budget_accepts(compiled, "<think>", "</", "think>")
    assert _budget_mask_allows(compiled, ["<think>"], "</")
    assert not _budget_mask_allows(compiled, ["<think>"], "a")

    _, char_compiled = _compile_any_text_budget(max_chars=0)
    assert _budget_accepts(char_compiled, "<think>", "</", "think>")
    assert not _budget_mask_allows(char_compiled, ["<think>"], "a")


def test_any_text_max_tokens_rollback_and_fork():
    _, compiled = _compile_any_text_budget(max_tokens=2)
    matcher = xgr.GrammarMatcher(compiled)
    assert matcher.accept_token(_budget_token_id("<think>"))
    assert matcher.accept_token(_budget_token_id("a"))
    forked = matcher.fork()

    assert matcher.accept_token(_budget_token_id("b"))
    assert not _budget_matcher_mask_allows(matcher, "c")
    matcher.rollback(1)
    assert _budget_matcher_mask_allows(matcher, "c")
    assert matcher.accept_token(_budget_token_id("c"))

    assert forked.accept_token(_budget_token_id("c"))
    assert not _budget_matcher_mask_allows(forked, "b")


def test_any_text_max_chars_counts_codepoints():
    _, compiled = _compile_any_text_budget(max_chars=3)
    end = ["</", "think>"]
    assert _budget_accepts(compiled, "<think>", "de", "a", *end)
    assert not _budget_accepts(compiled, "<think>", "de", "de", *end)
    assert _budget_accepts(compiled, "<think>", "中", "中", "中", *end)
    assert not _budget_accepts(compiled, "<think>", "中", "中", "中", "中", *end)
    assert _budget_mask_allows(compiled, ["<think>", "a", "b"], "a")
    assert not _budget_mask_allows(compiled, ["<think>", "a", "b"], "de")

    grammar = compiled.grammar
    assert _is_grammar_accept_string(grammar, "<think>中中中</think>")
    assert not _is_grammar_accept_string(grammar, "<think>中中中中</think>")


def test_any_text_token_and_character_budgets_combine():
    _, compiled = _compile_any_text_budget(max_tokens=2, max_chars=3)
    end = ["</", "think>"]
    assert _budget_accepts(compiled, "<think>", "de", "a", *end)
    assert not _budget_accepts(compiled, "<think>", "a", "b", "c", *end)
    assert not _budget_accepts(compiled, "<think>", "de", "de", *end)


def test_any_text_budgets_are_independent_per_format():
    tokenizer_info = xgr.TokenizerInfo(
        _LENGTH_BUDGET_VOCAB, stop_token_ids=[_budget_token_id("<eos>")]
    )

    def think_tag(max_tokens: int):
        return {
            "type": "tag",
            "begin": "<think>",
            "content": {"type": "any_text", "max_tokens": max_tokens},
            "end": "</think>",
        }

    structural_tag = {
        "type": "structural_tag",
        "format": {"type": "sequence", "elements": [think_tag(1), think_tag(2)]},
    }
    compiled = xgr.GrammarCompiler(tokenizer_info, cache_enabled=False).compile_structural_tag(
        structural_tag
    )
    first = ["<think>", "a", "</", "think>"]
    second = ["<think>", "a", "b", "</", "think>"]
    assert _budget_accepts(compiled, *first, *second)
    assert not _budget_accepts(compiled, *second, *first)


def test_any_text_max_tokens_int32_does_not_overflow_after_prefix():
    vocab = ["prefix", "<think>", "a", "</think>", "<eos>"]
    tokenizer_info = xgr.TokenizerInfo(vocab, stop_token_ids=[4])
    structural_tag = {
        "type": "structural_tag",
        "format": {
            "type": "sequence",
            "elements": [
                {"type": "const_string", "value": "prefix"},
                {
                    "type": "tag",
                    "begin": "<think>",
                    "content": {"type": "any_text", "max_tokens": 2**31 - 1},
                    "end": "</think>",
                },
            ],
        },
    }
    compiled = xgr.GrammarCompiler(tokenizer_info, cache_enabled=False).compile_structural_tag(
        structural_tag
    )
    matcher = xgr.GrammarMatcher(compiled)
    assert matcher.accept_token(0)
    assert matcher.accept_token(1)
    assert "budget_deadline=2147483647" in matcher._debug_print_internal_state()


def test_any_tokens_max_tokens_forces_token_end():
    vocab = ["<begin>", "x", "y", "<end>", "<eos>"]
    tokenizer_info = xgr.TokenizerInfo(vocab, stop_token_ids=[4])
    structural_tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": {"type": "token", "token": 0},
            "content": {"type": "any_tokens", "max_tokens": 2},
            "end": {"type": "token", "token": 3},
        },
    }
    compiled = xgr.GrammarCompiler(tokenizer_info, cache_enabled=False).compile_structural_tag(
        structural_tag
    )

    matcher = xgr.GrammarMatcher(compiled)
    assert matcher.accept_token(0)
    assert matcher.accept_token(1)
    assert matcher.accept_token(2)
    bitmask = xgr.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(bitmask)
    rejected = _get_masked_tokens_from_bitmask(bitmask, len(vocab))
    assert 3 not in rejected
    assert 1 in rejected and 2 in rejected and 4 in rejected
    assert matcher.accept_token(3)
    assert matcher.is_completed()

    zero_budget_tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": {"type": "token", "token": 0},
            "content": {"type": "any_tokens", "max_tokens": 0},
            "end": {"type": "token", "token": 3},
        },
    }
    zero_compiled = xgr.GrammarCompiler(tokenizer_info, cache_enabled=False).compile_structural_tag(
        zero_budget_tag
    )
    zero_matcher = xgr.GrammarMatcher(zero_compiled)
    assert zero_matcher.accept_token(0)
    zero_matcher.fill_next_token_bitmask(bitmask)
    zero_rejected = _get_masked_tokens_from_bitmask(bitmask, len(vocab))
    assert 3 not in zero_rejected
    assert 1 in zero_rejected and 2 in zero_rejected


def test_any_text_budget_cache_and_serialization_roundtrip():
    tokenizer_info = xgr.TokenizerInfo(
        _LENGTH_BUDGET_VOCAB, stop_token_ids=[_budget_token_id("<eos>")]
    )
    compiler = xgr.GrammarCompiler(tokenizer_info, cache_enabled=True)
    _, unbounded = _compile_any_text_budget(compiler=compiler)
    _, bounded = _compile_any_text_budget(max_tokens=2, compiler=compiler)

    assert _budget_accepts(unbounded, "<think>", "a", "b", "c", "</", "think>")
    assert not _budget_accepts(bounded, "<think>", "a", "b", "c", "</", "think>")

    recovered = xgr.CompiledGrammar.deserialize_json(bounded.serialize_json(), tokenizer_info)
    assert _budget_accepts(recovered, "<think>", "a", "b", "</", "think>")
    assert not _budget_accepts(recovered, "<think>", "a", "b", "c", "</", "think>")


if __name__ == "__main__":
    pytest.main(sys.argv)
