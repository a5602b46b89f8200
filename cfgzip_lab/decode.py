"""Stepper: one constrained decode step at a time, both engines side by side.

A view (the workbench's step decoder, a notebook) needs more than the next token: the
logits before and after the mask, how many classes and tokens the grammar allows, what
the mask cost with plain XGrammar and with CFGzip, and whether the two masks agree. The
:class:`Stepper` runs the model with a KV cache and, at every step,

1. fills the plain mask (XGrammar over the whole vocabulary: the oracle) and times it;
2. fills the class mask and expands it to the vocabulary (CFGzip) and times both together;
3. compares the two vocabulary bitmasks bit for bit (``masks_identical``);
4. masks the logits with the compressed mask and picks a token: greedy, or sampled from a
   seeded generator;
5. feeds the token to both matchers and records a :class:`StepResult`.

:meth:`Stepper.rollback` undoes steps in both matchers and restores the sampling
generator, so that stepping again replays the same choices. The KV cache is rebuilt from
scratch after a rollback (one forward over the kept text): simple, and independent of
the cache API of each transformers version; the recomputed logits can differ from the
incremental ones by float rounding only.

With ``overlap=True`` the matchers' work for the next step (accepting the chosen token,
filling and expanding the next masks) runs on a :class:`~cfgzip_lab.overlap.MaskWorker`
while the model computes the next step's logits, and the step returns when both are done;
the masks, hence the tokens, are the serial ones (``tests/test_overlap.py``).

>>> stepper = Stepper(model, tokenizer, json_text, classes, prompt="A cat as JSON")  # doctest: +SKIP
>>> r = stepper.step(); r.token_text, r.allowed_tokens, r.masks_identical
('{', 2, True)
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .engine import compile_engines
from .errors import CfgzipError
from .expand import unpack_bitmask
from .hf.generate import _model_device, encode_prompt
from .hf.models import vocab_for
from .hf.processors import cached_classes, grammar_text_of
from .vocab import KIND_NAMES, NORMAL, VocabTable

if TYPE_CHECKING:
    from .classes.classing import TokenClasses
    from .pipeline import CompiledGrammar

__all__ = [
    "TopToken",
    "ClassExample",
    "StepResult",
    "Stepper",
    "DecodingFinished",
    "ForcedTextRefused",
    "first_refused",
    "token_text",
]


def _cache_argument(model: Any) -> str:
    """The KV-cache keyword of ``model.forward``: transformers 5.2x renamed
    ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - an opaque forward
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


class DecodingFinished(CfgzipError, RuntimeError):
    """``step()`` after the grammar has terminated (a stop token was chosen)."""


class ForcedTextRefused(CfgzipError, ValueError):
    """Forced text the grammar does not take here (:meth:`Stepper.force`); nothing was applied.

    ``index``: the first refused token among ``token_ids`` (the forced text's tokens),
    ``offset``: where that token starts in the forced text, in characters."""

    def __init__(self, message: str, *, token_ids: list[int], index: int, offset: int) -> None:
        super().__init__(message)
        self.token_ids, self.index, self.offset = token_ids, index, offset


def first_refused(matcher: Any, token_ids: list[int]) -> int | None:
    """The index of the first of ``token_ids`` that ``matcher`` refuses when fed them in turn
    from where it stands, or None when it takes them all; the matcher is left where it stood
    (what it took is rolled back)."""
    taken = 0
    try:
        for i, token in enumerate(token_ids):
            if matcher.is_terminated() or not matcher.accept_token(int(token)):
                return i
            taken += 1
        return None
    finally:
        if taken:
            matcher.rollback(taken)


def token_text(vocab: VocabTable, token_id: int) -> str:
    """How a view shows one token: its text (invalid UTF-8 as ``\\xNN``), or the name of a
    stop/special token (``<|im_end|>``), or ``<padding 49151>``."""
    if vocab.kinds[token_id] == NORMAL:
        return vocab.token_bytes[token_id].decode("utf-8", errors="backslashreplace")
    for name, tid in vocab.special_tokens.items():
        if tid == token_id:
            return name
    return f"<{KIND_NAMES[int(vocab.kinds[token_id])]} {token_id}>"


