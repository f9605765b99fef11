"""`lab`: the engine of "FlashAttention from first principles".

The notebooks are thin; everything they compute lives here, tested. Each public name is listed below
with the module that defines it, and is imported from there on first use (PEP 562): `import lab` loads
nothing but this map, so a numpy-only notebook never waits for torch, Triton, matplotlib or ipywidgets.
Each module's docstring says what it teaches.

Where each notebook's code lives (its figures in lab/figures/, its sliders in lab/widgets/ and its
exercise checks in lab/checks/ carry the name of the chapter's module):

  every notebook                  lab/notebook.py, lab/exercises.py
  00 the memory wall              lab/memory.py, lab/hardware.py
  01-02 softmax                   lab/softmax.py, lab/overflow.py, lab/softmax_steps.py, lab/access_count.py
  03 one pass                     lab/states.py, lab/one_pass.py
  04 merge order                  lab/merge.py, lab/distributed.py
  05-06 tiling, FlashAttention-2  lab/tiling.py
  the kernel ladder               lab/rules.py, lab/kernels/ (rungs 0-6), lab/attention.py, lab/torch_kernels.py
  07 precision                    lab/precision.py, lab/precision_experiments.py, lab/precision_fa3.py, lab/activations.py
  08 hardware runs                lab/measure/
  09 backward                     lab/backward.py
  10 decoding and GQA             lab/decoding.py
  11 masks                        lab/masks.py, lab/mask_experiments.py, lab/checks/masks.py

The kernels form one ladder, rung by rung, in lab/kernels/ (its docstring tells what each rung changes).
"""

from __future__ import annotations

import importlib
import os
import sys

# Triton fixes, at its first import, whether its kernels are compiled or interpreted. Without an NVIDIA
# driver the course steps through its Triton kernels in the interpreter, so the variable is set here,
# before anything (torch included) can import Triton; lab/kernels/rung6_triton.py repeats the check with
# torch.cuda once torch is loaded. An existing value is kept.
if "triton" not in sys.modules and not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

__version__ = "0.1.0"

