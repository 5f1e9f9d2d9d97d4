"""What every template's generated module starts with: its imports and the names the generator binds.

Each template (``hbvm.py``, ``polynomial.py``, ``rattle.py``, ``reference.py``) opens with
``from hbvm_core.kernels.preamble import *``, and the builder pastes this file's code in that line's place
(``description.template_source``): the generated module holds these lines as text, as it holds the template's
(so the in-memory module's ``CACHE = False`` finds its line, ``modules.generated_module``). A template declares
here only what is its own (HBVM's k, s and solver, RATTLE's g, the reference's d2g).

The names below are placeholders that the generated module binds after them: the problem's callbacks and the
compile-time constants in its footer (``modules._with_footer``: numba freezes globals, so the loops over m and
nu unroll and the code for M = I or nu = 0 is pruned), the fields of ``state`` and ``info``
(``description.field_source``). Never imported when a loop runs: the generated modules hold its text.
"""

import numpy as np  # noqa: F401
from numba import njit  # noqa: F401

from hbvm_core.kernels.linalg import minv, solve_small  # noqa: F401 (pasted by the generator)
from hbvm_core.kernels.rules import (  # noqa: F401 (pasted by the generator)
    DIVERGED,
    NO_CONVERGENCE,
    NON_FINITE_STATE,
    OK,
    SINGULAR,
    compensated_add,
    converged,
    inline_source,
    record_failure,
    save_rows,
)

CACHE = True  # the generator writes False for callbacks that cannot be imported by name
# the fields of run_chunk's state and info: set by the generated module from the loop's description
# (kernels/description.py, ``field_source``)
STATE_N = STATE_HAVE_PREV = STATE_POINTS = STATE_STEPS = STATE_ITERATIONS = STATE_MAX_ITERATIONS = None
STATE_COMPENSATED = INFO_STATUS = INFO_STEP = INFO_ITERATIONS = INFO_INCREMENT = None
# bound by the generated module: the problem's compiled callbacks (inlined copies, and the originals), and the
# compile-time constants m, nu and whether M != I
grad_U = grad_U_original = None
G = G_original = None
M_SIZE = 0
NU_SIZE = 0
HAS_M = False
