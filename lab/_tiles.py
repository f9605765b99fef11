"""The tile plan the kernels share: which tiles to compute, which need mask work, and the score_mod's gradient.

Every tiled kernel (numpy forward, torch forward and backward) asks a `TilePlan` which key blocks a query
block visits (`keys`) or which query blocks a key block visits (`queries`), and lets it apply score_mod and
the mask to one tile of scores (`apply`). Empty tiles are never visited, so K_j, V_j are never loaded.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import math

import numpy as np

from .masks import BlockMask, _is_torch, _kept, _tile_kinds, _torch, index_arrays
from .rules import causal_key_end


class TilePlan:
    """What a tiled kernel does with each (query block ib, key block jb): compute it or skip it, mask it or not.

    `computed[ib, jb]`: some batch and head keeps an element (so K_j, V_j are loaded); `full[ib, jb]`: every
    element is kept in every batch and head (no mask work). From `block_mask` when there is a mask_mod,
    from the causal boundary alone otherwise. `apply` runs score_mod, then the mask, on one tile.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """

    def __init__(
        self,
        shape,
        Br,
        Bc,
        causal,
        mask_mod=None,
        score_mod=None,
        blocks=None,
        like=None,
    ):
        (self.B, self.H, self.N, self.M), self.Br, self.Bc = shape, Br, Bc
        self.causal, self.score_mod = bool(causal), score_mod
        if blocks is not None:
            mask_mod = _checked_blocks(blocks, mask_mod, shape, Br, Bc, self.causal)
        self.mask_mod, self.mods = (
            mask_mod,
            mask_mod is not None or score_mod is not None,
        )
        if mask_mod is not None:
            if blocks is None:
                blocks = BlockMask(
                    _tile_kinds(mask_mod, *shape, Br, Bc, self.causal, like),
                    mask_mod,
                    Br,
                    Bc,
                    self.causal,
                )
            self.computed, self.full = (
                (blocks.kind > 0).any(axis=(0, 1)),
                (blocks.kind == 2).all(axis=(0, 1)),
            )
        else:
            i0, j0 = (
                np.arange(0, self.N, Br)[:, None],
                np.arange(0, self.M, Bc)[None, :],
            )
            i1, j1 = np.minimum(i0 + Br, self.N), np.minimum(j0 + Bc, self.M)
            every = np.ones((len(i0), j0.shape[1]), bool)
            # computed: the block's last query sees key j0; full: its first query sees key j1 - 1
            self.computed = (
                (j0 < causal_key_end(i1 - 1, self.N, self.M)) & every
                if self.causal
                else every
            )
            self.full = (
                (j1 <= causal_key_end(i0, self.N, self.M)) & every
                if self.causal
                else every
            )
        self.blocks, self.tiles = blocks, int(self.computed.sum())
        self.visited = 0  # tiles a kernel computed (it counts them)

    def keys(self, ib: int) -> list:
        return [int(jb) for jb in np.flatnonzero(self.computed[ib])]

    def queries(self, jb: int) -> list:
        return [int(ib) for ib in np.flatnonzero(self.computed[:, jb])]

    def untouched(self, ib: int, jb: int) -> bool:
        """True when the tile's scores go to the softmax as they are: no score_mod, no mask work."""
        return self.score_mod is None and bool(self.full[ib, jb])

    def apply(self, s, i0: int, i1: int, j0: int, j1: int, ib: int, jb: int):
        """score_mod, then the mask, in place on one tile `s`, (B, H, n, m) with mods, (..., n, m) without; returns keep or None."""
        if not self.mods:  # causal alone: 2-D index arrays broadcast anywhere
            i = (
                np.arange(i0, i1)[:, None]
                if not _is_torch(s)
                else _torch().arange(i0, i1, device=s.device)[:, None]
            )
            j = (
                np.arange(j0, j1)[None, :]
                if not _is_torch(s)
                else _torch().arange(j0, j1, device=s.device)[None, :]
            )
            idx = (None, None, i, j)
        else:
            idx = index_arrays(self.B, self.H, i0, i1, j0, j1, s)
        if self.score_mod is not None:
            out = self.score_mod(s, *idx)
            if tuple(out.shape) != tuple(s.shape):
                raise ValueError(
                    f"score_mod must return an array of s's shape {tuple(s.shape)}, got {tuple(out.shape)}"
                )
            s[...] = out
        if self.full[ib, jb]:
            return None
        keep = _kept(self.mask_mod, self.causal, self.N, self.M, idx)
        if _is_torch(s):
            keep = _torch().as_tensor(keep, device=s.device)
            s.masked_fill_(~keep, -math.inf)
        else:
            keep = np.asarray(keep)
            np.copyto(s, -np.inf, where=~keep)
        return keep


def _checked_blocks(blocks, mask_mod, shape, Br, Bc, causal):
    """A precomputed BlockMask must match the call: its mask_mod, shape, block sizes and causal."""
    if not isinstance(blocks, BlockMask):
        raise TypeError(
            f"block_mask must be a lab.BlockMask (from lab.block_mask), got {type(blocks).__name__}"
        )
    want = shape[:2] + (-(-shape[2] // Br), -(-shape[3] // Bc))
    if mask_mod is not None and mask_mod is not blocks.mask_mod:
        raise ValueError(
            "block_mask was built from another mask_mod than the one passed"
        )
    if blocks.kind.shape != want or (blocks.block_q, blocks.block_k, blocks.causal) != (
        Br,
        Bc,
        causal,
    ):
        raise ValueError(
            f"block_mask was built for kind {blocks.kind.shape}, blocks ({blocks.block_q}, {blocks.block_k}), "
            f"causal={blocks.causal}; this call needs {want}, ({Br}, {Bc}), causal={causal}"
        )
    return blocks.mask_mod


def score_mod_grad(score_mod, s, ds, idx):
    """$dS \\circ \\partial s'/\\partial s$ on one tile: the builder's derivative, or torch autograd through `score_mod`.

    Raises ValueError when the output does not depend differentiably on `s` (a derivative the kernel cannot know).
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    derivative = getattr(score_mod, "derivative", None)
    if derivative is not None:
        g = derivative(s, *idx)
        return ds if g is None else ds * g
    import torch  # autograd through the mod: the torch kernels' backward

    with torch.enable_grad():
        x = s.detach().requires_grad_(True)
        y = score_mod(x, *idx)
        if not (_is_torch(y) and y.requires_grad):
            raise ValueError(
                "score_mod: its output does not depend differentiably on s, so the backward cannot know "
                "its derivative; write it with torch operations on s (or use no score_mod for training)"
            )
        (g,) = torch.autograd.grad(y, x, ds)
    return g
