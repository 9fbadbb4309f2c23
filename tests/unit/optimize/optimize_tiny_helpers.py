"""Helpers for the optimize tests: a tiny BERT (2 layers, hidden 32) with its tokenizer saved
as a Hugging Face folder, simulated hardware, and a registry for fast compile tests."""

from __future__ import annotations

from pathlib import Path

from infertune.hardware import HardwareInfo

WORDS = ("the a is was fast slow model query answer user password reset report revenue "
         "grew costs stayed flat inference matters when users wait for every how do i my "
         "quarterly shows eight percent while").split()
SENTENCES = [
    "how do i reset my password",
    "the quarterly report shows revenue grew eight percent",
    "fast inference matters when users wait",
    "the model was slow",
    "every user query needs a fast answer while costs stayed flat",
    "revenue grew",
    "my password",
    "the report was fast and the model answer was slow for every user query",
] * 3


def make_tiny_bert(folder: Path, outlier: float | None = None) -> Path:
    """``outlier``: one weight of layer 1's FFN output set to this value, so per-tensor INT8
    of that one MatMul rounds its other weights to zero (a known most-sensitive layer)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64,
                        initializer_range=0.02 if outlier is None else 0.2)
    model = BertModel(config).eval()
    if outlier is not None:
        with torch.no_grad():
            model.encoder.layer[1].intermediate.dense.weight[0, 0] = outlier
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def hardware(flags: list[str], gpus: int = 0, cores: int = 2) -> HardwareInfo:
    from infertune.hardware import GpuInfo

    return HardwareInfo(cpu_model="test cpu", logical_cores=cores, flags=flags,
                        gpus=[GpuInfo("test gpu", 16.0, "1.0") for _ in range(gpus)],
                        cxx_compiler="/usr/bin/g++", arch="x86_64")


def tiny_registry() -> dict:
    """The default registry, with torch.compile on the 'eager' backend: the same pass code and
    recipe plumbing without minutes of inductor C++ compilation in unit tests (the real
    inductor build runs in tests/unit/optimize/test_torch_compile_inductor.py, marked slow).
    The OpenVINO passes are left out: they time shapes and run NNCF at build, and are built and
    checked once in test_passes_openvino.py."""
    from functools import partial

    from infertune.optimize.passes import REGISTRY
    from infertune.optimize.passes.registry import Registry
    from infertune.optimize.passes.torch_compile import TorchCompilePass

    kept = Registry({e.name: e for e in REGISTRY.entries() if not e.name.startswith("openvino_")})
    return kept | {"torch_compile": partial(TorchCompilePass, backend="eager")}
