"""A cross-encoder saved by the installed transformers: detected as reranking from its head
(``id2label`` with one entry, no ``num_labels``), scored on (query, passage) pairs exactly as
``tokenizer(query, passage)`` and the model called directly, never through a softmax."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cross_encoder import direct_scores, make_tiny_cross_encoder

from infertune.data.text_inputs import TextPair, as_text_input, text_inputs
from infertune.errors import IncompatibleInputError, ModelLoadError
from infertune.models import TextAdapter, load
from infertune.models.loaders import _hf_task

PAIRS = [("what is the capital of france", "Paris is the capital of France."),
         ("totally unrelated", "bananas are yellow"),
         ("how do I reset my password", "Open Settings, choose Security and press Reset password.")]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "model")


def test_saved_config_has_no_num_labels_and_is_read_as_reranking(reranker: Path) -> None:
    config = json.loads((reranker / "config.json").read_text())
    assert "num_labels" not in config and len(config["id2label"]) == 1  # what transformers writes
    adapter = load(reranker)
    assert isinstance(adapter, TextAdapter) and adapter.info.task == "reranking"


def test_scores_match_the_model_called_directly_and_differ(reranker: Path) -> None:
    adapter = load(reranker)
    forms = [list(PAIRS[0]), {"query": PAIRS[1][0], "passage": PAIRS[1][1]},
             {"text": PAIRS[2][0], "text_pair": PAIRS[2][1]}]
    scores = adapter.predict(forms)
    np.testing.assert_allclose(scores, direct_scores(reranker, PAIRS), atol=1e-5)
    assert len({round(s, 6) for s in scores}) == 3  # not a constant (the softmax bug gave 1.0)


def test_pairs_are_encoded_with_segment_ids_and_the_passage_truncated(reranker: Path) -> None:
    adapter = load(reranker)
    feeds = adapter.preprocess([TextPair("capital of france", "paris is the capital")])
    types = feeds["token_type_ids"][0]
    ids = feeds["input_ids"][0]
    sep = adapter.tokenizer.sep_token_id
    first_sep = int(np.flatnonzero(ids == sep)[0])
    assert types[: first_sep + 1].tolist() == [0] * (first_sep + 1)  # [CLS] query [SEP]
    assert set(types[first_sep + 1:].tolist()) == {1}  # passage [SEP]
    long_passage = " ".join(["paris"] * 400)
    cut = adapter.preprocess([TextPair("capital of france", long_passage)])
    assert cut["input_ids"].shape[1] == adapter.pre.max_length  # the passage was cut
    assert (cut["token_type_ids"][0] == 0).sum() == first_sep + 1  # the query kept whole
    long_query = " ".join(["capital"] * 400)  # only_second cannot cut it: longest_first does
    both = adapter.preprocess([TextPair(long_query, "paris"), TextPair("france", "paris")])
    assert both["attention_mask"].sum(axis=1).max() == adapter.pre.max_length
    assert adapter.token_lengths([("a", "b")]) == [len(adapter.tokenizer("a", "b")["input_ids"])]


def test_a_single_string_to_a_reranker_is_a_one_line_error(reranker: Path) -> None:
    adapter = load(reranker)
    with pytest.raises(IncompatibleInputError, match="takes \\[query, passage\\] pairs") as err:
        adapter.predict(["what is the capital of france [SEP] Paris is the capital."])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("item", "message"), [
    (["only one"], "send a string or a \\[query, passage\\] pair"),
    (["a", 2], "send a string or a \\[query, passage\\] pair"),
    ({"query": "q"}, "keys \\['query'\\]"),
    ({"query": "q", "passage": 3}, "must both be strings"),
    (None, "NoneType"),
])
def test_malformed_pairs(item: object, message: str) -> None:
    with pytest.raises(IncompatibleInputError, match=message):
        as_text_input(item)


def test_what_each_task_accepts() -> None:
    assert text_inputs([["q", "p"]], "classification") == [TextPair("q", "p")]
    assert text_inputs(["text"], "regression") == ["text"]
    with pytest.raises(IncompatibleInputError, match="takes one string per input"):
        text_inputs([["q", "p"]], "embedding")


def _config(**extra: object) -> dict[str, object]:
    return {"architectures": ["BertForSequenceClassification"], **extra}


@pytest.mark.parametrize(("config", "task"), [
    ({"architectures": ["BertModel"]}, "embedding"),
    (_config(id2label={"0": "LABEL_0"}), "reranking"),
    (_config(num_labels=1), "reranking"),
    (_config(id2label={"0": "neg", "1": "pos"}), "classification"),
    (_config(), "classification"),  # transformers' default: two labels
    (_config(id2label={"0": "a", "1": "b"}, problem_type="regression"), "regression"),
    (_config(id2label={"0": "LABEL_0"}, problem_type="regression"), "reranking"),
    # sentence-transformers CrossEncoder folders mark their config (v4+ and older releases)
    (_config(id2label={"0": "a", "1": "b"},
             sentence_transformers={"activation_fn": "torch.nn.modules.linear.Identity"}),
     "reranking"),
    (_config(id2label={"0": "a", "1": "b"}, sbert_ce_default_activation_function="x"),
     "reranking"),
])
def test_task_follows_the_checkpoint(config: dict[str, object], task: str,
                                     tmp_path: Path) -> None:
    assert _hf_task(tmp_path, config) == task


def test_explicit_task_wins_unless_it_contradicts_the_head(tmp_path: Path) -> None:
    one = _config(id2label={"0": "LABEL_0"})
    assert _hf_task(tmp_path, one, "regression") == "regression"
    assert _hf_task(tmp_path, one, "embedding") == "embedding"
    with pytest.raises(ModelLoadError, match="softmax over one logit is 1.0") as err:
        _hf_task(tmp_path, one, "classification")
    assert "\n" not in str(err.value)
    with pytest.raises(ModelLoadError, match="has 3 output logits"):
        _hf_task(tmp_path, _config(id2label={"0": "a", "1": "b", "2": "c"}), "reranking")
    with pytest.raises(ModelLoadError, match="no sequence-classification head"):
        _hf_task(tmp_path, {"architectures": ["BertModel"]}, "reranking")
    with pytest.raises(ModelLoadError, match="cannot be served"):
        _hf_task(tmp_path, one, "generation")


def test_builtin_refuses_a_task_it_cannot_be() -> None:
    with pytest.raises(ModelLoadError, match="sentence-embedding model"):
        load("minilm", task="reranking")
