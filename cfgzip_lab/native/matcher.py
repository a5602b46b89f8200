"""DisplacementMatcher: the next-token mask looked up from the classes' displacements, no XGrammar.

Same interface as :class:`cfgzip_lab.engine.PlainMatcher` / ``CompressedMatcher`` (original
vocabulary ids everywhere), with one difference in what "native" means: this engine's native
mask *is* the full-vocabulary packed bitmask (XGrammar's int32 layout, stop bits included,
bits past V zero), so ``fill_next_token_bitmask`` writes what vLLM/SGLang take and
``to_vocab_bitmask`` is a copy.

State: a history of state nodes (:mod:`.walk`), one per accepted token or string, so
``rollback(n)`` pops n entries; a stop token pushes :data:`_STOPPED`. The nodes are immutable
(hash-consed in the grammar's store, shared by every request), so :meth:`fork` shares the two
history lists and each side copies them on its first write: a fork costs O(1), its first
accept or rollback one O(history) list copy, and no state node is ever copied. When a token would grow the state past
the walk's budgets, the request moves to the compressed XGrammar engine: it is built, fed the
accepted tokens again, and answers every call until :meth:`reset` (counted in
``fallbacks`` here and on the engine; never a wrong mask).

A stop id is read by the matcher's :class:`.stop_policy.StopPolicy` (XGrammar's reading: the
signal, and from 0.2.9 its text; ``terminate_without_stop_token``): every accepted stop id ends
the matcher, whichever way it was read.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._binding import kernel as _kernel
from ..batch_rows import MatcherRows
from ..classes.classing import BLOCKED, NORMAL
from ..expand import apply_vocab_bitmask_inplace
from ..grammar.words import EMPTY
from .draft import traverse_draft_tree
from .jump_forward import forced_bytes, valid_utf8_prefix
from .stop_policy import SIGNAL_ONLY, StopPolicy
from .walk import StateBudgetExceeded

if TYPE_CHECKING:
    import torch

    from ..engine import CompressedMatcher
    from .engine import NativeEngine

__all__ = [
    "DisplacementMatcher",
    "DisplacementBatchMatcher",
    "NativeMatcher",
    "NativeBatchMatcher",
    "fill_vocab_rows",
]

_STOPPED = -1  # history entry after a stop token
_TERMINATED = "GrammarMatcher has terminated after accepting the stop token, but is trying to {}"


class DisplacementMatcher:
    """One request decoded by the native engine. Build with :meth:`NativeEngine.matcher`.

    ``stop_policy`` says how a stop id is read (:data:`.stop_policy.SIGNAL_ONLY` for cfgzip's own
    vocabularies; :func:`.from_xgrammar.native_matcher` passes XGrammar's, with the stop texts of
    its ``TokenizerInfo`` and ``terminate_without_stop_token``).
    """

    kind = "native"

    def __init__(self, engine: NativeEngine, stop_policy: StopPolicy = SIGNAL_ONLY) -> None:
        self.engine = engine
        self.stop_policy = stop_policy
        self._stop_ids = frozenset(int(s) for s in engine.vocab.stop_ids)
        self.walker = engine.walker
        self.rows = engine.rows
        self.vocab_size = engine.vocab_size
        self.native_size = engine.vocab_size
        self.bitmask_size = math.ceil(self.vocab_size / 32)
        self.vocab_bitmask_size = self.bitmask_size
        # The compiled accept step (a walker on a compiled store): the token's kind, the memo, the byte
        # steps and the budgets in one call; see accept_token. Only the Python step reads the engine's
        # class lists (made on first use: a compiled engine's first mask never builds them).
        self._advancer = getattr(self.walker, "_advancer", None)
        if self._advancer is None:
            self._class_of, self._class_kind = engine.class_of, engine.class_kind
        self.fallbacks = 0
        self._bitmask: torch.Tensor | None = None  # the last bitmask filled, its numpy view and memory (_numpy_of)
        self._bitmask_view: np.ndarray | None = None
        self._bitmask_ptr = 0
        # One compiled call per mask (csrc/fill.c) where the stop bits are the stop class's (the policy
        # never patches them).
        plain_stops = not (stop_policy.mask_may_differ(True) or stop_policy.mask_may_differ(False))
        self._filler = engine.filler if plain_stops else None
        self.reset()

    # -- the Engine interface --------------------------------------------------------
    def native_id(self, token_id: int) -> int:
        """``token_id`` if this engine can ever allow it, else -1 (special, padding, dead)."""
        if not 0 <= token_id < self.vocab_size:
            return -1
        engine = self.engine
        return -1 if engine.class_kind[engine.class_of[token_id]] == BLOCKED else int(token_id)

    def allocate_bitmask(self, batch_size: int = 1) -> torch.Tensor:
        import torch

        return torch.full((batch_size, self.bitmask_size), -1, dtype=torch.int32)

    @property
    def in_fallback(self) -> bool:
        """True while this request is served by the compressed XGrammar engine."""
        return self._fallback is not None

    def is_terminated(self) -> bool:
        """True once a stop token was accepted; with ``terminate_without_stop_token``, once the grammar
        is complete (XGrammar's ``IsTerminated``: such a matcher still fills masks and takes tokens)."""
        if self.stop_policy.terminate_without_stop_token:
            return self.is_completed()
        return self._stopped()

    def is_completed(self) -> bool:
        if self._fallback is not None:
            return self._stopped() or self._fallback.is_completed()
        state = self._history[-1]
        return state == _STOPPED or self.walker.accepts_stop(state)

    def _stopped(self) -> bool:
        """Whether the last step was a stop id (taken as the signal or as text): the matcher has ended."""
        if self._fallback is None:
            return self._history[-1] == _STOPPED
        last = self._tokens[-1] if self._tokens else None
        return isinstance(last, int) and last in self._stop_ids

    def vocab_row(self) -> np.ndarray:
        """The packed vocabulary mask of the next token (read-only, shared; copy before writing)."""
        if self._stopped():
            raise RuntimeError("the matcher is terminated: a stop token was accepted")
        if self._fallback is not None:
            return self._with_stop_bits(self._fallback.next_vocab_bitmask().numpy(), self._fallback.is_completed())
        state = self._history[-1]
        try:
            row = self.rows.vocab_row(self.walker.class_mask(state))
        except StateBudgetExceeded as exc:
            self._fall_back(str(exc))
            return self.vocab_row()
        return self._with_stop_bits(row, self.walker.accepts_stop(state))

    def _with_stop_bits(self, row: np.ndarray, completed: bool) -> np.ndarray:
        """``row`` (whose stop bits say ``completed``) with the stop bits the stop policy gives: the
        same array when they agree (always, under SIGNAL_ONLY), else a patched copy."""
        policy = self.stop_policy
        if not policy.mask_may_differ(completed):
            return row
        patched = None
        for token in self._stop_ids:
            word, bit = divmod(token, 32)
            wanted = policy.mask_bit(completed, self._text_completes(token))
            if bool((int(row[word]) >> bit) & 1) != wanted:
                if patched is None:
                    patched = np.array(row)
                patched.view(np.uint32)[word] ^= np.uint32(1 << bit)
        return row if patched is None else patched

    def _text_completes(self, token_id: int) -> bool:
        """Whether the stop id's text, read as bytes from here, completes the grammar (XGrammar 0.2.9's
        ``CanAcceptStopTokenAsTerminal``); memoised per state on the engine."""
        text = self.stop_policy.texts.get(token_id) if self.stop_policy.stops_as_text else None
        if not text:
            return False
        if self._fallback is None:
            try:
                return self.engine.text_completes(self._history[-1], text, self._spent)
            except StateBudgetExceeded as exc:
                self._fall_back(str(exc))
        trial = self._fallback.fork()
        return bool(trial.accept_string(text)) and bool(trial.is_completed())

    def class_set(self) -> int:
        """The allowed classes as an int (bit k = class k); for views and tests."""
        state = self._history[-1]
        if state == _STOPPED:
            raise RuntimeError("the matcher is terminated: a stop token was accepted")
        return self.walker.class_mask(state)

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> bool:
        """Write the next token's full-vocabulary mask into row ``index`` of ``bitmask``."""
        filler = self._filler
        if filler is not None and self._fallback is None:
            state = self._history[-1]
            if state != _STOPPED:
                _kernel.fill_state(filler, state, self._numpy_of(bitmask), index)
                return True
        row = self.vocab_row()
        self._numpy_of(bitmask)[index][: len(row)] = row  # no (index, slice) tuple: see _numpy_of
        return True

    def _numpy_of(self, bitmask: torch.Tensor) -> np.ndarray:
        """``bitmask.numpy()``, kept while the caller passes the same tensor on the same memory.

        torch's ``numpy()`` allocates an object Python's collector tracks (and costs ~1 µs): a warm
        step that allocates none (this, the compiled rows' memo hit, ``accept_state``) can never start
        a collection inside a mask, whatever the caller allocates between masks (issue 33: MaskBench
        steps that did took 35 µs to 2.9 ms). A tensor given other memory (``set_``, a ``resize_`` that
        reallocates) has a new ``data_ptr`` and is read again; a ``resize_`` within the same memory is
        not seen (as a numpy view the caller kept would not see it)."""
        if bitmask is not self._bitmask or bitmask.data_ptr() != self._bitmask_ptr:
            view = bitmask.numpy()
            self._bitmask, self._bitmask_view, self._bitmask_ptr = bitmask, view, bitmask.data_ptr()
        return self._bitmask_view

    def next_vocab_bitmask(self) -> torch.Tensor:
        """The full-vocabulary packed mask for the next token: int32 ``(ceil(V/32),)``, a fresh tensor."""
        import torch

        return torch.from_numpy(np.array(self.vocab_row()))

    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        return bitmask.clone()

    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        return apply_vocab_bitmask_inplace(logits, bitmask, self.vocab_size)

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) if the grammar does not allow it."""
        if token_id in self._stop_ids:
            return self._accept_stop(int(token_id))
        if self._stopped():
            return False
        if self._fallback is not None:
            return self._accept_fallback(token_id)
        state = self._history[-1]
        if self._advancer is not None:  # EMPTY for a refused token (stop ids never get here: _accept_stop)
            # accept_state, not accept: its (state, created) tuple was a collected object, and a step
            # that allocates one may start Python's collector inside the mask (MaskBench: 35 µs to 2.9 ms)
            try:
                new = self._advancer.accept_state(state, token_id, self._spent)
            except StateBudgetExceeded as exc:
                self._fall_back(str(exc))
                return self._accept_fallback(token_id)
            if new == EMPTY:
                return False
            return self._push(new, int(token_id), self._advancer.last_created)
        if not 0 <= token_id < self.vocab_size:
            return False
        kind = self._class_kind[self._class_of[token_id]]
        if kind == NORMAL:  # a stop id never gets here (_accept_stop)
            try:
                new, created = self.walker.advance(state, int(token_id), self._spent)
            except StateBudgetExceeded as exc:
                self._fall_back(str(exc))
                return self._accept_fallback(token_id)
            if new == EMPTY:
                return False
        else:
            return False
        return self._push(new, int(token_id), created)

    def _accept_stop(self, token_id: int) -> bool:
        """A stop id, read as the stop policy says: the signal when the grammar is complete (and the
        option allows), else its text when that completes the grammar (0.2.9); either ends the matcher."""
        if self._stopped():
            return False
        signal = self.stop_policy.signal_allowed(self.is_completed())
        if not signal and not self._text_completes(token_id):
            return False
        if self._fallback is not None:
            fallback = self._fallback
            ok = fallback.accept_token(token_id) if signal else fallback.accept_string(self.stop_policy.texts[token_id])
            if not ok:  # pragma: no cover - both engines are exact
                raise RuntimeError(f"the fallback engine refused the stop token {token_id}")
            self._own()
            self._tokens.append(token_id)
            return True
        return self._push(_STOPPED, token_id, 0)

    def _push(self, state: int, step: int | bytes, created: int) -> bool:
        self._own()
        self._spent += created
        self._history.append(state)
        self._tokens.append(step)
        return True

    def _own(self) -> None:
        """Copy the history lists if a fork shares them (copy on write)."""
        if self._shared:
            self._history = list(self._history)
            self._tokens = list(self._tokens)
            self._shared = False

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens or strings (a stop token included).

        Raises
        ------
        RuntimeError
            More steps than were accepted (XGrammar's check), or a negative count.
        """
        steps = len(self._tokens)
        if num_tokens < 0 or num_tokens > steps:
            raise RuntimeError(
                f"Intended to rollback {num_tokens} tokens, but only the last {steps} steps of history are saved"
            )
        if not num_tokens:
            return
        self._own()
        if self._fallback is not None:
            self._fallback.rollback(num_tokens)
        else:
            del self._history[-num_tokens:]
        del self._tokens[-num_tokens:]

    def reset(self) -> None:
        self._history: list[int] = [self.walker.initial if self.walker is not None else EMPTY]
        self._tokens: list[int | bytes] = []  # every accepted step: a token id, or a string's bytes
        self._shared = False  # the two lists above are shared with a fork: copy before writing
        self._spent = 0  # store nodes this request created (the request budget)
        self._fallback: CompressedMatcher | None = None
        self.fallback_reason: str | None = None
        if self.walker is None:  # no index for this grammar: every request on the compressed engine
            self._fall_back(f"native engine unavailable: {self.engine.unavailable}")

    @property
    def accepted_tokens(self) -> list[int]:
        """The accepted token ids (strings accepted by :meth:`accept_string` are not tokens)."""
        return [t for t in self._tokens if isinstance(t, int)]

    # -- XGrammar's GrammarMatcher surface ----------------------------------------------
    def fork(self) -> DisplacementMatcher:
        """An independent matcher in this one's state, in O(1): the history is shared until either writes."""
        twin = copy.copy(self)
        self._shared = twin._shared = True
        if self._fallback is not None:
            twin._fallback = self._fallback.fork()
        return twin

    def accept_string(self, input_str: str | bytes, *, debug_print: bool = False) -> bool:
        """Accept the bytes of ``input_str`` (UTF-8 for a str) as one step of rollback.

        False, the state unchanged, when the grammar does not allow them or the matcher has
        terminated, as XGrammar's ``accept_string``.
        """
        data = input_str.encode("utf-8") if isinstance(input_str, str) else bytes(input_str)
        if self._stopped():
            return False
        if self._fallback is not None:
            return self._accept_string_fallback(data)
        state = self._history[-1]
        try:
            new, created = self.walker.run_bytes(state, data, self._spent)
        except StateBudgetExceeded as exc:
            self._fall_back(str(exc))
            return self._accept_string_fallback(data)
        if new == EMPTY:
            return False
        return self._push(new, data, created)

    def _forced_bytes(self) -> bytes:
        if self.walker is not None and self.walker._token_paths is not None:
            # Token(...) macros: a token edge is never a forced byte in XGrammar, and the state DAG
            # does not tell them apart; XGrammar over the whole vocabulary (token ids kept) answers.
            plain = self.engine.plain_matcher()
            _replay(plain, self._tokens)
            return plain.find_jump_forward_string().encode("utf-8")
        if self._fallback is not None:
            return self._fallback.find_jump_forward_string().encode("utf-8")
        try:
            return forced_bytes(self.walker, self._history[-1], self._spent)
        except StateBudgetExceeded:
            return self._xgrammar_twin().find_jump_forward_string().encode("utf-8")

    def find_jump_forward_string(self) -> str:
        """The longest string of whole UTF-8 characters the grammar forces next (the state unchanged).

        Raises
        ------
        RuntimeError
            After a stop token, as XGrammar.
        """
        if self._stopped():
            raise RuntimeError(_TERMINATED.format("get the jump forward string"))
        return valid_utf8_prefix(self._forced_bytes())

    def find_jump_forward_tokens(self) -> list[int]:
        """Token ids that spell the forced continuation, greedily longest first (XGrammar 0.2.9's contract).

        Empty when terminated or completed. The last token is withheld when a longer ordinary
        token starts with it. Each returned token is accepted in turn by a fork; this matcher
        is left as it was.
        """
        if self.is_terminated() or self.is_completed():
            return []
        data = self._forced_bytes()
        index = self.engine.forced_token_index
        trial = self.fork()
        tokens: list[int] = []
        extended = False
        offset = 0
        while offset < len(data):
            token, length, longer = index.longest_match(data, offset)
            if token < 0 or not trial.accept_token(token):
                break
            tokens.append(token)
            extended = longer
            offset += length
        if tokens and extended:
            tokens.pop()
        return tokens

    def get_captures(self, *, deduplicate: bool = True) -> list[tuple[str, bytes]]:
        """XGrammar's ``get_captures``: ``[]`` for a grammar without capture attributes, as XGrammar
        records nothing then.

        Raises
        ------
        NotImplementedError
            The grammar has capture attributes: cfgzip drops them (the language is the same), so it
            has no spans to report.
        """
        if self.engine.has_captures:
            raise NotImplementedError("get_captures: the native matcher does not record capture attributes")
        return []

    @property
    def max_rollback_tokens(self) -> int:
        """-1: rollback is unlimited (XGrammar's value since 0.2.x)."""
        return -1

    @property
    def stop_token_ids(self) -> list[int]:
        """The vocabulary's stop token ids, sorted as XGrammar lists them."""
        return sorted(int(s) for s in self.engine.vocab.stop_ids)

    @property
    def temperature(self) -> float | None:
        """None: no grammar served here sets a sampling temperature."""
        return None

    def traverse_draft_tree(
        self,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        draft_tokens: torch.Tensor,
        token_bitmask: torch.Tensor,
        time_threshold: float = -1.0,
        temperatures: torch.Tensor | None = None,
    ) -> bool:
        """XGrammar's ``traverse_draft_tree``: a mask for every node of a draft tree (see :mod:`.draft`)."""
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
        """Masks for a linear draft in one call: row ``index + i`` gets the mask after the first i draft tokens.

        Rows are filled for i = 0 … k (the last one for the bonus token) while the draft tokens
        are accepted: it stops after the row of the first refused token (the rows after it left
        as they were) or before the row after which the matcher is terminated (a stop token; with
        ``terminate_without_stop_token``, a complete sentence), as ``traverse_draft_tree`` does.
        The state is the same after the call.

        Returns
        -------
        int
            The number of rows filled.
        """
        accepted = 0
        filled = 0
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

    # -- fallback ----------------------------------------------------------------------
    def _fall_back(self, reason: str) -> None:
        matcher = self.engine.fallback_matcher()
        _replay(matcher, self._tokens)
        self._fallback = matcher
        self.fallbacks += 1
        self.fallback_reason = reason
        self.engine.fallbacks += 1

    def _accept_fallback(self, token_id: int) -> bool:
        ok = self._fallback.accept_token(token_id)
        if ok:
            self._own()
            self._tokens.append(int(token_id))
        return ok

    def _accept_string_fallback(self, data: bytes) -> bool:
        ok = self._fallback.accept_string(data)
        if ok:
            self._own()
            self._tokens.append(data)
        return ok

    def _xgrammar_twin(self) -> CompressedMatcher:
        """The compressed XGrammar matcher in this state (this request's fallback, or a fresh one fed
        the steps again): the answer for what the state DAG cannot say."""
        if self._fallback is not None:
            return self._fallback
        matcher = self.engine.fallback_matcher()
        _replay(matcher, self._tokens)
        return matcher


