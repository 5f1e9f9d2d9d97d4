"""Fingerprints of what determines the numbers of a run: the problem as built, and the numerics.

``problem_fingerprint(problem)`` hashes, bit for bit, what the problem computes:
q0, p0, M, params, sizes and period, and the values of its callbacks (U, grad_U,
g, G, d2g where given) at q0 and at a few fixed probe points near it. Its
compiled callbacks (``Problem.kernels``) are covered by the source of the
module that defines each one (parsed, so comments and formatting do not count)
and, where they are numba functions already, by the values of their Python
functions at the same points. Cached on the problem instance.

``method_fingerprint(entry)`` identifies the numerics of one method entry's
kind (HBVM constant multiplier per solver, polynomial multiplier, RATTLE,
DOP853): the package version, the bits of a few steps of that kind on a small
probe problem (the numpy path), and for the kinds with a compiled loop the
parsed source of the loop modules. A refactor that changes no number and no
loop leaves it unchanged. The steps cost about a second (scipy's DOP853 import
mostly), so their bits are cached per process and on disk under the kernel
cache directory, keyed by the bytes of every source file of this package and
the numpy/scipy versions: any edit recomputes them (not the runs).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from ._version import __version__

PACKAGE = Path(__file__).resolve().parent
#: the loop modules of the compiled paths, by method kind (parsed source hashed)
LOOP_SOURCES = {
    "hbvm-constant": ("kernels/hbvm.py", "kernels/runner.py"),
    "hbvm-polynomial": ("kernels/polynomial.py", "kernels/runner.py"),
    "rattle": ("kernels/rattle.py", "kernels/runner.py"),
    "dop853": (),
}
#: the probe runs of each method kind: (method entry, steps)
PROBES = {
    "hbvm-constant-fixed-point": {"k": 3, "s": 2, "solver": "fixed-point"},
    "hbvm-constant-blended": {"k": 3, "s": 2, "solver": "blended"},
    "hbvm-polynomial": {"k": 4, "s": 2, "multiplier": "polynomial", "projection": True},
    "rattle": {"method": "rattle"},
    "dop853": {"method": "dop853", "rtol": 1e-8, "projection": True},
}
PROBE_STEPS = 4
PROBE_H = 0.05
_ATTR = "_hbvm_fingerprint"


# --------------------------------------------------------------------------- helpers
def _feed(digest, label: str, value) -> None:
    """Add a labelled value to ``digest``: arrays bit for bit (dtype, shape, bytes), others as JSON."""
    digest.update(f"\n{label}:".encode())
    if value is None:
        digest.update(b"none")
        return
    if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)) and value and hasattr(value[0], "shape"):
        arr = np.ascontiguousarray(np.asarray(value))
        digest.update(f"{arr.dtype.str}{arr.shape}".encode())
        digest.update(arr.tobytes())
        return
    digest.update(json.dumps(value, sort_keys=True, default=repr).encode())


def _call(f, *args):
    """f(*args) as a float array, or the name of what it raised (a fingerprint never fails on a callback)."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(f(*args), dtype=float)
    except Exception as exc:  # noqa: BLE001 - the fingerprint records it instead
        return f"raised {type(exc).__name__}"


def probe_points(q0: np.ndarray, n: int = 3) -> np.ndarray:
    """q0 and ``n`` fixed deterministic points near it, shape (n + 1, m)."""
    m = q0.size
    scale = 1e-2 * (1.0 + float(np.max(np.abs(q0)))) if m else 0.0
    rows = [q0] + [q0 + scale * np.cos(0.7 * (j + 1) * np.arange(1, m + 1) + j) for j in range(n)]
    return np.array(rows, dtype=float)


def source_digest(path: str | os.PathLike) -> str:
    """The hash of a Python file's syntax tree without docstrings (comments and formatting do not count).

    Cached per process by the file's content (reading it is cheap; parsing it is not)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return "unreadable"
    return _source_digest(data)


@functools.lru_cache(maxsize=64)
def _source_digest(data: bytes) -> str:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return "unreadable"
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def _module_file(module: str) -> str | None:
    """The file of ``module`` without importing it (its parent packages are imported)."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__file__", None)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


# --------------------------------------------------------------------------- problems
def problem_fingerprint(problem) -> str:
    """A hex digest of what ``problem`` computes (see the module docstring); cached on the instance."""
    cached = problem.__dict__.get(_ATTR)
    if cached is not None:
        return cached
    d = hashlib.sha256(b"hbvm-problem/1")
    Q = probe_points(problem.q0)
    V = probe_points(problem.p0)[::-1]
    _feed(d, "q0", problem.q0)
    _feed(d, "p0", problem.p0)
    _feed(d, "M", None if problem.M is None else np.asarray(problem.M, dtype=float))
    _feed(d, "params", problem.params)
    _feed(d, "sizes", [problem.m, problem.nu, problem.period])
    for key in ("U", "grad_U", "g", "G"):
        f = getattr(problem, key)
        _feed(d, key, None if f is None else _call(f, Q))
    _feed(d, "d2g", None if problem.d2g is None else _call(problem.d2g, Q, V))
    _feed_kernels(d, problem.kernels, Q, problem.m, problem.nu)
    value = d.hexdigest()[:16]
    problem.__dict__[_ATTR] = value
    return value


