"""The GPU loop module's source: the SAME expanded template as the CPU loop, rewritten for numba-cuda.

``cuda_loop_source(template, sizes)`` takes the template's source with the
``@inline_source`` helpers of ``rules.py`` and ``linalg.py`` pasted in
(``registry.expand_inline``, exactly as for the CPU module) and rewrites it, on
its syntax tree, so that numba-cuda compiles it as a device function; the
arithmetic is not touched:

- ``run_chunk``'s ``@njit(cache=CACHE)`` becomes ``@cuda.jit(device=True)``;
- each work array ``x = np.empty(shape[, dtype])`` / ``np.zeros(shape)`` becomes
  ``x = cuda.local.array(shape, dtype)`` with the shape evaluated to integer
  literals from the compile-time sizes (``sizes``: the names k, s, m, nu and
  sm = s m of the templates; a dimension of size 0 is allocated as 1, never
  read), followed by a zero fill for ``np.zeros`` (per-thread local memory
  is not zeroed; the CPU loop's zeros are its initial values);
- scalar ``np.isfinite(x)`` (and the other scalar functions in ``SCALAR_MATH``)
  becomes ``math.isfinite(x)`` (numba-cuda has no numpy ufuncs).

Anything else of numpy called in the template is an error here (``ValueError``),
so a template change that the rewrite does not cover fails when the module is
built, not on the GPU. ``run_block_source`` is the kernel: one thread per run.
Imports neither numba nor numba.cuda (text only).
"""

from __future__ import annotations

import ast

#: numpy scalar functions of the templates -> the math module's (the same IEEE results on float64 scalars)
SCALAR_MATH = {"isfinite": "isfinite", "isnan": "isnan", "expm1": "expm1", "log1p": "log1p", "sqrt": "sqrt"}
#: numpy attributes that numba-cuda reads as constants or dtypes
NUMPY_CONSTANTS = {"nan", "inf", "int64", "int32", "float64"}
#: numpy allocations of work arrays -> whether the CPU loop's array starts as zeros
ALLOCATIONS = {"empty": False, "zeros": True}


def _dims(node: ast.expr, sizes: dict[str, int]) -> tuple[int, ...]:
    """The integer dimensions of an allocation's shape expression, from the compile-time ``sizes``."""
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    dims = []
    for part in parts:
        names = {n.id for n in ast.walk(part) if isinstance(n, ast.Name)}
        unknown = names - set(sizes)
        if unknown or any(isinstance(n, ast.Call | ast.Attribute | ast.Subscript) for n in ast.walk(part)):
            raise ValueError(f"work array shape {ast.unparse(part)!r}: not a compile-time size ({sorted(unknown)})")
        value = eval(compile(ast.Expression(part), "<shape>", "eval"), {"__builtins__": {}}, dict(sizes))  # noqa: S307
        dims.append(max(int(value), 1))
    return tuple(dims)


def _is_numpy(node: ast.expr, attrs) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "np"
        and node.func.attr in attrs
    )


def _dtype(call: ast.Call) -> str:
    kinds = [kw.value for kw in call.keywords if kw.arg == "dtype"] + call.args[1:]
    if not kinds:
        return "np.float64"
    text = ast.unparse(kinds[0])
    if text not in ("np.int64", "np.int32", "np.float64", "float"):
        raise ValueError(f"work array dtype {text!r}: expected np.float64, np.int64 or np.int32")
    return "np.float64" if text == "float" else text


def _local_array(target: ast.expr, call: ast.Call, sizes: dict[str, int], counter: list[int]) -> list[ast.stmt]:
    """``target = cuda.local.array(dims, dtype)``, and the zero fill of an ``np.zeros``."""
    dims = _dims(call.args[0], sizes)
    name = ast.unparse(target)
    lines = [f"{name} = cuda.local.array({dims!r}, {_dtype(call)})"]
    if ALLOCATIONS[call.func.attr]:
        counter[0] += 1
        idx = [f"_z{counter[0]}_{i}" for i in range(len(dims))]
        for depth, (i, d) in enumerate(zip(idx, dims)):
            lines.append("    " * depth + f"for {i} in range({d}):")
        lines.append("    " * len(dims) + f"{name}[{', '.join(idx)}] = 0")
    return ast.parse("\n".join(lines)).body


