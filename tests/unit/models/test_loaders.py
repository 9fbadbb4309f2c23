"""Every loader on a tiny model built here: HF folder (embedding, classification), .onnx,
TorchScript (with and without its example sidecar), entry point, pickled module (consent)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from infertune.errors import IncompatibleInputError, ModelLoadError
from infertune.models import TensorAdapter, TextAdapter, load  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "fast", "slow", "##s", "##ing"]
SENTENCES = ["the cat sat on the mat", "a dog ran", "cats sat fast on a slow mat mat mat"]


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def _tiny_bert(folder: Path, classify: bool) -> Path:
    torch.manual_seed(0)
    folder.mkdir(parents=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=3,
    )
    cls = transformers.BertForSequenceClassification if classify else transformers.BertModel
    cls(config).eval().save_pretrained(folder)
    transformers.BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bert")
    return {"embed": _tiny_bert(root / "embed", classify=False),
            "classify": _tiny_bert(root / "classify", classify=True)}


def test_hf_folder_as_embedding_matches_manual_mean_pooling(bert_dirs: dict[str, Path]) -> None:
    adapter = load(bert_dirs["embed"])
    assert isinstance(adapter, TextAdapter)
    assert adapter.info.task == "embedding" and adapter.info.kind == "text"
    assert adapter.info.max_length == 64 and adapter.info.max_position == 64
    assert adapter.info.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    inputs = adapter.preprocess(SENTENCES)
    assert inputs["input_ids"].shape == inputs["attention_mask"].shape
    assert inputs["attention_mask"].sum(axis=1).tolist() == adapter.token_lengths(SENTENCES)
    vectors = np.stack(adapter.postprocess(adapter.forward(inputs), inputs))
    assert vectors.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # reference: the model on each sentence alone (no padding), mean over tokens, normalised
    model = transformers.BertModel.from_pretrained(bert_dirs["embed"]).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(bert_dirs["embed"])
    for row, sentence in enumerate(SENTENCES):
        with torch.no_grad():
            states = model(**tok(sentence, return_tensors="pt")).last_hidden_state[0]
        ref = states.mean(dim=0)
        ref = (ref / ref.norm()).numpy()
        np.testing.assert_allclose(vectors[row], ref, atol=1e-5)


def test_hf_folder_as_classification(bert_dirs: dict[str, Path]) -> None:
    adapter = load(bert_dirs["classify"])
    assert adapter.info.task == "classification"
    probs = adapter.predict(SENTENCES[:2])
    assert len(probs) == 2 and all(p.shape == (3,) for p in probs)
    np.testing.assert_allclose([p.sum() for p in probs], 1.0, atol=1e-6)
    forced = load(bert_dirs["embed"], task="embedding")
    assert forced.info.task == "embedding"


def test_text_adapter_rejects_bad_inputs(bert_dirs: dict[str, Path]) -> None:
    adapter = load(bert_dirs["embed"])
    for bad in ("just a string", [], ["ok", 3], None):
        with pytest.raises(IncompatibleInputError):
            adapter.preprocess(bad)


@pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export")
def test_onnx_file(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Tiny().eval()
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(module, (torch.zeros(1, 4),), str(path), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      dynamo=False)
    adapter = load(path)
    assert isinstance(adapter, TensorAdapter)
    assert adapter.info.runtime == "onnxruntime" and adapter.info.input_names == ["x"]
    assert adapter.example["x"].shape == (4,) and adapter.example["x"].dtype == np.float32
    rows = [np.arange(4, dtype=np.float64) * k for k in range(3)]  # cast to the graph's float32
    got = np.stack(adapter.predict(rows))
    with torch.no_grad():
        want = module(torch.tensor(np.stack(rows), dtype=torch.float32)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    with pytest.raises(IncompatibleInputError, match="shape"):
        adapter.preprocess([np.zeros(5)])
    with pytest.raises(IncompatibleInputError):
        adapter.preprocess([np.zeros(4), np.zeros((2, 4))])


def _traced(tmp_path: Path) -> tuple[Path, Tiny]:
    torch.manual_seed(0)
    module = Tiny().eval()
    path = tmp_path / "tiny.pt"
    torch.jit.trace(module, torch.zeros(1, 4)).save(str(path))
    return path, module


def test_torchscript_with_example_sidecar(tmp_path: Path) -> None:
    path, module = _traced(tmp_path)
    np.save(tmp_path / "tiny.example.npy", np.zeros(4, dtype=np.float32))
    adapter = load(path)
    assert adapter.info.runtime == "torch" and adapter.info.id == "tiny"
    samples = adapter.sample_inputs(3)
    got = np.stack(adapter.predict(samples))
    with torch.no_grad():
        want = module(torch.from_numpy(np.stack(samples))).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert len(adapter.info.version) == 12


def test_torchscript_without_sidecar_says_how_to_fix(tmp_path: Path) -> None:
    path, _ = _traced(tmp_path)
    with pytest.raises(ModelLoadError, match=r"tiny\.example\.npy"):
        load(path)


def test_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "tinypkg_loaders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "factory.py").write_text(textwrap.dedent("""
        import torch

        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.zeros(4)

        def wrong():
            return "not a model"

        def broken():
            raise RuntimeError("boom")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        adapter = load("tinypkg_loaders.factory:make")
        assert adapter.info.id == "make" and adapter.info.input_names == ["input"]
        out = adapter.predict([np.ones(4, dtype=np.float32)])
        assert out[0].shape == (2,)
        with pytest.raises(ModelLoadError, match="must return"):
            load("tinypkg_loaders.factory:wrong")
        with pytest.raises(ModelLoadError, match="boom"):
            load("tinypkg_loaders.factory:broken")
        with pytest.raises(ModelLoadError, match="not found"):
            load("tinypkg_loaders.factory:absent")
    finally:
        for name in [n for n in sys.modules if n.startswith("tinypkg_loaders")]:
            del sys.modules[name]


