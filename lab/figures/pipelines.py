"""Where each model of notebook 07b's section 1 rounds: one row of boxes per model, the format of each
intermediate written in its box.

Taught in: notebooks/07_precision_in_attention.ipynb
"""

import matplotlib.pyplot as plt

STEPS = ("Q, K, V", "S = QKᵀ/√d", "P", "acc += P V", "o")

# (model, kernel, the format each step is held in); "·" marks a step the model does not round
PIPELINES = (
    (
        "standard FP16",
        "standard",
        ("FP16", "FP16", "FP16 (normalized)", "FP32", "FP16"),
    ),
    (
        "tiled FP16",
        "tiled",
        ("FP16", "FP32 (m, l too)", "FP16 (e^(S-m) ≤ 1)", "FP32", "FP16"),
    ),
    (
        "per-tensor FP8",
        "standard",
        ("e4m3, 1 scale", "FP16", "FP16, then e4m3", "FP32", "FP16"),
    ),
    (
        "FA3 FP8",
        "tiled, Q and K rotated",
        (
            "e4m3, 64-row scales",
            "FP32 (m, l too)",
            "e4m3 (256·P ≤ 256)",
            "FP32",
            "FP16",
        ),
    ),
)

_COLOUR = {"FP32": "#d9ead3", "FP16": "#fff2cc", "e4m3": "#f4cccc"}


def _colour(fmt: str) -> str:
    """Green for FP32, yellow for FP16, red for FP8: the format's first word picks it."""
    return next((c for key, c in _COLOUR.items() if fmt.startswith(key)), "#eeeeee")


def draw_pipelines(pipelines=PIPELINES) -> dict:
    """Four rows of boxes, Q, K, V → S → P → acc → o, each box coloured and labelled with the format the
    model holds that intermediate in. Returns {model: {step: format}}."""
    fig, ax = plt.subplots(figsize=(12, 0.95 * len(pipelines) + 0.8))
    width, gap = 2.1, 0.35
    for r, (model, kernel, fmts) in enumerate(pipelines):
        y = len(pipelines) - 1 - r
        ax.text(-0.2, y, f"{model}\n({kernel})", ha="right", va="center", fontsize=11)
        for c, (step, fmt) in enumerate(zip(STEPS, fmts)):
            x = c * (width + gap)
            box = plt.Rectangle(
                (x, y - 0.34), width, 0.68, fc=_colour(fmt), ec="0.3", lw=1
            )
            ax.add_patch(box)
            ax.text(
                x + width / 2, y + 0.13, step, ha="center", fontsize=10, weight="bold"
            )
            ax.text(x + width / 2, y - 0.17, fmt, ha="center", fontsize=9)
            if c:
                ax.annotate(
                    "",
                    (x, y),
                    (x - gap, y),
                    arrowprops=dict(arrowstyle="->", color="0.3"),
                )
    ax.set_xlim(-2.8, len(STEPS) * (width + gap))
    ax.set_ylim(-0.6, len(pipelines) - 0.4)
    ax.axis("off")
    ax.set_title(
        "Where each model rounds (green FP32, yellow FP16, red FP8 e4m3)", fontsize=12
    )
    fig.tight_layout()
    return {m: dict(zip(STEPS, f)) for m, _, f in pipelines}
