"""``select(c, a, b)``: ``a if c else b`` as one LLVM ``select`` instruction, for the lockstep module's lane loops.

``LaneRewriter`` writes each store of a masked lane loop as ``x = new if mask else x`` (``kernels/lanes.py``).
As a conditional expression each of them is a branch: three basic blocks in numba's IR, whose front end (SSA,
liveness) costs more than linearly in the blocks of a function, and LLVM folds them back into a select. The
intrinsic is that select from the start: one call in numba's IR, both operands evaluated (they are loads and
arithmetic without effects: ``LaneRewriter`` passes only such), the value of the unified type of a and b.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


@intrinsic
def select(typingctx, cond, a, b):
    """a where cond (a bool or a number, nonzero) else b: one LLVM select, no branch."""
    a, b = types.unliteral(a), types.unliteral(b)
    res = a if a == b else typingctx.unify_pairs(a, b)
    if not isinstance(res, (types.Number, types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        c, x, y = args
        c = context.is_true(builder, signature.args[0], c)
        x = context.cast(builder, x, signature.args[1], res)
        y = context.cast(builder, y, signature.args[2], res)
        return builder.select(c, x, y)

    return res(types.unliteral(cond), a, b), codegen
