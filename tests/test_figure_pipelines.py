"""lab.figures.pipelines: the drawn formats are the ones each model's code rounds to."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import lab  # noqa: E402


def test_the_pipelines_name_each_models_formats():
    fmts = lab.figures.pipelines.draw_pipelines()
    plt.close("all")
    assert set(fmts) == {"standard FP16", "tiled FP16", "per-tensor FP8", "FA3 FP8"}
    assert fmts["standard FP16"]["S = QKᵀ/√d"] == "FP16"  # S stored in FP16
    for tiled in ("tiled FP16", "FA3 FP8"):  # S, m, l in FP32; only P rounded
        assert fmts[tiled]["S = QKᵀ/√d"].startswith("FP32")
    assert fmts["FA3 FP8"]["P"].startswith("e4m3")
    assert all(f["acc += P V"] == "FP32" and f["o"] == "FP16" for f in fmts.values())
