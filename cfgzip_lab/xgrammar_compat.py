"""XGrammar's matcher API over our engines: a drop-in for serving engines' XGrammar backends.

vLLM and SGLang drive XGrammar through ``GrammarMatcher`` (``accept_token``,
``fill_next_token_bitmask(bitmask, index)``, ``rollback``, ``is_terminated``, ``reset``,
``find_jump_forward_string``…), ``BatchGrammarMatcher`` and ``apply_token_bitmask_inplace``,
with full-vocabulary packed bitmasks from ``allocate_token_bitmask``. This module offers the
same names, signatures and shapes over any engine with the common interface of
:class:`cfgzip_lab.engine.Engine` (``accept_token``, ``fill_next_token_bitmask`` into its
native buffer, ``allocate_bitmask``, ``to_vocab_bitmask``, ``rollback``, ``reset``,
``is_terminated``, ``is_completed``): the compressed engine (XGrammar over the class
representatives), the plain one, or the native engine (``cfgzip_lab.native``), so that an
engine's XGrammar backend can swap its import::

    from cfgzip_lab import xgrammar_compat as xgr          # instead of: import xgrammar as xgr
    matcher = xgr.GrammarMatcher(engines.compressed())      # instead of: xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(batch, vocab_size)
    matcher.fill_next_token_bitmask(bitmask, i)
    xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))

Only construction differs (an engine instead of a ``CompiledGrammar``). Results equal
XGrammar's call for call, bitmask words included: bits past the vocabulary in the last word
are left as they were, as XGrammar leaves them (``tests/test_xgrammar_compat.py`` runs one
call sequence on both and compares every result).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import xgrammar as _xgr

__all__ = [
    "GrammarMatcher",
    "BatchGrammarMatcher",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "get_bitmask_shape",
    "reset_token_bitmask",
    "bitmask_dtype",
]

allocate_token_bitmask = _xgr.allocate_token_bitmask
get_bitmask_shape = _xgr.get_bitmask_shape
reset_token_bitmask = _xgr.reset_token_bitmask
bitmask_dtype = _xgr.bitmask_dtype


def apply_token_bitmask_inplace(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    vocab_size: int | None = None,
    indices: list[int] | None = None,
    backend: Literal["auto", "cpu", "cuda", "triton", "torch_compile", "torch_native"] = "auto",
) -> None:
    """``xgrammar.apply_token_bitmask_inplace``, same signature; ``auto`` picks a backend that
    is installed here (XGrammar's own ``auto`` assumes Triton on CUDA)."""
    if backend == "auto":
        if logits.device.type == "cpu":
            backend = "cpu"
        elif logits.device.type == "cuda":
            from .kernels.triton import available

            backend = "triton" if available() else "torch_native"
        else:
            backend = "torch_native"
    _xgr.apply_token_bitmask_inplace(
        logits, bitmask.to(logits.device, non_blocking=True), vocab_size=vocab_size, indices=indices, backend=backend
    )


class GrammarMatcher:
    """``xgrammar.GrammarMatcher``'s interface over one of our engines.

    Parameters
    ----------
    engine
        A matcher with the common interface (``engines.compressed()``, ``engines.plain()``,
        a native matcher). Token ids are original vocabulary ids, as with XGrammar.

    ``fill_next_token_bitmask`` writes the full-vocabulary mask (``ceil(V / 32)`` int32 words)
    into ``bitmask[index]``; the engine's own mask (class bits, for the compressed engine)
    stays inside.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.vocab_size = int(engine.vocab_size)
        self._words = math.ceil(self.vocab_size / 32)
        tail = self.vocab_size % 32
        self._tail = np.int32(-1 if tail == 0 else (1 << tail) - 1)
        self._native = engine.allocate_bitmask(1)

    # -- state --------------------------------------------------------------------------
    def accept_token(self, token_id: int, *, debug_print: bool = False) -> bool:
        return bool(self.engine.accept_token(int(token_id)))

    def accept_string(self, input_str: str | bytes, *, debug_print: bool = False) -> bool:
        """Delegated to the engine's XGrammar matcher (the grammar's bytes, no token ids)."""
        own = getattr(self.engine, "accept_string", None)
        if own is not None:
            return bool(own(input_str))
        return bool(self._xgrammar("accept_string").accept_string(input_str, debug_print=debug_print))

    def rollback(self, num_tokens: int = 1) -> None:
        self.engine.rollback(num_tokens)

    def reset(self) -> None:
        self.engine.reset()

    def is_terminated(self) -> bool:
        return bool(self.engine.is_terminated())

    def is_completed(self) -> bool:
        return bool(self.engine.is_completed())

    @property
    def stop_token_ids(self) -> list[int]:
        vocab = getattr(self.engine, "vocab", None) or self.engine.engine.vocab  # native matchers: .engine.vocab
        return sorted(int(s) for s in vocab.stop_ids)  # XGrammar lists them sorted

    @property
    def max_rollback_tokens(self) -> int:
        """-1: unlimited, as with XGrammar's default."""
        matcher = getattr(self.engine, "xgrammar_matcher", None)
        return int(matcher.max_rollback_tokens) if matcher is not None else -1

    def find_jump_forward_string(self) -> str:
        """The string the grammar forces next (grammar state only, so the class matcher's is the plain one's)."""
        own = getattr(self.engine, "find_jump_forward_string", None)
        if own is not None:
            return own()
        return self._xgrammar("find_jump_forward_string").find_jump_forward_string()

    def find_jump_forward_tokens(self) -> list[int]:
        """Vocabulary ids for the forced continuation (XGrammar 0.2.9's contract): the native matcher's own,
        or the plain engine's XGrammar matcher (its ids are vocabulary ids); the compressed engine's
        XGrammar matcher sees class ids, so it has none."""
        own = getattr(self.engine, "find_jump_forward_tokens", None)
        if own is not None:
            return list(own())
        if getattr(self.engine, "kind", None) == "plain":
            return list(self._xgrammar("find_jump_forward_tokens").find_jump_forward_tokens())
        raise NotImplementedError(f"{type(self.engine).__name__} has no find_jump_forward_tokens")

    def get_captures(self, *, deduplicate: bool = True) -> list[tuple[str, bytes]]:
        """XGrammar's captures: the native matcher's own (``[]`` without capture attributes), or the plain
        engine's XGrammar matcher; the compressed engine's sees class representatives, so it has none."""
        own = getattr(self.engine, "get_captures", None)
        if own is not None:
            return own(deduplicate=deduplicate)
        if getattr(self.engine, "kind", None) == "plain":
            return self._xgrammar("get_captures").get_captures(deduplicate=deduplicate)
        raise NotImplementedError(f"{type(self.engine).__name__} has no get_captures")

    def fork(self) -> GrammarMatcher:
        """An independent matcher in this one's state (the engine's ``fork``: O(1) for the native one)."""
        twin = copy.copy(self)
        twin.engine = self.engine.fork()
        twin._native = twin.engine.allocate_bitmask(1)
        return twin

    @property
    def temperature(self) -> float | None:
        """None: no grammar served here sets a sampling temperature."""
        return getattr(self.engine, "temperature", None)

    def traverse_draft_tree(
        self,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        draft_tokens: torch.Tensor,
        token_bitmask: torch.Tensor,
        time_threshold: float = -1.0,
        temperatures: torch.Tensor | None = None,
    ) -> bool:
        """XGrammar's ``traverse_draft_tree``: row i of ``token_bitmask`` gets the mask at draft-tree node i
        (see :mod:`cfgzip_lab.native.draft` for the semantics, which are XGrammar's); the state is unchanged."""
        from .native.draft import traverse_draft_tree

        return traverse_draft_tree(
            self,
            retrieve_next_token,
            retrieve_next_sibling,
            draft_tokens,
            token_bitmask,
            self.fill_next_token_bitmask,
            time_threshold,
            temperatures,
        )

    def fill_draft_bitmasks(self, draft_tokens: Sequence[int], bitmask: torch.Tensor, index: int = 0) -> int:
        """Masks for a linear draft of k tokens in one call (not an XGrammar method): row ``index + i``
        gets the mask after the first i draft tokens, for i = 0 … k (the last for the bonus token).

        Stops after the row of the first refused token, or before the row after a stop token; the
        state is the same after the call (the accepted draft tokens are rolled back). Returns the
        number of rows filled, as :meth:`cfgzip_lab.native.matcher.DisplacementMatcher.fill_draft_bitmasks`.
        """
        accepted = filled = 0
        try:
            for i in range(len(draft_tokens) + 1):
                if self.is_terminated():
                    break
                self.fill_next_token_bitmask(bitmask, index + i)
                filled += 1
                if i == len(draft_tokens) or not self.accept_token(int(draft_tokens[i])):
                    break
                accepted += 1
        finally:
            self.rollback(accepted)
        return filled

    def _debug_print_internal_state(self) -> str:
        """A text of the state for comparisons (XGrammar's is its parser states; ours the state history)."""
        history = getattr(self.engine, "_history", None)
        if history is None:
            return self._xgrammar("_debug_print_internal_state")._debug_print_internal_state()
        return f"states={list(history)} steps={list(self.engine._tokens)}"

    def _xgrammar(self, what: str) -> _xgr.GrammarMatcher:
        matcher = getattr(self.engine, "xgrammar_matcher", None)
        if matcher is None:
            raise NotImplementedError(f"{type(self.engine).__name__} has no {what}")
        return matcher

    # -- masks --------------------------------------------------------------------------
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, *, debug_print: bool = False) -> bool:
        """Fill ``bitmask[index]`` (CPU int32, ``(batch, ceil(V / 32))`` or ``(ceil(V / 32),)``) with the
        vocabulary mask; returns ``need_apply`` (False only when every token is allowed).

        Raises
        ------
        RuntimeError
            XGrammar's checks, in its order: the dtype, the device, the shape (the width exactly
            ``ceil(V / 32)``), the index within the rows.
        """
        if bitmask.dtype != torch.int32:
            raise RuntimeError("The bitmask's dtype is not valid: it must be an int32 tensor on the CPU")
        if bitmask.device.type != "cpu":
            raise RuntimeError("the bitmask must be an int32 tensor on the CPU (allocate_token_bitmask)")
        if bitmask.dim() not in (1, 2) or bitmask.shape[-1] != self._words:
            raise RuntimeError(f"The provided bitmask's shape is not valid: should be (batch_size, {self._words})")
        if not 0 <= index < (bitmask.shape[0] if bitmask.dim() == 2 else 1):
            raise RuntimeError("The provided index is out of bounds")
        self.engine.fill_next_token_bitmask(self._native, 0)
        row = self.engine.to_vocab_bitmask(self._native[0]).numpy()
        return self._write(bitmask, index, row)

    def _write(self, bitmask: torch.Tensor, index: int, row: np.ndarray) -> bool:
        out = bitmask.numpy().reshape(-1, bitmask.shape[-1])[index]
        words = self._words
        out[: words - 1] = row[: words - 1]
        # The last word: bits past the vocabulary keep what they were, as XGrammar keeps them.
        out[words - 1] = (out[words - 1] & ~self._tail) | (row[words - 1] & self._tail)
        full = np.all(row[: words - 1] == -1) and (row[words - 1] & self._tail) == self._tail
        return not bool(full)


