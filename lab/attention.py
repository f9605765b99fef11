"""Attention in numpy: the rungs 0-3 of the kernel ladder, re-exported from `lab.kernels`.

The kernels themselves live one module per rung in `lab/kernels/` (its docstring is the ladder's table):
`attention_reference` (rung 0), `attention_naive` (rung 1), `flash_attention_numpy(variant="fa1")`
(rung 2) and `flash_attention_numpy(variant="fa2")` (rung 3), with the causal rule (`causal_mask`,
`causal_key_end`) and the -inf guard (`safe_exp_shift`) in `lab/rules.py`. This module keeps
`from lab.attention import ...` working.

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb
"""

from .kernels import *  # noqa: F401,F403
from .kernels import __all__  # noqa: F401
from .validate import check_qkv as _checked  # noqa: F401 (old names)
from .validate import group_view as _grouped  # noqa: F401
from .validate import ungroup_view as _ungrouped  # noqa: F401