# module (relative to lab) -> the public names it defines, grouped by notebook
_NAMES: dict[str, tuple[str, ...]] = {
    # every notebook
    "notebook": (
        "setup_notebook",
        "SEED",
        "measured",
        "folded",
        "report",
        "format_table",
        "MEASURED_OPEN",
        "MEASURED_CLOSE",
    ),
    "exercises": (
        "check",
        "diagnose",
        "describe_case",
    ),
    # 00 the memory wall
    "memory": (
        "peak_bytes",
        "attention_bytes",
        "measure_peak_memory",
        "SOFTMAX_OPS_PER_ELEMENT",
        "attainable_flops",
        "attention_traffic",
        "chip_rows",
        "traffic_rows",
        "bound_rows",
    ),
    "hardware": (
        "CHIPS",
        "SOURCES",
        "chip",
        "exp_rate",
        "fp32_op_rate",
        "ridge_point",
        "hardware_table",
        "estimated_bytes",
        "loop_overhead",
        "intensity_lines",
    ),
    # 01-02 softmax
    "softmax": (
        "softmax_naive",
        "softmax_safe",
        "softmax_online",
        "online_normalizer",
    ),
    "overflow": (
        "SOFTMAX_DTYPES",
        "GAPS",
        "WORKS_EPS",
        "exp_limits",
        "works_tolerance",
        "first_exp_overflow",
        "score_row",
        "softmax_error",
        "softmax_broken",
        "naive_vs_safe",
        "first_broken_score",
        "overflow_table",
        "overflow_rows",
    ),
    "softmax_steps": (
        "online_trace",
        "trace_table",
        "demo_scores",
        "online_vs_safe",
    ),
    "access_count": (
        "CountingArray",
        "AccessCount",
        "count_accesses",
        "COUNTED_METHODS",
    ),
    # 03 one pass
    "states": (
        "SoftmaxState",
        "empty_state",
        "partial_state",
        "merge_states",
        "finalize",
    ),
    "one_pass": (
        "SlowRows",
        "RowRun",
        "ROW_METHODS",
        "attention_row_three_pass",
        "attention_row_two_pass",
        "attention_row_one_pass",
        "compare_row_methods",
        "one_pass_attention",
        "one_pass_buffers",
    ),
    # 04 merge order
    "merge": (
        "ORDERS",
        "chunk_bounds",
        "random_chunk_bounds",
        "merge_plan",
        "merge_depth",
        "reduce_states",
        "chunk_state",
        "split_states",
        "merge_output_pair",
        "merge_outputs",
        "flash_decoding",
    ),
    "distributed": (
        "sequence_parallel_attention",
        "free_port",
        "WORLD_SIZES",
        "START_METHODS",
    ),
    # 05-06 tiling, FlashAttention-2
    "tiling": (
        "SRAM_BYTES",
        "HARDWARE",
        "cpu_l2_bytes",
        "sram_sizes",
        "fa_block_sizes",
        "step_footprint",
        "onchip_footprint",
        "onchip_fits",
        "warp_split_exchange",
        "tile_grid",
        "tile_counts",
        "causal_tiles_formula",
        "standard_traffic",
        "flash_counts",
        "flash_traffic_bytes",
        "theorem2_bytes",
        "flop_split",
        "gpu_time_share",
        "flash_peak_bytes",
    ),
    # the kernel ladder
    "rules": (
        "causal_key_end",
        "causal_mask",
        "safe_exp_shift",
    ),
    "kernels": (
        "attention_reference",
        "attention_naive",
        "flash_attention_numpy",
        "VARIANTS",
    ),
    "kernels.rung4_torch_fa2": ("torch_default_blocks",),
    "torch_kernels": (
        "flash_attention_torch",
        "flash_attention_torch_forward",
        "flash_attention_torch_backward",
        "attention_torch_naive",
        "FlashAttention",
    ),
    "kernels.rung6_triton": (
        "flash_attention_triton",
        "triton_status",
        "TritonUnavailableError",
        "triton_tile_kinds",
        "triton_kernel_source",
        "triton_traffic",
    ),
    "kernels.rung6_triton_backward": (
        "flash_attention_triton_backward",
        "TritonFlashAttention",
    ),
    # 07 precision
    "precision": (
        "round_to",
        "truncate_tf32",
        "FORMATS",
        "format_info",
    ),
    "precision_experiments": (
        "gaussian_qkv",
        "relative_error",
        "p_rounding_error",
        "p_error_grid",
        "p_underflow",
        "low_precision_sum",
        "overflow_threshold",
        "softmax_in_format",
        "outlier_qkv",
        "attention_standard_lowp",
        "attention_tiled_lowp",
        "rmse",
        "matmul_error",
        "compare_inputs",
        "p_error_ablation",
        "FA3_TABLE3_RMSE",
    ),
    "precision_fa3": (
        "FA3_TABLE3_ABLATION_RMSE",
        "quantize_fp8",
        "random_hadamard",
        "attention_fp8_baseline",
        "attention_fp8_fa3",
        "fa3_table3",
    ),
    "activations": (
        "Activations",
        "load_activations",
        "ACTIVATIONS_PATH",
        "ACTIVATIONS_SHA256",
        "file_sha256",
    ),
    # 08 hardware runs
    "measure": (
        "KERNELS",
        "attention_flops",
        "make_inputs",
        "kernel_available",
        "time_call",
        "time_interleaved",
        "time_rounds",
        "spread",
        "time_once",
        "other_programs",
        "count_torch_ops",
        "at_threads",
        "thread_ratios",
        "describe_rounds",
        "round_ratios",
        "ceiling_spread",
        "fairness",
        "machine_report",
        "latest_sweeps",
        "sweep_lines",
        "accuracy_lines",
        "peak_memory",
        "describe_machine",
        "measure_ceilings",
        "run_sweep",
        "results_table",
        "record_run",
        "load_runs",
        "verify_accuracy",
        "accuracy_table",
        "RUNS_DIR",
        "user_runs_dir",
        "REPORTED_910B3_ACCURACY",
    ),
    # 09 backward
    "backward": (
        "attention_backward",
        "flash_attention_backward_numpy",
        "backward_delta",
        "NumpyFlashAttention",
        "standard_attention_torch",
        "saved_tensor_bytes",
        "training_memory",
        "backward_flops",
        "time_forward_backward",
        "backward_time_lines",
    ),
    # 10 decoding and GQA
    "decoding": (
        "MODEL_CONFIGS",
        "PROCESSORS",
        "H100_RIDGE",
        "attention_layout",
        "kv_cache_bytes_per_token",
        "kv_cache_table",
        "cache_table",
        "decode_intensity",
        "decode_schedule",
        "schedule_table",
        "heuristic_table",
        "num_splits_heuristic",
        "flash_attn_num_splits",
        "MLA_CONFIGS",
        "latent_decode_intensity",
        "decode_torch",
        "time_decoding",
        "cpu_speedup_model",
        "decode_timing_table",
        "stream_bandwidth",
        "PagedCache",
        "paged_kv",
        "gather_pages",
        "decode_paged",
    ),
    # 11 masks
    "masks": (
        "sliding_window",
        "document_mask",
        "and_masks",
        "alibi",
        "alibi_slopes",
        "softcap",
        "prefix_lm",
        "dilated_window",
        "clipped_alibi",
        "block_mask",
        "BlockMask",
    ),
    "mask_experiments": (
        "attention_reference_torch",
        "flex_reference",
        "window_tile_counts",
        "softcap_fixed_reference_error",
        "softcap_fixed_reference_detail",
        "time_window_attention",
    ),
    "checks.masks": (
        "check_window_tiles",
        "check_mask_mod",
        "check_score_mod",
    ),
}
# the subpackages a notebook reaches as attributes (lab.checks.check_..., lab.widgets.tile_walk)
_SUBMODULES = ("checks", "figures", "trace", "widgets")

_WHERE = {name: module for module, names in _NAMES.items() for name in names}
__all__ = [*_WHERE, *_SUBMODULES]


def __getattr__(name: str):
    """`lab.NAME`: import the module that defines NAME on first use, then keep the name here."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'lab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
