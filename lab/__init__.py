"""`lab`: the engine of "FlashAttention from first principles".

The notebooks are thin; everything they compute lives here, tested. Each name below is imported
explicitly from the module that defines it; each module's docstring says what it teaches.

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
  11 masks                        lab/masks.py, lab/mask_checks.py, lab/checks/masks.py

The kernels form one ladder, rung by rung, in lab/kernels/ (its docstring tells what each rung changes).
"""

# every notebook
from .notebook import (
    setup_notebook, SEED, measured, report, format_table, MEASURED_OPEN, MEASURED_CLOSE,
)
from .exercises import (
    check, diagnose, describe_case,
)
# 00 the memory wall
from .memory import (
    peak_bytes, attention_bytes, measure_peak_memory, SOFTMAX_OPS_PER_ELEMENT, attainable_flops,
    attention_traffic,
)
from .hardware import (
    CHIPS, SOURCES, chip, exp_rate, ridge_point, hardware_table, estimated_bytes, loop_overhead,
)
# 01-02 softmax
from .softmax import (
    softmax_naive, softmax_safe, softmax_online, online_normalizer,
)
from .overflow import (
    SOFTMAX_DTYPES, GAPS, WORKS_EPS, exp_limits, works_tolerance, first_exp_overflow, score_row,
    softmax_error, softmax_broken, naive_vs_safe, first_broken_score, overflow_table,
)
from .softmax_steps import (
    online_trace, trace_table, demo_scores, online_vs_safe,
)
from .access_count import (
    CountingArray, AccessCount, count_accesses, COUNTED_METHODS,
)
# 03 one pass
from .states import (
    SoftmaxState, empty_state, partial_state, merge_states, finalize,
)
from .one_pass import (
    SlowRows, RowRun, ROW_METHODS, attention_row_three_pass, attention_row_two_pass, attention_row_one_pass,
    compare_row_methods, one_pass_attention, one_pass_buffers,
)
# 04 merge order
from .merge import (
    ORDERS, chunk_bounds, random_chunk_bounds, merge_plan, reduce_states, chunk_state, split_states,
    merge_output_pair, merge_outputs, flash_decoding,
)
from .distributed import (
    sequence_parallel_attention, free_port, WORLD_SIZES, START_METHODS,
)
# 05-06 tiling, FlashAttention-2
from .tiling import (
    SRAM_BYTES, HARDWARE, cpu_l2_bytes, sram_sizes, fa_block_sizes, step_footprint, onchip_footprint,
    onchip_fits, warp_split_exchange, tile_grid, tile_counts, causal_tiles_formula, standard_traffic,
    flash_counts, flash_traffic_bytes, theorem2_bytes, flop_split, gpu_time_share, flash_peak_bytes,
)
# the kernel ladder
from .rules import (
    causal_key_end, causal_mask, safe_exp_shift,
)
from .kernels import (
    attention_reference, attention_naive, flash_attention_numpy, VARIANTS,
)
from .kernels.rung4_torch_fa2 import (
    torch_default_blocks,
)
from .torch_kernels import (
    flash_attention_torch, flash_attention_torch_forward, flash_attention_torch_backward,
    attention_torch_naive, FlashAttention,
)
from .kernels.rung6_triton import (
    flash_attention_triton, triton_status, TritonUnavailableError, triton_tile_kinds, triton_kernel_source,
)
from .kernels.rung6_triton_backward import (
    flash_attention_triton_backward, TritonFlashAttention,
)
# 07 precision
from .precision import (
    round_to, truncate_tf32, FORMATS, format_info,
)
from .precision_experiments import (
    gaussian_qkv, relative_error, p_rounding_error, p_error_grid, p_underflow, low_precision_sum,
    overflow_threshold, softmax_in_format, outlier_qkv, attention_standard_lowp, attention_tiled_lowp, rmse,
    matmul_error, compare_inputs, FA3_TABLE3_RMSE,
)
from .precision_fa3 import (
    FA3_TABLE3_ABLATION_RMSE, quantize_fp8, random_hadamard, attention_fp8_baseline, attention_fp8_fa3,
    fa3_table3,
)
from .activations import (
    Activations, load_activations, ACTIVATIONS_PATH, ACTIVATIONS_SHA256, file_sha256,
)
# 08 hardware runs
from .measure import (
    KERNELS, attention_flops, make_inputs, kernel_available, time_call, time_interleaved, peak_memory,
    describe_machine, measure_ceilings, run_sweep, results_table, record_run, load_runs, verify_accuracy,
    accuracy_table, RUNS_DIR, user_runs_dir, REPORTED_910B3_ACCURACY,
)
# 09 backward
from .backward import (
    attention_backward, flash_attention_backward_numpy, backward_delta, NumpyFlashAttention,
    standard_attention_torch, saved_tensor_bytes, training_memory, backward_flops, time_forward_backward,
)
# 10 decoding and GQA
from .decoding import (
    MODEL_CONFIGS, PROCESSORS, H100_RIDGE, attention_layout, kv_cache_bytes_per_token, kv_cache_table,
    decode_intensity, decode_schedule, decode_torch, time_decoding, PagedCache, paged_kv, gather_pages,
    decode_paged,
)
# 11 masks
from .masks import (
    sliding_window, document_mask, and_masks, alibi, alibi_slopes, softcap, prefix_lm, dilated_window,
    clipped_alibi, block_mask, BlockMask,
)
from .mask_checks import (
    attention_reference_torch, flex_reference, window_tile_counts, softcap_fixed_reference_error,
    softcap_fixed_reference_detail, time_window_attention,
)
from .checks.masks import (
    check_window_tiles, check_mask_mod, check_score_mod,
)
from . import checks, figures, trace, widgets  # noqa: E402,F401

__version__ = "0.1.0"
