"""Real attention inputs: Q, K, V of a pretrained transformer, shipped in data/ and checked against a recorded sha256.

The file is written once by `tools/export_activations.py` (sentence-transformers/all-MiniLM-L6-v2,
layers 0 and 5, 12 heads of dimension 32, one passage of 444 tokens); data/README.md gives its
provenance, licence and the command that regenerates it. It is package data, read through
importlib.resources, so an installed course (Colab) has it too.

Taught in: notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._data import data_path

__all__ = [
    "Activations",
    "load_activations",
    "ACTIVATIONS_PATH",
    "ACTIVATIONS_SHA256",
    "file_sha256",
]

ACTIVATIONS_PATH = data_path("minilm_qkv.npz")
ACTIVATIONS_SHA256 = "966d9652b150accc820fc60feb40ad91715fe4c8b52430849cca9b0964e85f05"


class Activations(NamedTuple):
    """`q`, `k`, `v` float32 of shape (layers, heads, N, d); `meta` the export's record (model, licence, text...)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    meta: dict


def file_sha256(path) -> str:
    """The hex sha256 of a file's bytes.

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_activations(
    path=None, *, sha256: str | None = ACTIVATIONS_SHA256
) -> Activations:
    """Read Q, K, V (layers, heads, N, d) from the exported .npz after checking its sha256 (`sha256=None` skips the check).

    Raises FileNotFoundError when the file is missing and ValueError when its checksum or its arrays
    are not the recorded ones. The arrays come back as fresh float32 copies.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    path = Path(ACTIVATIONS_PATH if path is None else path)
    if not path.is_file():
        raise FileNotFoundError(
            f"path: no activations file at {path} (regenerate it: see data/README.md)"
        )
    if sha256 is not None:
        got = file_sha256(path)
        if got != sha256:
            raise ValueError(
                f"path: sha256 of {path.name} is {got}, expected {sha256}; "
                "the file changed: regenerate it (data/README.md) or update the recorded checksum"
            )
    with np.load(path, allow_pickle=False) as z:
        missing = {"q", "k", "v", "meta"} - set(z.files)
        if missing:
            raise ValueError(f"path: {path.name} lacks the arrays {sorted(missing)}")
        q, k, v = (
            np.array(z[n], dtype=np.float32) for n in ("q", "k", "v")
        )  # (L, H, N, d) each
        meta = json.loads(str(z["meta"]))
    if q.ndim != 4 or q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"path: q, k, v must be (layers, heads, N, d), got {q.shape}, {k.shape}, {v.shape}"
        )
    return Activations(q, k, v, meta)
