"""``cfgzip`` as an SGLang grammar backend (``--grammar-backend cfgzip``), served by the native engine.

SGLang loads general plugins from the ``sglang.srt.plugins`` entry point group before it parses
its arguments and again in the scheduler process; our entry point is :func:`register`, which
adds ``cfgzip`` to ``--grammar-backend``'s choices and registers :func:`create_backend` under
that name, which SGLang's ``create_grammar_backend`` then calls for the scheduler. Nothing
changes for a server started without ``--grammar-backend cfgzip``.

Requests: JSON Schema (``$$ANY$$`` too), EBNF (or a Lark grammar in the ebnf field), regex and structural tags, each converted to EBNF
by XGrammar with the server's JSON options (:mod:`.grammars`) and served by the native engine
(which moves a request past its state budget to the compressed XGrammar engine, never a wrong
mask). Grammars are compiled once and shared: SGLang's own cache keeps one
:class:`CfgzipGrammar` per key and hands out :meth:`CfgzipGrammar.copy`,
:class:`~.grammars.EngineCache` keeps one engine per EBNF (two keys that convert to the same
EBNF share it), and the per-request API's cache (``cfgzip_lab.cache.grammars``) keeps the
classes on disk, so a schema is classed once per machine. A request we cannot serve (a construct the front end refuses, a budget) gets
SGLang's ``InvalidGrammarObject`` with the reason: SGLang aborts that request with the message
and the server keeps running.

Masks are XGrammar's: int32 words over the whole (padded) vocabulary, bit set = allowed, so the
rows of a batch, speculative decoding's tree walk (which reads the bits of a draft token) and
SGLang's token filters read them as they read XGrammar's. The batch fill
(:meth:`CfgzipGrammar.fill_vocab_mask_batched`) writes the rows of every grammar of the batch
into one bitmask (:func:`cfgzip_lab.native.matcher.fill_vocab_rows`); applying it to logits is
our compiled kernel on the CPU and XGrammar's kernel elsewhere.

Token table: the ``xgrammar.TokenizerInfo`` SGLang's XGrammar backend builds for the same
tokenizer, vocabulary size and stop ids (``TokenizerInfo.from_huggingface``, or the tokenizer's
``init_xgrammar``), so our masks are over the tokens theirs are.

Jump-forward as SGLang's XGrammar backend does it (``try_jump_forward`` gives the forced text,
``jump_and_retokenize`` re-aligns the tokens; SGLang 0.5.23's scheduler no longer calls them, a
server that does gets the same text). Not done by this backend: SGLang's token filters for strict
thinking (``is_support_token_filter`` False), and the reasoning-parser wrapper, which SGLang's
``create_grammar_backend`` does not put around a registered backend.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
)
from sglang.srt.constrained.json_schema_validation import UnsupportedJSONSchemaFeature, validate_xgrammar_json_schema

from .grammars import (
    EngineCache,
    GrammarRequest,
    ServingError,
    legacy_structural_tag,
    stop_policy_of,
    vocab_from_tokenizer_info,
)

logger = logging.getLogger(__name__)

__all__ = ["BACKEND_NAME", "register", "create_backend", "CfgzipGrammarBackend", "CfgzipGrammar"]

BACKEND_NAME = "cfgzip"


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: make ``--grammar-backend cfgzip`` available."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices
    from sglang.srt.constrained.base_grammar_backend import register_grammar_backend

    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:  # plugins load in several processes, maybe twice
        add_grammar_backend_choices([BACKEND_NAME])
    register_grammar_backend(BACKEND_NAME, create_backend)


def create_backend(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None
) -> CfgzipGrammarBackend:
    """What SGLang's ``create_grammar_backend`` calls for ``--grammar-backend cfgzip``.

    Reads the same JSON options as SGLang's XGrammar backend (``--constrained-json-disable-any-whitespace``,
    ``--constrained-json-max-whitespace-cnt``) from ``server_args``.
    """
    return CfgzipGrammarBackend(
        tokenizer,
        vocab_size=vocab_size,
        model_eos_token_ids=sorted(eos_token_ids) if eos_token_ids else None,
        any_whitespace=not getattr(server_args, "constrained_json_disable_any_whitespace", False),
        max_whitespace_cnt=getattr(server_args, "constrained_json_max_whitespace_cnt", None),
    )


def _allocate(vocab_size: int, batch_size: int) -> torch.Tensor:
    """An all-allowed bitmask, pinned where pinning exists (SGLang copies it to the device without blocking)."""
    import xgrammar as xgr

    pin = torch.cuda.is_available()
    return torch.full(xgr.get_bitmask_shape(batch_size, vocab_size), -1, dtype=torch.int32, pin_memory=pin)


class CfgzipGrammar(BaseGrammarObject):
    """One request's grammar state for SGLang: a native matcher and the tokens it accepted.

    ``stop_policy`` reads the stop ids as the XGrammar backend's matcher does (their text from its
    ``TokenizerInfo`` under 0.2.9; :mod:`cfgzip_lab.native.stop_policy`); None: the signal only.
    """

    def __init__(
        self, engine: Any, key_string: str, grammar_stats: GrammarStats | None = None, stop_policy: Any = None
    ) -> None:
        super().__init__()
        self.engine = engine
        self.stop_policy = stop_policy
        self.matcher = engine.matcher() if stop_policy is None else engine.matcher(stop_policy)
        self.vocab_size = engine.vocab_size
        self.key_string = key_string
        self.grammar_stats = grammar_stats
        self.accepted_tokens: list[int] = []

    def accept_token(self, token: int) -> None:
        """Advance by ``token``; a token the grammar refuses raises ValueError, as XGrammar's backend does
        (SGLang then aborts the request)."""
        if self.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept_token(int(token)):
            raise ValueError(
                f"token {token} is not allowed by the grammar here (cfgzip); accepted so far: {len(self.accepted_tokens)}"
            )
        self.accepted_tokens.append(int(token))

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)
        if k:
            del self.accepted_tokens[-k:]

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    # -- masks: XGrammar's full-vocabulary int32 layout -----------------------------------------
    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return _allocate(vocab_size, batch_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        from ..native.matcher import fill_vocab_rows

        fill_vocab_rows(vocab_mask, [(idx, self.matcher)])

    @staticmethod
    def fill_vocab_mask_batched(entries: list, vocab_mask: torch.Tensor) -> None:
        """Rows of every grammar of the batch into one bitmask; unlisted rows untouched."""
        from ..native.matcher import fill_vocab_rows

        fill_vocab_rows(vocab_mask, [(entry.row, entry.grammar.matcher) for entry in entries])

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        from ..expand import apply_vocab_bitmask_inplace

        apply_vocab_bitmask_inplace(logits, vocab_mask, min(logits.shape[-1], vocab_mask.shape[-1] * 32))

    def copy(self) -> CfgzipGrammar:
        """A fresh request of the same grammar (same engine, initial state)."""
        stats = self.grammar_stats
        if stats is not None:
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        return CfgzipGrammar(self.engine, self.key_string, stats, self.stop_policy)

    # -- jump-forward ----------------------------------------------------------------------
    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """The text every continuation of the grammar writes next, as SGLang's XGrammar backend gives
        it (``([], text)``), or None where the next byte is not forced.

        The native matcher's ``find_jump_forward_string`` equals XGrammar's (tests compare them), so a
        server that jumps forward writes the same text under either backend."""
        text = self.matcher.find_jump_forward_string()
        return ([], text) if text else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        """The text to append and the next state (-1: none, as XGrammar's backend)."""
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: int) -> None:
        """Roll back to the common prefix of the old and new ids, then accept the rest of the new ones."""
        k = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            k += 1
        if k < len(old_output_ids):
            self.rollback(len(old_output_ids) - k)
        for token in new_output_ids[k:]:
            self.accept_token(token)

    def __repr__(self) -> str:
        return f"CfgzipGrammar(key_string={self.key_string!r}, accepted={len(self.accepted_tokens)})"


