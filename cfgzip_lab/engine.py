"""Plain and compressed XGrammar engines behind one interface.

:class:`PlainMatcher` runs XGrammar over the whole vocabulary table (the oracle);
:class:`CompressedMatcher` runs XGrammar over the K class representatives and is fed the
class of each sampled token. Both take and return *original* vocabulary ids, and both
can produce the full-vocabulary packed bitmask (XGrammar's int32 format), so that they
can be compared bit for bit (:mod:`cfgzip_lab.verify`) and swapped in a decode loop.

How the vocabulary table becomes an XGrammar ``TokenizerInfo`` (checked against
xgrammar 0.2.8, see ``tests/test_engine.py``):

- ``VocabType.RAW``: token bytes are taken as they are. Text such as ``b"<s>"`` or
  ``b"<|endoftext|>"`` is matched as *text*; only ids listed as stop tokens are special.
- XGrammar marks every id whose bytes are empty, and every id in
  ``[len(encoded_vocab), vocab_size)``, as a *special token*: never in a mask, and
  ``accept_token`` rejects it (with a warning on stderr). An empty-bytes id that is
  listed in ``stop_token_ids`` is a stop token instead.
- ``stop_token_ids=None`` makes XGrammar *guess* stop tokens from their text
  (``</s>``, ``<|endoftext|>``…); we always pass an explicit list, possibly empty.
- A stop token is only ever a stop token: its text is never matched by the grammar.

So the plain engine passes ``b""`` for every SPECIAL and PADDING id (whatever text the
tokenizer gives them) and the table's stop ids; the compressed engine passes ``b""`` for
BLOCKED and STOP classes, the representative's bytes for NORMAL classes, and the STOP
classes as stop ids. Special, padding and dead tokens are thereby never allowed in
either engine, and both are built from the same table.

XGrammar (0.2.8 and 0.2.9) is not vocabulary-independent: whether it allows a token
can depend on which other tokens the vocabulary holds. With ``root ::= "a" [^\n]+ "\n"`` and the
vocabulary ``["a\n", "aa\n"]`` it refuses ``"aa\n"`` at the start, which the grammar
allows and which it does allow once ``"aa"`` is in the vocabulary too (``tests/test_engine.py``
pins these cases). The cause (:mod:`cfgzip_lab.xgrammar_runs`): a refused token refuses, unchecked,
the tokens sorted right after it that *hold* it anywhere (XGrammar's "trie subtree" is built with a
substring test, not a prefix test), until a token that does not hold it ends the run. Over the
representatives alone a run can reach further than over the full vocabulary: the verifier found it
on llama.cpp's ``list.gbnf`` with SmolLM2 (``"  \n"`` after ``"-"``) and on JSONSchemaBench's
htmlhint schema with Llama-3 (``"ine"`` refusing ``"inline"`` after ``{"``, issue 31). The
compressed vocabulary therefore also lists :func:`shadow_prefixes` (every vocabulary token that is
a proper prefix of a representative, the first workaround) and
:func:`~cfgzip_lab.xgrammar_runs.run_fences` (the tokens that end each run where the full vocabulary
ends it, and those whose run takes a representative in the full vocabulary), so that every run
over the compressed vocabulary is the full vocabulary's run cut to it. The verifier stays the
check that this holds on a given grammar and tokenizer.

Other XGrammar behaviour the interface smooths over:

- ``fill_next_token_bitmask`` leaves bits at or past ``vocab_size`` in the last word as
  they were (``allocate_token_bitmask`` fills them with 1s); :meth:`Engine.next_vocab_bitmask`
  clears them.
- Filling a mask after the stop token was accepted raises ``RuntimeError``; so does
  rolling back more tokens than were accepted. A rejected token leaves the state as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import xgrammar as xgr

from ._gc import gc_paused
from .batch_rows import MatcherRows
from .classes.classing import ClassKind, TokenClasses, grammar_sha256
from .errors import CfgzipError
from .expand import Expander, apply_vocab_bitmask_inplace
from .grammar.token_macros import named_id_bound, rewrite_for_representatives
from .vocab import TokenKind
from .xgrammar_runs import run_fences, sorted_runs

if TYPE_CHECKING:
    from .vocab import VocabTable

__all__ = [
    "Engine",
    "PlainMatcher",
    "CompressedMatcher",
    "BatchMatcher",
    "CompiledEngines",
    "GrammarCompileError",
    "compile_engines",
    "clear_engine_cache",
    "grammar_sha256",
    "plain_tokenizer_info",
    "compressed_tokenizer_info",
    "shadow_prefixes",
]


class GrammarCompileError(CfgzipError, ValueError):
    """XGrammar refused the grammar text (its message names line and column)."""


_PROBE = """
import sys, xgrammar
text = sys.stdin.read()
size = int(sys.argv[1])  # past every id a Token(...) names: XGrammar checks them against it
info = xgrammar.TokenizerInfo([b"a"], xgrammar.VocabType.RAW, vocab_size=size, stop_token_ids=[])
xgrammar.GrammarCompiler(info, cache_enabled=False).compile_grammar(text)
"""


def probe_xgrammar(grammar_text: str, *, timeout: float = 120.0) -> None:
    """Compile ``grammar_text`` with XGrammar in a child process first.

    xgrammar 0.2.8 kills the whole process with a segmentation fault on some grammars;
    a command that compiles user grammars in-process calls this first so that a crash
    becomes a :class:`GrammarCompileError` with a message instead.
    """
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(named_id_bound(grammar_text))],
            input=grammar_text,
            text=True,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise GrammarCompileError(f"XGrammar did not finish compiling the grammar within {timeout:.0f} s") from None
    if done.returncode < 0:
        raise GrammarCompileError(f"XGrammar crashed (signal {-done.returncode}) while compiling the grammar")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise GrammarCompileError(last)


def _never_allowed_ids(vocab: VocabTable) -> np.ndarray:
    kinds = np.asarray(vocab.kinds)
    return (kinds == TokenKind.SPECIAL) | (kinds == TokenKind.PADDING)


# ---------------------------------------------------------------------------------------
# Engines
# ---------------------------------------------------------------------------------------
class Engine(ABC):
    """One constrained-decoding matcher; token ids are always original vocabulary ids.

    ``fill_next_token_bitmask`` fills the engine's *native* mask (vocabulary bits for the
    plain engine, class bits for the compressed one) in XGrammar's format; allocate it
    with :meth:`allocate_bitmask`. :meth:`next_vocab_bitmask` returns the
    full-vocabulary packed mask for comparison, and :meth:`apply_bitmask_inplace` masks
    logits with a native mask.
    """

    kind: Literal["plain", "compressed"]

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int, native_size: int) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self.native_size = native_size
        self.bitmask_size = math.ceil(native_size / 32)
        self.vocab_bitmask_size = math.ceil(vocab_size / 32)
        self._native_buffer = xgr.allocate_token_bitmask(1, native_size)

    @abstractmethod
    def native_id(self, token_id: int) -> int:
        """The id this engine's XGrammar matcher sees for ``token_id``; -1 if never allowed."""

    @abstractmethod
    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        """Native mask ``(…, bitmask_size)`` → vocabulary mask ``(…, ceil(V/32))``, tail bits 0."""

    @abstractmethod
    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        """Mask ``logits`` ``(…, V)`` in place with a native mask (moved to their device)."""

    def allocate_bitmask(self, batch_size: int = 1) -> torch.Tensor:
        """A native bitmask ``(batch_size, bitmask_size)`` int32 on CPU, all ones."""
        return xgr.allocate_token_bitmask(batch_size, self.native_size)

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) if the grammar does not allow it."""
        native = self.native_id(token_id)
        if native < 0:
            return False
        return bool(self._matcher.accept_token(native))

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> bool:
        """Fill row ``index`` of the native ``bitmask``; returns XGrammar's ``need_apply``."""
        return bool(self._matcher.fill_next_token_bitmask(bitmask, index))

    def next_vocab_bitmask(self) -> torch.Tensor:
        """The full-vocabulary packed mask for the next token: int32 ``(ceil(V/32),)`` on CPU."""
        self._matcher.fill_next_token_bitmask(self._native_buffer, 0)
        return self.to_vocab_bitmask(self._native_buffer[0])

    @property
    def xgrammar_matcher(self) -> xgr.GrammarMatcher:
        """The underlying matcher (its token ids are native ids: classes when compressed)."""
        return self._matcher

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (a stop token included)."""
        self._matcher.rollback(num_tokens)

    def accept_string(self, input_str: str | bytes) -> bool:
        """Accept the bytes of ``input_str`` as one step (XGrammar's ``accept_string``: bytes, no ids)."""
        return bool(self._matcher.accept_string(input_str))

    def find_jump_forward_string(self) -> str:
        """The string the grammar forces next (XGrammar's; grammar state only, so the same on every engine)."""
        return str(self._matcher.find_jump_forward_string())

    def fork(self) -> Engine:
        """An independent matcher in this one's state (XGrammar's ``fork``; a fresh buffer of its own)."""
        twin = copy.copy(self)
        twin._matcher = self._matcher.fork()
        twin._native_buffer = xgr.allocate_token_bitmask(1, self.native_size)
        return twin

    def reset(self) -> None:
        self._matcher.reset()

    def is_terminated(self) -> bool:
        """True once a stop token has been accepted."""
        return bool(self._matcher.is_terminated())

    def is_completed(self) -> bool:
        """True when the input so far is a complete sentence (a stop token may follow)."""
        return bool(self._matcher.is_completed())


class PlainMatcher(Engine):
    """XGrammar over the full vocabulary: the oracle. Build with :func:`compile_engines`."""

    kind = "plain"

    def __init__(self, compiled: xgr.CompiledGrammar, vocab: VocabTable) -> None:
        super().__init__(compiled, vocab.vocab_size, vocab.vocab_size)
        self.vocab = vocab
        self._blocked = _never_allowed_ids(vocab)
        tail = self.vocab_size % 32
        self._tail_word_mask = -1 if tail == 0 else (1 << tail) - 1

    def native_id(self, token_id: int) -> int:
        if not 0 <= token_id < self.vocab_size or self._blocked[token_id]:
            return -1  # XGrammar would reject it too, with a warning on stderr
        return int(token_id)

    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        out = bitmask.clone()
        out[..., -1] &= self._tail_word_mask
        return out

    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        return apply_vocab_bitmask_inplace(logits, bitmask, self.vocab_size)


class CompressedMatcher(Engine):
    """XGrammar over the K class representatives, fed the class of each token."""

    kind = "compressed"

    def __init__(
        self,
        compiled: xgr.CompiledGrammar,
        vocab: VocabTable,
        classes: TokenClasses,
        expander: Expander | None = None,
    ) -> None:
        # XGrammar's ids: the K classes, then the shadow prefixes (never read, never fed).
        super().__init__(compiled, vocab.vocab_size, int(compiled.tokenizer_info.vocab_size))
        self.vocab = vocab
        self.classes = classes
        self.num_classes = int(classes.num_classes)
        self.expander = expander or Expander(classes)
        self._class_of = np.asarray(classes.class_of)
        self._class_blocked = np.asarray(classes.class_kind) == ClassKind.BLOCKED
        self.class_bitmask_size = math.ceil(self.num_classes / 32)

    def native_id(self, token_id: int) -> int:
        if not 0 <= token_id < self.vocab_size:
            return -1
        k = int(self._class_of[token_id])
        return -1 if self._class_blocked[k] else k

    def class_of(self, token_id: int) -> int:
        return int(self._class_of[token_id])

    # Only the shadow words are cut off: expansion reads the bits of class ids, never a
    # bit past K, so shadow bits left in the last class word need no clearing.
    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        return self.expander.to_vocab_bitmask(bitmask[..., : self.class_bitmask_size])

    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        return self.expander.mask_logits_(logits, bitmask[..., : self.class_bitmask_size])


class BatchMatcher(MatcherRows):
    """A batch of engines of one kind, filled in parallel by ``xgrammar.BatchGrammarMatcher``.

    Row ``i`` is ``matchers[i]``; token ids are original vocabulary ids.
    """

    def __init__(self, matchers: Sequence[Engine], *, max_threads: int | Literal["auto"] = "auto") -> None:
        super().__init__(matchers)
        if len({type(m) for m in self.matchers}) != 1:
            raise ValueError("all matchers of a batch must be of one kind")
        self._batch = xgr.BatchGrammarMatcher(max_threads)
        self._native_buffer = self._first.allocate_bitmask(len(self.matchers))

    @property
    def kind(self) -> str:
        return self._first.kind

    def accept_tokens(self, token_ids: Sequence[int]) -> list[bool]:
        """Row ``i`` accepts ``token_ids[i]``; returns who accepted."""
        self._check_batch(token_ids)
        natives = [m.native_id(int(t)) for m, t in zip(self.matchers, token_ids)]
        rows = [i for i, n in enumerate(natives) if n >= 0]
        accepted = [False] * self.batch_size
        if rows:
            result = xgr.BatchGrammarMatcher.batch_accept_token(
                [self.matchers[i]._matcher for i in rows], [natives[i] for i in rows]
            )
            for i, ok in zip(rows, result):
                accepted[i] = bool(ok)
        return accepted

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, indices: Sequence[int] | None = None) -> None:
        """Fill native masks: row ``i`` of ``bitmask`` from matcher ``i`` (or only ``indices``).

        Terminated matchers cannot be filled (XGrammar raises); leave them out with ``indices``.
        """
        if indices is None:
            matchers = [m._matcher for m in self.matchers]
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask)
        else:
            matchers = [self.matchers[i]._matcher for i in indices]
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, list(indices))

    def next_vocab_bitmask(self) -> torch.Tensor:
        """Full-vocabulary packed masks ``(B, ceil(V/32))``; rows of terminated matchers are 0."""
        live = [i for i, m in enumerate(self.matchers) if not m.is_terminated()]
        buffer = self._native_buffer
        buffer.zero_()
        if live:
            self.fill_next_token_bitmask(buffer, live)
        return self._first.to_vocab_bitmask(buffer)

    def to_vocab_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        """Native masks ``(B, bitmask_size)`` → vocabulary masks ``(B, ceil(V/32))``."""
        return self._first.to_vocab_bitmask(bitmask)

    def apply_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        return self._first.apply_bitmask_inplace(logits, bitmask)

    def rollback(self, num_tokens: int | Sequence[int] = 1) -> None:
        """Roll every row back by ``num_tokens`` (one count for all, or one per row)."""
        counts = num_tokens if isinstance(num_tokens, int) else [int(n) for n in num_tokens]
        xgr.BatchGrammarMatcher.batch_rollback([m._matcher for m in self.matchers], counts)

    def reset(self, index: int | None = None) -> None:
        for m in self.matchers if index is None else [self.matchers[index]]:
            m.reset()

    def is_terminated(self) -> list[bool]:
        return [m.is_terminated() for m in self.matchers]


