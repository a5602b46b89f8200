"""``cfgzip`` as a vLLM logits processor, for the V1 interface and Model Runner V2's.

vLLM has no registry for structured-output backends, but loads custom logits processors: from the
``vllm.logits_processors`` entry point group (ours: :class:`CfgzipLogitsProcessor`, so installing
cfgzip_lab is enough), or by name (``--logits-processors
cfgzip_lab.serving.vllm_processor:CfgzipLogitsProcessor``, ``LLM(logits_processors=[...])``). A
request opts in with ``SamplingParams.extra_args``::

    {"cfgzip": {"json_schema": {...}}}      # or {"ebnf": "..."}, {"regex": "..."}, {"lark": "..."}, {"structural_tag": ...}

or, in the OpenAI server's ``vllm_xargs`` (whose values cannot be objects), the same as JSON text:
``{"cfgzip": "{\"json_schema\": {...}}"}``.

Requests without it are left alone. Both runners load the entry point group, so the one class
implements both interfaces (V1: ``__init__(vllm_config, device, is_pin_memory)``,
``update_state(BatchUpdate)``, ``apply(logits)``; V2: ``__init__(vllm_config, req_states)``,
``add_request``, ``apply_staged_writes``, ``apply(logits, ctx)``; V2 refuses a plugin class
that is not its own interface's subclass).

Each request's matcher is advanced from the request's output tokens (V1: the live output list
its ``BatchUpdate`` hands over; V2: the token fed at the request's first row, and the committed
tokens in ``req_states.all_token_ids`` after a preemption or accepted drafts), then its rows are
filled (rows of different grammars into one full-vocabulary bitmask,
:func:`cfgzip_lab.native.matcher.fill_vocab_rows`) and applied to the logits.

What this route cannot do, and what a patch of vLLM's structured-output manager would give:

- no overlap: the masks are filled inside ``apply``, after the forward pass, on the critical
  path; vLLM's structured-output manager fills XGrammar's bitmasks in the scheduler while the
  model runs. On V2 reading this step's tokens from the device is a synchronisation too.
- no speculative decoding on V1: vLLM refuses custom logits processors named with
  ``--logits-processors`` then, and silently leaves out the entry-point ones, so ``cfgzip``
  requests would run unconstrained (do not combine the two). On V2 each draft token's row is
  masked by the request's state after the drafts before it (accepted for the fill, rolled back).
- a grammar the worker cannot build (it passed ``validate_params``, which runs our front end at
  admission and refuses with the reason, but classing failed) cannot fail its request from
  here: its rows allow only the stop tokens, so it ends at once, and the reason is logged.

The structured-output backend (:mod:`.vllm_backend`, ``CFGZIP_VLLM_BACKEND=1`` with vLLM's
``xgrammar`` backend selected) has all three: bitmasks filled in the scheduler beside the forward
pass, speculative tokens validated and rolled back, a refused grammar failing its request.

Token tables: the two vLLM's XGrammar backend builds (``TokenizerInfo.from_huggingface`` over the
model's vocabulary size): for JSON, EBNF and regex requests with the tokenizer's special added tokens
removed, for structural tags with them kept as text (free text around a tool call may then hold
``<|im_start|>``, as in vLLM), so the masks are over the tokens vLLM's own structured output uses.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

from .grammars import GrammarRequest, ServingError, request_from_json, shared_engine_cache, vocab_from_tokenizer_info

try:  # Model Runner V2's interface (vLLM >= 0.33)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - older vLLM: V1 only
    V2LogitsProcessor = None

if TYPE_CHECKING:
    from vllm import SamplingParams

logger = logging.getLogger(__name__)

__all__ = ["ARG", "CfgzipLogitsProcessor", "grammar_request_of"]

ARG = "cfgzip"
"""The key of ``SamplingParams.extra_args`` that carries a request's grammar."""


def grammar_request_of(params: SamplingParams) -> GrammarRequest | None:
    """The request's grammar from ``extra_args["cfgzip"]``, None without one; ServingError if malformed."""
    extra = getattr(params, "extra_args", None) or {}
    if ARG not in extra:
        return None
    value = extra[ARG]
    if isinstance(value, str):  # the OpenAI server's vllm_xargs takes no nested objects: JSON text
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ServingError(f"the cfgzip argument is not JSON: {exc}") from None
    return request_from_json(value)


@dataclass
class _Request:
    """One request's state: its matcher (None: refused, stop tokens only), the output ids it follows."""

    matcher: Any
    output_ids: list[int] | None = None  # V1: the request's live output list
    broken: str | None = None
    accepted: int = 0  # output tokens the matcher has taken (a stop token included)

    @property
    def masked(self) -> bool:
        """True while this request's row needs a mask (a terminated matcher's request is ending)."""
        return self.matcher is None or self.broken is not None or not self.matcher.is_terminated()

    def advance(self, tokens: list[int]) -> None:
        """Accept ``tokens`` (the ones after those already accepted); a refused one breaks the request."""
        if self.broken or self.matcher is None:
            return
        for token in tokens:
            if self.matcher.is_terminated():
                return
            if not self.matcher.accept_token(int(token)):
                self.broken = f"token {token} is not allowed by the grammar (was the row masked by another processor?)"
                logger.error("cfgzip: %s; the request may only stop now", self.broken)
                return
            self.accepted += 1

    def rollback(self, count: int) -> None:
        self.matcher.rollback(count)
        self.accepted -= count


