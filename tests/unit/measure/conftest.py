"""Tiny models for the measure tests: an ONNX graph built with onnx.helper, a torch MLP, and a
text model (whitespace tokenizer + embedding bag) driven through the real TextAdapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infertune.models import ModelInfo, TensorAdapter, TextAdapter, TextPreprocess, load
from infertune.models.runners import TorchRunner


def write_tiny_onnx(path: Path, width: int = 16, seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Mul", ["s", "x"], ["m"]),
             helper.make_node("Tanh", ["m"], ["t"]),
             helper.make_node("Add", ["t", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_onnx(tmp_path_factory.mktemp("onnx") / "tiny.onnx")


@pytest.fixture(scope="session")
def tiny_onnx(tiny_onnx_path: Path) -> TensorAdapter:
    return load(tiny_onnx_path)


@pytest.fixture(scope="session")
def tiny_torch() -> TensorAdapter:
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                 torch.nn.Linear(16, 4)).eval()
    info = ModelInfo(id="tiny-mlp", version="0", kind="tensor", task="other", runtime="torch",
                     input_names=["input"])
    return TensorAdapter(info, TorchRunner(module, ["input"]),
                         {"input": np.zeros(8, dtype=np.float32)})


class WordTokenizer:
    """Whitespace tokenizer with [CLS]/[SEP] ids, enough for TextAdapter."""

    pad_token_id = 0

    def __call__(self, texts: list[str], truncation: bool = True, max_length: int | None = None,
                 **_: Any) -> dict[str, list[list[int]]]:
        out = []
        for text in texts:
            ids = [101] + [3 + (sum(map(ord, w)) % 90) for w in text.split()] + [102]
            if truncation and max_length is not None:
                ids = ids[:max_length]
            out.append(ids)
        return {"input_ids": out}


@pytest.fixture(scope="session")
def tiny_text() -> TextAdapter:
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(128, 16)
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.proj(self.emb(input_ids)) * attention_mask[..., None]

    torch.manual_seed(0)
    info = ModelInfo(id="tiny-text", version="0", kind="text", task="embedding",
                     runtime="torch", input_names=["input_ids", "attention_mask"],
                     max_length=32, max_position=64)
    runner = TorchRunner(Encoder().eval(), ["input_ids", "attention_mask"])
    return TextAdapter(info, runner, WordTokenizer(), TextPreprocess(max_length=32))


_SENTENCES = [
    "short one",
    "a somewhat longer sentence with a few more words in it",
    "fast inference matters",
    "the quarterly report shows revenue grew eight percent while costs stayed flat",
    "hi",
    "how do I reset my password",
]


@pytest.fixture()
def sentences() -> list[str]:
    return list(_SENTENCES)