@dataclass(frozen=True)
class TopToken:
    """One entry of a top-k list; ``allowed``: whether the grammar allows it at this step."""

    token_id: int
    text: str
    logit: float
    allowed: bool


@dataclass(frozen=True)
class ClassExample:
    """An allowed class: its id, representative (id and text) and member count."""

    class_id: int
    representative: int
    text: str
    size: int


@dataclass(frozen=True)
class StepResult:
    """Everything one decode step shows.

    ``top_before`` / ``top_after``: the k highest logits before and after the mask (after:
    allowed tokens only, so fewer than k when fewer are allowed). ``class_examples``: the
    largest allowed classes. ``plain_mask_seconds``: XGrammar's fill over the vocabulary;
    ``compressed_mask_seconds``: class fill + expansion to the vocabulary bitmask.
    ``masks_identical``: the expanded class mask equals the plain mask bit for bit (stop
    bits included). ``text``: the generated text after this step. ``terminated``: this
    step chose a stop token; ``completed``: the text so far is a complete sentence.
    """

    index: int
    token_id: int
    token_text: str
    text: str
    top_before: list[TopToken]
    top_after: list[TopToken]
    allowed_classes: int
    num_classes: int
    allowed_tokens: int
    vocab_size: int
    class_examples: list[ClassExample]
    plain_mask_seconds: float
    compressed_mask_seconds: float
    masks_identical: bool
    terminated: bool
    completed: bool
    forward_seconds: float
    native_mask_seconds: float | None = None  # the native engine's packed vocabulary mask
    native_identical: bool | None = None  # the native mask equals the plain mask, bit for bit
    forced: bool = False  # the token came from forced text (Stepper.force), not from the model

    @property
    def speedup(self) -> float:
        """Plain mask time over compressed mask time."""
        return self.plain_mask_seconds / self.compressed_mask_seconds if self.compressed_mask_seconds else float("inf")


@dataclass
class _Masks:
    """One step's masks as :meth:`Stepper.step` uses them (filled ahead by the worker when overlapping)."""

    compressed_bits: torch.Tensor
    class_row: torch.Tensor
    plain_seconds: float
    compressed_seconds: float
    identical: bool
    native_seconds: float | None = None
    native_identical: bool | None = None