_Bases = (V1LogitsProcessor,) if V2LogitsProcessor is None else (V1LogitsProcessor, V2LogitsProcessor)


class CfgzipLogitsProcessor(*_Bases):
    """Grammar-constrained decoding by cfgzip's native engine, per request (see the module docstring)."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """At admission: refuse a malformed ``cfgzip`` argument or a grammar our front end refuses,
        with the reason (vLLM answers HTTP 400). The classes are built later, in the worker."""
        try:
            request = grammar_request_of(sampling_params)
            if request is not None:
                _check_grammar(request)
        except ServingError as exc:
            raise ValueError(str(exc)) from None

    def __init__(self, vllm_config: Any, *args: Any) -> None:
        # V1: (vllm_config, device, is_pin_memory); V2: (vllm_config, req_states)
        from vllm.tokenizers import cached_tokenizer_from_config

        self.v2 = len(args) == 1
        self.req_states = args[0] if self.v2 else None
        self.device = self.req_states.device if self.v2 else args[0]
        model_config = vllm_config.model_config
        self.vocab_size = int(model_config.get_vocab_size())
        tokenizer = cached_tokenizer_from_config(model_config)
        self.vocab, self.stop_policy = _table_like_vllm(tokenizer, self.vocab_size)
        self.engines = shared_engine_cache(self.vocab)
        self._tokenizer = tokenizer
        self._full: Any = None  # structural tags' engines and stop policy, made on the first such request
        self.stop_ids = list(self.vocab.stop_ids)
        self.requests: dict[int, _Request] = {}  # V1: batch row; V2: request slot

    # -- both ------------------------------------------------------------------------------
    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token is the largest

    def _new_request(self, params: SamplingParams) -> _Request | None:
        try:
            request = grammar_request_of(params)
        except ServingError as exc:  # validate_params refused it already where vLLM called it
            return _Request(None, broken=str(exc))
        if request is None:
            return None
        try:
            engines, stop_policy = self._engines_for(request)
            return _Request(engines.engine(request).matcher(stop_policy))
        except ServingError as exc:
            logger.error("cfgzip cannot serve a request (it may only stop): %s", exc)
            return _Request(None, broken=str(exc))

    def _engines_for(self, request: GrammarRequest) -> tuple[Any, Any]:
        """The engine cache over the token table vLLM's backend uses for ``request``'s kind, and how
        that backend's XGrammar matchers read the stop ids over it (:func:`_table_like_vllm`)."""
        if request.kind != "structural_tag":
            return self.engines, self.stop_policy
        if self._full is None:
            full, policy = _table_like_vllm(self._tokenizer, self.vocab_size, keep_special=True)
            self._full = (shared_engine_cache(full), policy)
        return self._full

    def _mask(self, logits: torch.Tensor, rows: list[tuple[int, _Request, list[int]]]) -> torch.Tensor:
        """Fill the rows' masks into one bitmask and apply it (rows not listed stay all-allowed).

        A row's mask is its request's state after the row's draft tokens (speculative decoding on
        Model Runner V2; none elsewhere): they are accepted for the fill and rolled back after it.
        A row behind a draft the grammar refuses is left all-allowed: its draft is rejected anyway,
        since the row before it has that token masked.
        """
        import xgrammar as xgr

        from ..expand import apply_vocab_bitmask_inplace
        from ..native.matcher import fill_vocab_rows

        live = [(i, r, d) for i, r, d in rows if r.masked]
        if not live:
            return logits
        bitmask = torch.full(xgr.get_bitmask_shape(logits.shape[0], self.vocab_size), -1, dtype=torch.int32)
        words = bitmask.numpy().view(np.uint32)
        plain = []
        for i, r, drafts in live:
            if r.matcher is None or r.broken:  # refused or broken: stop tokens only
                words[i] = 0
                for s in self.stop_ids:
                    words[i, s >> 5] |= np.uint32(1 << (s & 31))
            elif not drafts:
                plain.append((i, r.matcher))
            else:
                taken = 0
                for token in drafts:
                    if r.matcher.is_terminated() or not r.matcher.accept_token(int(token)):
                        break
                    taken += 1
                if taken == len(drafts) and not r.matcher.is_terminated():
                    fill_vocab_rows(bitmask, [(i, r.matcher)])
                if taken:
                    r.matcher.rollback(taken)
        fill_vocab_rows(bitmask, plain)
        return apply_vocab_bitmask_inplace(logits, bitmask, min(logits.shape[-1], self.vocab_size))

    # -- V1 --------------------------------------------------------------------------------
    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """V1: follow the persistent batch (removed, then added, then moved), then advance every
        request's matcher over its new output tokens."""
        if batch_update is not None:
            for index in batch_update.removed:
                self.requests.pop(index, None)
            for index, params, _prompt_ids, output_ids in batch_update.added:
                request = self._new_request(params)
                if request is None:
                    self.requests.pop(index, None)
                else:
                    request.output_ids = output_ids
                    self.requests[index] = request
            for a, b, direction in batch_update.moved:
                ra, rb = self.requests.pop(a, None), self.requests.pop(b, None)
                if ra is not None:
                    self.requests[b] = ra
                if direction == MoveDirectionality.SWAP and rb is not None:
                    self.requests[a] = rb
        for request in self.requests.values():
            if request.output_ids is not None and len(request.output_ids) > request.accepted:
                request.advance(request.output_ids[request.accepted :])

    # -- V2 --------------------------------------------------------------------------------
    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """V2: a request enters slot ``req_idx`` (whatever was there before is dropped)."""
        request = self._new_request(sampling_params)
        if request is None:
            self.requests.pop(req_idx, None)
            return False
        self.requests[req_idx] = request
        return True

    def apply_staged_writes(self) -> None:
        """V2: nothing staged (the state is on the host)."""

    def _advance_v2(self, ctx: Any) -> list[tuple[int, _Request, list[int]]]:
        """The rows this processor masks, with their draft tokens; each request first advanced to
        its committed tokens (the token fed at its first row is the newest; older ones, after a
        preemption or accepted drafts, are read from ``req_states.all_token_ids``)."""
        slots = ctx.expanded_idx_mapping.tolist()
        if not any(s in self.requests for s in slots):
            return []
        local = ctx.expanded_local_pos.tolist()
        positions = ctx.pos.tolist()
        inputs = ctx.input_ids.tolist()
        prompt_len = self.req_states.prompt_len.np
        by_slot: dict[int, list[int]] = {}
        for row, slot in enumerate(slots):
            if slot in self.requests:
                by_slot.setdefault(slot, []).append(row)
        out = []
        for slot, rows in by_slot.items():
            rows.sort(key=local.__getitem__)
            request, first = self.requests[slot], rows[0]
            if request.matcher is not None and not request.broken:
                seen = max(0, positions[first] + 1 - int(prompt_len[slot]))  # committed output tokens
                done = request.accepted
                if seen < done:
                    request.rollback(done - seen)
                elif seen > done:
                    start = int(prompt_len[slot]) + done
                    older = (
                        self.req_states.all_token_ids.gpu[slot, start : positions[first]].tolist()
                        if seen > done + 1
                        else []
                    )
                    request.advance([*older, inputs[first]])
            out += [(row, request, [inputs[r] for r in rows[1 : j + 1]]) for j, row in enumerate(rows)]
        return out

    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        """Mask the rows of requests that asked for a grammar (V1: ``apply(logits)``; V2: ``apply(logits, ctx)``)."""
        if ctx is None:
            return self._mask(logits, [(i, r, []) for i, r in sorted(self.requests.items())])
        return self._mask(logits, self._advance_v2(ctx))