class CfgzipGrammarBackend(BaseGrammarBackend):
    """SGLang's grammar backend interface over cfgzip's native engine (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        model_eos_token_ids: list[int] | None = None,
        any_whitespace: bool = True,
        max_whitespace_cnt: int | None = None,
        capacity: int = 64,
        grammars: Any = None,
    ) -> None:
        super().__init__()
        import xgrammar as xgr

        if hasattr(tokenizer, "init_xgrammar"):  # tokenizers SGLang's XGrammar backend asks the same way
            info, override_stop_tokens = tokenizer.init_xgrammar()
            if info is None:
                raise ValueError(
                    f"tokenizer type {type(tokenizer).__name__} is not supported by XGrammar, nor by cfgzip"
                )
            if override_stop_tokens is not None:
                info = xgr.TokenizerInfo(
                    info.decoded_vocab,
                    xgr.VocabType.RAW,
                    vocab_size=info.vocab_size,
                    stop_token_ids=list(override_stop_tokens)
                    if isinstance(override_stop_tokens, (list, tuple))
                    else [override_stop_tokens],
                )
        else:
            info = xgr.TokenizerInfo.from_huggingface(
                tokenizer, vocab_size=vocab_size, stop_token_ids=model_eos_token_ids
            )
        name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        self.vocab = vocab_from_tokenizer_info(info, name=name)
        self.stop_policy = stop_policy_of(info)
        self.vocab_size = vocab_size
        self.engines = EngineCache(self.vocab, capacity=capacity, grammars=grammars)
        self.any_whitespace = any_whitespace
        self.max_whitespace_cnt = max_whitespace_cnt

    def _dispatch(self, kind: str, key_string: str, request: GrammarRequest | None = None) -> BaseGrammarObject:
        try:
            request = request or GrammarRequest(kind, key_string)
            engine = self.engines.engine(request)
        except ServingError as exc:
            logger.error("cfgzip refused a %s request: %s", kind, exc)
            return InvalidGrammarObject(str(exc))
        return CfgzipGrammar(engine, key_string, GrammarStats(dispatch_type=kind), self.stop_policy)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if key_string == "$$ANY$$":
            return self._dispatch("json", key_string, GrammarRequest("any_json", ""))
        try:
            validate_xgrammar_json_schema(json.loads(key_string))  # refuse what their XGrammar backend refuses
        except (UnsupportedJSONSchemaFeature, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            logger.error("cfgzip refused a json request: %s", exc)
            return InvalidGrammarObject(str(exc))
        request = GrammarRequest(
            "json_schema", key_string, any_whitespace=self.any_whitespace, max_whitespace_cnt=self.max_whitespace_cnt
        )
        return self._dispatch("json", key_string, request)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        # SGLang has no Lark field: a Lark grammar comes as "ebnf" (never valid EBNF: it has no ::=).
        from ..grammar.lark_regex import looks_like_lark

        return self._dispatch("lark" if looks_like_lark(key_string) else "ebnf", key_string)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._dispatch("regex", key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        try:
            tag = json.loads(key_string)
        except ValueError as exc:
            return InvalidGrammarObject(str(exc))
        if isinstance(tag, dict) and tag.get("structures") is not None:  # SGLang's legacy form
            try:
                structures = [{**s, "schema": s.get("schema") or {}} for s in tag["structures"]]  # SGLang's default
                request = legacy_structural_tag(
                    structures, tag["triggers"], at_least_one=tag.get("at_least_one", False)
                )
            except (KeyError, TypeError, ValueError, RuntimeError) as exc:
                return InvalidGrammarObject(f"invalid structural_tag: {exc}")
            return self._dispatch("structural_tag", key_string, request)
        if isinstance(tag, dict) and isinstance(tag.get("format"), dict):
            # a missing json_schema means {}, as SGLang's XGrammar backend reads it (its own helper)
            from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

            XGrammarGrammarBackend._sanitize_structural_format(tag["format"])
            return self._dispatch("structural_tag", key_string, GrammarRequest("structural_tag", json.dumps(tag)))
        return self._dispatch("structural_tag", key_string)

    def reset(self) -> None:
        super().reset()
        self.engines.clear()