class _ToCuda(ast.NodeTransformer):
    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.counter = [0]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        if node.name == "run_chunk":
            node.decorator_list = [ast.parse("cuda.jit(device=True)", mode="eval").body]
        return node

    def visit_Assign(self, node: ast.Assign):
        value = node.value
        if _is_numpy(value, ALLOCATIONS) and len(node.targets) == 1:
            return _local_array(node.targets[0], value, self.sizes, self.counter)
        if (
            isinstance(value, ast.Tuple)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple)
            and all(_is_numpy(v, ALLOCATIONS) for v in value.elts)
        ):
            out: list[ast.stmt] = []
            for target, call in zip(node.targets[0].elts, value.elts, strict=True):
                out += _local_array(target, call, self.sizes, self.counter)
            return out
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if _is_numpy(node, SCALAR_MATH):
            node.func = ast.Attribute(value=ast.Name("math", ast.Load()), attr=SCALAR_MATH[node.func.attr])
        return node


def to_cuda(source: str, sizes: dict[str, int]) -> str:
    """The expanded template ``source`` rewritten for numba-cuda (see the module docstring)."""
    tree = _ToCuda(sizes).visit(ast.parse(source))
    ast.fix_missing_locations(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "np":
            if node.attr not in NUMPY_CONSTANTS:
                raise ValueError(f"np.{node.attr} in a template: numba-cuda has no such function (kernels/cuda_source)")
    return ast.unparse(tree)


#: run_chunk's parameters that belong to one run -> the kernel's local array or value for it (the names of
#: ``kernels/ensemble.PER_RUN``; every other parameter but N and save_every is shared by the block, passed through)
LOCAL = {
    "q": "cuda.local.array({m}, np.float64)",
    "p": "cuda.local.array({m}, np.float64)",
    "cq": "cuda.local.array({m}, np.float64)",
    "cp": "cuda.local.array({m}, np.float64)",
    "gamma_prev": "cuda.local.array(({g}, {m}), np.float64)",
    "lam_prev": "cuda.local.array({nu}, np.float64)",
    "lam": "cuda.local.array({nu}, np.float64)",
    "state": "cuda.local.array({state}, np.int64)",
    "info": "cuda.local.array({info}, np.float64)",
    "q_fail": "cuda.local.array({m}, np.float64)",
    "pt_t": "cuda.local.array({rows}, np.float64)",
    "pt_q": "cuda.local.array(({rows}, {m}), np.float64)",
    "pt_p": "cuda.local.array(({rows}, {m}), np.float64)",
    "st_t": "cuda.local.array({rows}, np.float64)",
    "st_lam": "cuda.local.array(({rows}, {nu}), np.float64)",
    "st_it": "cuda.local.array({rows}, np.int32)",
}
#: run_chunk's per-run scalars and views of the block's arrays (structure-of-arrays: the run axis last)
VIEWS = {"h": "h[r]", "P": "params[:, r]", "params": "params[:, r]", "L": "L[:, :, r]"}
#: set per call: the steps to run to and the save rule
CALL = {"N": "n_call", "save_every": "every_call"}
#: the kernel: run r = the thread's global index. Its time loop is the CPU ensemble's (kernels/ensemble.py): the
#: steps to N - 1 by the run's save rule, then the last step with save_every 1, so that the step row of the last
#: step (its multiplier: the result's lam) is kept and the points are those of the rule (a point N - 1 kept only
#: as the last point of the first part is dropped); after each call of run_chunk the points go to global memory.
KERNEL = """

@cuda.jit(cache=CACHE)
def run_block(q0, p0, lam0, h, N, sample_every, params, L, compensated, {shared}
              status, fail_step, steps, iterations, max_iterations, n_saved, t, q_out, p_out, lam_out):
    \"\"\"Run r of the block by this module's run_chunk; q0[a, r], t[i, r], q_out[i, a, r], lam_out[b, r].\"\"\"
    r = cuda.grid(1)
    if r >= q0.shape[1]:
        return
    m, nu = M_SIZE, NU_SIZE
{local}
    for a in range(m):
        _q[a] = q0[a, r]
        _p[a] = p0[a, r]
        q_out[0, a, r] = q0[a, r]
        p_out[0, a, r] = p0[a, r]
{clear}
    for b in range(nu):
        lam_run[b] = np.nan
{lam_start}
    t[0, r] = 0.0
    _state[STATE_COMPENSATED] = 1 if compensated else 0
    n_run, every = N[r], sample_every[r]
{views}
    saved = 1
    code = OK
    while code == OK and _state[STATE_N] < n_run:
        last = _state[STATE_N] >= n_run - 1
        n_call = n_run if last else n_run - 1
        every_call = 1 if last else every
        code = run_chunk({call})
        rows = _state[STATE_POINTS]
        if code == OK and not last and _state[STATE_N] == n_run - 1 and (n_run - 1) % every != 0:
            rows -= 1  # point N - 1 was kept only as the last point of the first part
        for i in range(rows):
            t[saved, r] = _pt_t[i]
            for a in range(m):
                q_out[saved, a, r] = _pt_q[i, a]
                p_out[saved, a, r] = _pt_p[i, a]
            saved += 1
        if code == OK and last and _state[STATE_STEPS] > 0:
            for b in range(nu):
                lam_run[b] = _st_lam[_state[STATE_STEPS] - 1, b]
        _state[STATE_POINTS] = 0
        _state[STATE_STEPS] = 0
    for i in range(saved, t.shape[0]):
        t[i, r] = np.nan
        for a in range(m):
            q_out[i, a, r] = np.nan
            p_out[i, a, r] = np.nan
    status[r] = code
    fail_step[r] = -1 if code == OK else int(_info[INFO_STEP])
    steps[r] = _state[STATE_N]
    iterations[r] = _state[STATE_ITERATIONS]
    max_iterations[r] = _state[STATE_MAX_ITERATIONS]
    n_saved[r] = saved
    for b in range(nu):
        lam_out[b, r] = lam_run[b] if code == OK and n_run > 0 else np.nan
"""


#: the kernel's own names, which a shared parameter must not take
KERNEL_NAMES = frozenset(
    "q0 p0 lam0 h N sample_every params L compensated status fail_step steps iterations max_iterations n_saved t "
    "q_out p_out lam_out r m nu a b i j lam_run n_run every saved code last n_call every_call rows".split()
)


def shared_parameters(names: list[str]) -> list[str]:
    """run_chunk's parameters shared by the block (in run_chunk's order: ``ensemble.BLOCK_SHARED``'s)."""
    shared = [n for n in names if n not in LOCAL and n not in VIEWS and n not in CALL]
    clash = sorted(set(shared) & KERNEL_NAMES)
    if clash:
        raise ValueError(f"run_chunk parameter {clash[0]!r}: a name of the GPU kernel (kernels/cuda_source)")
    return shared


def run_block_source(names: list[str], sizes: dict[str, int], rows: int, gamma_rows: int, fields: dict) -> str:
    """The kernel ``run_block`` for a template whose ``run_chunk`` has the parameters ``names``: its local arrays
    sized by the compile-time ``sizes`` (0 allocated as 1), ``rows`` rows of point and step buffer per call, the
    carried guess of ``gamma_rows`` rows; ``fields``: the state and info fields (``LoopDescription.fields``), whose
    names the kernel reads (the module's constants) and whose sizes its local arrays take."""
    dims = {"m": max(sizes["m"], 1), "nu": max(sizes["nu"], 1), "g": max(gamma_rows, 1), "rows": rows}
    dims |= {"state": fields["STATE_SIZE"], "info": fields["INFO_SIZE"]}
    own = [n for n in names if n in LOCAL]
    local = [f"    _{n} = {LOCAL[n].format(**dims)}" for n in own] + [f"    lam_run = {LOCAL['lam'].format(**dims)}"]
    clear = []
    for n in own:
        if n in ("cq", "cp", "q_fail"):
            clear.append(f"        _{n}[a] = 0.0")
        if n == "gamma_prev":
            clear.append(f"        for j in range({dims['g']}):\n            _gamma_prev[j, a] = 0.0")
    starts = [f"    for b in range(nu):\n        _{n}[b] = lam0[b, r]" for n in own if n in ("lam_prev", "lam")]
    starts += [f"    for i in range({fields['STATE_SIZE']}):\n        _state[i] = 0"]
    starts += [f"    for i in range({fields['INFO_SIZE']}):\n        _info[i] = 0.0"]
    views = [f"    _{n} = {VIEWS[n]}" for n in names if n in VIEWS]
    call = ", ".join(CALL[n] if n in CALL else f"_{n}" if n in LOCAL or n in VIEWS else n for n in names)
    shared = "".join(f"{n}, " for n in shared_parameters(names))
    return KERNEL.format(
        shared=shared, local="\n".join(local), clear="\n".join(clear), lam_start="\n".join(starts),
        views="\n".join(views), call=call,
    )  # fmt: skip


def chunk_parameters(source: str) -> list[str]:
    """The parameter names of ``run_chunk`` in a template's source."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "run_chunk":
            return [a.arg for a in node.args.args]
    raise ValueError("the template has no run_chunk")


def cuda_module_source(expanded: str, sizes: dict[str, int], rows: int, gamma_rows: int, fields: dict) -> str:
    """The generated CUDA module's text (without the footer that binds the callbacks and constants); ``expanded``
    holds the state and info fields as module constants (``registry.expanded_template``)."""
    header = [
        "import math  # noqa: F401",
        "",
        "import numpy as np  # noqa: F401",
        "from numba import cuda  # noqa: F401",
        "",
    ]
    names = chunk_parameters(expanded)
    return (
        "\n".join(header) + to_cuda(expanded, sizes) + "\n" + run_block_source(names, sizes, rows, gamma_rows, fields)
    )
