"""Problems with repeated structure written once: indexed coordinates, sums and families of constraints.

A chain of n beads joined by rods is ``coordinates: {x: "i in 1..n", y: "i in 1..n"}``, one constraint
``{for: "i in 1..n", g: "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - l**2"}`` with ``fixed: {"x[0]": 0, "y[0]": 0}``
(docs/configuration.md, "Indexed problems"). Each term is derived once, with respect to its own few references
(``terms``); at the params' values the coordinates are numbered (``layout``) and the callbacks and the sparse
pattern of G evaluate each term over its whole range as numpy arrays (``assembly``), so the sparse path serves
large problems.

- ``terms``: ranges, one term's references and its derivatives as numpy functions.
- ``layout``: the numbering of the coordinates, fixed values, the column each reference reads.
- ``assembly``: U, grad_U, g, d2g and the nonzeros of G from the terms.
- ``model``: the mapping read and checked (``IndexedModel``), its Problem at parameter values.
"""

from __future__ import annotations

from ..errors import keywords_checked
from ..problem import Problem
from .model import KEYS, REQUIRED, IndexedModel, is_indexed


@keywords_checked
def from_indexed(
    name: str,
    coordinates: dict,
    potential,
    q0,
    p0,
    *,
    params: dict | None = None,
    mass=1,
    constraints=(),
    fixed: dict | None = None,
    linear_algebra: str = "auto",
) -> Problem:
    """A Problem from the indexed form (the keys of a config's indexed ``problem:`` mapping).

    Parameters
    ----------
    name : str
    coordinates : dict
        Family name -> range ``"i in lo..hi"`` (bounds: integer formulas of the params).
    potential
        A formula, ``{"sum": "i in a..b", "term": formula}``, or a list of them.
    q0, p0, mass
        One formula of the family's index and the params per family (``{"x": ..., "y": ...}``), or one for all.
    params : dict, optional
        Name -> value; those in ranges and indices must be integers.
    constraints : list, optional
        Formulas (one constraint each) and ``{"for": "i in a..b", "g": formula}`` (one per index).
    fixed : dict, optional
        Reference -> value (``{"x[0]": 0}``): references outside their family's range.
    linear_algebra : {"auto", "sparse", "dense"}
        The numpy steppers' path (``sparse.path``).
    """
    from ..expressions import MAX_SECONDS, time_limit

    with time_limit(MAX_SECONDS, f"problem {name!r}"):
        model = IndexedModel(name, coordinates, potential, q0, p0, params, mass, constraints, fixed)
    return model.problem(linear_algebra=linear_algebra)


__all__ = ["KEYS", "REQUIRED", "IndexedModel", "from_indexed", "is_indexed"]