# ---------------------------------------------------------------------------------------
# Compilation, cached
# ---------------------------------------------------------------------------------------
_CACHE_LIMIT = 32
_cache_lock = threading.Lock()
_compilers: OrderedDict[tuple, xgr.GrammarCompiler] = OrderedDict()
_compiled: OrderedDict[tuple, xgr.CompiledGrammar] = OrderedDict()


def _lru_get(cache: OrderedDict, key: tuple, build):
    with _cache_lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = build()  # outside the lock: compiling can take seconds
    with _cache_lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > _CACHE_LIMIT:
            cache.popitem(last=False)
    return value


def clear_engine_cache() -> None:
    """Forget cached tokenizer infos, compilers and compiled grammars."""
    with _cache_lock:
        _compilers.clear()
        _compiled.clear()


def plain_tokenizer_info(vocab: VocabTable) -> xgr.TokenizerInfo:
    """The full vocabulary table as XGrammar sees it: special and padding ids blanked."""
    blocked = _never_allowed_ids(vocab)
    stops = {int(s) for s in vocab.stop_ids}
    encoded = [b"" if blocked[i] and i not in stops else bytes(b) for i, b in enumerate(vocab.token_bytes)]
    return xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.vocab_size, stop_token_ids=sorted(stops))


def shadow_prefixes(vocab: VocabTable, classes: TokenClasses) -> list[bytes]:
    """Tokens of the vocabulary that are proper prefixes of a representative and not one.

    XGrammar 0.2.8 decides some tokens differently depending on which *other* tokens are
    in the vocabulary (see the module doc). Listing these prefixes after the K
    representatives, as tokens nobody ever samples, makes the compressed vocabulary
    prefix-closed like the full one; that removed every such disagreement we found. Cost:
    XGrammar checks these tokens too, 5% more for C-like with Llama-3 (210 on 4,001
    classes), up to 31% on llama.cpp's Java grammar with SmolLM2 (1,180 on 3,756).
    Sorted, so the vocabulary is deterministic.
    """
    kinds = np.asarray(classes.class_kind)
    reps = np.asarray(classes.representatives)
    blocked = _never_allowed_ids(vocab)
    stops = {int(s) for s in vocab.stop_ids}
    present = {bytes(b) for i, b in enumerate(vocab.token_bytes) if b and not blocked[i] and i not in stops}
    rep_bytes = {bytes(vocab.token_bytes[int(reps[k])]) for k in np.flatnonzero(kinds == ClassKind.NORMAL)}
    shadows = {
        rep[:i] for rep in rep_bytes for i in range(1, len(rep)) if rep[:i] in present and rep[:i] not in rep_bytes
    }
    return sorted(shadows)


