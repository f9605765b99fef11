"""Checks for the exercises of notebook 11: a learner's sliding-window and document-mask tile counts, mask_mod and
score_mod builders.

Each prints one verdict line for a learner's answer, saying what is wrong and where.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import contextlib
import inspect
import math
import types
import warnings

import numpy as np
import torch

from ..attention import attention_reference, flash_attention_numpy
from ..mask_experiments import flex_reference, window_tile_counts
from ..masks import (
    KINDS,
    _tile_kinds,
    block_mask,
    document_mask,
    index_arrays,
    sliding_window,
)
from ..memory import peak_bytes
from ..torch_kernels import flash_attention_torch
from ._seeded import noting_seed
from ._support import _fresh, _refusal, _settled, _watching

__all__ = [
    "check_window_tiles",
    "check_mask_mod",
    "check_score_mod",
    "check_document_tiles",
]


_FAILED = object()

_ARRAY_HINT = " (on arrays, use & | ~ instead of and / or / not, and no `if`)"


def _show(case) -> str:
    """A case as the learner would type it: numpy arrays as `np.array([...])`."""
    parts = [
        f"np.array({a.tolist()})" if isinstance(a, np.ndarray) else repr(a)
        for a in case
    ]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _codes(answers) -> dict:
    """The code of each of lab's functions `answers` and of every function defined inside it (the mod a builder
    returns), each mapped to "lab.<name>": a mod made by lab's builder, by any route (called, aliased, built
    beforehand and kept), runs one of them."""
    out = {}
    for f in answers:
        todo = [getattr(inspect.unwrap(f), "__code__", None)]
        while todo:
            code = todo.pop()
            if code is not None and code not in out:
                out[code] = f"lab.{f.__name__}"
                todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return out


def _watching_codes(codes: dict):
    """Record (once each) the names of `codes` whose code runs inside the block, by any route, and what escapes the
    watch (`_support._watching`: the profiler switched off, another thread or process, the check's frames)."""
    return _watching(also=codes)


def _attempt(name, fn, case, n, *args, hint=_ARRAY_HINT, lab_answer=()):
    """`fn(*args)` (`fn(*case)` without args), or `_FAILED` after printing why it could not run.

    `hint` is added when the error is an array asked for a single truth value; with `lab_answer` (lab's functions that
    answer the exercise) an answer that runs their code, or the code of a mod they build, is refused.
    """
    try:
        with contextlib.ExitStack() as stack:
            seen = (
                stack.enter_context(_watching_codes(_codes(lab_answer)))
                if lab_answer
                else []
            )
            out = _settled(fn(*(args or case)))
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return _FAILED
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        text = str(exc)
        extra = hint if "truth value" in text else ""
        if "scalar index" in text:
            extra = " (index a numpy array with the index array h: np.asarray(slopes)[h], not a list)"
        print(
            f"{name}: ✗ case {n} {_show(case)} raised {type(exc).__name__}: {exc}{extra}"
        )
        return _FAILED
    if seen:
        print(f"{name}: ✗ case {n} {_show(case)}: {_refusal(seen[0])}")
        return _FAILED
    if out is None:
        print(f"{name}: ✗ case {n} {_show(case)}: returned None (a missing `return`?)")
        return _FAILED
    return out


def _pair(got: float, want: float) -> tuple:
    """`got` and `want` formatted with the fewest significant digits (4 to 17) at which they differ."""
    for digits in range(4, 18):
        a, b = format(got, f".{digits}g"), format(want, f".{digits}g")
        if a != b:
            return a, b
    return format(got, ".17g"), format(want, ".17g")


def _where(pos) -> str:
    b, h, i, j = (int(x) for x in pos)
    return f"head {h}, query i = {i}, key j = {j}"


_TORCH_MOD = (
    "in lab.flash_attention_torch and flex_attention a mod gets torch tensors (s, b, h, i, j): use what numpy arrays "
    "and tensors both have (operators, & | ~, abs(x), x.clip(max=D)), and make a table indexed by h a tensor of s's "
    "kind first: torch.as_tensor(slopes, dtype=s.dtype, device=s.device) when isinstance(s, torch.Tensor)"
)


def _kernels_run() -> str:  # noqa: N802
    return "the numpy and torch kernels" + (
        " and flex_attention" if _flex_runs() else ""
    )


def _flex_runs() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def _kernel_problem(build, spec, kind, case, heads, what, seed=0) -> str | None:
    """Why a kernel with the learner's mod (`build(*case)`, passed as `kind`) does not match the reference with the
    spec's, or None: `flash_attention_numpy` on numpy arrays, then `flash_attention_torch` and (where it runs)
    PyTorch's `flex_attention` on torch tensors; refused, or max |o - ref| ≥ 1e-9. `what` names what already agreed
    ("masks", "scores")."""
    N, M = case[-2:]
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((1, heads, N, 8)),
        rng.standard_normal((1, heads, M, 8)),
        rng.standard_normal((1, heads, M, 8)),
    )
    ref = attention_reference(q, k, v, **{kind: spec(*case)})[0]
    t = [torch.from_numpy(a) for a in (q, k, v)]
    kernels = [
        (
            "flash_attention_numpy",
            lambda mod: flash_attention_numpy(
                q, k, v, block_q=16, block_k=16, **{kind: mod}
            )[0],
        ),
        (
            "lab.flash_attention_torch",
            lambda mod: flash_attention_torch(
                *t, block_q=16, block_k=16, **{kind: mod}
            )[0].numpy(),
        ),
    ]
    if _flex_runs():
        kernels.append(
            ("flex_attention", lambda mod: flex_reference(*t, **{kind: mod})[0].numpy())
        )
    for label, kernel in kernels:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                o = kernel(build(*case))
        except Exception as exc:
            if label == "flash_attention_numpy" and not isinstance(
                exc, (ValueError, TypeError)
            ):
                raise
            text = f"the {what} agree, but {label} refused yours: {type(exc).__name__}: {exc}"
            return text if label == "flash_attention_numpy" else f"{text}; {_TORCH_MOD}"
        err = float(np.abs(np.asarray(o, dtype=float) - ref).max())
        if not err < 1e-9:
            return f"the {what} agree, but {label} with yours differs from the reference (max |o - ref| = {err:.1e})"
    return None


