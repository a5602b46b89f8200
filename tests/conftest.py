"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import torch


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