def refuse_nested_root_in(text: str, vocab: VocabTable | None = None) -> None:
    """``GrammarError`` where ``text``'s root rule is nested with input after it
    (:mod:`.grammar.nested_root`): XGrammar's mask then depends on where a token starts, so one
    representative does not speak for its class (``root ::= "" | root [b]``: ``b`` is in XGrammar's
    mask, ``bb`` of the same class is not), and the compressed engine is refused. Likewise a class
    repeated past 128 that XGrammar's lookahead reads otherwise than its matcher (:mod:`.grammar.large_repeat`;
    with ``vocab``, only where that vocabulary holds such a token): classes made from the language do not
    follow that mask."""
    from .grammar.diagnostics import GrammarError
    from .grammar.large_repeat import large_repeat_in_text
    from .grammar.nested_root import COMPRESSED_REFUSAL, nested_root_in_text

    found = large_repeat_in_text(text, vocab)
    if found is not None:
        message = "the compressed engine refuses this grammar: " + found.message
        raise GrammarError([dataclasses.replace(found, message=message)], text=text)
    found = nested_root_in_text(text)  # root rule "root", as compile_engines compiles it
    if found is not None:
        message = COMPRESSED_REFUSAL.format(root="root")
        raise GrammarError([dataclasses.replace(found, message=message)], text=text)