def _answer(spec) -> tuple:
    """`(spec,)` when the spec is one of lab's builders (its answer to the exercise), else ()."""
    return (spec,) if getattr(spec, "__module__", "").startswith("lab.") else ()


def _window_computed(
    N: int,
    W: int,
    Br: int,
    Bc: int,
    *,
    last_from_first_row=False,
    drop_short=False,
    first_from_last_row=False,
    unclamped=False,
    uncut_last=False,
    last_past_row=False,
) -> int:
    """Tiles a causal window of W keys computes (N = M), one number per query block.

    Query block i0..i1-1 needs key blocks max(0, i0 - (W - 1)) // Bc through (i1 - 1) // Bc; equal to
    `window_tile_counts(N, N, W - 1, 0, Br, Bc)["computed"]` at O(N / Br) cost, so N = 10^7 is cheap.
    The keywords plant six classic mistakes for the hints.
    """
    i0 = np.arange(0, N - N % Br if drop_short else N, Br, dtype=np.int64)
    i1 = i0 + Br if uncut_last else np.minimum(i0 + Br, N)
    start = (i1 - 1 if first_from_last_row else i0) - (W - 1)
    first = (start if unclamped else np.maximum(0, start)) // Bc
    last = (i0 if last_from_first_row else i1 if last_past_row else i1 - 1) // Bc
    return int((last - first + 1).sum())


