"""What both serving integrations share: a request's grammar to EBNF, the server's token table,
and one native engine per grammar, compiled once and shared by every request that names it.

A serving engine hands us a request's constraint as it got it (a JSON Schema, an EBNF, a regex,
a structural tag). :class:`GrammarRequest` turns it into XGrammar's EBNF with XGrammar's own
converters and the serving engine's options (``any_whitespace``, ``max_whitespace_cnt``,
``separators``; :func:`legacy_structural_tag` for the older ``structures``/``triggers`` form), so the
language we serve is the one the engine's XGrammar backend would compile; our front end then
takes that EBNF. :func:`vocab_from_tokenizer_info` builds the token table from the
``xgrammar.TokenizerInfo`` the engine's XGrammar backend builds for the same tokenizer (its
decoded bytes, special ids, stop ids and padded size), so both see the same tokens.
:class:`EngineCache` holds the native engines, one per (EBNF, vocabulary), in an LRU; a grammar
asked for by several requests at once is built once (the others wait for that build), and a
refused grammar's reason is remembered so that repeating it costs a dictionary look-up.

The engines themselves come from the per-request API, :class:`cfgzip_lab.cache.grammars.GrammarCache`
(by default the process's shared one): an in-process LRU over the on-disk class cache, so a
schema is classed once per machine and loaded from disk by the next server process.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CfgzipError
from ..grammar.printed import printed_ebnf

if TYPE_CHECKING:
    from ..native.engine import NativeEngine
    from ..vocab import VocabTable

__all__ = [
    "GRAMMAR_KINDS",
    "GrammarRequest",
    "legacy_structural_tag",
    "stop_policy_of",
    "ServingError",
    "EngineCache",
    "shared_engine_cache",
    "vocab_from_tokenizer_info",
]

GRAMMAR_KINDS = ("json_schema", "any_json", "ebnf", "regex", "lark", "structural_tag")


class ServingError(CfgzipError, ValueError):
    """A request whose grammar cannot be served; the message is the reason, for the client."""


@dataclass(frozen=True)
class GrammarRequest:
    """One request's constraint as a serving engine received it.

    ``kind`` is one of :data:`GRAMMAR_KINDS` (``any_json`` is any JSON value, SGLang's
    ``$$ANY$$``); ``any_whitespace``, ``max_whitespace_cnt`` and ``separators`` (the item and
    key separators, ``(",", ":")`` for compact JSON as vLLM asks without whitespace) are XGrammar's
    JSON Schema options, as the engine's XGrammar backend passes them.
    """

    kind: str
    text: str
    any_whitespace: bool = True
    max_whitespace_cnt: int | None = None
    separators: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in GRAMMAR_KINDS:
            raise ServingError(f"unknown grammar kind {self.kind!r} (one of {', '.join(GRAMMAR_KINDS)})")
        if not isinstance(self.text, str):
            raise ServingError(f"the {self.kind} must be a string, not {type(self.text).__name__}")

    def to_ebnf(self) -> str:
        """XGrammar's EBNF for this constraint (the EBNF itself for ``ebnf``).

        Raises :class:`ServingError` with XGrammar's message when XGrammar cannot convert it
        (a malformed schema or regex, a structural tag it refuses).
        """
        if self.kind == "ebnf":
            return self.text
        import xgrammar as xgr

        try:
            if self.kind == "any_json":
                grammar = xgr.Grammar.builtin_json_grammar()
            elif self.kind == "json_schema":
                grammar = xgr.Grammar.from_json_schema(
                    self.text,
                    any_whitespace=self.any_whitespace,
                    max_whitespace_cnt=self.max_whitespace_cnt,
                    separators=self.separators,
                )
            elif self.kind == "regex":
                grammar = xgr.Grammar.from_regex(self.text)
            elif self.kind == "lark":
                grammar = xgr.Grammar.from_lark(self.text)
            else:
                grammar = xgr.Grammar.from_structural_tag(self.text)
        except (RuntimeError, ValueError, TypeError) as exc:  # XGrammar's parse errors, json's
            raise ServingError(f"invalid {self.kind}: {exc}") from None
        return printed_ebnf(grammar)


def legacy_structural_tag(structures: list[dict], triggers: list[str], *, at_least_one: bool = False) -> GrammarRequest:
    """The request of a structural tag in its older form (``{"structures": [{"begin", "schema", "end"}],
    "triggers": [...]}``, which SGLang and vLLM still take), made the current form with XGrammar's own
    ``StructuralTag.from_legacy_structural_tag``, as ``Grammar.from_structural_tag(tags, triggers)`` does.

    A structure's ``schema`` is a JSON Schema object. ``at_least_one`` is SGLang's flag (at least one
    tagged structure must occur).

    Raises
    ------
    KeyError, TypeError, ValueError, RuntimeError
        A structure without ``begin``, ``schema`` or ``end``, or a form XGrammar refuses.
    """
    import xgrammar as xgr

    items = [xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"]) for s in structures]
    tag = xgr.StructuralTag.from_legacy_structural_tag(items, triggers)
    if at_least_one:
        tag.format.at_least_one = True
    return GrammarRequest("structural_tag", tag.model_dump_json(indent=None))


def stop_policy_of(info: Any) -> Any:
    """How the XGrammar matchers over ``info`` (an ``xgrammar.TokenizerInfo``) read its stop ids: the
    signal, and under 0.2.9 their decoded text, which :func:`vocab_from_tokenizer_info` blanks
    (:mod:`cfgzip_lab.native.stop_policy`). Pass it to ``NativeEngine.matcher``."""
    from ..native.stop_policy import StopPolicy
    from ..xgrammar_version import at_least

    decoded = info.decoded_vocab
    texts = {int(i): bytes(decoded[i]) for i in info.stop_token_ids if 0 <= i < len(decoded) and decoded[i]}
    return StopPolicy(texts, False, at_least("0.2.9"))


def vocab_from_tokenizer_info(info: Any, *, name: str, extra_special: Iterable[int] = ()) -> VocabTable:
    """The token table of an ``xgrammar.TokenizerInfo``: its decoded bytes, with its special ids
    (and ``extra_special``) SPECIAL, its stop ids STOP and the ids past the tokenizer PADDING.

    Built from the TokenizerInfo the serving engine's XGrammar backend makes for the same
    tokenizer, our masks are over the same tokens as theirs (XGrammar's ``from_huggingface``
    keeps an added token such as ``<|im_start|>`` as text, ``vocab_from_tokenizer`` does not).
    """
    from ..vocab import vocab_from_bytes

    special = set(int(i) for i in info.special_token_ids) | set(int(i) for i in extra_special)
    stops = [int(i) for i in info.stop_token_ids]
    special -= set(stops)
    decoded = list(info.decoded_vocab)
    token_bytes = [b"" if i in special else bytes(b) for i, b in enumerate(decoded)]
    return vocab_from_bytes(
        token_bytes, stop_ids=stops, special_ids=sorted(special), vocab_size=int(info.vocab_size), name=name
    )


def _reason(exc: CfgzipError, ebnf: str) -> str:
    """The refusal as a client should read it: the errors only (a converted schema's unreachable-rule
    warnings would bury them), each with its line of the EBNF."""
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(f"{d.line}:{d.column}: {d.message} [{_line(ebnf, d.line)}]" for d in errors[:3])
    return str(exc)


def _line(text: str, number: int) -> str:
    lines = text.splitlines()
    line = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    return line if len(line) <= 120 else line[:117] + "..."


def _build_engine(ebnf: str, vocab: VocabTable, grammars: Any) -> NativeEngine:
    """The native engine of one EBNF: the per-request API's (memory, then disk, then front end,
    classing and σ_in index)."""
    if grammars is None:
        from ..cache.grammars import default_grammar_cache

        grammars = default_grammar_cache()
    return grammars.engine(ebnf, vocab, kind="ebnf")


@dataclass
class _Slot:
    """One grammar's entry: built once; requests that arrive meanwhile wait on ``ready``."""

    ready: threading.Event = field(default_factory=threading.Event)
    engine: NativeEngine | None = None
    error: str | None = None
    seconds: float = 0.0


