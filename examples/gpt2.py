"""Hugging Face's GPT-2 built from a small config (no download): its forward returns a
`CausalLMOutputWithCrossAttentions`, whose `.logits` the workbench takes; its attention and MLP
layers are `transformers.pytorch_utils.Conv1D` (a Linear with its weight transposed) and its
output head is tied to the token embedding.

    workbench run --model examples/gpt2.py:build --set data.name=text
"""

from transformers import GPT2Config, GPT2LMHeadModel


def build(vocab_size, seq_len, width: int = 64, layers: int = 2, heads: int = 2):
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=seq_len,
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        use_cache=False,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)