def check_window_tiles(
    build, cases, *, name: str | None = None, fresh: int = 4, seed: int | None = None
) -> None:
    """Check `build(N, W, Br, Bc)`, the tiles computed for a causal window of W keys, against the reference; print one verdict.

    The reference is `window_tile_counts(N, N, W - 1, 0, Br, Bc)["computed"]`. For a wrong count it says the
    case's arguments, yours and the expected count, and whether yours is the count of a window one key
    wider or narrower (the classic off-by-one: a causal window of W keys reaches back to key i - (W - 1)),
    of causal attention or of full attention. After `cases`, `fresh` cases drawn afresh on each run (`seed` draws
    the same again), so no table of the fixed ones passes, the last with N between 10^6 and 10^7 (no mask of
    N^2 elements can be evaluated there); running lab's count or `lab.block_mask` is refused. Also named:
    the last key block taken from a block's first row, and the last, shorter query block dropped or not
    cut at N.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(build, "__name__", "<lambda>")
    name = (
        "window_tiles" if name.startswith("<") else name
    )  # a lambda: the exercise's own name
    rng, seed = _fresh(seed)
    drawn = []
    for _ in range(fresh):
        Bc = int(rng.choice([16, 32, 48, 64]))
        W = int(rng.integers(1, 12)) * Bc + int(rng.choice([-1, 0, 1, 2]))
        drawn.append(
            (int(rng.integers(1, 4000)), max(W, 1), int(rng.choice([16, 32, 64])), Bc)
        )
    if (
        fresh
    ):  # one long sequence, where evaluating the mask (N^2 elements) is out of reach
        Bc = int(rng.choice([64, 128, 256]))
        drawn.append(
            (
                int(rng.integers(10**6, 10**7)),
                int(rng.integers(2, 40)) * Bc + 1,
                128,
                Bc,
            )
        )
    with noting_seed(seed if fresh else None):
        _window_cases(build, list(cases) + drawn, name)


def _window_cases(build, cases, name) -> None:
    for n, case in enumerate(cases):
        N, W, Br, Bc = case
        shown = f"{name}(N={N}, W={W}, Br={Br}, Bc={Bc})"
        got = _attempt(
            name,
            build,
            case,
            n,
            hint=" (a count needs plain integers: no arrays here)",
            lab_answer=(window_tile_counts, block_mask),
        )
        if got is _FAILED:
            return
        if isinstance(got, (bool, np.bool_)) or not isinstance(
            got, (int, float, np.integer, np.floating)
        ):
            print(
                f"{name}: ✗ case {n} {shown}: returned {type(got).__name__} {got!r}, not a number of tiles"
            )
            return
        want = _window_computed(N, W, Br, Bc)
        if got == want:
            continue
        known = [
            (
                _window_computed(N, W + 1, Br, Bc),
                "the count for a window of W + 1 keys: a causal window of W keys "
                "starts at key i - (W - 1), not i - W",
            )
        ]
        if W > 1:
            known.append(
                (
                    _window_computed(N, W - 1, Br, Bc),
                    "the count for a window of W - 1 keys: the W keys include "
                    "the query's own, so the window starts at key i - (W - 1)",
                )
            )
        nq, nk = -(-N // Br), -(-N // Bc)
        known += [
            (
                _window_computed(N, N + 1, Br, Bc),
                "causal attention's count, as if the window reached back to key 0",
            ),
            (nq * nk, "full attention's count"),
            (
                _window_computed(N, W, Br, Bc, last_past_row=True),
                "the count with each query block's last key block taken from key i1, one past the "
                "block: its last row is i1 - 1, and causally that row's last key is i1 - 1 too",
            ),
            (
                _window_computed(N, W, Br, Bc, last_from_first_row=True),
                "the count with each query block's last key block taken from its first row, i0; "
                "the block's last row, i1 - 1, reaches furthest right",
            ),
        ]
        known += [
            (
                _window_computed(N, W, Br, Bc, first_from_last_row=True),
                "the count with each query block's first key block taken from its last row's window; "
                "the block's first row, i0, reaches furthest left, to key i0 - (W - 1)",
            ),
            (
                _window_computed(N, W, Br, Bc, unclamped=True),
                "the count that gives every query block a whole window (no max(0, ·), or an estimate "
                "such as N/Br · (W/Bc + 1)): for the first query blocks i0 - (W - 1) is negative, and "
                "floor division then counts key blocks before key 0, which do not exist; count exactly",
            ),
        ]
        if N % Br:
            known.append(
                (
                    _window_computed(N, W, Br, Bc, uncut_last=True),
                    f"the count with the last query block's rows running to i0 + Br: Br = {Br} does not "
                    f"divide N = {N}, so the last block ends at row N - 1 = {N - 1} (i1 = min(i0 + Br, N)), "
                    "and its last key block is (N - 1) // Bc",
                )
            )
            known.append(
                (
                    _window_computed(N, W, Br, Bc, drop_short=True),
                    f"the count without the last, shorter query block: Br = {Br} does not divide N = {N}, "
                    f"so rows {N - N % Br}..{N - 1} form a block of their own",
                )
            )
        hint = next((f"; that is {text}" for count, text in known if got == count), "")
        if not hint and math.isfinite(got) and abs(got - want) <= 0.25 * want:
            hint = (
                f"; yours is within {abs(got - want) / want:.0%}: an estimate such as N/Br · (W/Bc + 1)? "
                "the count is exact: sum, per query block, its last key block minus its first plus one "
                "(the first blocks' windows are cut at key 0, and the edges fall inside blocks)"
            )
        yours = str(int(got)) if float(got).is_integer() else repr(float(got))
        diff = f" ({got - want:+g} tiles)" if math.isfinite(got) else ""
        print(f"{name}: ✗ case {n} {shown}: yours {yours}, expected {want}{diff}{hint}")
        return
    print(f"{name}: ✓ passed {len(cases)} cases")


_TOP_LEFT = (
    "yours is the spec aligned top-left (off = 0): the course aligns bottom-right, off = M - N = {off}, "
    "so that the last query sees the last key; write the condition with i + off where a square mask has i"
)


def _top_left(got, spec, case, idx, shape) -> bool:
    """Whether `got` equals the spec with off = 0 (the spec built for N = M), on the N × M grid."""
    with np.errstate(all="ignore"):
        square = spec(*case[:-2], case[-1], case[-1])
        return bool(np.array_equal(got, np.broadcast_to(square(*idx), shape)))


def _edge_hint(got, spec, case, idx, shape) -> str | None:
    """A diagnosis when `got` equals the spec with its first argument (a window or a prefix) one off, or, for a
    dilated window, with the dilation counted from key 0 instead of from the query's own key."""
    name = getattr(spec, "__name__", "")
    if name == "prefix_lm":
        return _prefix_hint(got, case, idx, shape)
    with np.errstate(all="ignore"):
        for step, word in ((1, "one wider"), (-1, "one narrower")):
            if case[0] + step < 1 and name == "dilated_window":
                continue
            try:
                alt = spec(case[0] + step, *case[1:])
            except ValueError:
                continue
            if np.array_equal(got, np.broadcast_to(alt(*idx), shape)):
                what = "window" if "window" in name else "first argument"
                return (
                    f"yours is the spec with a {what} {word} ({case[0] + step} for {case[0]}): the "
                    "query's own key counts, so a window of W keys reaches back to distance W - 1"
                )
        if name == "dilated_window" and not np.any(got):
            return (
                "yours keeps no key at all: a window of `window` keys includes the query's own key "
                "(distance 0), so window = 1 keeps exactly that key: is yours one narrower?"
            )
        if name == "dilated_window":
            window, dilation, N, M = case
            b, h, i, j = idx
            off = M - N
            from_zero = (j <= i + off) & (j > i + off - window) & (j % dilation == 0)
            if np.array_equal(got, np.broadcast_to(from_zero, shape)):
                return (
                    "yours keeps the keys j that are multiples of the dilation, counted from key 0; "
                    "count the distance back from the query's own key, i + off - j"
                )
            dist = i + off - j
            taps = (dist >= 0) & (dist < window * dilation) & (dist % dilation == 0)
            if dilation > 1 and np.array_equal(got, np.broadcast_to(taps, shape)):
                return (
                    f"yours keeps `window` = {window} taps spread over window · dilation = "
                    f"{window * dilation} keys: the window is `window` keys of distance, "
                    "i + off - j < window, and the dilation keeps every dilation-th of them"
                )
    return None