class EngineCache:
    """Native engines by grammar for one vocabulary: an LRU of ``capacity`` grammars.

    :meth:`engine` is safe to call from several threads (SGLang compiles grammars on a thread
    pool): the first caller of a grammar builds it, the others wait for that build. A refused
    grammar is kept too (its reason, not an engine), so a client repeating it is answered at once.
    ``stats`` counts hits, builds (engines asked of ``grammars``, which may find them in memory
    or on disk) and refusals. ``grammars`` is the per-request API's cache
    (:class:`cfgzip_lab.cache.grammars.GrammarCache`; None: the process's default one).
    """

    def __init__(self, vocab: VocabTable, *, capacity: int = 64, grammars: Any = None) -> None:
        self.vocab = vocab
        self.capacity = int(capacity)
        self.grammars = grammars
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "builds": 0, "refused": 0}

    def __len__(self) -> int:
        return len(self._slots)

    def engine(self, request: GrammarRequest) -> NativeEngine:
        """The native engine of ``request``'s grammar; :class:`ServingError` with the reason if refused."""
        ebnf = request.to_ebnf()
        with self._lock:
            slot = self._slots.get(ebnf)
            if slot is not None:
                self._slots.move_to_end(ebnf)
                self.stats["hits"] += 1
                owner = False
            else:
                slot = self._slots[ebnf] = _Slot()
                owner = True
                while len(self._slots) > self.capacity:
                    self._slots.popitem(last=False)
        if owner:
            start = time.perf_counter()
            try:
                slot.engine = _build_engine(ebnf, self.vocab, self.grammars)
                self.stats["builds"] += 1
            except CfgzipError as exc:
                slot.error = f"cfgzip cannot serve this {request.kind}: {_reason(exc, ebnf)}"
                self.stats["refused"] += 1
            except Exception as exc:  # noqa: BLE001 - a bug must fail this request, not the server
                slot.error = f"cfgzip failed on this {request.kind}: {type(exc).__name__}: {exc}"
                self.stats["refused"] += 1
                with self._lock:  # not a property of the grammar: let a later request try again
                    if self._slots.get(ebnf) is slot:
                        del self._slots[ebnf]
            finally:
                slot.seconds = time.perf_counter() - start
                slot.ready.set()
        else:
            slot.ready.wait()
        if slot.engine is None:
            raise ServingError(slot.error)
        return slot.engine

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()


