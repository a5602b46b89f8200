"""``cfgzip-lab``: gnf | test | compress | verify | bench | inspect | tokenizers.

One module per command group (:mod:`.gnf`, :mod:`.classes`, :mod:`.tokenizers`,
:mod:`.engines`), each with a ``register(subparsers)``; :mod:`._common` holds what they
share. A new command group is one more module in ``_GROUPS``.

Bad input (missing file, grammar error, unknown tokenizer, corrupt cache) exits
with status 2 and a message, never a traceback: :func:`main` catches
:class:`~cfgzip_lab.errors.CfgzipError`, of which :class:`UsageError` is one. With ``--json`` the LAST line
printed is one JSON object, so scripts can ``tail -n1``.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import CfgzipError
from . import classes, engines, gnf, testing, tokenizers
from ._common import UsageError

__all__ = ["build_parser", "main", "UsageError"]

# In the order ``cfgzip-lab --help`` lists them.
_GROUPS = (gnf, testing, classes, tokenizers, engines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cfgzip-lab", description="Token-space compression of grammar-constrained decoding."
    )
    sub = p.add_subparsers(dest="command", required=True)
    for group in _GROUPS:
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CfgzipError as exc:  # UsageError and every bad-input error the library raises
        print(f"cfgzip-lab {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
