"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
import torch

# The class cache directory (cfgzip_lab.cache.directory): never the user's ~/.cache, and a fresh folder
# for every test (below), so no test finds classes another test (or run) wrote and every test
# classes what it asks for, as it did before the directory existed; child processes a test starts
# inherit it. Module-scoped fixtures class into the session's folder. Removed when the session ends.
_CACHE_DIR = tempfile.mkdtemp(prefix="cfgzip-test-cache-")
os.environ["CFGZIP_CACHE_DIR"] = _CACHE_DIR


@pytest.fixture(autouse=True)
def _fresh_class_cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CFGZIP_CACHE_DIR", str(tmp_path_factory.mktemp("class-cache")))
    # the workbench's saved author sessions (cfgzip_lab.widgets.persisted_session): never the user's,
    # and none from another test (a Workbench() would start where that test left it)
    monkeypatch.setenv("CFGZIP_SESSIONS_DIR", str(tmp_path_factory.mktemp("sessions")))


# The exactness tests: every module that compares our masks, automata or verdicts with XGrammar's.
# scripts/test.sh runs the whole suite under the newest supported XGrammar in .venv, then these
# again (``-m exactness``) under each older supported release, in its overlay venv.
EXACTNESS_MODULES = frozenset(
    {
        "test_regex_fsm",
        "test_regex",
        "test_corpora",
        "test_token_macros",
        "test_structural_tag",
        "test_tag_dispatch",
        "test_substring",
        "test_rule_attributes",
        "test_schema_info",
        "test_sources",
        "test_serving_grammars",
        "test_serving_sglang",
        "test_serving_vllm",
        "test_xgrammar_compat",
        "test_xgrammar_version",
        "test_xgrammar_differences",
        "test_xgrammar_runs",
        "test_matcher_api",
        "test_printed",
        "test_nested_root",
        "test_serialized",
        "test_large_repeat",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in EXACTNESS_MODULES:
            item.add_marker(pytest.mark.exactness)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Model tests on one intra-op thread: on a shared two-core runner, torch's threads spin
    against other processes (a SmolLM2 step measured 5-8x slower with two). Both engines of
    a comparison run under the same setting, so results are unaffected.

    Opt in per module with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def checker():
    """XGrammar's verdicts from a child process, as the workbench gets them (one per module:
    starting the child costs a second or two)."""
    from cfgzip_lab.widgets.xgrammar_worker import XGrammarChecker

    c = XGrammarChecker()
    yield c
    c.close()