def _replay(matcher: CompressedMatcher, steps: Sequence[int | bytes]) -> None:
    for step in steps:
        ok = matcher.accept_string(step) if isinstance(step, bytes) else matcher.accept_token(step)
        if not ok:  # pragma: no cover - both engines are exact
            raise RuntimeError(f"the fallback engine refused {step!r}, which the native engine had accepted")


def fill_vocab_rows(bitmask: torch.Tensor, rows: Sequence[tuple[int, DisplacementMatcher]]) -> None:
    """Fill ``bitmask[row]`` with each ``(row, matcher)``'s next-token mask; other rows are left alone.

    The matchers may be of different grammars (each its own engine), as a serving engine's batch
    is: one full-vocabulary bitmask (XGrammar's int32 layout, on the CPU) takes them all. Every
    matcher must be over the bitmask's vocabulary size. Bits past the vocabulary in the last word
    are 0; XGrammar's are 0 or 1 depending on how it computed the row (its accepted or its
    rejected list), and no kernel reads them.
    """
    if not rows:
        return
    out = bitmask.numpy()
    out = out.reshape(-1, out.shape[-1])
    for row, matcher in rows:
        vocab_row = matcher.vocab_row()
        if vocab_row.shape[0] > out.shape[1]:
            raise ValueError(
                f"a row of {vocab_row.shape[0]} words does not fit a bitmask of {out.shape[1]} words per row"
            )
        out[row, : vocab_row.shape[0]] = vocab_row


