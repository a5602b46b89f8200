"""``cfgzip-lab tokenizers``: the offline tokenizer registry and what is installed."""

from __future__ import annotations

import argparse

from ._common import add_json_flag, emit

__all__ = ["register", "cmd_tokenizers"]


def cmd_tokenizers(args: argparse.Namespace) -> int:
    from .. import vocab_sources

    infos = vocab_sources.available_vocabs()
    human = [f"{i.name:<10} {'installed' if i.installed else 'missing  '} {i.description}" for i in infos]
    emit(args, human, {"tokenizers": [{"name": i.name, "installed": i.installed} for i in infos]})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    t = add_json_flag(sub.add_parser("tokenizers", help="list the offline tokenizer registry"))
    t.set_defaults(func=cmd_tokenizers)
