"""Small Hugging Face checkpoints the tests save themselves (random weights)."""
from __future__ import annotations

import pytest


def small_config(kind: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    common = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if kind == "llama":
        return LlamaConfig(**common, attention_bias=True, tie_word_embeddings=True)
    if kind == "qwen2":  # q/k/v biases
        return Qwen2Config(**common, tie_word_embeddings=False)
    # Mistral with a sliding window shorter than the sequences
    return MistralConfig(**common, sliding_window=8)


def tiny_checkpoint(path, max_positions: int = 256) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM
    cfg = small_config("llama")
    cfg.max_position_embeddings = max_positions
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
