"""What the lockstep forms of the other templates share (``rattle_lanes.py``, ``polynomial_lanes.py``): each is a
driver text and a ``lanes.LaneLayout``, rewritten by ``lanes.LaneRewriter`` as HBVM's own form is.

- ``lane_constants``: the compile-time constants every such module has: whether M != I and diagonal (HAS_M,
  DIAG_M, L_SIZE), LANES, run-time lanes, and how the callbacks that read params take a lane's row (LANE_PARAMS,
  POINT_CALLBACKS, PARAM_CALLBACKS, POINT_FORM: as ``lanes.constants_of``);
- ``rewritten``: the template's helpers with the driver pasted (``registry.expand_inline``) and rewritten;
- ``form_module``: the generated module, cached on disk like the loops, its per-point callbacks bound.
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import lane_callbacks
from .description import template_path, template_source
from .lanes import LANES, LaneLayout, LaneRewriter, _LaneShapes, _slots, bind_point_callbacks, module_text
from .modules import by_key, generated_module, module_tag
from .registry import LOOP_BINDING, SHARED, bound_callbacks, expand_inline, resolve_callback, timed_loops


def lane_constants(
    problem, callbacks: tuple[str, ...], *, per_lane: bool | None, has_m: bool | None, diagonal: bool | None
) -> dict:
    """HAS_M, DIAG_M, L_SIZE (by default the problem's own M), LANES, RUNTIME_LANES (the loops over lanes run to a
    run-time LANES: ``lanes.LaneRewriter._runtime_lanes``), and the callbacks' forms (``lanes.constants_of``: a
    params row per point where a callback has that form, else lane by lane; ``per_lane`` None: the module of a
    block of one params row, the per-lane one where no callback needs calling lane by lane)."""
    M = None if problem.M is None else np.atleast_2d(np.asarray(problem.M, dtype=float))
    has_m = M is not None if has_m is None else has_m
    diagonal = (M is None or not np.any(M - np.diag(np.diag(M)))) if diagonal is None else diagonal
    points, lanes = [], []
    for name in callbacks if per_lane is not False else ():
        f = getattr(problem.kernels, name)
        f = None if f is None else resolve_callback(name, f)[0]
        if f is not None and lane_callbacks.reads_params(f):
            (points if lane_callbacks.per_point(f) is not None else lanes).append(name)
    if per_lane is None:
        per_lane = not lanes
        points = points if per_lane else []
    return {"HAS_M": has_m, "DIAG_M": has_m and diagonal, "L_SIZE": problem.m if has_m else 0, "LANES": LANES,
            "RUNTIME_LANES": True, "LANE_PARAMS": per_lane, "POINT_CALLBACKS": tuple(points),
            "PARAM_CALLBACKS": tuple(lanes), "POINT_FORM": lane_callbacks.version() if points else ""}  # fmt: skip


def rewritten(
    template: str, driver: str, constants: dict, layout: LaneLayout, tables=(), edit: Callable[[str], str] = str
) -> str:
    """The module's source: ``template``'s helpers (its text up to ``run_chunk``, ``edit`` applied) with ``driver``
    pasted, its helpers and the shared ones expanded, rewritten by ``LaneRewriter`` with ``layout``; ``tables`` (in
    the order of ``layout.tables``) frozen as module constants ``TABLE_<name>``."""
    text = template_source(template)
    text = edit(text[: text.index("@njit(cache=CACHE)\ndef run_chunk(")])  # the helpers, not the loop
    driver = re.sub(r"\\\n\s*", "", driver)  # one line a call, for expand_inline
    expanded = expand_inline(text + "\n" + driver, *(path.read_text() for path in SHARED))
    tree = _LaneShapes(layout.arrays).visit(ast.parse(expanded))
    slots = _slots(constants, (), layout)
    tree = LaneRewriter(slots, dict(constants) | {"OK": 0}, (), layout).visit(tree)
    ast.fix_missing_locations(tree)
    return module_text(tree, slots, layout.tables, tables)


def form_module(
    generator: str, template: str, problem, constants: dict, callbacks: tuple[str, ...],
    source: Callable[[], str], tables=(),
) -> types.ModuleType:  # fmt: skip
    """The lockstep module that ``generator`` (a file of this folder, ``rattle_lanes.py``, ...) makes from
    ``template`` for the problem's ``callbacks`` and ``constants`` (``source`` generates its text): one per key in
    the process, cached on disk by the hash of what makes it (these files, the template, the tables)."""
    kernels = problem.kernels
    bound_names = tuple(getattr(kernels, name) for name in callbacks)
    key = (generator, tuple(sorted(constants.items())), bound_names, tuple(np.asarray(t).tobytes() for t in tables))

    def build() -> types.ModuleType:
        import numba

        bound = bound_callbacks(callbacks, kernels, constants["NU_SIZE"])
        here = Path(__file__)
        files = (here.with_name(generator), here, here.with_name("lanes.py"), here.with_name("modules.py"))
        files += (here.with_name("registry.py"), template_path(template), here.with_name("description.py"))
        files += (here.with_name("lane_select.py"), template_path("preamble"), *SHARED)
        parts = [path.read_bytes() for path in files]
        parts += [np.ascontiguousarray(table, dtype=float).tobytes() for table in tables]
        prefix = generator.removesuffix(".py").replace("_", "")
        tag = module_tag(prefix, parts, numba.__version__, bound, constants)
        origin = f"hbvm_core.kernels.{generator.removesuffix('.py')} from {template}.py"
        module = generated_module(tag, source, bound, constants, LOOP_BINDING, origin, finish=timed_loops)
        bind_point_callbacks(module, kernels, constants)
        return module

    return by_key(key, build)
