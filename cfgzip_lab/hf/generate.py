"""Constrained generation: ``model.generate`` with a grammar logits processor.

:func:`constrained_generate` returns the text, the token ids and the per-step mask times
(:class:`GenerationResult`); :func:`constrained_generate_batch` does the same for several
prompts in one left-padded batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ..vocab import VocabTable
from .models import vocab_for
from .processors import (
    CompressedLogitsProcessor,
    EngineKind,
    GrammarLogitsProcessor,
    NativeLogitsProcessor,
    PlainLogitsProcessor,
)

if TYPE_CHECKING:
    from ..classes.classing import TokenClasses
    from ..pipeline import CompiledGrammar

__all__ = [
    "GenerationResult",
    "encode_prompt",
    "constrained_generate",
    "constrained_generate_batch",
]


# ---------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------
@dataclass
class GenerationResult:
    """One constrained generation.

    ``token_ids`` are the generated ids (the stop token included when one was chosen, no
    padding); ``text`` their bytes decoded as UTF-8 (stop tokens add nothing);
    ``steps`` the processor calls; ``mask_seconds[i]`` the fill + apply time of step ``i``
    (for the whole batch, in a batched generation); ``stopped`` whether a stop token ended
    the row (else ``max_new_tokens`` did); ``seconds`` the wall time of ``generate``.
    """

    text: str
    token_ids: list[int]
    steps: int
    mask_seconds: list[float] = field(default_factory=list)
    stopped: bool = False
    seconds: float = 0.0
    engine: str = ""

    @property
    def tokens_per_second(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else float("nan")


def encode_prompt(tokenizer: Any, prompt: str, *, chat: bool = True, vocab: VocabTable | None = None) -> list[int]:
    """Prompt ids: the chat template with a generation prompt when ``chat`` and the
    tokenizer has one, else the plain encoding. Never empty (an empty plain prompt becomes
    the BOS id, or the first stop id), since a model needs one input position."""
    ids: list[int]
    if tokenizer is None:
        if vocab is None:
            raise TypeError("encoding a prompt needs a tokenizer or a vocabulary table")
        ids = vocab.encode(prompt) if prompt else []
    elif chat and getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(out, dict) or hasattr(out, "keys"):  # BatchEncoding in transformers 5
            out = out["input_ids"]
        ids = [int(i) for i in out]
    else:
        ids = [int(i) for i in tokenizer.encode(prompt, add_special_tokens=False)] if prompt else []
    if not ids:
        bos = getattr(tokenizer, "bos_token_id", None) if tokenizer is not None else None
        if bos is None and vocab is not None and vocab.stop_ids:
            bos = vocab.stop_ids[0]
        if bos is None:
            raise ValueError("empty prompt and no BOS token to start from")
        ids = [int(bos)]
    return ids


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def constrained_generate_batch(
    model: Any,
    tokenizer: Any,
    grammar: str | CompiledGrammar,
    prompts: Sequence[str],
    *,
    classes: TokenClasses | None = None,
    vocab: VocabTable | None = None,
    engine: EngineKind | None = "compressed",
    max_new_tokens: int = 64,
    seed: int = 0,
    do_sample: bool = False,
    temperature: float = 1.0,
    chat: bool = True,
    overlap: bool = False,
    **generate_kwargs: Any,
) -> list[GenerationResult]:
    """:func:`constrained_generate` for several prompts in one batch (left padding).

    ``engine=None`` generates without a grammar (the unconstrained baseline for timing).
    Each result's ``mask_seconds`` and ``seconds`` are the batch's.
    """
    vocab = vocab or vocab_for(model, tokenizer)
    processors: list[LogitsProcessor] = []
    processor: GrammarLogitsProcessor | None = None
    if engine == "plain":
        processor = PlainLogitsProcessor(grammar, vocab)
    elif engine == "compressed":
        processor = CompressedLogitsProcessor(grammar, vocab, classes)
    elif engine == "native":
        processor = NativeLogitsProcessor(grammar, vocab, classes)
    elif engine is not None:
        raise ValueError(f"engine must be 'plain', 'compressed', 'native' or None, not {engine!r}")
    overlapped = None
    if processor is not None and overlap:
        from transformers import StoppingCriteriaList

        from .overlap import OverlappedLogitsProcessor

        overlapped = OverlappedLogitsProcessor(processor)
        processors.append(overlapped)
        criteria = StoppingCriteriaList(generate_kwargs.pop("stopping_criteria", None) or [])
        criteria.append(overlapped.hook)
        generate_kwargs["stopping_criteria"] = criteria
    elif processor is not None:
        processors.append(processor)

    encoded = [encode_prompt(tokenizer, p, chat=chat, vocab=vocab) for p in prompts]
    width = max(map(len, encoded))
    pad = _pad_id(tokenizer, vocab)
    device = _model_device(model)
    input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], dtype=torch.long, device=device)
    attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], dtype=torch.long, device=device)

    sampling: dict[str, Any] = {"do_sample": do_sample}
    if do_sample:
        sampling["temperature"] = temperature
    else:  # silence "temperature is set but do_sample is False" from a sampling generation config
        sampling.update(temperature=None, top_p=None, top_k=None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                logits_processor=LogitsProcessorList(processors),
                max_new_tokens=max_new_tokens,
                eos_token_id=list(vocab.stop_ids) or None,
                pad_token_id=pad,
                **sampling,
                **generate_kwargs,
            )
    finally:
        if overlapped is not None:
            overlapped.finish()  # the job started after the last token
    seconds = time.perf_counter() - t0
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    stops = set(vocab.stop_ids)
    results = []
    for row in sequences[:, width:].tolist():
        ids: list[int] = []
        stopped = False
        for t in row:
            ids.append(int(t))
            if t in stops:
                stopped = True
                break
        results.append(
            GenerationResult(
                text=vocab.decode(ids).decode("utf-8", errors="replace"),
                token_ids=ids,
                steps=processor.steps if processor is not None else len(row),
                mask_seconds=list(processor.mask_seconds) if processor is not None else [],
                stopped=stopped,
                seconds=seconds,
                engine=engine or "none",
            )
        )
    return results


def _pad_id(tokenizer: Any, vocab: VocabTable) -> int:
    pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    if pad is None:
        pad = vocab.stop_ids[0] if vocab.stop_ids else 0
    return int(pad)


def constrained_generate(
    model: Any,
    tokenizer: Any,
    grammar: str | CompiledGrammar,
    prompt: str,
    *,
    classes: TokenClasses | None = None,
    vocab: VocabTable | None = None,
    engine: EngineKind | None = "compressed",
    max_new_tokens: int = 64,
    seed: int = 0,
    do_sample: bool = False,
    temperature: float = 1.0,
    chat: bool = True,
    overlap: bool = False,
    **generate_kwargs: Any,
) -> GenerationResult:
    """Generate under ``grammar`` with ``model.generate`` and a grammar logits processor.

    Parameters
    ----------
    grammar : str or pipeline.CompiledGrammar
        XGrammar EBNF (root rule ``root``).
    classes : TokenClasses, optional
        For ``engine="compressed"`` or ``"native"``; default: built once per (grammar,
        vocabulary) and cached in-process.
    vocab : VocabTable, optional
        Default :func:`vocab_for` ``(model, tokenizer)``.
    engine : "plain", "compressed", "native" or None
        Which matcher masks the logits; None generates unconstrained.
    seed : int
        ``torch.manual_seed`` right before ``generate``: equal seeds and equal masks give
        byte-identical outputs with either engine.
    chat : bool
        Wrap ``prompt`` in the tokenizer's chat template (as a user turn).
    overlap : bool
        Accept each sampled token and fill the next mask on a CPU worker thread while the
        model computes the next logits (:mod:`cfgzip_lab.hf.overlap`); same tokens as the
        serial loop. ``mask_seconds`` is then the time the loop still waits (wait + apply).
    **generate_kwargs
        Passed to ``model.generate`` (``top_k``, ``top_p``...).

    Returns
    -------
    GenerationResult
    """
    return constrained_generate_batch(
        model,
        tokenizer,
        grammar,
        [prompt],
        classes=classes,
        vocab=vocab,
        engine=engine,
        max_new_tokens=max_new_tokens,
        seed=seed,
        do_sample=do_sample,
        temperature=temperature,
        chat=chat,
        overlap=overlap,
        **generate_kwargs,
    )[0]
