"""Models: the Adapter contract (preprocess -> forward -> postprocess) and the loaders."""

from infertune.models.adapter import Adapter, ModelInfo, ModelInputs, Runner
from infertune.models.loaders import BUILTIN, load, minilm_path
from infertune.models.tensor import TensorAdapter
from infertune.models.text import TextAdapter, TextPreprocess

__all__ = ["Adapter", "BUILTIN", "ModelInfo", "ModelInputs", "Runner", "TensorAdapter",
           "TextAdapter", "TextPreprocess", "load", "minilm_path"]
