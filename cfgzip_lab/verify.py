"""Lossless check: the compressed engine's expanded mask equals plain XGrammar's, bit for bit.

Random constrained walks are driven by the PLAIN matcher (the oracle). At every step both
engines fill their next mask; the compressed one is expanded to the vocabulary and the
two packed masks are compared word for word, stop-token bits included; ``is_terminated``
must agree too. Walks pick among the allowed tokens with a bias toward long tokens and,
as a walk goes on, toward finishing (a stop token when one is allowed, tokens that close
brackets or quotes otherwise). They also roll back a few tokens now and then (in both
engines, the masks are then re-checked), and try a disallowed token in both engines
(both must reject it). Tokenized documents are replayed step by step with the same
comparison. Everything is deterministic for a seed.

The check is only as strong as the states it visits: it samples, it does not prove.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .classes.classing import ClassKind, TokenClasses
from .engine import CompiledEngines, Engine, compile_engines
from .expand import unpack_bitmask
from .vocab import TokenKind

if TYPE_CHECKING:
    from .vocab import VocabTable

__all__ = [
    "VerifyReport",
    "verify_lossless",
    "verify_engines",
    "identity_classes",
    "duplicate_classes",
    "partition_classes",
]

# Bytes that close a structure in most grammars we ship (JSON, C-like, XML-ish, Python-ish).
_CLOSERS = frozenset(b")]}>\"';\n")
_MAX_LISTED_IDS = 16
_MAX_ARBITRATED = 4096
_NONE = np.zeros(0, dtype=np.int64)  # no token ids (a default never written to)


@dataclass
class VerifyReport:
    """What :func:`verify_lossless` checked and the first difference it found.

    ``first_mismatch`` is None when every step agreed; otherwise a dict with ``walk``
    (``"walk 3"`` or ``"doc 0"``), ``step``, ``check`` (``"mask"``, ``"terminated"``,
    ``"accept"`` or ``"reject"``), ``prefix`` (the text accepted so far),
    ``prefix_ids``, and, for a mask difference, ``plain_only`` / ``compressed_only``
    (token ids allowed by one engine only, at most 16 each, with their bytes and classes)
    and ``differing_bits`` (how many tokens differ).

    ``xgrammar_disagreements`` counts mask differences where XGrammar's own matcher sides with
    the engine under test against XGrammar's mask (xgrammar 0.2.8's mask can refuse a token its
    ``accept_token`` takes, after recursion through an empty alternative): every differing token
    (at most ``_MAX_ARBITRATED``) is put to ``accept_token`` in the plain matcher, and when each
    answer contradicts the plain mask the step is counted here, with examples in
    ``xgrammar_disagreement_examples``, instead of in ``mismatches``. They still fail :attr:`ok`
    unless ``allow_xgrammar_disagreements`` is set: a pass never hides them.
    """

    steps_checked: int = 0
    mismatches: int = 0
    first_mismatch: dict[str, Any] | None = None
    walks: int = 0
    docs: int = 0
    docs_rejected: list[dict[str, Any]] = field(default_factory=list)
    rollbacks: int = 0
    rejections_checked: int = 0
    stops_reached: int = 0
    plain_cache_hits: int = 0
    seconds: float = 0.0
    engine: str = "compressed"
    xgrammar_disagreements: int = 0
    xgrammar_disagreement_examples: list[dict[str, Any]] = field(default_factory=list)
    allow_xgrammar_disagreements: bool = False
    guides_typed: int = 0  # guide strings (TagDispatch tags) a walk typed to the end
    cancelled: bool = False  # ``cancel`` stopped it: what it says covers the steps before
    guide_tokens_taken: int = 0  # steps that took one of the token guides (Token(...) ids)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and (self.allow_xgrammar_disagreements or self.xgrammar_disagreements == 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def in_words(self, walks: int | None = None) -> list[str]:
        """What it found, in sentences (the workbench's Verify): the verdict with the steps
        checked, then the first mismatch. ``walks``: how many were asked for (said when cancelled)."""
        what = f"{self.steps_checked:,} step{'s' * (self.steps_checked != 1)} checked over {self.walks} walk"
        what += "s" * (self.walks != 1)
        if self.docs:
            what += f" and {self.docs} document{'s' * (self.docs != 1)}"
        what += f", {self.rollbacks} rollbacks, {self.rejections_checked} refused tokens tried ({self.seconds:.1f} s)"
        if self.cancelled:
            asked = f" of {walks}" if walks is not None else ""
            lead = f"Cancelled after {self.walks}{asked} walks: "
            lead += "no mismatch so far" if not self.mismatches else f"{self.mismatches} mismatches so far"
        elif self.ok:
            lead = "Lossless: every checked step masks exactly as plain XGrammar"
        else:
            lead = f"Not lossless: {self.mismatches} mismatch{'es' * (self.mismatches != 1)}"
        lines = [f"{lead} — {what}."]
        if self.xgrammar_disagreements:
            lines.append(
                f"{self.xgrammar_disagreements} step(s) where XGrammar's own matcher disagrees with its mask "
                "(counted apart from mismatches)."
            )
        m = self.first_mismatch
        if m is not None:
            where = f"First mismatch: {m.get('walk')}, step {m.get('step')}, {m.get('check')} check, after {m.get('prefix')!r}"
            if m.get("check") == "mask":
                plain, ours = m.get("plain_only") or [], m.get("compressed_only") or []
                where += (
                    f": {m.get('differing_bits', len(plain) + len(ours))} token(s) differ "
                    f"({len(plain)} allowed only by plain XGrammar, {len(ours)} only by the {self.engine} engine)"
                )
            lines.append(where + ".")
        return lines


def partition_classes(vocab: VocabTable, key_of: Sequence[Any]) -> TokenClasses:
    """Classes from any grouping key per NORMAL token; STOP ids form one class, SPECIAL and
    PADDING ids the BLOCKED class. Numbered BLOCKED, STOP, then by representative id
    (byte-wise shortest member, ties to the lowest id), like displacement classing.

    Grammar-blind: a reference for tests and baselines, not a classing algorithm.
    """
    kinds = np.asarray(vocab.kinds)
    size = vocab.vocab_size
    lengths = np.fromiter(map(len, vocab.token_bytes), dtype=np.int64, count=size)
    normal = (kinds == TokenKind.NORMAL) & (lengths > 0)
    stop = kinds == TokenKind.STOP
    blocked = ~normal & ~stop  # SPECIAL, PADDING
    # group id per NORMAL token, in order of first appearance of its key
    first_of: dict[Any, int] = {}
    group = np.full(size, -1, dtype=np.int64)
    for tid in np.flatnonzero(normal).tolist():
        group[tid] = first_of.setdefault(key_of[tid], len(first_of))
    members = np.flatnonzero(normal)
    # representative: byte-wise shortest member, ties to the lowest id
    order = members[np.lexsort((members, lengths[members], group[members]))]
    first = np.ones(order.size, dtype=bool)
    first[1:] = group[order[1:]] != group[order[:-1]]
    reps_of_group = np.empty(len(first_of), dtype=np.int64)
    reps_of_group[group[order[first]]] = order[first]
    # number the classes: BLOCKED, STOP, then NORMAL groups by representative id
    rank = np.empty(len(first_of), dtype=np.int64)
    rank[np.argsort(reps_of_group, kind="stable")] = np.arange(len(first_of))
    offset = int(blocked.any()) + int(stop.any())
    class_of = np.empty(size, dtype=np.int32)
    class_of[normal] = offset + rank[group[normal]]
    reps, kinds_out = [], []
    if blocked.any():
        class_of[blocked] = 0
        reps.append(int(np.flatnonzero(blocked)[0]))
        kinds_out.append(ClassKind.BLOCKED)
    if stop.any():
        class_of[stop] = offset - 1
        reps.append(int(np.flatnonzero(stop)[0]))
        kinds_out.append(ClassKind.STOP)
    reps = np.concatenate([np.array(reps, dtype=np.int64), np.sort(reps_of_group)]).astype(np.int32)
    kinds_out = np.concatenate(
        [np.array(kinds_out, dtype=np.uint8), np.full(len(first_of), ClassKind.NORMAL, np.uint8)]
    )
    return TokenClasses(class_of, reps, kinds_out, {"partition": "reference"})


def identity_classes(vocab: VocabTable) -> TokenClasses:
    """Every NORMAL token its own class (trivially lossless, no compression)."""
    return partition_classes(vocab, range(vocab.vocab_size))


def duplicate_classes(vocab: VocabTable) -> TokenClasses:
    """NORMAL tokens with byte-identical contents share a class (lossless for any grammar)."""
    return partition_classes(vocab, vocab.token_bytes)


class _TokenStats:
    """Per-token lengths and 'closes a structure' flags, computed once per vocabulary."""

    _cache: dict[str, _TokenStats] = {}

    def __init__(self, vocab: VocabTable) -> None:
        size = vocab.vocab_size
        self.token_bytes = vocab.token_bytes
        self.length = np.fromiter((len(b) for b in vocab.token_bytes), dtype=np.float64, count=size)
        self.closes = np.fromiter((bool(b) and b[-1] in _CLOSERS for b in vocab.token_bytes), dtype=bool, count=size)
        self.is_stop = np.zeros(size, dtype=bool)
        self.is_stop[list(vocab.stop_ids)] = True
        self._by_bytes: dict[bytes, list[int]] | None = None

    def ids_of(self, data: bytes) -> list[int]:
        """The token ids whose bytes are ``data`` (a table built on first use)."""
        if self._by_bytes is None:
            self._by_bytes = {}
            for t, b in enumerate(self.token_bytes):
                self._by_bytes.setdefault(b, []).append(t)
        return self._by_bytes.get(data, [])

    @classmethod
    def of(cls, vocab: VocabTable) -> _TokenStats:
        stats = cls._cache.get(vocab.fingerprint)
        if stats is None:
            stats = cls._cache[vocab.fingerprint] = cls(vocab)
        return stats


class _Checker:
    """Runs both engines in lockstep and records the first difference."""

    def __init__(
        self, engines: CompiledEngines, report: VerifyReport, candidate: Callable[[], Any] | None = None
    ) -> None:
        self.vocab = engines.vocab
        self.classes = engines.classes
        self.plain: Engine = engines.plain()
        # The engine under test: the compressed one, or any other with the Engine interface.
        self.compressed: Engine = candidate() if candidate is not None else engines.compressed()
        self.report = report
        self.history: list[int] = []
        self.label = ""
        # The oracle's mask depends only on the accepted prefix: keep it, so that states
        # revisited after a rollback (and the shared first state of every walk) cost the
        # slow plain fill once. The compressed engine is filled afresh every time.
        self._plain_masks: dict[tuple[int, ...], torch.Tensor] = {}
        self._plain_cache_limit = max(64, (64 << 20) // (4 * max(1, self.plain.vocab_bitmask_size)))

    def reset(self, label: str) -> None:
        self.plain.reset()
        self.compressed.reset()
        self.history = []
        self.label = label

    def _record(self, check: str, **details: Any) -> None:
        self.report.mismatches += 1
        if self.report.first_mismatch is None:
            prefix = self.vocab.decode(self.history)
            self.report.first_mismatch = {
                "walk": self.label,
                "step": len(self.history),
                "check": check,
                "prefix": prefix.decode("utf-8", errors="replace"),
                "prefix_ids": list(self.history),
                **details,
            }

    def _describe(self, ids: np.ndarray) -> list[dict[str, Any]]:
        out = []
        for t in ids[:_MAX_LISTED_IDS]:
            t = int(t)
            out.append(
                {
                    "id": t,
                    "bytes": self.vocab.token_bytes[t].decode("utf-8", errors="backslashreplace"),
                    "class": int(self.classes.class_of[t]),
                }
            )
        return out

    def check_state(self) -> tuple[bool, np.ndarray | None]:
        """Compare termination and masks; returns (agreed, allowed token ids or None if terminated)."""
        self.report.steps_checked += 1
        term_p, term_c = self.plain.is_terminated(), self.compressed.is_terminated()
        if term_p != term_c:
            self._record("terminated", plain_terminated=term_p, compressed_terminated=term_c)
            return False, None
        if term_p:
            return True, None
        key = tuple(self.history)
        plain_mask = self._plain_masks.get(key)
        if plain_mask is None:
            plain_mask = self.plain.next_vocab_bitmask()
            if len(self._plain_masks) >= self._plain_cache_limit:
                self._plain_masks.pop(next(iter(self._plain_masks)))
            self._plain_masks[key] = plain_mask
        else:
            self.report.plain_cache_hits += 1
        compressed_mask = self.compressed.next_vocab_bitmask()
        plain_bits = unpack_bitmask(plain_mask, self.vocab.vocab_size)
        if not np.array_equal(plain_mask.numpy(), compressed_mask.numpy()):
            compressed_bits = unpack_bitmask(compressed_mask, self.vocab.vocab_size)
            plain_only = np.flatnonzero(plain_bits & ~compressed_bits)
            compressed_only = np.flatnonzero(compressed_bits & ~plain_bits)
            if self._xgrammar_contradicts_its_mask(plain_only, compressed_only):
                self.report.xgrammar_disagreements += 1
                self._xgrammar_disagreement(self.history, plain_only, compressed_only)
                return False, None
            self._record(
                "mask",
                differing_bits=int(plain_only.size + compressed_only.size),
                plain_allowed=int(plain_bits.sum()),
                compressed_allowed=int(compressed_bits.sum()),
                plain_only=self._describe(plain_only),
                compressed_only=self._describe(compressed_only),
            )
            return False, None
        return True, np.flatnonzero(plain_bits)

    def _xgrammar_disagreement(
        self,
        prefix_ids: list[int],
        mask_only: np.ndarray = _NONE,
        engine_only: np.ndarray = _NONE,
        taken_outside: np.ndarray = _NONE,
    ) -> None:
        """Count a step where XGrammar's matcher contradicts its mask, with one example (of 5) in the
        same keys whichever check found it: tokens only its mask allows, tokens only the engine's
        allows (the matcher sides with the engine on each), tokens outside both masks both matchers take."""
        self.report.xgrammar_disagreements += 1
        if len(self.report.xgrammar_disagreement_examples) < 5:
            self.report.xgrammar_disagreement_examples.append(
                {
                    "walk": self.label,
                    "step": len(prefix_ids),
                    "prefix": self.vocab.decode(prefix_ids).decode("utf-8", errors="replace"),
                    "prefix_ids": list(prefix_ids),
                    "xgrammar_mask_only": self._describe(mask_only),
                    "engine_only": self._describe(engine_only),
                    "taken_outside_both_masks": self._describe(taken_outside),
                }
            )

    def _xgrammar_contradicts_its_mask(self, plain_only: np.ndarray, engine_only: np.ndarray) -> bool:
        """Whether XGrammar's ``accept_token`` sides with the engine on every differing token."""
        if plain_only.size + engine_only.size > _MAX_ARBITRATED:
            return False
        for ids, mask_allows in ((plain_only, True), (engine_only, False)):
            for t in ids.tolist():
                accepted = self.plain.accept_token(int(t))
                if accepted:
                    self.plain.rollback(1)
                if accepted == mask_allows:
                    return False
        return True

    def accept(self, token_id: int) -> tuple[bool, bool]:
        """Both engines accept ``token_id``; returns (agreed, accepted)."""
        a_p = self.plain.accept_token(token_id)
        a_c = self.compressed.accept_token(token_id)
        if a_p != a_c:
            self._record("accept", token=self._describe(np.array([token_id]))[0], plain=a_p, compressed=a_c)
            return False, a_p
        if a_p:
            self.history.append(int(token_id))
        return True, a_p

    def check_reject(self, token_id: int) -> bool:
        """A token outside the mask: both must reject it (and stay where they are)."""
        self.report.rejections_checked += 1
        agreed, accepted = self.accept(token_id)
        if agreed and accepted:
            # Both took a token outside the plain mask: the engines agree, and XGrammar's own matcher
            # contradicts its mask (a nested root's, grammar/nested_root.py): counted apart, as in
            # the mask check; still no pass unless allowed.
            self._xgrammar_disagreement(self.history[:-1], taken_outside=np.array([token_id]))
            return False
        return agreed

    def rollback(self, k: int) -> None:
        self.plain.rollback(k)
        self.compressed.rollback(k)
        del self.history[-k:]
        self.report.rollbacks += 1


_GUIDE_PROBABILITY = 0.3  # per step without a guide string in progress: start typing one
_TOKEN_GUIDE_PROBABILITY = 0.5  # per step where a token guide is allowed: take one


def _choose(rng: np.random.Generator, allowed: np.ndarray, stats: _TokenStats, progress: float) -> int:
    """Pick a token among ``allowed``: long tokens favoured, finishing favoured as progress → 1."""
    stop_allowed = allowed[stats.is_stop[allowed]]
    if stop_allowed.size and rng.random() < 0.1 + 0.8 * progress:
        return int(rng.choice(stop_allowed))
    if rng.random() < 0.3:  # plain uniform picks keep short tokens in play
        return int(rng.choice(allowed))
    weights = stats.length[allowed] ** 1.5 + 1e-3
    weights = weights * (1.0 + 8.0 * progress * stats.closes[allowed])
    weights /= weights.sum()
    return int(allowed[rng.choice(allowed.size, p=weights)])


def _guided(allowed: np.ndarray, pending: bytes, stats: _TokenStats) -> tuple[int | None, bytes]:
    """The allowed token that types the longest head of ``pending``, and what is left to type."""
    mask = np.zeros(stats.length.size, dtype=bool)
    mask[allowed] = True
    for k in range(len(pending), 0, -1):
        for t in stats.ids_of(pending[:k]):
            if mask[t]:
                return t, pending[k:]
    return None, b""


def _walk(
    checker: _Checker,
    rng: np.random.Generator,
    stats: _TokenStats,
    steps: int,
    rollback_prob: float,
    guides: Sequence[bytes] = (),
    token_guides: np.ndarray | None = None,
    cancel: Callable[[], bool] | None = None,
) -> None:
    vocab_size = checker.vocab.vocab_size
    pending = b""  # the rest of a guide string being typed
    for step in range(steps):
        if cancel is not None and cancel():
            return
        agreed, allowed = checker.check_state()
        if not agreed:
            return
        if checker.history and rng.random() < rollback_prob:
            checker.rollback(int(rng.integers(1, min(len(checker.history), 4) + 1)))
            continue
        if allowed is None:  # terminated: walk over
            checker.report.stops_reached += 1
            return
        if allowed.size == 0:
            return
        if allowed.size < vocab_size and rng.random() < 0.2:
            for _ in range(4):  # a token the plain mask refuses
                t = int(rng.integers(vocab_size))
                if t not in allowed:
                    if not checker.check_reject(t):
                        return
                    break
        token = None
        if guides:  # now and then, type one of the guide strings (TagDispatch's tags) where allowed
            if not pending and rng.random() < _GUIDE_PROBABILITY:
                pending = guides[int(rng.integers(len(guides)))]
            if pending:
                token, pending = _guided(allowed, pending, stats)
                if token is not None and not pending:
                    checker.report.guides_typed += 1
        guided = False
        if token is None and token_guides is not None and rng.random() < _TOKEN_GUIDE_PROBABILITY:
            named = np.intersect1d(allowed, token_guides, assume_unique=True)
            if named.size:  # a token the grammar names by id, where one is allowed
                token, guided = int(rng.choice(named)), True
        if token is None:
            token = _choose(rng, allowed, stats, step / max(steps - 1, 1))
        agreed, accepted = checker.accept(token)
        if not (agreed and accepted):  # plain refused its own mask's token: record nothing more
            return
        checker.report.guide_tokens_taken += guided
    checker.check_state()


def _replay(
    checker: _Checker,
    ids: Sequence[int],
    stop_ids: Sequence[int],
    report: VerifyReport,
    doc_index: int,
    limit: int | None,
) -> None:
    truncated = limit is not None and len(ids) > limit
    ids = ids[:limit] if truncated else ids
    for position, token in enumerate(ids):
        agreed, allowed = checker.check_state()
        if not agreed:
            return
        agreed, accepted = checker.accept(int(token))
        if not agreed:
            return
        if not accepted:
            report.docs_rejected.append({"doc": doc_index, "position": position, "token": int(token)})
            return
    agreed, allowed = checker.check_state()
    if truncated:
        return
    if agreed and allowed is not None:
        stops = [s for s in stop_ids if s in allowed]
        if stops:
            checker.accept(stops[0])
            checker.check_state()


def verify_engines(
    engines: CompiledEngines,
    *,
    walks: int = 20,
    steps: int = 64,
    seed: int = 0,
    docs: Iterable[str | bytes] = (),
    rollback_prob: float = 0.1,
    max_doc_tokens: int | None = None,
    candidate: Callable[[], Any] | None = None,
    candidate_name: str = "compressed",
    allow_xgrammar_disagreements: bool = False,
    guides: Sequence[bytes] = (),
    token_guides: Iterable[int] = (),
    progress: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> VerifyReport:
    """:func:`verify_lossless` on already compiled engines (see there).

    ``candidate`` makes the matcher under test (default ``engines.compressed``), e.g. a
    native engine's ``matcher``; ``candidate_name`` labels the report. ``progress(done, total)``
    is called after each walk and document (total: walks plus documents); ``cancel()`` is polled
    before each step of a walk and before each document: once it says True the check stops and
    returns what it checked so far, ``cancelled`` set (the workbench's Verify button).
    """
    if engines.classes is None:
        raise ValueError("verification needs TokenClasses")
    start = time.perf_counter()
    report = VerifyReport(engine=candidate_name, allow_xgrammar_disagreements=allow_xgrammar_disagreements)
    checker = _Checker(engines, report, candidate)
    stats = _TokenStats.of(engines.vocab)
    rng = np.random.default_rng(seed)
    named = np.unique(np.asarray(list(token_guides), dtype=np.int64))
    docs = list(docs)
    total = walks + len(docs)
    for w in range(walks):
        checker.reset(f"walk {w}")
        _walk(checker, rng, stats, steps, rollback_prob, guides, named if named.size else None, cancel)
        if cancel is not None and cancel():
            report.cancelled = True
            break
        report.walks += 1
        if progress is not None:
            progress(report.walks, total)
    for d, doc in enumerate(docs if not report.cancelled else ()):
        if cancel is not None and cancel():
            report.cancelled = True
            break
        text = doc.decode("utf-8") if isinstance(doc, bytes) else doc
        checker.reset(f"doc {d}")
        _replay(checker, engines.vocab.encode(text), engines.vocab.stop_ids, report, d, max_doc_tokens)
        report.docs += 1
        if progress is not None:
            progress(walks + report.docs, total)
    report.seconds = time.perf_counter() - start
    return report


def verify_lossless(
    grammar_text: str,
    vocab: VocabTable,
    classes: TokenClasses,
    *,
    walks: int = 20,
    steps: int = 64,
    seed: int = 0,
    docs: Iterable[str | bytes] = (),
    rollback_prob: float = 0.1,
    max_doc_tokens: int | None = None,
    guides: Sequence[bytes] = (),
    token_guides: Iterable[int] = (),
) -> VerifyReport:
    """Check that the compressed engine masks exactly like plain XGrammar.

    Parameters
    ----------
    grammar_text : str
        XGrammar EBNF, root rule ``root``.
    vocab : VocabTable
        The vocabulary table both engines are built from.
    classes : TokenClasses
        The partition under test.
    walks, steps : int
        Number of random constrained walks and the most tokens each takes.
    seed : int
        Seed of the walks; the report is a function of the inputs and the seed.
    docs : iterable of str or bytes
        Documents to tokenize with ``vocab.encode`` and replay token by token; a document
        the grammar refuses is replayed up to the refused token and listed in
        ``docs_rejected`` (not a mismatch, unless the engines disagree about it).
    rollback_prob : float
        Chance per step of rolling back 1–4 tokens in both engines.
    max_doc_tokens : int, optional
        Replay at most this many tokens of each document (plain XGrammar over a large
        vocabulary can take 0.1–1 s per mask on a big grammar: the oracle sets the pace).
    guides : sequence of bytes
        Strings the walks now and then type, token by token where the mask allows (a walk
        over free text rarely types a TagDispatch tag by chance:
        :func:`~cfgzip_lab.grammar.tag_dispatch.dispatch_triggers` lists a grammar's).
        Without guides the walks are what they were.
    token_guides : iterable of int
        Token ids the walks take, half the time, where the mask allows one (the ids a grammar
        names with ``Token(...)``: :func:`~cfgzip_lab.grammar.token_macros.guide_token_ids`);
        ``report.guide_tokens_taken`` counts the steps that did.

    Returns
    -------
    VerifyReport
        ``mismatches == 0`` when every checked step agreed.

    Raises
    ------
    GrammarCompileError
        If XGrammar refuses the grammar.
    """
    engines = compile_engines(grammar_text, vocab, classes)
    return verify_engines(
        engines,
        walks=walks,
        steps=steps,
        seed=seed,
        docs=docs,
        rollback_prob=rollback_prob,
        max_doc_tokens=max_doc_tokens,
        guides=guides,
        token_guides=token_guides,
    )
