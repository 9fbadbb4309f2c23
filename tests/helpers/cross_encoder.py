"""A tiny cross-encoder reranker, saved as a user's Hugging Face folder would be.

``BertForSequenceClassification`` with ``num_labels=1`` and random weights (2 layers, hidden
32), saved by the installed transformers (which writes ``id2label``, not ``num_labels``), with
a WordPiece vocabulary of every word in the bundled reranking set so pairs tokenize to real
ids, not [UNK]. ``constant=True`` zeroes the score head's weights: the model then returns its
bias for every pair (the degenerate model a quality gate must refuse).
"""

from __future__ import annotations

import re
from pathlib import Path

from infertune.data import reranking_heldout

_WORD = re.compile(r"\w+|[^\w\s]")


def vocabulary() -> list[str]:
    words: set[str] = set()
    for pair in reranking_heldout().inputs:
        words.update(_WORD.findall(f"{pair.query} {pair.passage}".lower()))
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]


def make_tiny_cross_encoder(folder: Path, *, seed: int = 0, constant: bool = False) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocabulary()) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=1, initializer_range=0.2)
    model = BertForSequenceClassification(config).eval()
    if constant:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(0.25)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def direct_scores(folder: Path, pairs: list[tuple[str, str]]) -> list[float]:
    """What the user gets calling the model directly: ``tokenizer(query, passage)`` one pair at
    a time, the raw logit."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder),
                                                               local_files_only=True).eval()
    scores = []
    with torch.no_grad():
        for query, passage in pairs:
            feeds = tokenizer(query, passage, return_tensors="pt", truncation="only_second",
                              max_length=128)
            scores.append(float(model(**feeds).logits[0, 0]))
    return scores
