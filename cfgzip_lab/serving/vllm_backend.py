"""``cfgzip`` as vLLM's structured-output backend: masks filled in the scheduler, drafts validated.

vLLM 0.33 has no registry for structured-output backends: its ``StructuredOutputManager``
(``vllm/v1/structured_output/__init__.py``) builds ``XgrammarBackend`` by that name when a request's
backend resolves to ``xgrammar``. Our ``vllm.general_plugins`` entry point (:func:`register`, run
by every vLLM process before it builds an engine) replaces that one name with
:class:`CfgzipBackend`, a subclass, when the environment asks for it::

    CFGZIP_VLLM_BACKEND=1 vllm serve MODEL --structured-outputs-config.backend xgrammar

Nothing else is patched, and only on the vLLM releases this module was written against
(:data:`VLLM_RELEASES`); on another one :func:`register` raises at start-up rather than guess. Without
the variable the plugin does nothing and the logits processor (:mod:`.vllm_processor`) stays the
way in.

What this route gives that the logits processor cannot: bitmasks filled by vLLM's scheduler while
the model runs (its ``grammar_bitmask``, as for XGrammar), speculative drafts validated
(``validate_tokens``) and rolled back on both runners, and a grammar cfgzip cannot serve failing its
own request with the reason (vLLM's compile future carries the error to the scheduler).

Each request is built as vLLM's XGrammar backend builds it (the same XGrammar conversion of the
JSON Schema with vLLM's whitespace options, Lark, regex, choice or structural tag, the same token
table: special tokens removed for JSON, EBNF, regex and choice, kept for Lark and structural tags),
and served by the native engine over the EBNF XGrammar made of it, so
every mask equals the one ``XgrammarBackend`` would fill. The request's stop tokens are the token
table's stop ids; XGrammar's ``override_stop_tokens`` also leaves a stop token's text matchable inside
the grammar, which differs only for a stop token that is not a special token (the tests use the
model's own end token, as vLLM does by default).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .grammars import EngineCache, GrammarRequest, ServingError, legacy_structural_tag

__all__ = ["ENV", "VLLM_RELEASES", "CfgzipBackend", "CfgzipStructuredGrammar", "register"]

ENV = "CFGZIP_VLLM_BACKEND"
"""Set to 1 to serve vLLM's ``xgrammar`` structured-output requests with cfgzip."""

VLLM_RELEASES = ("0.33.",)
"""vLLM releases whose ``StructuredOutputManager`` this module patches (prefixes of the version)."""


def register() -> None:
    """The ``vllm.general_plugins`` entry point: with ``CFGZIP_VLLM_BACKEND=1``, make vLLM's
    structured-output manager build :class:`CfgzipBackend` where it builds ``XgrammarBackend``.

    Raises
    ------
    RuntimeError
        The variable is set and the installed vLLM is not one of :data:`VLLM_RELEASES`, or its
        structured-output manager no longer builds ``XgrammarBackend`` by that name.
    """
    if os.environ.get(ENV, "0") != "1":
        return
    import vllm
    import vllm.v1.structured_output as manager

    version = str(getattr(vllm, "__version__", "?"))
    if not version.startswith(VLLM_RELEASES):
        raise RuntimeError(
            f"{ENV}=1: cfgzip's structured-output backend is written against vLLM "
            f"{', '.join(r + 'x' for r in VLLM_RELEASES)} and this is vLLM {version}; unset {ENV} "
            "(the cfgzip logits processor still works) or install a supported vLLM"
        )
    current = getattr(manager, "XgrammarBackend", None)
    if current is CfgzipBackend:
        return
    if current is None or not isinstance(current, type) or current.__name__ != "XgrammarBackend":
        raise RuntimeError(f"{ENV}=1: vLLM {version}'s structured-output manager has no XgrammarBackend to replace")
    manager.XgrammarBackend = CfgzipBackend


def _xgrammar_backend() -> type:
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    return XgrammarBackend


