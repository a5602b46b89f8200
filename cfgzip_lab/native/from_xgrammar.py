"""The native engine for an XGrammar ``CompiledGrammar``: XGrammar's constructor, our engine.

A server (or XGrammar's own test suite) makes ``xgrammar.GrammarMatcher(compiled_grammar, ...)``;
:func:`native_matcher` takes the same arguments and returns a matcher with XGrammar's interface
(:class:`cfgzip_lab.xgrammar_compat.GrammarMatcher` over a native matcher): the grammar is read
back from ``str(compiled_grammar.grammar)`` (XGrammar's own EBNF print), the vocabulary from its
``TokenizerInfo`` (decoded bytes, stop and special ids, vocabulary size), then classed and
indexed once per (grammar, vocabulary) and kept for later matchers. The matcher reads a stop id
as XGrammar does (:mod:`.stop_policy`): the signal, its text from the ``TokenizerInfo`` under 0.2.9,
and ``terminate_without_stop_token``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..xgrammar_compat import GrammarMatcher
    from .engine import NativeEngine

__all__ = ["native_engine_for", "native_matcher"]

# key -> the engine and its stop ids' texts as the TokenizerInfo decodes them (the engine's own
# vocabulary blanks them, as every cfgzip vocabulary does)
_ENGINES: dict[tuple, tuple[NativeEngine, dict[int, bytes]]] = {}
_MAX_ENGINES = 64


def native_engine_for(compiled_grammar: Any, stop_token_ids: list[int] | None = None) -> NativeEngine:
    """The native engine (cached) for an ``xgrammar.CompiledGrammar``, stop ids overridden if given."""
    return _engine_and_stop_texts(compiled_grammar, stop_token_ids)[0]


def _engine_and_stop_texts(
    compiled_grammar: Any, stop_token_ids: list[int] | None
) -> tuple[NativeEngine, dict[int, bytes]]:
    from ..grammar.printed import printed_ebnf
    from ..pipeline import build_classes, compile_grammar
    from ..vocab import vocab_from_bytes
    from .engine import build_native_engine

    info = compiled_grammar.tokenizer_info
    text = printed_ebnf(compiled_grammar.grammar)
    stops = list(info.stop_token_ids) if stop_token_ids is None else list(stop_token_ids)
    decoded = [bytes(b) for b in info.decoded_vocab]
    key = (text, tuple(decoded), tuple(stops), tuple(info.special_token_ids), int(info.vocab_size))
    got = _ENGINES.get(key)
    if got is None:
        vocab = vocab_from_bytes(
            decoded,
            stop_ids=stops,
            special_ids=[i for i in info.special_token_ids if i not in stops],
            vocab_size=int(info.vocab_size),
            name="xgrammar-tokenizer-info",
        )
        compiled = compile_grammar(text)
        classing = build_classes(compiled, vocab)
        engine = build_native_engine(compiled, vocab, classing.classes, classing=classing)
        texts = {i: decoded[i] for i in stops if 0 <= i < len(decoded) and decoded[i]}
        if len(_ENGINES) >= _MAX_ENGINES:
            _ENGINES.clear()
        got = _ENGINES[key] = (engine, texts)
    return got


def native_matcher(
    compiled_grammar: Any,
    *,
    override_stop_tokens: int | list[int] | None = None,
    terminate_without_stop_token: bool = False,
    max_rollback_tokens: int = -1,
    default_temperature: float | None = None,
) -> GrammarMatcher:
    """``xgrammar.GrammarMatcher(compiled_grammar, ...)`` served by the native engine.

    Parameters
    ----------
    compiled_grammar
        An ``xgrammar.CompiledGrammar``.
    override_stop_tokens
        As XGrammar: stop ids instead of the tokenizer's.
    terminate_without_stop_token
        As XGrammar: the matcher is terminated once the grammar is complete, and refuses a stop
        token read as the signal (see :mod:`.stop_policy`).
    default_temperature
        Not supported (NotImplementedError): the native matcher sets no temperature.
    max_rollback_tokens
        Ignored, as XGrammar ignores it (rollback is unlimited).

    Raises
    ------
    ValueError
        ``compiled_grammar`` is not compiled (XGrammar's check and message).
    RuntimeError
        An override stop id outside ``[0, vocab_size)`` (XGrammar's check).
    NotImplementedError
        For ``default_temperature``.
    """
    import xgrammar

    from ..xgrammar_compat import GrammarMatcher
    from ..xgrammar_version import at_least
    from .stop_policy import StopPolicy

    if not isinstance(compiled_grammar, xgrammar.CompiledGrammar):
        raise ValueError("The grammar should be compiled before passing it to GrammarMatcher.")
    if default_temperature is not None:
        raise NotImplementedError("default_temperature is not supported by the native matcher")
    if isinstance(override_stop_tokens, int):
        override_stop_tokens = [override_stop_tokens]
    size = int(compiled_grammar.tokenizer_info.vocab_size)
    for token in override_stop_tokens or ():
        if not 0 <= token < size:  # XGrammar's check (stop ids are written into the bitmask)
            raise RuntimeError(f"The override stop token id {token} is out of the vocabulary range [0, {size})")
    engine, texts = _engine_and_stop_texts(compiled_grammar, override_stop_tokens)
    policy = StopPolicy(texts, bool(terminate_without_stop_token), at_least("0.2.9"))
    return GrammarMatcher(engine.matcher(policy))