def _prefix_hint(got, case, idx, shape) -> str | None:
    """A diagnosis for a prefix-LM mask one key too long or short, joined with `&` instead of `|`, or
    derived by cases with a slip: the prompt test on i for i + off, the prompt hidden from the queries
    after it, or the causal mask alone."""
    prefix, N, M = case
    b, h, i, j = idx
    causal = j <= i + M - N
    variants = (
        (
            (j <= prefix) | causal,
            f"yours sees one prefix key too many: the prefix is keys 0 ... prefix - 1 "
            f"(here 0 ... {prefix - 1}), so the condition is j < prefix, not j <= prefix",
        ),
        (
            (j < prefix - 1) | causal,
            "yours sees one prefix key too few: the prefix is keys 0 ... prefix - 1, so j < prefix",
        ),
        (
            (j < prefix) & causal,
            "yours joins the two conditions with & (a key must be in the prefix AND causal): "
            "every query sees the prefix OR the causal keys, so join them with |",
        ),
        (
            ((i < prefix) & (j < prefix)) | causal,
            "yours tests whether the query is in the prompt with i, its index: its position "
            f"is p = i + off (off = M - N = {M - N}), so the case test is i + off < prefix",
        ),
        (
            ((i + M - N < prefix) & (j < prefix)) | (causal & (j >= prefix)),
            "in yours a query after the prompt does not see the prompt: it sees every key up "
            "to itself, j <= i + off, the prompt included",
        ),
        (
            causal,
            "yours is the causal mask: a query inside the prompt also sees the later prompt "
            "keys, j < prefix (the bidirectional part)",
        ),
        (
            (j < prefix) | (j <= i + N - M),
            f"yours shifts the diagonal the wrong way, off = N - M = {N - M}: the offset is "
            f"off = M - N = {M - N}, so that the last query (i = N - 1) sees the last key "
            "(j = M - 1)",
        ),
    )
    for mask, text in variants:
        if np.array_equal(got, np.broadcast_to(mask, shape)):
            return text
    return None


