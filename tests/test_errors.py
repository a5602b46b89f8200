"""One error base: every bad-input error is a CfgzipError and keeps its older standard base,
and a broken tokenizer folder is one of them (the CLI turns it into exit status 2)."""

from __future__ import annotations

import pytest

from cfgzip_lab import errors
from cfgzip_lab.errors import CfgzipError


@pytest.mark.parametrize(
    "name__older_bases",
    [
        ("GrammarError", ()),
        ("GrammarCompileError", (ValueError,)),
        ("UnknownVocabError", (ValueError,)),
        ("VocabLoadError", (RuntimeError,)),
        ("MissingVocabPackageError", (RuntimeError, ImportError)),
        ("ClassesError", (ValueError,)),
        ("CacheError", (ValueError,)),
        ("ModelLoadError", (RuntimeError,)),
        ("DecodingFinished", (RuntimeError,)),
        ("UsageError", ()),
        ("WorkbenchError", (ValueError,)),
        ("TokenIdError", (ValueError,)),
        ("MissingExtraError", (ImportError,)),
    ],
    ids=lambda row: row[0],
)
def test_name__older_bases__is_a_cfgzip_error(name__older_bases):
    name, older = name__older_bases
    cls = getattr(errors, name)
    assert issubclass(cls, CfgzipError)
    for base in older:
        assert issubclass(cls, base)


def test_every_listed_error_is_importable_and_nothing_else():
    assert set(errors.__all__) == {"CfgzipError", *errors._HOMES}
    with pytest.raises(AttributeError):
        errors.NoSuchError  # noqa: B018


def test_budget_exceeded_is_control_flow_not_bad_input():
    from cfgzip_lab.grammar.words import BudgetExceeded

    assert not issubclass(BudgetExceeded, CfgzipError)


@pytest.mark.parametrize(
    "files__message",
    [
        ({"tokenizer_config.json": "{not json"}, "JSONDecodeError"),
        ({"tokenizer.json": "{}", "config.json": "{bad"}, "JSONDecodeError"),
        ({"tokenizer.json": "garbage"}, "not a Hugging Face tokenizer file"),
    ],
    ids=["bad_tokenizer_config", "bad_config", "bad_tokenizer_json"],
)
def test_broken_tokenizer_folder__message(tmp_path, files__message):
    from cfgzip_lab.vocab_sources import VocabLoadError, load_vocab

    files, message = files__message
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(VocabLoadError, match=message) as info:
        load_vocab(str(tmp_path))
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize(
    "text__kind",
    [
        ('{"type": "strin"}', "json_schema"),  # XGrammar raises RuntimeError for it
        ('{"type": "string", "pattern": "(?<=a)b"}', "json_schema"),
        ("{not json", "auto"),
        ('root ::= "\\q"', "gbnf"),
        ('root ::= Regex("a{2,1}")', "ebnf"),  # XGrammar's compiler raises RuntimeError for it
    ],
    ids=["bad_type", "lookbehind", "bad_json", "bad_gbnf_escape", "bad_regex"],
)
def test_bad_grammar_input_is_a_grammar_error_never_a_runtime_error(text__kind):
    from cfgzip_lab.grammar.diagnostics import GrammarError
    from cfgzip_lab.pipeline import compile_grammar

    text, kind = text__kind
    with pytest.raises(CfgzipError) as info:
        compile_grammar(text, kind=kind)
    assert isinstance(info.value, GrammarError) and not isinstance(info.value, RuntimeError)
    assert info.value.errors and all(d.line >= 1 and d.column >= 1 for d in info.value.errors)
    assert "/project/cpp" not in str(info.value)  # XGrammar's C++ log prefix is stripped
