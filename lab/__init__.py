"""`lab`: the engine of "FlashAttention from first principles".

The notebooks are thin; everything they compute lives here, tested. Each module's docstring says what
it teaches and which notebook uses it.
"""

from .access_count import *  # noqa: F401,F403
from .activations import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .backward import *  # noqa: F401,F403
from .merge import *  # noqa: F401,F403
from .distributed import *  # noqa: F401,F403
from .exercises import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .decoding import *  # noqa: F401,F403
from .tiling import *  # noqa: F401,F403
from .mask_checks import *  # noqa: F401,F403
from .masks import *  # noqa: F401,F403
from .checks.masks import *  # noqa: F401,F403
from .measure import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .notebook import *  # noqa: F401,F403
from .one_pass import *  # noqa: F401,F403
from .softmax_steps import *  # noqa: F401,F403
from .overflow import *  # noqa: F401,F403
from .precision import *  # noqa: F401,F403
from .precision_experiments import *  # noqa: F401,F403
from .precision_fa3 import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .states import *  # noqa: F401,F403
from .torch_kernels import *  # noqa: F401,F403
from .triton_kernels import *  # noqa: F401,F403
from .triton_backward import *  # noqa: F401,F403
from . import figures, trace, widgets  # noqa: F401

__version__ = "0.1.0"
