"""XGrammar's own matcher tests, run twice: as published, and with the native matcher substituted.

Every test of this folder is parametrized by ``matcher_impl``: ``xgrammar`` runs it unchanged on
XGrammar's ``GrammarMatcher``; ``native`` replaces ``xgrammar.GrammarMatcher`` (and
``BatchGrammarMatcher``) for the test's duration with :func:`cfgzip_lab.native.from_xgrammar.native_matcher`
(the same constructor arguments; the grammar and vocabulary read back from the
``CompiledGrammar``) and :class:`cfgzip_lab.xgrammar_compat.BatchGrammarMatcher`.

A difference is either fixed or listed in ``NATIVE_XFAILS`` below: a strict xfail naming the XGrammar
behaviour the native matcher does not copy (strict, so a test that starts passing is reported).
The files are copied unchanged (see each file's header and ORIGINS.md); the licence is beside them.
The installed XGrammar must be the release they come from (their expectations move between releases):
the folder is skipped under another one.
"""

from __future__ import annotations

import pytest
import xgrammar
import xgrammar.testing as xgrammar_testing

from cfgzip_lab import engine, xgrammar_compat
from cfgzip_lab.native.from_xgrammar import native_matcher
from cfgzip_lab.xgrammar_version import installed

TESTS_FROM = "0.2.9"

_MAX_TOKENS = (
    "max_tokens: a bound on the number of tokens depends on the tokenizer, not on bytes; cfgzip refuses it "
    "(GrammarError) rather than class it unsoundly"
)

_CAPTURES = "get_captures (capture attributes): not recorded by the native matcher (cfgzip drops the attribute)"
_EXCLUDE_TOKEN = (
    "0.2.9's ExcludeToken also takes stop tokens that complete the grammar and tokens starting inside the literal "
    "before it; cfgzip refuses the construct (GrammarError) until it reproduces that"
)
_TOKEN_NAMES_STOP = (
    "Token(...) naming a stop id: from 0.2.9 a stop token is taken by a Token(...) edge that completes the grammar; "
    "cfgzip refuses the grammar (TokenIdError) until it reproduces that"
)

# test id (function name, or name[params]) -> the XGrammar behaviour the native matcher does not copy
NATIVE_XFAILS: dict[str, str] = {
    "test_captures_masks_fork_and_serialization": _CAPTURES,
    "test_budget_enforcement_state_is_preserved": _MAX_TOKENS,
    # test_xgr_grammar_matcher_basic.py
    "test_stop_token_terminal_matching_paths[atomic-complete]": _TOKEN_NAMES_STOP,
    "test_stop_token_terminal_matching_paths[atomic-then-bytes]": _TOKEN_NAMES_STOP,
    "test_stop_token_mid_token_exclude_probe[rewind-partial-byte-path-and-captures]": _CAPTURES,
    "test_stop_token_mid_token_exclude_probe[incomplete-fallback]": _EXCLUDE_TOKEN,
    "test_stop_token_mid_token_exclude_probe[character-budget-fallback-guard]": _EXCLUDE_TOKEN,
    "test_stop_token_atomic_success_blocks_mid_token_fallback": _EXCLUDE_TOKEN,
    # test_xgr_grammar_matcher_structural_tag.py
    "test_any_text_max_tokens_forces_multitoken_end": _MAX_TOKENS,
    "test_any_text_zero_token_budget_forces_immediate_end": _MAX_TOKENS,
    "test_any_text_max_tokens_rollback_and_fork": _MAX_TOKENS,
    "test_any_text_token_and_character_budgets_combine": _MAX_TOKENS,
    "test_any_text_budgets_are_independent_per_format": _MAX_TOKENS,
    "test_any_text_max_tokens_int32_does_not_overflow_after_prefix": _MAX_TOKENS,
    "test_any_tokens_max_tokens_forces_token_end": _MAX_TOKENS,
    "test_any_text_budget_cache_and_serialization_roundtrip": _MAX_TOKENS,
    "test_any_text_max_chars_counts_codepoints": "max_chars on TagDispatch free text: XGrammar counts code points "
    "of text that cfgzip reads as bytes; cfgzip refuses it (GrammarError) rather than class it unsoundly",
}