def _table_like_vllm(
    tokenizer: Any, vocab_size: int, *, keep_special: bool = False, stop_token_ids: Sequence[int] | None = None
) -> tuple[Any, Any]:
    """A token table vLLM's XGrammar backend uses, and how its XGrammar matchers read the stop ids
    over it (:func:`~.grammars.stop_policy_of`: their text under 0.2.9, blank where vLLM blanks a
    special token). The table is XGrammar's ``from_huggingface`` over the model's vocabulary size,
    less the tokenizer's special added tokens (JSON, EBNF, regex) or with them (``keep_special``:
    structural tags, vLLM's ``full_vocab_compiler``); ``stop_token_ids``: a request's own stop
    tokens instead of the tokenizer's (they stay stop ids, never special)."""
    import dataclasses

    import xgrammar as xgr

    from .grammars import stop_policy_of

    stops = list(stop_token_ids) if stop_token_ids else None
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
    special = []
    if not keep_special:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        special = [int(i) for i, tok in added.items() if tok.special]
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    policy = stop_policy_of(info)
    blank = set(special)
    policy = dataclasses.replace(policy, texts={i: t for i, t in policy.texts.items() if i not in blank})
    return vocab_from_tokenizer_info(info, name=name, extra_special=special), policy


def _check_grammar(request: GrammarRequest) -> None:
    """Our front end on the request's grammar (no vocabulary: that is the worker's part)."""
    from ..errors import CfgzipError
    from ..pipeline import compile_grammar

    ebnf = request.to_ebnf()
    try:
        compile_grammar(ebnf, source=f"<{request.kind}>")
    except CfgzipError as exc:
        from .grammars import _reason

        raise ServingError(f"cfgzip cannot serve this {request.kind}: {_reason(exc, ebnf)}") from None