_REQUEST_KINDS = ("json_schema", "ebnf", "regex", "lark", "structural_tag")


def request_from_json(spec: Any, **options: Any) -> GrammarRequest:
    """A :class:`GrammarRequest` from ``{"json_schema": ...}``, ``{"ebnf": ...}``, ``{"regex": ...}``,
    ``{"lark": ...}`` or ``{"structural_tag": ...}`` (a schema or tag may be given as an object or as JSON text);
    :class:`ServingError` names what is wrong with anything else."""
    if not isinstance(spec, dict):
        raise ServingError(f"the cfgzip argument must be an object with one grammar, not {type(spec).__name__}")
    kinds = [k for k in _REQUEST_KINDS if k in spec]
    unknown = sorted(set(spec) - set(_REQUEST_KINDS))
    if unknown:
        raise ServingError(f"unknown cfgzip argument(s) {', '.join(map(repr, unknown))}")
    if len(kinds) != 1:
        raise ServingError(
            f"give exactly one of {', '.join(_REQUEST_KINDS)}" + (f" (got {', '.join(kinds)})" if kinds else "")
        )
    kind = kinds[0]
    value = spec[kind]
    if kind in ("json_schema", "structural_tag") and isinstance(value, (dict, list, bool)):
        value = json.dumps(value)
    return GrammarRequest(kind, value, **options)


_SHARED: dict[str, EngineCache] = {}
_SHARED_LOCK = threading.Lock()


def shared_engine_cache(vocab: VocabTable) -> EngineCache:
    """The process's engine cache for ``vocab`` (by fingerprint): backends and processors made
    for one model in one process (vLLM builds its processor per runner) share their grammars."""
    with _SHARED_LOCK:
        cache = _SHARED.get(vocab.fingerprint)
        if cache is None:
            cache = _SHARED[vocab.fingerprint] = EngineCache(vocab)
        return cache