def compressed_tokenizer_info(vocab: VocabTable, classes: TokenClasses) -> xgr.TokenizerInfo:
    """The K representatives as a vocabulary, then the shadow prefixes, then the run fences.

    Class ``k`` is id ``k``: NORMAL → its representative's bytes, STOP → a stop id,
    BLOCKED → special. Ids ``K, K+1, …`` are :func:`shadow_prefixes`, then
    :func:`~cfgzip_lab.xgrammar_runs.run_fences` (the tokens that end or own XGrammar's runs
    of rejection as in the full vocabulary): their bits are never read and their ids never
    fed to the matcher.
    """
    kinds = np.asarray(classes.class_kind)
    reps = np.asarray(classes.representatives)
    normal = (kinds == ClassKind.NORMAL).tolist()
    encoded = [bytes(vocab.token_bytes[int(reps[k])]) if normal[k] else b"" for k in range(classes.num_classes)]
    encoded += shadow_prefixes(vocab, classes)
    # XGrammar's runs of rejection as over the full vocabulary (see .xgrammar_runs).
    encoded += run_fences(sorted_runs(vocab), encoded)
    stops = [int(k) for k in np.flatnonzero(kinds == ClassKind.STOP)]
    return xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=len(encoded), stop_token_ids=stops)


@dataclass
class CompiledEngines:
    """One grammar compiled against one vocabulary table (and optionally its classes).

    Each XGrammar compilation happens on first use and is cached process-wide by
    (grammar sha256, vocabulary fingerprint[, classes digest]); each call of
    :meth:`plain` / :meth:`compressed` returns a fresh matcher in the initial state.
    """

    grammar_text: str
    vocab: VocabTable
    classes: TokenClasses | None = None
    max_threads: int = 8
    grammar_sha256: str = field(init=False)
    classes_digest: str | None = field(init=False)
    _expander: Expander | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.grammar_sha256 = grammar_sha256(self.grammar_text)
        self.classes_digest = None
        if self.classes is not None:
            served = self.classes.metadata.get("xgrammar_only")
            if served:  # no partition of the grammar's, only the placeholder of one XGrammar alone serves
                refuse_nested_root_in(self.grammar_text, self.vocab)  # a nested root: its own refusal, at the reference
                raise CfgzipError(f"no token classes for this grammar, XGrammar itself serves it: {served}")
            self.classes.validate(self.vocab.vocab_size)
            self.classes_digest = self.classes.digest()

    def _compile(self, key: tuple, info_builder, text: str | None = None) -> xgr.CompiledGrammar:
        text = self.grammar_text if text is None else text

        def build_compiled() -> xgr.CompiledGrammar:
            compiler = _lru_get(
                _compilers,
                key[1:],
                # XGrammar's own cache off: compiled grammars are kept in ``_compiled``.
                lambda: xgr.GrammarCompiler(info_builder(), max_threads=self.max_threads, cache_enabled=False),
            )
            try:
                return compiler.compile_grammar(text)
            except RuntimeError as err:
                raise GrammarCompileError(str(err).split("\n")[0]) from err

        return _lru_get(_compiled, key, build_compiled)

    @property
    def plain_grammar(self) -> xgr.CompiledGrammar:
        key = (self.grammar_sha256, "plain", self.vocab.fingerprint)
        return self._compile(key, lambda: plain_tokenizer_info(self.vocab))

    @property
    def compressed_grammar(self) -> xgr.CompiledGrammar:
        if self.classes is None:
            raise ValueError("compressed engines need TokenClasses")
        key = (self.grammar_sha256, "compressed", self.vocab.fingerprint, self.classes_digest)
        if key not in _compiled:
            refuse_nested_root_in(self.grammar_text, self.vocab)  # XGrammar's masks leave the language there
        # Token(...) macros name vocabulary ids: over the representatives they must name classes.
        text = rewrite_for_representatives(self.grammar_text, self.classes.representatives, self.classes.class_kind)
        return self._compile(key, lambda: compressed_tokenizer_info(self.vocab, self.classes), text)

    @property
    def expander(self) -> Expander:
        if self.classes is None:
            raise ValueError("expansion needs TokenClasses")
        if self._expander is None:
            self._expander = Expander(self.classes)
        return self._expander

    def plain(self) -> PlainMatcher:
        return PlainMatcher(self.plain_grammar, self.vocab)

    def compressed(self) -> CompressedMatcher:
        return CompressedMatcher(self.compressed_grammar, self.vocab, self.classes, self.expander)

    def plain_batch(self, batch_size: int, *, max_threads: int | Literal["auto"] = "auto") -> BatchMatcher:
        return BatchMatcher([self.plain() for _ in range(batch_size)], max_threads=max_threads)

    def compressed_batch(self, batch_size: int, *, max_threads: int | Literal["auto"] = "auto") -> BatchMatcher:
        return BatchMatcher([self.compressed() for _ in range(batch_size)], max_threads=max_threads)


@gc_paused()  # a build never pays a full collection (cfgzip_lab._gc)
def compile_engines(
    grammar_text: str, vocab: VocabTable, classes: TokenClasses | None = None, *, max_threads: int = 8
) -> CompiledEngines:
    """Compile ``grammar_text`` (XGrammar EBNF, root rule ``root``) for both engines.

    Compilation is lazy and cached; raises :class:`GrammarCompileError` on first use if
    XGrammar refuses the grammar, and :class:`~cfgzip_lab.classes.classing.ClassesError` (a
    ``ValueError``) at once if ``classes`` is no partition of ``vocab``'s ids.

    >>> engines = compile_engines(text, load_vocab("llama3"), classes)   # doctest: +SKIP
    >>> plain, compressed = engines.plain(), engines.compressed()
    """
    return CompiledEngines(grammar_text, vocab, classes, max_threads=max_threads)