def test_pickled_module_needs_consent(tmp_path: Path) -> None:
    path = tmp_path / "pickled.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(4, 2)), str(path))
    np.save(tmp_path / "pickled.example.npy", np.zeros(4, dtype=np.float32))
    with pytest.raises(ModelLoadError, match="trust-remote-code"):
        load(path)
    adapter = load(path, trust_remote_code=True)
    assert adapter.predict([np.zeros(4, dtype=np.float32)])[0].shape == (2,)


def test_state_dict_and_garbage_torch_files(tmp_path: Path) -> None:
    weights = tmp_path / "weights.pt"
    torch.save(Tiny().state_dict(), str(weights))
    with pytest.raises(ModelLoadError, match="state dict"):
        load(weights)
    garbage = tmp_path / "garbage.pt"
    garbage.write_text("not a model")
    for trust in (False, True):
        with pytest.raises(ModelLoadError):
            load(garbage, trust_remote_code=trust)


@pytest.mark.parametrize("ref", ["/no/such/model", "no_such_pkg_xyz.mod:factory", "model.h5"])
def test_bad_references(ref: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if ref == "model.h5":
        (tmp_path / ref).write_text("keras")
    with pytest.raises(ModelLoadError):
        load(ref)


def test_broken_onnx_and_broken_hf_folder(tmp_path: Path) -> None:
    onnx_path = tmp_path / "broken.onnx"
    onnx_path.write_bytes(b"not a graph")
    with pytest.raises(ModelLoadError, match="ONNX"):
        load(onnx_path)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ModelLoadError):
        load(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        load(folder)


def test_tensor_adapter_input_errors(tmp_path: Path) -> None:
    path, _ = _traced(tmp_path)
    np.save(tmp_path / "tiny.example.npy", np.zeros(4, dtype=np.float32))
    adapter = load(path)
    bad_inputs = (np.zeros(4), [], "text", [np.zeros((2, 2))], [["a", "b", "c", "d"]],
                  [{"y": 1}], [np.zeros(4), np.zeros(5)])
    for bad in bad_inputs:
        with pytest.raises(IncompatibleInputError):
            adapter.preprocess(bad)


def test_with_runner_swaps_runner_and_accepts_info_overrides(tmp_path: Path) -> None:
    path, _ = _traced(tmp_path)
    np.save(tmp_path / "tiny.example.npy", np.zeros(4, dtype=np.float32))
    adapter = load(path)
    copy = adapter.with_runner(adapter.runner, id="variant-1", precision="int8-dynamic")
    assert copy.info.id == "variant-1" and copy.info.precision == "int8-dynamic"
    assert copy.info.runtime == "torch" and adapter.info.id == "tiny"
    np.testing.assert_array_equal(np.stack(copy.predict([np.ones(4, np.float32)])),
                                  np.stack(adapter.predict([np.ones(4, np.float32)])))
