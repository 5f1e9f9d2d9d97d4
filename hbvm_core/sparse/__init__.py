"""The sparse path: problems whose constraint gradient G has a known sparsity pattern (docs/method.md,
"The sparse path").

- ``structure.SparseG``: the pattern of G (which coordinates each constraint touches) and its values as a
  vectorised callback; the products G lam and G^T v over the nonzeros.
- ``normal.NormalPattern``: the pattern of G^T M^-1 G and the assembly of sum_j L_j^T M^-1 R_j over it.
- ``factor.Factorisation``: a sparse LU (or banded) solve whose ordering is found once per pattern.
- ``hbvm.SparseSweep``: the fixed-point HBVM(k, s) sweep on that structure (``compiled``: its work after the
  callbacks as one compiled function where G^T M^-1 G is tridiagonal and numba imports); ``rattle.SparseRattle``: the
  products and solves of RATTLE's step (``methods.rattle.rattle_step``) on it (the methods' numpy steppers hand
  their work to them on the sparse path).
- ``blended``: the simplified-Newton iteration of HBVM(k, s) with its Newton matrix sparse.
- ``checks``: ``Problem.validate``, the hidden constraint and lambda(q, p) on the sparse G.
- ``path.sparse_path``: whether a run takes it (automatic by size).
"""

from .path import SPARSE_MIN_M, sparse_path
from .structure import SparseG

__all__ = ["SPARSE_MIN_M", "SparseG", "sparse_path"]