class CfgzipBackend(_xgrammar_backend()):  # type: ignore[misc]
    """vLLM's ``XgrammarBackend`` with every grammar served by the native engine.

    The parent's ``__post_init__`` still runs (its token tables and compilers: vLLM reads
    attributes of the backend it made, and the compilers cost nothing until used); grammars are
    converted with XGrammar as the parent converts them and compiled by cfgzip, one engine cache
    per token table and stop-token set.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        # (keep_special, stops) -> the engines over that token table, and how its stop ids are read
        self._caches: dict[tuple[bool, tuple[int, ...] | None], tuple[EngineCache, Any]] = {}

    def compile_grammar(
        self, request_type: Any, grammar_spec: str, stop_token_ids: set[int] | None = None
    ) -> CfgzipStructuredGrammar:
        """The request's native matcher; ``ValueError`` with the reason where cfgzip cannot serve it
        (or XGrammar cannot convert it: "invalid <kind>: ...")."""
        request, keep_special = self._request(request_type, grammar_spec)
        stops = tuple(sorted(int(t) for t in stop_token_ids)) if stop_token_ids else None
        engines, stop_policy = self._cache(keep_special, stops)
        try:
            engine = engines.engine(request)
        except ServingError as exc:  # "cfgzip cannot serve this ebnf: <reason, line and column>"
            raise ValueError(f"{exc} (vLLM {request_type.name} request)") from None
        return CfgzipStructuredGrammar(vocab_size=self.vocab_size, matcher=engine.matcher(stop_policy))

    def _request(self, request_type: Any, spec: str) -> tuple[GrammarRequest, bool]:
        """The request as ``XgrammarBackend.compile_grammar`` reads it (its JSON options: compact
        separators without whitespace), and whether its token table keeps the special tokens (vLLM's
        ``full_vocab_compiler``). :meth:`GrammarRequest.to_ebnf` converts it with XGrammar."""
        from vllm.v1.structured_output.utils import choice_as_grammar, grammar_is_likely_lark

        kind = request_type.name
        compact = self.disable_any_whitespace
        json_options = {"any_whitespace": not compact, "separators": (",", ":") if compact else None}
        try:
            if kind == "JSON":
                return GrammarRequest("json_schema", spec, **json_options), False
            if kind == "JSON_OBJECT":
                return GrammarRequest("json_schema", '{"type": "object"}', **json_options), False
            if kind == "GRAMMAR":
                lark = grammar_is_likely_lark(spec)
                return GrammarRequest("lark" if lark else "ebnf", spec), lark
            if kind == "REGEX":
                return GrammarRequest("regex", spec), False
            if kind == "CHOICE":
                return GrammarRequest("ebnf", choice_as_grammar(json.loads(spec))), False
            if kind == "STRUCTURAL_TAG":
                tag = json.loads(spec)
                if "structures" in tag:  # the legacy form, as vLLM reads it
                    return legacy_structural_tag(tag["structures"], tag["triggers"]), True
                return GrammarRequest("structural_tag", spec), True
        except (RuntimeError, ValueError, TypeError) as exc:
            raise ValueError(f"invalid {kind.lower()} request: {exc}") from None
        raise ValueError(f"grammar is not of valid supported types. ({request_type!s})")

    def _cache(self, keep_special: bool, stops: tuple[int, ...] | None) -> tuple[EngineCache, Any]:
        """The engines over vLLM's token table for these requests, and how its matchers read a stop id."""
        key = (keep_special, stops)
        if key not in self._caches:
            from .vllm_processor import _table_like_vllm

            vocab, stop_policy = _table_like_vllm(
                self.tokenizer, self.vocab_size, keep_special=keep_special, stop_token_ids=stops
            )
            self._caches[key] = (EngineCache(vocab), stop_policy)
        return self._caches[key]

    def destroy(self) -> None:
        self._caches.clear()
        super().destroy()


def _xgrammar_grammar() -> type:
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar

    return XgrammarGrammar


@dataclass
class CfgzipStructuredGrammar(_xgrammar_grammar()):  # type: ignore[misc]
    """One request's native matcher in vLLM's ``XgrammarGrammar``, whose draft checks, rollback,
    termination and fill call only ``accept_token``, ``rollback``, ``is_terminated``, ``reset``
    and ``fill_next_token_bitmask``: the native matcher has each with XGrammar's meaning, so the
    request behaves as vLLM's own XGrammar request does. No compiled XGrammar grammar behind it."""

    ctx: Any = field(default=None, hash=False)