_PRINTED_NUL = (
    "a NUL byte in a literal: XGrammar's printer drops it and what follows it in the literal (str() of the "
    'compiled "\\v" "\\0" "\\e" ends at \\v), and native_matcher reads the grammar back from that print'
)

# a grammar construct in the test's parameters (as pytest writes them in the test id) -> why the native
# matcher refuses or differs under TESTS_FROM
NATIVE_XFAIL_CONSTRUCTS: dict[str, str] = {"ExcludeToken(": _EXCLUDE_TOKEN, r'"\\0"': _PRINTED_NUL}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "xgrammar_conformance" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.exactness)  # XGrammar's own expectations: run under every release
        if installed() != TESTS_FROM:
            item.add_marker(pytest.mark.skip(reason=f"XGrammar {TESTS_FROM}'s tests; {installed()} is installed"))
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("matcher_impl") != "native":
            continue
        inner = item.name.replace("native-", "").replace("-native", "").replace("[native]", "")
        reasons = [NATIVE_XFAILS[key] for key in (inner, item.originalname) if key in NATIVE_XFAILS]
        reasons += [why for construct, why in NATIVE_XFAIL_CONSTRUCTS.items() if construct in item.name]
        if reasons:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reasons[0]))


class _Published:
    """The xgrammar module as published, for our own modules while the test's names are replaced
    (the compressed engine and the compat batch make real XGrammar matchers)."""

    def __init__(self) -> None:
        self._own = {"GrammarMatcher": xgrammar.GrammarMatcher, "BatchGrammarMatcher": xgrammar.BatchGrammarMatcher}

    def __getattr__(self, name: str):
        return self._own[name] if name in self._own else getattr(xgrammar, name)


# node ids of native runs that made no native matcher (they check XGrammar's converters and printers
# only): reported at the end
_NO_NATIVE_MATCHER: list[str] = []


@pytest.fixture(autouse=True, params=["xgrammar", "native"])
def matcher_impl(request, monkeypatch):
    """Which matcher ``xgrammar.GrammarMatcher`` makes during the test.

    Under ``native``, ``xgrammar.testing``'s helpers make the native one too: the matchers over a
    tokenizer (``_get_matcher_from_grammar_and_tokenizer_info``) and the string-only ones
    (``_get_matcher_from_grammar``, behind ``_is_grammar_accept_string``: an empty vocabulary and
    ``terminate_without_stop_token``), so a grammar's language is checked on the native engine too.
    """
    if request.param != "native":
        yield request.param
        return
    made = []

    def counted(compiled_grammar, **kwargs):
        made.append(1)
        return native_matcher(compiled_grammar, **kwargs)

    published = _Published()
    monkeypatch.setattr(engine, "xgr", published)
    monkeypatch.setattr(xgrammar_compat, "_xgr", published)
    monkeypatch.setattr(xgrammar, "GrammarMatcher", counted)
    monkeypatch.setattr(xgrammar_testing, "GrammarMatcher", counted)
    monkeypatch.setattr(xgrammar, "BatchGrammarMatcher", xgrammar_compat.BatchGrammarMatcher)
    yield request.param
    if not made:
        _NO_NATIVE_MATCHER.append(request.node.nodeid)


def pytest_terminal_summary(terminalreporter):
    if _NO_NATIVE_MATCHER:
        terminalreporter.write_line(
            f"xgrammar_conformance: {len(_NO_NATIVE_MATCHER)} native runs made no native matcher "
            "(they check XGrammar's converters and printers only)"
        )


def pytest_configure(config):
    config.addinivalue_line("markers", "hf_token_required: XGrammar's mark for tests that load hub tokenizers")
