"""Writing variants: folder layout, hashes, library versions, and the build-time check.

The manifest schema and the loader live in models/variant.py (models/ may not import
optimize/); this module writes folders that loader accepts, and checks each one on build.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.errors import InternalError
from infertune.jsonfile import write_json
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.models.variant import (
    MANIFEST,
    Agreement,
    Manifest,
    manifest_digest,
    read_manifest,
    sha256_file,
)
from infertune.serial import Serial

LIBRARIES = ("torch", "onnxruntime", "onnx", "transformers", "torchao", "numpy")


@dataclass
class Variant:
    """A built variant folder and its manifest."""

    path: Path
    manifest: Manifest

    @property
    def id(self) -> str:
        return self.manifest.id

    def load(self) -> Adapter:
        return load(self.path)

    @classmethod
    def open(cls, path: str | Path) -> Variant:
        return cls(Path(path), read_manifest(Path(path)))


@dataclass
class VariantResult(Serial):
    """What one pass produced: a built variant, or the reason it was skipped."""

    pass_name: str
    status: Literal["built", "skipped"]
    reason: str | None = None
    path: str | None = None
    seconds: float = 0.0  # before manifest: the order run files have always had
    manifest: Manifest | None = None

    @property
    def built(self) -> bool:
        return self.status == "built"


def fresh_dir(out_dir: Path, variant_id: str) -> Path:
    folder = Path(out_dir) / variant_id
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link big immutable files when the filesystem allows (hashes still cover them)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_link_or_copy_file)
    else:
        _link_or_copy_file(str(src), str(dst))


def _link_or_copy_file(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def library_versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def finalize(folder: Path, manifest: Manifest) -> Variant:
    """Hash every file in the folder into the manifest, then write manifest.json."""
    folder = Path(folder)
    manifest.files = {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).as_posix() != MANIFEST
    }
    manifest.libraries = manifest.libraries or library_versions()
    write_manifest(folder, manifest)
    return Variant(folder, manifest)


def write_manifest(folder: Path, manifest: Manifest) -> None:
    data = manifest.to_dict()
    data["manifest_sha256"] = manifest_digest(data)
    write_json(Path(folder) / MANIFEST, data, sort_keys=True)


def predict_rows(adapter: Adapter, inputs: Sequence[Any], batch_size: int = 16) -> np.ndarray:
    """Final (postprocessed) outputs as a 2-D float array, one row per input."""
    rows: list[np.ndarray] = []
    for start in range(0, len(inputs), batch_size):
        out = adapter.predict(list(inputs[start:start + batch_size]))
        rows.extend(np.asarray(r, dtype=np.float64).reshape(-1) for r in out)
    return np.stack(rows)


def agreement(reference: np.ndarray, outputs: np.ndarray) -> Agreement:
    """Per-row cosine and max abs diff of ``outputs`` against ``reference`` (same shape)."""
    if reference.shape != outputs.shape:
        raise InternalError(f"agreement needs equal shapes; got {reference.shape} "
                            f"and {outputs.shape}")
    ref = reference.astype(np.float64)
    out = outputs.astype(np.float64)
    if ref.ndim == 2 and ref.shape[1] == 1 and len(ref) >= 2:
        # one score per row (a reranker): the cosine of two 1-element rows is only their sign
        # agreement, so the rows' scores are compared as vectors, centred: their Pearson
        # correlation stands for every row's cosine
        a, b = ref[:, 0] - ref[:, 0].mean(), out[:, 0] - out[:, 0].mean()
        r = float((a * b).sum() / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))
        cosine = np.full(len(ref), r)
    else:
        norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1)
        cosine = (ref * out).sum(axis=1) / np.clip(norms, 1e-30, None)
    return Agreement(n_samples=int(ref.shape[0]), max_abs_diff=float(np.abs(ref - out).max()),
                     mean_cosine=float(cosine.mean()), min_cosine=float(cosine.min()),
                     output_shape=list(out.shape))
