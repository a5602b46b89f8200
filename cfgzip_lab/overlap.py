"""Masks computed while the model runs: the grammar's next step on a CPU worker thread.

A serial constrained decode loop pays for the mask after every forward pass::

    logits = forward(token)            # GPU (or CPU) busy, grammar idle
    fill(mask); apply(logits, mask)    # grammar busy, model idle
    token = sample(logits)
    accept(token)

The mask of step ``i + 1`` depends only on the tokens up to ``i``, not on step ``i + 1``'s
logits, so it can be computed while the forward pass of step ``i + 1`` runs::

    token = sample(logits)
    job = worker.submit(accept(token); fill(next_mask))   # CPU worker thread
    logits = forward(token)                                 # main thread, meanwhile
    job.result(); apply(logits, next_mask)

The masks and hence the tokens are exactly the serial loop's (tests compare them); what
the step costs becomes ``max(forward, accept + fill)`` plus the apply, instead of their sum.

This works because XGrammar releases the GIL while it fills a mask (xgrammar 0.2.8 calls
C++ through tvm-ffi, whose functions release the GIL by default; measured with
``benchmarks/gil_probe.py``: a Python loop on the main thread runs as fast beside a
thread filling C-like masks as beside one hashing with ``hashlib``, which releases the GIL,
and faster than beside a pure-Python thread). The forward pass on the main thread needs
the GIL only to launch its kernels (GPU) or between torch ops (CPU), so both make progress.
Our own expansion (numpy) and the native engine's walk run Python and do hold the GIL for
their share.

For serving engines that schedule their own batches (vLLM, SGLang), the same pattern with
the engine API, one worker per engine process::

    worker = MaskWorker()
    # after sampling step i's tokens:
    job = worker.submit(advance_and_fill, matchers, tokens, bitmask_cpu)
    # ... launch step i + 1's forward ...
    job.result()
    apply(logits, bitmask_cpu.to(device, non_blocking=True))

where ``advance_and_fill`` is ``accept_token`` for each row then
``fill_next_token_bitmask`` (or :class:`~cfgzip_lab.engine.BatchMatcher`'s batch calls).
``notebooks/tour_overlap.ipynb`` runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["MaskWorker", "shared_worker"]

T = TypeVar("T")


class MaskWorker:
    """One CPU thread that runs the grammar's work for the next step, in submission order.

    One thread, so the jobs of one generation run in order and never touch a matcher at
    the same time; the caller waits for a job before it reads that job's mask or submits
    work that uses the same matchers.

    >>> worker = MaskWorker()
    >>> worker.submit(sum, [1, 2, 3]).result()
    6
    >>> worker.close()
    """

    def __init__(self, name: str = "cfgzip-mask") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on the worker; ``Future.result()`` re-raises its error."""
        return self._pool.submit(fn, *args, **kwargs)

    def close(self) -> None:
        """Finish the queued jobs and stop the thread."""
        self._pool.shutdown(wait=True)

    def __enter__(self) -> MaskWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: MaskWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> MaskWorker:
    """The process-wide worker that processors and steppers use unless given their own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MaskWorker()
        return _shared
