"""One base for every error cfgzip_lab raises on bad input: catch :class:`CfgzipError`.

As in lark's ``exceptions.py``, callers (the CLI, the workbench, user code) catch one thing.
Each error keeps its name, its module and its older standard base, so code that caught
``ValueError`` or ``RuntimeError`` before still does::

    CfgzipError
    ├── GrammarError              grammar/diagnostics.py  our front end or GNF refuses the grammar
    ├── GrammarCompileError       engine.py               XGrammar refuses the grammar   (ValueError)
    ├── UnknownVocabError         vocab_sources.py        no such tokenizer              (ValueError)
    ├── VocabLoadError            vocab_sources.py        a tokenizer that cannot be read (RuntimeError)
    │   └── MissingVocabPackageError                      its PyPI package is missing     (ImportError)
    ├── TokenIdError              grammar/token_macros.py a grammar naming token ids past the
    │                                                     tokenizer's vocabulary (ValueError)
    ├── ClassesError              classes/classing.py     classes that are no partition, or built for
    │                                                     another grammar or vocabulary (ValueError)
    ├── CacheError                cache/format.py         a class cache that cannot be used (ValueError)
    ├── ModelLoadError            hf/models.py            a model that cannot be loaded offline (RuntimeError)
    ├── DecodingFinished          decode.py               ``step()`` after the grammar ended (RuntimeError)
    ├── UsageError                cli/_common.py          bad command-line input (exit status 2)
    ├── MissingExtraError         extras.py               a feature whose extra is not installed,
    │                                                     e.g. cfgzip-lab[workbench] (ImportError)
    ├── WorkbenchError            widgets/session.py      a workbench action that cannot run now (ValueError)
    └── BuildBudgetError          deadline.py             a build past its time budget,
                                                          GrammarCache(build_seconds=) (TimeoutError)

``grammar.words.BudgetExceeded`` is not one of them: it is control flow inside classing
(a token over its budget becomes a singleton class) and never reaches a caller; if it
ever did, that would be a bug, which must not pass for bad input.

This module defines the base only, at the bottom of the package: it imports nothing of
cfgzip_lab, so every layer can raise a :class:`CfgzipError`. The subclasses live beside the code
that raises them and are re-exported from the package (``from cfgzip_lab import GrammarError``).
Their names also resolve here, by name on first use (``_HOMES``; no import statement, so the
import graph keeps no edge from the bottom of the package up to its callers).
"""

from __future__ import annotations

import importlib
from typing import Any


class CfgzipError(Exception):
    """Bad input to cfgzip_lab: the message says what is wrong and where, for a user to read."""


_HOMES = {
    "GrammarError": "cfgzip_lab.grammar.diagnostics",
    "GrammarCompileError": "cfgzip_lab.engine",
    "UnknownVocabError": "cfgzip_lab.vocab_sources",
    "VocabLoadError": "cfgzip_lab.vocab_sources",
    "MissingVocabPackageError": "cfgzip_lab.vocab_sources",
    "ClassesError": "cfgzip_lab.classes.classing",
    "CacheError": "cfgzip_lab.cache.format",
    "ModelLoadError": "cfgzip_lab.hf.models",
    "DecodingFinished": "cfgzip_lab.decode",
    "UsageError": "cfgzip_lab.cli._common",
    "WorkbenchError": "cfgzip_lab.widgets.session",
    "TokenIdError": "cfgzip_lab.grammar.token_macros",
    "MissingExtraError": "cfgzip_lab.extras",
    "BuildBudgetError": "cfgzip_lab.deadline",
}

__all__ = ["CfgzipError", *_HOMES]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
