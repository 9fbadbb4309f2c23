"""A tiny random-weight chat model folder that `transformers serve` can load offline: a Llama
built from a config, a word-level tokenizer (every id decodes to one whole word, so a streamed
token is one content event) and a chat template. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

WORDS = ("the of and to in is was for on that with as by at from this be are or an it time "
         "model user data query answer fast slow report value system request").split()


VOCAB = {"<unk>": 0, **{f"▁{w}": i + 1 for i, w in enumerate(WORDS)}}


def build_tokenizer(folder: Path) -> Path:
    """The word-level tokenizer alone (one token per known word, <unk> for any other)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} "
                          "{% endfor %}")
    fast.save_pretrained(folder)
    return folder


def build_chat_model(folder: Path, *, hidden: int, layers: int, heads: int = 4,
                     seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tokenizer(folder)
    vocab = VOCAB
    torch.manual_seed(seed)
    # no end-of-sequence token: a random model would stop at it by chance, and the test wants
    # exactly max_tokens per request
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden,
                         intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=1024, bos_token_id=None, eos_token_id=None,
                         pad_token_id=0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
