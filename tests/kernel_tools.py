"""Test tools shared by the native kernel's test modules: the llama3 vocabulary (or a skip where
this machine lacks its offline files) and the reference gather a class set's mask is checked against."""

from __future__ import annotations

import numpy as np
import pytest


def llama3_or_skip():
    """The llama3 vocabulary; the test is skipped (not failed) on a machine without its files."""
    from cfgzip_lab.vocab_sources import load_vocab

    try:
        return load_vocab("llama3")
    except Exception as err:  # pragma: no cover - depends on the machine's offline files
        pytest.skip(f"llama3 vocabulary unavailable: {err}")


def gathered_mask(class_of: np.ndarray, num_classes: int, class_set: int) -> np.ndarray:
    """The reference: allowed[t] = class_set bit class_of[t], packed in int32 words (bits past V zero)."""
    bits = np.unpackbits(
        np.frombuffer(class_set.to_bytes(-(-num_classes // 8), "little"), np.uint8), bitorder="little"
    )[:num_classes]
    allowed = bits[class_of]
    return np.packbits(np.r_[allowed, np.zeros(-class_of.size % 32, np.uint8)], bitorder="little").view(np.int32)