class DisplacementBatchMatcher(MatcherRows):
    """A batch of native matchers with :class:`cfgzip_lab.engine.BatchMatcher`'s interface.

    Rows are filled one after the other on this thread: a row costs microseconds, so
    thread hand-offs would cost more than they save. The rows may be of different grammars
    (each its own engine) over one vocabulary size.
    """

    kind = "native"

    def __init__(self, matchers: Sequence[DisplacementMatcher]) -> None:
        super().__init__(matchers)
        sizes = {m.vocab_size for m in self.matchers}
        if len(sizes) > 1:
            raise ValueError(f"the rows of one batch must share a vocabulary size, got {sorted(sizes)}")

    def accept_tokens(self, token_ids: Sequence[int]) -> list[bool]:
        self._check_batch(token_ids)
        return [m.accept_token(int(t)) for m, t in zip(self.matchers, token_ids)]

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, indices: Sequence[int] | None = None) -> None:
        """Fill row ``i`` of ``bitmask`` from matcher ``i`` (or only ``indices``)."""
        for i in range(self.batch_size) if indices is None else indices:
            self.matchers[i].fill_next_token_bitmask(bitmask, i)

    def next_vocab_bitmask(self) -> torch.Tensor:
        """Masks ``(B, ceil(V/32))``; rows of terminated matchers are 0."""
        import torch

        out = torch.zeros((self.batch_size, self.bitmask_size), dtype=torch.int32)
        live = [i for i, m in enumerate(self.matchers) if not m.is_terminated()]
        if live:
            self.fill_next_token_bitmask(out, live)
        return out

    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        return bitmask.clone()

    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        return self._first.apply_bitmask_inplace(logits, bitmask)

    def rollback(self, num_tokens: int | Sequence[int] = 1) -> None:
        counts = [num_tokens] * self.batch_size if isinstance(num_tokens, int) else list(num_tokens)
        for m, n in zip(self.matchers, counts):
            m.rollback(int(n))

    def reset(self, index: int | None = None) -> None:
        for m in self.matchers if index is None else [self.matchers[index]]:
            m.reset()

    def is_terminated(self) -> list[bool]:
        return [m.is_terminated() for m in self.matchers]


NativeMatcher = DisplacementMatcher
NativeBatchMatcher = DisplacementBatchMatcher