class BatchGrammarMatcher:
    """``xgrammar.BatchGrammarMatcher`` over :class:`GrammarMatcher` objects of this module.

    When every matcher wraps an XGrammar-backed engine of one kind, the engines' own masks
    are filled in parallel by XGrammar's batch matcher and then expanded row by row.
    """

    def __init__(self, max_threads: int | Literal["auto"] = "auto") -> None:
        self._batch = _xgr.BatchGrammarMatcher(max_threads)

    def batch_fill_next_token_bitmask(
        self,
        matchers: list[GrammarMatcher],
        bitmask: torch.Tensor,
        indices: list[int] | None = None,
        debug_print: bool = False,
    ) -> None:
        if indices is not None and len(indices) != len(matchers):
            raise RuntimeError(
                f"The size of indices ({len(indices)}) should be the same as the size of matchers ({len(matchers)})."
            )
        rows = list(range(len(matchers))) if indices is None else list(indices)
        height = bitmask.shape[0] if bitmask.dim() == 2 else 1
        for batch_id, row in enumerate(rows):
            if not 0 <= row < height:
                raise RuntimeError(f"The index {row} is out of range [0, {height}) for batch_id {batch_id}.")
        # XGrammar's own matchers (xgrammar.testing's helpers make them) fill their rows one by one below.
        inner = [getattr(getattr(m, "engine", None), "xgrammar_matcher", None) for m in matchers]
        if len(matchers) > 1 and all(x is not None for x in inner) and len({type(m.engine) for m in matchers}) == 1:
            native = matchers[0].engine.allocate_bitmask(len(matchers))
            self._batch.batch_fill_next_token_bitmask(inner, native)
            vocab_rows = matchers[0].engine.to_vocab_bitmask(native).numpy()
            for m, row, vocab_row in zip(matchers, rows, vocab_rows):
                m._write(bitmask, row, vocab_row)
            return
        for m, row in zip(matchers, rows):
            m.fill_next_token_bitmask(bitmask, row)

    @staticmethod
    def batch_accept_token(matchers: list[GrammarMatcher], tokens: list[int], debug_print: bool = False) -> list[bool]:
        _same_size(matchers, tokens, "token_ids")
        return [m.accept_token(t) for m, t in zip(matchers, tokens)]

    @staticmethod
    def batch_accept_string(
        matchers: list[GrammarMatcher], strings: list[str | bytes], debug_print: bool = False
    ) -> list[bool]:
        _same_size(matchers, strings, "input_strs")
        return [m.accept_string(s) for m, s in zip(matchers, strings)]

    @staticmethod
    def batch_rollback(matchers: list[GrammarMatcher], num_tokens: Sequence[int] | int = 1) -> None:
        counts = [num_tokens] * len(matchers) if isinstance(num_tokens, int) else list(num_tokens)
        _same_size(matchers, counts, "num_tokens")
        for m, n in zip(matchers, counts):
            m.rollback(n)


def _same_size(matchers: Sequence[Any], values: Sequence[Any], name: str) -> None:
    """XGrammar's check (RuntimeError, its message) that a batch call has one value per matcher."""
    if len(matchers) != len(values):
        raise RuntimeError(f"The size of matchers ({len(matchers)}) and {name} ({len(values)}) should be the same.")
