"""transformers integration: an offline model registry, grammar logits processors, generation.

Three pieces, each usable alone, one module each (the core never imports this package;
it is the only part of cfgzip_lab that needs torch and transformers, as XGrammar keeps
its own in ``contrib/hf.py``):

- :mod:`.models`: :func:`load_model` returns ``(model, tokenizer, vocab)`` for a
  registered name (``"smollm2"``) or a local Hugging Face model folder, offline;
  :func:`vocab_for` gives the vocabulary table of a model's logits.
- :mod:`.processors`: :class:`PlainLogitsProcessor` and :class:`CompressedLogitsProcessor`,
  transformers ``LogitsProcessor`` objects over XGrammar on the whole vocabulary (the
  oracle) and over the K class representatives (CFGzip); :class:`NativeLogitsProcessor` over the
  native displacement engine (no XGrammar at decode time); :func:`cached_classes`.
- :mod:`.generate`: :func:`constrained_generate`, ``model.generate`` with one of them,
  returning the text, the token ids and the per-step mask times.

>>> model, tokenizer, vocab = load_model("smollm2")                      # doctest: +SKIP
>>> constrained_generate(model, tokenizer, json_grammar, "A cat as JSON").text  # doctest: +SKIP
'{"name": "Whiskers", ...'
"""

from __future__ import annotations

from .generate import GenerationResult, constrained_generate, constrained_generate_batch, encode_prompt
from .models import MODEL_NAMES, ModelLoadError, default_device, default_dtype, load_model, model_cache_dir, vocab_for
from .processors import (
    CompressedLogitsProcessor,
    EngineKind,
    GrammarLogitsProcessor,
    NativeLogitsProcessor,
    PlainLogitsProcessor,
    cached_classes,
    clear_classes_cache,
    grammar_text_of,
)

__all__ = [
    "MODEL_NAMES",
    "ModelLoadError",
    "GenerationResult",
    "EngineKind",
    "GrammarLogitsProcessor",
    "PlainLogitsProcessor",
    "CompressedLogitsProcessor",
    "NativeLogitsProcessor",
    "load_model",
    "model_cache_dir",
    "default_device",
    "default_dtype",
    "vocab_for",
    "cached_classes",
    "clear_classes_cache",
    "grammar_text_of",
    "encode_prompt",
    "constrained_generate",
    "constrained_generate_batch",
]