def check_mask_mod(
    build, spec, cases, *, heads: int = 2, block: int = 16, name: str | None = None
) -> None:
    """Check `build(*case)` against `spec(*case)` (each returns a mask_mod; a case ends with N, M); print one verdict.

    Reports what is wrong and where: an error (with a hint for `and`/`or` on arrays), a non-boolean or
    mis-shaped result, the first (head, query, key) kept or dropped against the spec with the counts of
    both, and the tiles `block_mask` would then misclassify. Last, the numpy kernel must match the
    reference. Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(build, "__name__", "your mask_mod")
    for n, case in enumerate(cases):
        N, M = case[-2], case[-1]
        idx = index_arrays(1, heads, 0, N, 0, M)
        mod = _attempt(name, build, case, n, lab_answer=_answer(spec))
        got = (
            _FAILED
            if mod is _FAILED
            else _attempt(name, mod, case, n, *idx, lab_answer=_answer(spec))
        )
        if got is _FAILED:
            return
        if np.asarray(got).dtype != bool:
            print(
                f"{name}: ✗ case {n} {_show(case)}: the mask is {np.asarray(got).dtype}, not bool: build it from comparisons "
                "(<=, ==) joined by & | ~"
            )
            return
        want = np.broadcast_to(spec(*case)(*idx), (1, heads, N, M))
        try:
            got = np.broadcast_to(got, (1, heads, N, M))
        except ValueError:
            print(
                f"{name}: ✗ case {n} {_show(case)}: the mask has shape {np.shape(got)}, which does not broadcast to (1, {heads}, {N}, {M})"
            )
            return
        wrong = got != want
        if wrong.any():
            pos = np.argwhere(wrong)[0]
            h = int(
                pos[1]
            )  # counts in that one head, of the N × M grid the learner pictures
            g, w = got[0, h], want[0, h]
            extra, missing = int((g & ~w).sum()), int((~g & w).sum())
            kg = block_mask(mod, 1, heads, N, M, block, block).kind[0, h]
            kw = block_mask(spec(*case), 1, heads, N, M, block, block).kind[0, h]
            bad = np.argwhere(kg != kw)
            tiles = ""
            if len(bad):
                t = tuple(int(x) for x in bad[0])
                tiles = (
                    f"; {len(bad)} of its {kg.size} tiles ({block}×{block}) misclassified, first (query block {t[0]}, "
                    f"key block {t[1]}): yours {KINDS[int(kg[t])]}, the spec's {KINDS[int(kw[t])]}"
                )
            print(
                f"{name}: ✗ case {n} {_show(case)}: at {_where(pos)} yours {'keeps' if got[tuple(pos)] else 'drops'} the key, the spec "
                f"{'keeps' if want[tuple(pos)] else 'drops'} it; in head {h}, {extra} kept that should be dropped, {missing} "
                f"dropped that should be kept{tiles}"
            )
            if N != M and _top_left(got, spec, case, idx, (1, heads, N, M)):
                print(f"  hint: {_TOP_LEFT.format(off=M - N)}")
            elif hint := _edge_hint(got, spec, case, idx, (1, heads, N, M)):
                print(f"  hint: {hint}")
            return
    problem = _kernel_problem(build, spec, "mask_mod", cases[-1], heads, "masks")
    if problem:
        print(f"{name}: ✗ {problem}")
        return
    N, M = cases[-1][-2:]
    kind = block_mask(build(*cases[-1]), 1, heads, N, M, block, block).kind[0, 0]
    counts = {k: int((kind == code).sum()) for code, k in KINDS.items()}
    print(
        f"{name}: ✓ passed {len(cases)} cases; last case (N = {N}, M = {M}), one head's {kind.size} "
        f"tiles of {block}×{block}:\n  {counts['empty']} empty, {counts['partial']} partial, "
        f"{counts['full']} full (as the spec)\n"
        f"  {_kernels_run()} match the reference"
    )


_SCORE_HINT = (
    " (on arrays, use np.minimum / np.maximum instead of the built-in min / max, and np.where "
    "instead of `if`)"
)


def _score_hint(spec, case, got, s, idx) -> str | None:
    """A diagnosis for a clipped ALiBi with the penalty's sign flipped, dropped past max_distance, clipped
    instead of the distance, on a signed distance, or clipped one off."""
    if getattr(spec, "__name__", "") != "clipped_alibi":
        return None
    slopes, max_distance, N, M = case
    b, h, i, j = idx
    dist = np.abs(i + M - N - j)
    penalty = np.asarray(slopes)[h] * np.minimum(dist, max_distance)
    variants = (
        (
            s + penalty,
            "yours adds the penalty: ALiBi lowers the score of a distant key, s - slope * distance",
        ),
        (
            s - np.where(dist <= max_distance, penalty, 0.0),
            "yours gives keys beyond max_distance no penalty at all: clipping keeps the penalty "
            "at its value for max_distance (slope * max_distance), it does not drop it",
        ),
        (
            s - np.minimum(np.asarray(slopes)[h] * dist, max_distance),
            "yours clips the penalty slope * distance at max_distance; clip the distance: "
            "slope * min(distance, max_distance)",
        ),
        (
            s - np.asarray(slopes)[h] * np.minimum(i + M - N - j, max_distance),
            "yours uses the signed i + off - j: a key after the query (j > i + off) then gets a "
            "bonus; the distance is |i + off - j|",
        ),
        (
            s - np.asarray(slopes)[h] * np.minimum(dist, max_distance - 1),
            "yours clips at max_distance - 1: the penalty grows up to the distance max_distance "
            "itself, min(distance, max_distance)",
        ),
        (
            s - np.asarray(slopes)[h] * np.minimum(dist, max_distance + 1),
            "yours clips at max_distance + 1: the penalty stops at the distance max_distance, "
            "min(distance, max_distance)",
        ),
    )
    for want, text in variants:
        if np.allclose(got, np.broadcast_to(want, got.shape), rtol=1e-9):
            return text
    return None


def check_score_mod(
    build, spec, cases, *, heads: int = 2, name: str | None = None, rtol: float = 1e-9
) -> None:
    """Check `build(*case)` against `spec(*case)` (each returns a score_mod; a case ends with N, M); print one verdict.

    Reports an error, a changed shape, a score changed in place, or the largest difference and where it
    is (head, query, key); last, the numpy kernel with the learner's mod must match the reference.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(build, "__name__", "your score_mod")
    rng = np.random.default_rng(0)
    for n, case in enumerate(cases):
        N, M = case[-2], case[-1]
        idx = index_arrays(1, heads, 0, N, 0, M)
        s = 3.0 * rng.standard_normal((1, heads, N, M))
        before = s.copy()
        mod = _attempt(name, build, case, n, hint=_SCORE_HINT, lab_answer=_answer(spec))
        got = (
            _FAILED
            if mod is _FAILED
            else _attempt(
                name, mod, case, n, s, *idx, hint=_SCORE_HINT, lab_answer=_answer(spec)
            )
        )
        if got is _FAILED:
            return
        if np.shape(got) != s.shape:
            print(
                f"{name}: ✗ case {n} {_show(case)}: returned shape {np.shape(got)}, not s's shape {s.shape}"
            )
            return
        if not np.array_equal(s, before):
            print(
                f"{name}: ✗ case {n} {_show(case)}: changed s in place; return a new array instead"
            )
            return
        want = spec(*case)(before, *idx)
        err = np.abs(np.asarray(got, dtype=float) - want)
        if not (err <= rtol * (1 + np.abs(want))).all():
            pos = np.unravel_index(np.argmax(err), err.shape)
            yours, spec_s = _pair(float(np.asarray(got)[pos]), float(want[pos]))
            print(
                f"{name}: ✗ case {n} {_show(case)}: largest difference {err[pos]:.3g} at {_where(pos)} "
                f"(yours {yours}, the spec's {spec_s}, from s = {before[pos]:.4g})"
            )
            square = spec(*case[:-2], M, M)(before, *idx)
            if N != M and np.allclose(np.asarray(got, dtype=float), square, rtol=rtol):
                print(f"  hint: {_TOP_LEFT.format(off=M - N)}")
            elif hint := _score_hint(
                spec, case, np.asarray(got, dtype=float), before, idx
            ):
                print(f"  hint: {hint}")
            return
    problem = _kernel_problem(build, spec, "score_mod", cases[-1], heads, "scores")
    if problem:
        print(f"{name}: ✗ {problem}")
        return
    print(
        f"{name}: ✓ passed {len(cases)} cases\n  {_kernels_run()} with it match the reference"
    )