def _feed_kernels(d, kernels, Q, m: int, nu: int) -> None:
    if kernels is None:
        _feed(d, "kernels", None)
        return
    params = np.asarray(getattr(kernels, "params", ()), dtype=float)
    _feed(d, "kernels.params", params)
    for key in ("grad_U", "G", "g"):
        f = getattr(kernels, key, None)
        if f is None:
            if key != "g":  # a problem without a compiled g keeps the fingerprint it had before g was one
                _feed(d, f"kernels.{key}", None)
            continue
        if isinstance(f, str):  # 'module:function': its module's source (importing it would import numba)
            module, _, attr = f.partition(":")
            origin = _module_file(module)
            _feed(d, f"kernels.{key}", [f, source_digest(origin) if origin else "not found"])
            continue
        py = getattr(f, "py_func", f)
        module = getattr(py, "__module__", None)
        origin = _module_file(module) if module and module != "__main__" else None
        _feed(d, f"kernels.{key}.source", [getattr(py, "__qualname__", repr(py)), origin and source_digest(origin)])
        out = np.zeros({"grad_U": (len(Q), m), "G": (len(Q), m, nu), "g": (len(Q), nu)}[key])
        try:
            with np.errstate(all="ignore"):
                py(Q, out, params)
            _feed(d, f"kernels.{key}", out)
        except Exception as exc:  # noqa: BLE001
            _feed(d, f"kernels.{key}", f"raised {type(exc).__name__}")


# --------------------------------------------------------------------------- numerics
def method_kind(entry: dict) -> str:
    """The numerics kind of a method entry: hbvm-constant-<solver>, hbvm-polynomial, rattle or dop853."""
    kind = entry.get("method", "hbvm")
    if kind != "hbvm":
        return str(kind)
    if entry.get("multiplier", "constant") == "polynomial":
        return "hbvm-polynomial"
    return f"hbvm-constant-{entry.get('solver', 'fixed-point')}"


def method_fingerprint(entry: dict) -> str:
    """A hex digest of the numerics of ``entry``'s kind (see the module docstring): version, probe bits, loops."""
    return _kind_fingerprint(method_kind(entry))


@functools.cache
def _kind_fingerprint(kind: str) -> str:
    d = hashlib.sha256(f"hbvm-numerics/1 {__version__} {kind}".encode())
    cached = probe_bits()
    d.update(str(cached.get(kind, "no probe")).encode())
    loops = LOOP_SOURCES.get("hbvm-constant" if kind.startswith("hbvm-constant") else kind, ())
    for rel in loops:
        d.update(f"{rel}={cached.get(rel) or source_digest(PACKAGE / rel)}".encode())
    return d.hexdigest()[:16]


def package_digest() -> str:
    """The hash of every source file of hbvm_core (bytes) and the numpy, scipy and Python versions."""
    import scipy

    d = hashlib.sha256(f"{np.__version__} {scipy.__version__} {sys.version}".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        d.update(str(path.relative_to(PACKAGE)).encode())
        d.update(path.read_bytes())
    return d.hexdigest()[:20]


@functools.lru_cache(maxsize=1)
def probe_bits() -> dict[str, str]:
    """{kind: digest of a few probe steps} and {loop module: ``source_digest``}, from the disk cache when the
    package's source is unchanged (parsing the loop modules costs a tenth of a second)."""
    from .kernels.registry import cache_dir

    path = cache_dir() / f"numerics-{package_digest()}.json"
    try:
        with open(path) as fh:
            found = json.load(fh)
        if isinstance(found, dict) and set(found) == set(PROBES) | set(_loop_files()):
            return found
    except (OSError, ValueError):
        pass
    found = {kind: _probe(entry) for kind, entry in PROBES.items()}
    found |= {rel: source_digest(PACKAGE / rel) for rel in _loop_files()}
    try:  # a cache that cannot be written costs the probes again next time, nothing else
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(found, fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return found


def _loop_files() -> list[str]:
    return sorted({rel for rels in LOOP_SOURCES.values() for rel in rels})


def _probe(entry: dict) -> str:
    """The digest of PROBE_STEPS steps of ``entry`` on the planar pendulum (numpy path), bit for bit."""
    from .errors import HBVMError
    from .integrate import integrate
    from .methods import from_spec
    from .problems import planar_pendulum

    d = hashlib.sha256()
    try:
        traj = integrate(planar_pendulum(), from_spec(entry), PROBE_H, PROBE_H * PROBE_STEPS, backend="numpy")
    except (HBVMError, FloatingPointError) as exc:
        return f"raised {type(exc).__name__}"
    for name in ("t", "q", "p", "lam", "iterations"):
        _feed(d, name, np.asarray(getattr(traj, name)))
    return d.hexdigest()[:16]


__all__ = ["method_fingerprint", "method_kind", "package_digest", "probe_points", "problem_fingerprint"]
