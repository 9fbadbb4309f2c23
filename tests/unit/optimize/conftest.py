"""A tiny BERT (2 layers, hidden 32) and tokenizer saved as a Hugging Face folder, built once
per session with fixed seeds, and a hardware description like this CI machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def make_tiny_bert(folder: Path) -> Path:
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
                        max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(str(folder), safe_serialization=True)
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


@pytest.fixture(scope="session")
def tiny_adapter(tiny_bert: Path):
    from infertune.models import load

    return load(tiny_bert, task="embedding")


def hardware(flags: list[str], gpus: int = 0, cores: int = 2) -> HardwareInfo:
    from infertune.hardware import GpuInfo

    return HardwareInfo(cpu_model="test cpu", logical_cores=cores, flags=flags,
                        gpus=[GpuInfo("test gpu", 16.0, "1.0") for _ in range(gpus)],
                        cxx_compiler="/usr/bin/g++", arch="x86_64")


@pytest.fixture
def vnni_cpu() -> HardwareInfo:
    return hardware(["avx2", "avx512f", "avx512_vnni", "avx512_bf16"])