# ------------------------------------------------------------ Exercise 4: the tiles of a causal document mask

_SECONDS = 3.0  # a case's time limit: per query block is milliseconds at N = 10^7, per tile is hours


def _document_counts(lengths, Br: int, Bc: int, *, mistake: str | None = None) -> tuple:
    """(empty, partial, full) tiles of causal ∧ documents (documents of `lengths` packed, N = M = their sum).

    Query block i0..i1-1, row i0 in document s..e-1: its rows see the keys s..i1-1, so key blocks s // Bc to
    (i1 - 1) // Bc are non-empty; with no boundary in its rows (i1 <= e) key block J is full when J·Bc >= s
    and min((J + 1)·Bc, N) - 1 <= i0. Numpy over query blocks, O(N / Br): N = 10^7 is cheap. `mistake`
    plants one of the classic mistakes of `_DOCUMENT_MISTAKES`, for the hints.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if mistake == "causal":  # one document: the plain causal mask
        lengths = lengths.sum(keepdims=True)
    ends = np.cumsum(lengths)
    N, nk = int(ends[-1]), -(-int(ends[-1]) // Bc)
    i0 = np.arange(0, N, Br, dtype=np.int64)
    i1 = np.minimum(i0 + Br, N)
    # the document of row i0 (side "left" puts row s_d in document d - 1)
    side = "left" if mistake == "boundary" else "right"
    d0 = np.searchsorted(ends, i1 - 1 if mistake == "last_row" else i0, side=side)
    s, e = ends[d0] - lengths[d0], ends[d0]  # its tokens s .. e - 1
    computed = (i1 - 1) // Bc - s // Bc + 1
    first = s // Bc if mistake == "keys_cross" else -(-s // Bc)
    # the last key block with j1 - 1 <= i0 (the planted ones: j1 <= i1, j1 <= i0, no short block)
    last = {
        "diagonal": np.where(i1 < N, i1 // Bc - 1, nk - 1),
        "strict": i0 // Bc - 1,
        "short_key": (i0 + 1) // Bc - 1,
    }.get(mistake, np.where(i0 + 1 < N, (i0 + 1) // Bc - 1, nk - 1))
    one_doc = np.ones_like(i0, dtype=bool) if mistake == "rows_cross" else i1 <= e
    full = int(np.where(one_doc, np.maximum(0, last - first + 1), 0).sum())
    computed = int(computed.sum())
    return len(i0) * nk - computed, computed - full, full


_DOCUMENT_MISTAKES = (
    (
        "causal",
        "these are the counts of the plain causal mask (one document of N tokens): a query sees only the "
        "keys of its own document, from its first token s to the query itself, so every tile left of "
        "the document's start is empty",
    ),
    (
        "rows_cross",
        "yours counts full tiles in a query block that a document boundary crosses: its rows after the "
        "boundary are in another document and drop every key before it, so a block whose rows span two "
        "documents has no full tile",
    ),
    (
        "keys_cross",
        "yours counts as full a tile whose keys a document's first token s falls inside (its keys before "
        "s belong to the previous document): the first full key block is ceil(s / Bc), not s // Bc",
    ),
    (
        "diagonal",
        "yours counts the tile on the diagonal as full: a tile is full only when its last key j1 - 1 is at "
        "or before its FIRST row i0; on the diagonal the first rows do not see the later keys",
    ),
    (
        "strict",
        "yours misses the full tiles whose last key is the first row's own, j1 - 1 = i0: a query sees "
        "itself (j <= i), so a key block is full when j1 - 1 <= i0, not j1 <= i0",
    ),
    (
        "boundary",
        "yours puts the first token of a document in the previous one: document d holds tokens "
        "s_d ... s_(d+1) - 1, so with ends = cumsum(lengths) the document of row i is the first whose "
        "end is > i (a block that starts on a boundary starts a new document)",
    ),
    (
        "last_row",
        "yours takes each query block's document from its LAST row: in a block that a boundary crosses, "
        "the rows before the boundary see back to their own document's first token (the document of "
        "row i0), and none of the later document's keys",
    ),
    (
        "short_key",
        "yours never counts the last, shorter key block as full: it ends at key N - 1, not at (J + 1)·Bc - 1, "
        "so a query block whose first row is N - 1 sees all of it",
    ),
)


def _lengths_shown(lengths) -> str:
    if len(lengths) <= 8:
        return (
            "("
            + ", ".join(str(n) for n in lengths)
            + ("," if len(lengths) == 1 else "")
            + ")"
        )
    return f"({lengths[0]}, {lengths[1]}, ..., {lengths[-1]}: {len(lengths)} documents)"


def _document_hint(got: tuple, lengths, Br: int, Bc: int, passed=()) -> str:
    """The mistake that gives `got` on this case (of those that also give the right counts on the cases
    `passed` before it, when one does), or what is wrong with its total."""
    want = _document_counts(lengths, Br, Bc)
    if sorted(got) == sorted(want):
        return "; these are the right three counts in another order: return (empty, partial, full)"
    found = [
        (mistake, text)
        for mistake, text in _DOCUMENT_MISTAKES
        if got == _document_counts(lengths, Br, Bc, mistake=mistake)
    ]
    fits = [
        text
        for mistake, text in found
        if all(
            _document_counts(*c, mistake=mistake) == _document_counts(*c)
            for c in passed
        )
    ]
    if fits or found:
        return f"; {(fits or [t for _, t in found])[0]}"
    N = int(sum(lengths))
    tiles = sum(want)
    if sum(got) != tiles:
        floors = {
            (N // Br) * (N // Bc),
            (N // Br) * -(-N // Bc),
            -(-N // Br) * (N // Bc),
        }
        why = (
            ": that is a floor, N // Br or N // Bc; the last, shorter block of queries or keys is a "
            "block too (ceil)"
            if sum(got) in floors - {tiles}
            else ""
        )
        return (
            f"; yours add up to {sum(got)} tiles, but there are ceil(N / Br) · ceil(N / Bc) = {tiles} "
            f"(N = {N}){why}"
        )
    return (
        "; per query block: its non-empty key blocks run from row i0's document start s to its last "
        "row, s // Bc to (i1 - 1) // Bc; a tile is full when its rows lie in one document and its keys "
        "run from s or later to i0 at most"
    )


class _TooSlow(
    BaseException
):  # not an Exception: an answer's `except Exception` cannot swallow it
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Interrupt the block with `_TooSlow` after `seconds` (SIGALRM, main thread only; elsewhere no limit)."""
    import signal
    import threading

    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def stop(signum, frame):
        raise _TooSlow

    before = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _counted(name: str, build, case, shown: str, memory: bool = False):
    """`build(list(lengths), Br, Bc)` watched (lab's answers refused), timed, and with `memory` its peak
    traced; the three counts as ints, or `_FAILED` after printing why not."""
    lengths, Br, Bc = case
    answers = _codes(
        (block_mask, _tile_kinds, document_mask, window_tile_counts, sliding_window)
    )

    def run():
        return _settled(build(list(lengths), Br, Bc))

    try:
        with _time_limit(_SECONDS), _watching_codes(answers) as seen:
            peak, got = peak_bytes(run) if memory else (0, run())
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return _FAILED
    except _TooSlow:
        N = int(sum(lengths))
        tiles = -(-N // Br) * -(-N // Bc)
        print(
            f"{name}: ✗ {shown}: still running after {_SECONDS:g} s: count per query block "
            f"({-(-N // Br):,} of them here), not per tile ({tiles:,}) nor per token"
        )
        return _FAILED
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}")
        return _FAILED
    if seen:
        lab_mask = seen[0].startswith("lab.") and not seen[0].startswith("lab.checks.")
        why = (
            f"it calls {seen[0]}: this exercise counts the tiles from the document boundaries, "
            "without lab's masks or block masks, so write it yourself"
            if lab_mask
            else _refusal(seen[0])
        )
        print(f"{name}: ✗ {shown}: {why}")
        return _FAILED
    if peak >= Br * Bc // 4:
        print(
            f"{name}: ✗ {shown}: your function held {peak / 2**20:.2f} MiB at its peak, and one tile of "
            f"booleans is {Br * Bc / 2**20:.2f} MiB: count from the document boundaries, without "
            "evaluating the mask on a tile or on the N × M grid"
        )
        return _FAILED
    if not isinstance(got, (tuple, list, np.ndarray)) or len(got) != 3:
        print(
            f"{name}: ✗ {shown}: returned {got!r}, not three counts (empty, partial, full)"
        )
        return _FAILED
    if not all(float(x).is_integer() for x in np.ravel(got)):
        print(
            f"{name}: ✗ {shown}: returned {tuple(got)!r}: the counts are whole numbers of tiles"
        )
        return _FAILED
    return tuple(int(x) for x in np.ravel(got))