class Stepper:
    """Constrained decoding one step at a time, plain and compressed engines in lockstep.

    Parameters
    ----------
    model, tokenizer
        A transformers causal LM and its tokenizer (``tokenizer`` may be None when
        ``vocab`` can encode the prompt).
    grammar : str or pipeline.CompiledGrammar
        XGrammar EBNF, root rule ``root``.
    classes : TokenClasses or None
        The partition for the compressed engine; None builds it (cached in-process).
    vocab : VocabTable, optional
        Default :func:`hf.vocab_for` ``(model, tokenizer)``.
    prompt : str
        The user turn (wrapped in the chat template when ``chat``).
    top_k : int
        How many entries the top-k lists hold.
    seed : int
        Seed of the sampling generator (used only when ``sample``).
    device : str or torch.device, optional
        Where model inputs go; default the model's device. Masks and logits for the view
        are kept on CPU.
    sample : bool
        False: greedy. True: sample from ``softmax(masked logits / temperature)``.
    chat : bool
        Wrap the prompt in the tokenizer's chat template.
    examples : int
        How many allowed classes ``class_examples`` lists.
    native : bool
        Also run the native displacement engine (:mod:`cfgzip_lab.native`) in lockstep: its mask
        is timed (``native_mask_seconds``) and compared with the plain one (``native_identical``).
    overlap : bool
        Accept the chosen token and fill the next masks on a worker thread while the next
        forward pass runs (see the module doc); ``forward_seconds`` of a step is then the
        forward that ran ahead of it, during the previous step.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        grammar: str | CompiledGrammar,
        classes: TokenClasses | None = None,
        *,
        vocab: VocabTable | None = None,
        prompt: str = "",
        top_k: int = 10,
        seed: int = 0,
        device: str | torch.device | None = None,
        sample: bool = False,
        temperature: float = 1.0,
        chat: bool = True,
        examples: int = 8,
        native: bool = False,
        overlap: bool = False,
    ) -> None:
        self.model = model
        self.overlap = bool(overlap)
        self.tokenizer = tokenizer
        self.vocab = vocab or vocab_for(model, tokenizer)
        self.grammar_text = grammar_text_of(grammar)
        if classes is None:
            classes = cached_classes(grammar, self.vocab)
        classes.check_fits(self.grammar_text, self.vocab)
        self.classes = classes
        self.engines = compile_engines(self.grammar_text, self.vocab, classes)
        self.plain = self.engines.plain()
        self.compressed = self.engines.compressed()
        self.native = None
        if native:
            from .hf.processors import cached_native_engine

            self.native = cached_native_engine(grammar, self.vocab, classes).matcher()
        self.top_k = int(top_k)
        self.seed = int(seed)
        self.sample = bool(sample)
        self.temperature = float(temperature)
        self.chat = bool(chat)
        self.examples = int(examples)
        self.device = torch.device(device) if device is not None else _model_device(model)
        self._class_sizes = classes.class_sizes()
        self._cache_name = _cache_argument(model)
        self._plain_buffer = self.plain.allocate_bitmask(1)
        self._class_buffer = self.compressed.allocate_bitmask(1)
        self._prompt = prompt
        self.reset(prompt)

    # -- state ------------------------------------------------------------------------
    def reset(self, prompt: str | None = None) -> None:
        """Back to the start, optionally with a new prompt; the generator is re-seeded."""
        if prompt is not None:
            self._prompt = prompt
        self.prompt_ids: list[int] = encode_prompt(self.tokenizer, self._prompt, chat=self.chat, vocab=self.vocab)
        self.plain.reset()
        self.compressed.reset()
        if self.native is not None:
            self.native.reset()
        self._tokens: list[int] = []
        self._history: list[StepResult] = []
        self._generator = torch.Generator().manual_seed(self.seed)
        self._rng_states: list[torch.Tensor] = []  # generator state before each step's draw
        self._next_masks: _Masks | None = None  # filled ahead by the worker (overlap)
        self._drop_cache()

    def _drop_cache(self) -> None:
        self._past: Any = None
        self._past_len = 0
        self._logits: torch.Tensor | None = None
        self._forward_ahead = 0.0  # the forward that computed ``_logits`` ahead of its step

    @property
    def prompt(self) -> str:
        return self._prompt

    @property
    def tokens(self) -> list[int]:
        """The generated ids so far (the stop token included once chosen)."""
        return list(self._tokens)

    @property
    def history(self) -> list[StepResult]:
        """One :class:`StepResult` per step taken (and not rolled back)."""
        return list(self._history)

    @property
    def text(self) -> str:
        """The generated text so far (a cut UTF-8 sequence at the end shows as U+FFFD)."""
        return self.vocab.decode(self._tokens).decode("utf-8", errors="replace")

    @property
    def terminated(self) -> bool:
        """A stop token was chosen: no more steps."""
        return self.compressed.is_terminated()

    # -- model ------------------------------------------------------------------------
    def _next_logits(self) -> tuple[torch.Tensor, float]:
        """Float32 CPU logits for the next position, and the forward time (0 if cached)."""
        if self._logits is not None:
            return self._logits, 0.0
        sequence = self.prompt_ids + self._tokens
        feed = sequence[self._past_len :]
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([feed], dtype=torch.long, device=self.device),
                use_cache=True,
                **{self._cache_name: self._past},
            )
        self._past = getattr(out, self._cache_name, None)
        self._past_len = len(sequence)
        self._logits = out.logits[0, -1].float().cpu()
        return self._logits, time.perf_counter() - t0

    # -- stepping ---------------------------------------------------------------------
    def _top(self, logits: torch.Tensor, allowed: np.ndarray, k: int) -> list[TopToken]:
        if k <= 0:
            return []
        values, ids = torch.topk(logits, k)
        return [
            TopToken(int(t), token_text(self.vocab, int(t)), float(v), bool(allowed[int(t)]))
            for v, t in zip(values.tolist(), ids.tolist())
        ]

    def _choose(self, masked: torch.Tensor, forced: int | None = None) -> int:
        self._rng_states.append(self._generator.get_state())
        if forced is not None:  # no draw: a rollback past it restores the same generator state
            return forced
        if not self.sample:
            return int(torch.argmax(masked))
        probs = torch.softmax(masked / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self._generator))

    def _fill_masks(self) -> _Masks:
        """Every engine's mask for the next token, timed, and their comparison."""
        t0 = time.perf_counter()
        self.plain.fill_next_token_bitmask(self._plain_buffer, 0)
        t1 = time.perf_counter()
        self.compressed.fill_next_token_bitmask(self._class_buffer, 0)
        compressed_bits = self.compressed.to_vocab_bitmask(self._class_buffer[0])
        t2 = time.perf_counter()
        plain_bits = self.plain.to_vocab_bitmask(self._plain_buffer[0])
        masks = _Masks(
            compressed_bits=compressed_bits,
            class_row=self._class_buffer[0].clone(),
            plain_seconds=t1 - t0,
            compressed_seconds=t2 - t1,
            identical=bool(torch.equal(plain_bits, compressed_bits)),
        )
        if self.native is not None:
            t3 = time.perf_counter()
            native_bits = self.native.next_vocab_bitmask()
            masks.native_seconds = time.perf_counter() - t3
            masks.native_identical = bool(torch.equal(plain_bits, native_bits))
        return masks

    def _accept(self, token: int) -> tuple[bool, bool, bool]:
        ok_plain = self.plain.accept_token(token)
        ok_compressed = self.compressed.accept_token(token)
        ok_native = self.native.accept_token(token) if self.native is not None else True
        return ok_plain, ok_compressed, ok_native

    def _accept_and_fill(self, token: int) -> tuple[tuple[bool, bool, bool], _Masks | None]:
        """The worker's job (overlap): accept ``token``, then fill the next step's masks."""
        oks = self._accept(token)
        if not all(oks) or self.compressed.is_terminated():
            return oks, None
        return oks, self._fill_masks()

    def step(self, *, forced: int | None = None) -> StepResult:
        """Take one decode step; raises :class:`DecodingFinished` once terminated. ``forced``: take
        this token instead of the model's choice (:meth:`force` checks it first); the masks and
        logits are those of the step all the same."""
        if self.terminated:
            raise DecodingFinished("the grammar has terminated; rollback() or reset() to go on")
        logits, forward_seconds = self._next_logits()
        if forward_seconds == 0.0:
            forward_seconds = self._forward_ahead
        masks, self._next_masks = self._next_masks, None
        if masks is None:
            masks = self._fill_masks()
        compressed_bits = masks.compressed_bits

        vocab_size = self.vocab.vocab_size
        allowed = unpack_bitmask(compressed_bits, vocab_size)
        allowed_count = int(allowed.sum())
        if allowed_count == 0:
            raise RuntimeError(f"step {len(self._tokens)}: the grammar allows no token")
        num_classes = self.classes.num_classes
        class_allowed = unpack_bitmask(masks.class_row, num_classes)
        masked = logits.clone()
        self.compressed.apply_bitmask_inplace(masked, masks.class_row)

        if forced is not None and not allowed[forced]:
            raise ValueError(f"token {forced} ({token_text(self.vocab, forced)!r}) is not allowed at this step")
        token = self._choose(masked, forced)
        if self.overlap:
            from .overlap import shared_worker

            job = shared_worker().submit(self._accept_and_fill, token)
            self._tokens.append(token)
            self._logits = None
            try:
                if token not in self.vocab.stop_ids:  # a stop token ends decoding: no next forward
                    _, self._forward_ahead = self._next_logits()
            finally:
                oks, self._next_masks = job.result()
            if not all(oks):
                self._tokens.pop()
                self._drop_cache()
        else:
            oks = self._accept(token)
        ok_plain, ok_compressed, ok_native = oks
        if not (ok_plain and ok_compressed and ok_native):
            self._rng_states.pop()
            for engine, ok in ((self.plain, ok_plain), (self.compressed, ok_compressed), (self.native, ok_native)):
                if ok and engine is not None:
                    engine.rollback(1)
            raise RuntimeError(
                f"step {len(self._tokens)}: token {token} ({token_text(self.vocab, token)!r}) accepted by "
                f"plain={ok_plain}, compressed={ok_compressed}, native={ok_native}: the engines disagree"
            )
        if not self.overlap:
            self._tokens.append(token)
            self._logits = None  # the next step feeds this token through the KV cache

        result = StepResult(
            index=len(self._tokens) - 1,
            token_id=token,
            token_text=token_text(self.vocab, token),
            text=self.text,
            top_before=self._top(logits, allowed, self.top_k),
            top_after=self._top(masked, allowed, min(self.top_k, allowed_count)),
            allowed_classes=int(class_allowed.sum()),
            num_classes=num_classes,
            allowed_tokens=allowed_count,
            vocab_size=vocab_size,
            class_examples=self._class_examples(class_allowed),
            plain_mask_seconds=masks.plain_seconds,
            compressed_mask_seconds=masks.compressed_seconds,
            masks_identical=masks.identical,
            terminated=self.compressed.is_terminated(),
            completed=self.compressed.is_terminated() or self.compressed.is_completed(),
            forward_seconds=forward_seconds,
            native_mask_seconds=masks.native_seconds,
            native_identical=masks.native_identical,
            forced=forced is not None,
        )
        self._history.append(result)
        return result

    def encode(self, text: str) -> list[int]:
        """``text``'s token ids, as plain text (a special token's spelling is its characters)."""
        if not text:
            return []
        if self.vocab.encoder is not None or self.vocab.tokenizer_factory is not None or self.tokenizer is None:
            return self.vocab.encode(text)
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def force(self, text: str) -> list[StepResult]:
        """Take ``text`` as if the model had written it: one step per token of it, each with its
        masks and logits shown (``StepResult.forced``), so that a tool call can be started by hand
        (a trigger, a tag's begin) and its masks watched. The whole text is checked against the
        grammar first: when it refuses a token, :class:`ForcedTextRefused` names the first one
        and nothing is applied. Rollback undoes forced steps like any other."""
        if self.terminated:
            raise DecodingFinished("the grammar has terminated; rollback() or reset() to go on")
        ids = self.encode(text)
        if not ids:
            raise ForcedTextRefused("no text to force", token_ids=[], index=0, offset=0)
        refused = first_refused(self.plain, ids)
        if refused is not None:
            before = self.vocab.decode(ids[:refused]).decode("utf-8", errors="replace")
            offset = len(before)
            what = token_text(self.vocab, ids[refused])
            which = (
                f"token {refused + 1} of {len(ids)} of the forced text, after {before!r}"
                if refused
                else f"the forced text's first token (of {len(ids)})"
            )
            raise ForcedTextRefused(
                f"the grammar refuses {what!r} here, {which}: nothing was forced",
                token_ids=ids,
                index=refused,
                offset=offset,
            )
        return [self.step(forced=token) for token in ids]

    def _class_examples(self, class_allowed: np.ndarray) -> list[ClassExample]:
        ids = np.flatnonzero(class_allowed)
        if ids.size == 0 or self.examples <= 0:
            return []
        # Largest classes first: they show where the compression comes from.
        order = ids[np.argsort(-self._class_sizes[ids], kind="stable")][: self.examples]
        reps = self.classes.representatives
        return [
            ClassExample(int(k), int(reps[k]), token_text(self.vocab, int(reps[k])), int(self._class_sizes[k]))
            for k in order
        ]

    def run(self, n: int) -> list[StepResult]:
        """Up to ``n`` steps; stops early when the grammar terminates."""
        out: list[StepResult] = []
        for _ in range(n):
            if self.terminated:
                break
            out.append(self.step())
        return out

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (matchers, history, generator); the next step replays."""
        if n < 0 or n > len(self._tokens):
            raise ValueError(f"cannot roll back {n} of {len(self._tokens)} steps")
        if n == 0:
            return
        self.plain.rollback(n)
        self.compressed.rollback(n)
        if self.native is not None:
            self.native.rollback(n)
        keep = len(self._tokens) - n
        self._generator.set_state(self._rng_states[keep])
        del self._tokens[keep:], self._history[keep:], self._rng_states[keep:]
        self._next_masks = None  # filled for the state before the rollback
        self._drop_cache()

    def masks_identical_so_far(self) -> bool:
        """Every step so far had identical plain and compressed masks."""
        return all(r.masks_identical for r in self._history)

    def __repr__(self) -> str:
        return (
            f"Stepper(vocab={self.vocab.name!r}, classes={self.classes.num_classes}, "
            f"steps={len(self._tokens)}, terminated={self.terminated})"
        )
