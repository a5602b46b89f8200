"""transformers ``generate`` with the grammar's next step computed while the model runs.

:class:`OverlappedLogitsProcessor` wraps a grammar logits processor. ``generate`` calls
its stopping criteria right after it has appended the sampled tokens and before the next
forward pass (transformers 4.4x–5.2x ``_sample``: forward → logits processors → sample →
append → stopping criteria → next forward), so :attr:`OverlappedLogitsProcessor.hook`, a
``StoppingCriteria`` that never stops anything, hands the new tokens to a
:class:`~cfgzip_lab.overlap.MaskWorker`: it accepts them and fills the next masks while the
forward runs. The processor's next call waits for that job and only applies the masks.
Same masks as the serial processor, hence the same tokens (tests compare generations).

``mask_seconds`` then holds what the decode loop still waits for (wait + apply); the fill
times themselves are in ``fill_seconds``.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import torch
from transformers import LogitsProcessor, StoppingCriteria

from ..overlap import MaskWorker, shared_worker
from .processors import GrammarLogitsProcessor

__all__ = ["OverlappedLogitsProcessor", "TokenSampledHook"]


class TokenSampledHook(StoppingCriteria):
    """A stopping criterion that stops nothing: it tells the processor which tokens were sampled."""

    def __init__(self, owner: OverlappedLogitsProcessor) -> None:
        self.owner = owner

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        self.owner.tokens_sampled(input_ids)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class OverlappedLogitsProcessor(LogitsProcessor):
    """``inner``'s masks, with accept + fill of each step run on a worker during the forward pass.

    Pass the processor to ``logits_processor`` and :attr:`hook` to ``stopping_criteria``;
    call :meth:`finish` after ``generate`` (it waits for the last job).

    >>> proc = OverlappedLogitsProcessor(CompressedLogitsProcessor(text, vocab))   # doctest: +SKIP
    >>> model.generate(**inputs, logits_processor=[proc], stopping_criteria=[proc.hook]); proc.finish()
    """

    def __init__(self, inner: GrammarLogitsProcessor, worker: MaskWorker | None = None) -> None:
        self.inner = inner
        self.worker = worker or shared_worker()
        self.hook = TokenSampledHook(self)
        self._pending: Future[float] | None = None
        self.fill_seconds: list[float] = []

    @property
    def mask_seconds(self) -> list[float]:
        return self.inner.mask_seconds

    @property
    def steps(self) -> int:
        return self.inner.steps

    def reset(self) -> None:
        self.finish()
        self.inner.reset()
        self.fill_seconds = []

    def finish(self) -> None:
        """Wait for the job in flight (re-raising its error), if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def tokens_sampled(self, input_ids: torch.LongTensor) -> None:
        """Start accepting ``input_ids[:, -1]`` and filling the next masks on the worker."""
        inner = self.inner
        if inner._seen_len is None:  # generate never called the processor: nothing to follow
            return
        self.finish()
        if input_ids.shape[1] != inner._seen_len + 1 or input_ids.shape[0] != inner.batch_size:
            raise RuntimeError(
                "this processor is in the middle of another generation; call reset() between generate calls"
            )
        last = input_ids[:, -1].tolist()
        self._pending = self.worker.submit(self._advance, last)

    def _advance(self, last: list[int]) -> float:
        t0 = time.perf_counter()
        # generate() allocated the bitmask under inference mode, which is per thread.
        with torch.inference_mode():
            self.inner._accept_last(last)
            self._live = self.inner._fill()
        seconds = time.perf_counter() - t0
        self.fill_seconds.append(seconds)
        return seconds

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        inner = self.inner
        pending, self._pending = self._pending, None
        if pending is None:  # the first step: nothing ran ahead
            return inner(input_ids, scores)
        t0 = time.perf_counter()
        pending.result()
        inner._seen_len = input_ids.shape[1]
        inner.steps += 1
        if self._live:
            inner._engines[0].apply_bitmask_inplace(scores, inner._bitmask)
        inner.mask_seconds.append(time.perf_counter() - t0)
        return scores