def _document_drawn(rng, fresh: int) -> list:
    """`fresh` short cases (boundaries on block edges, one-token documents, many in a block) and a long one."""
    drawn = []
    for _ in range(fresh):
        Br, Bc = (int(rng.choice([7, 16, 24, 25, 32, 48, 64])) for _ in range(2))
        kinds = rng.integers(0, 3, size=int(rng.integers(1, 9)))
        sizes = {0: lambda: rng.integers(1, 4), 1: lambda: Br * rng.integers(1, 4)}
        lengths = [int(sizes.get(k, lambda: rng.integers(1, 300))()) for k in kinds]
        drawn.append((tuple(lengths), Br, Bc))
    if fresh:  # N from 10^6 to 10^7, in up to 2,000 documents
        N = int(rng.integers(10**6, 10**7))
        cuts = np.unique(rng.integers(1, N, size=int(rng.integers(0, 2000))))
        lengths = np.diff(np.concatenate([[0], cuts, [N]]))
        drawn.append(
            (tuple(int(n) for n in lengths), 128, int(rng.choice([64, 128, 256])))
        )
    return drawn


# a tile of a mebibyte of booleans and, of about 50,000 tokens, 10^7 tiles of 16 × 16: what an answer that
# evaluates the mask, or counts tile by tile, cannot pass
_MEMORY_CASE = ((1000, 1, 999, 1000), 1024, 1024)
_SPEED_CASE = ((20000, 1, 29999), 16, 16)


def check_document_tiles(
    build, cases, *, name: str | None = None, fresh: int = 4, seed: int | None = None
) -> None:
    """Check `build(lengths, Br, Bc)`, the (empty, partial, full) tiles of a causal document mask, and print one verdict.

    Documents of `lengths` packed one after another (N = M = sum(lengths)); query i sees key j when both lie in
    one document and j <= i. The reference counts from the boundaries (`_document_counts`). After `cases`, `fresh`
    cases drawn afresh each run (`seed` draws the same again), the last with N from 10^6 to 10^7; before the
    cases of over 10^5 tokens, one whose tile of booleans is a mebibyte (the memory held must stay under a quarter
    of it) and one of 10^7 tiles; every case within 3 s. Refused: lab.block_mask, lab.document_mask and lab's
    window count. A wrong count names the case, yours against the expected, and the classic mistake it matches.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(build, "__name__", "<lambda>")
    name = "document_tiles" if name.startswith("<") else name
    rng, seed = _fresh(seed)
    given = [(tuple(int(n) for n in c[0]), int(c[1]), int(c[2])) for c in cases]
    every = given + _document_drawn(rng, fresh)
    short = [c for c in every if sum(c[0]) <= 10**5]
    long = [c for c in every if sum(c[0]) > 10**5]
    with noting_seed(seed if fresh else None):
        order = short + [_MEMORY_CASE, _SPEED_CASE] + long
        for case in order:
            lengths, Br, Bc = case
            n = every.index(case) if case in every else None
            label = (
                f"case {n}"
                if n is not None
                else "the memory case"
                if case is _MEMORY_CASE
                else "the speed case"
            )
            shown = f"{label} {name}({_lengths_shown(lengths)}, Br={Br}, Bc={Bc}), N = {sum(lengths):,}"
            got = _counted(name, build, case, shown, memory=case is _MEMORY_CASE)
            if got is _FAILED:
                return
            want = _document_counts(lengths, Br, Bc)
            if got != want:
                print(
                    f"{name}: ✗ {shown}: yours (empty, partial, full) = {got}, expected {want}"
                    f"{_document_hint(got, lengths, Br, Bc, order[: order.index(case)])}"
                )
                return
        lengths, Br, Bc = given[0] if given else every[0]
        e, p, f = _document_counts(lengths, Br, Bc)
        ce, cp, cf = _document_counts(lengths, Br, Bc, mistake="causal")
        print(
            f"{name}: ✓ passed {len(every)} cases\n  case 0, {_lengths_shown(lengths)} in tiles of "
            f"{Br} × {Bc}: {e} empty, {p} partial, {f} full (plain causal: {ce}, {cp}, {cf})\n"
            "  counted from the boundaries: no array of a tile's size; "
            f"N = {max(sum(c[0]) for c in every):,} within {_SECONDS:g} s"
        )
