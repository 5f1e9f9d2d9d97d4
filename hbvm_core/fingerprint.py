"""What identifies the numbers of a run, the same on every host: the problem's structure and values, the numerics.

Two hosts that differ only in round-off (BLAS kernels, SIMD paths, FMA
contraction, libm, thread counts) compute a problem's values a few units in
the last place apart. Nothing here hashes such values bit for bit:

- ``problem_structure(problem)`` hashes what is exact on every host: the
  problem's name, params and sizes (m, nu), and the parsed source (docstrings,
  comments and formatting do not count: ``source_digest``) of the modules that
  define its callbacks and compiled callbacks, and of the modules they import
  that belong to the project (not the standard library or site-packages,
  except the defining module's own package). A problem with ``identity`` (a
  canonical, host-independent description: an expression problem's
  expressions) is hashed by it instead of its sources.
- ``problem_probe(problem)`` records its values: q0, p0, M, period, and the
  values of its callbacks (U, grad_U, g, G, d2g, compiled callbacks) at q0 and
  at three fixed probe points near it (a sparse G: its pattern and nonzeros). Two records agree (``probe_mismatch``)
  when every value is within ``PROBE_RTOL`` times the scale of its quantity
  (the largest magnitude over the probe points).
- ``problem_fingerprint(problem)`` is the identity of the structure alone;
  ``problem_identity`` snaps a problem to the identity recorded for the same
  structure and agreeing values (the stores of a study), or mints a new one
  when its values moved by more than round-off (a data file the factory reads).
- ``method_fingerprint(entry)`` identifies the numerics of a method entry's
  class: the canonical form (``canonical.canonical_digest``) of the modules
  that implement it (``Method.numerics_sources``: tableau, stopping rule,
  solvers, compiled loops), in which the names of locals, arguments,
  functions, classes and files, and which file a definition is in, do not
  count, while every constant (the coefficients at full precision), operation
  and order of operations does. Not the package version, nor the class's
  module and name: a release or a renaming that computes the same reruns
  nothing. No probe steps: their bits depend on the host.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import hashlib
import importlib.util
import json
import math
import os
import site
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from . import canonical
from .canonical import canonical_digest, read_sources
from .kernels.modules import cache_dir
from .methods import method_from_entry
from .probes import probe_points

PACKAGE = Path(__file__).resolve().parent
#: Two probe records agree when |a - b| <= PROBE_RTOL * scale for each value (scale: the largest magnitude of
#: that quantity over the probe points). Round-off of a callback is some m * eps ~ 1e-13 of its scale even for
#: m ~ 1e3 terms with cancellation; 1e-10 leaves a margin of 1e3 over that, and a change that matters to a
#: convergence study (errors resolved to a few digits) moves values by far more.
PROBE_RTOL = 1e-10
#: the significant digits of the values in a minted identity (its name only; agreement uses PROBE_RTOL)
MINT_DIGITS = 6
_CALLBACKS = ("U", "grad_U", "g", "G", "d2g", "exact")
_STRUCTURE, _PROBE, _CODE = "_hbvm_structure", "_hbvm_probe", "_hbvm_code"


# --------------------------------------------------------------------------- sources
def source_digest(path: str | os.PathLike) -> str:
    """The hash of a Python file's syntax tree without docstrings (comments and formatting do not count)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return "unreadable"
    return _parsed(data)[0]


@functools.lru_cache(maxsize=256)
def _parsed(data: bytes) -> tuple[str, tuple]:
    """(``source_digest``, the imports as (level, module, names)) of a source; cached per process and on disk in
    the kernel cache folder by the source's hash and the Python version (parsing costs some 50 ms a module)."""
    key = hashlib.sha256(data + sys.version.encode()).hexdigest()[:32]
    path = _digest_cache() / f"{key}.json"
    try:
        with open(path) as fh:
            digest, imports = json.load(fh)
        return str(digest), tuple((int(lv), str(m), tuple(n)) for lv, m, n in imports)
    except (OSError, ValueError, TypeError):
        pass
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return "unreadable", ()
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [(0, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module or "", tuple(a.name for a in node.names if a.name != "*")))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    found = hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16], tuple(imports)
    _cache_write(path, found)
    return found


def _cache_write(path: Path, value) -> None:
    """``value`` as JSON at ``path`` in the digest cache, published by a rename; a cache that cannot be written
    costs the work again next time, nothing else."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)
    except OSError:
        pass


@functools.cache
def _digest_cache() -> Path:
    path = cache_dir() / "source-digests"
    path.mkdir(exist_ok=True)
    return path


def _imports(data: bytes, module: str, is_package: bool) -> list[str]:
    """The absolute names of what a module's source imports (``import a.b``; ``from .x import y``: x and x.y)."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for level, base, what in _parsed(data)[1]:
        if level:
            try:
                base = importlib.util.resolve_name("." * level + base, package)
            except (ImportError, ValueError):
                continue
        names.append(base)
        names += [f"{base}.{n}" for n in what]
    return names


def _module_file(module: str) -> str | None:
    """The source file of ``module``, found without importing anything (a package's ``__init__.py``); None if
    it has none (a built-in or compiled module, an attribute of a module)."""
    found = sys.modules.get(module)
    if found is not None:
        path = getattr(found, "__file__", None)
        return path if path and path.endswith(".py") else None
    top, *rest = module.split(".")
    try:
        found = importlib.util.find_spec(top)  # a top-level name: finds, imports nothing
    except (ImportError, ValueError):
        return None
    if found is None or not found.has_location:
        return None
    if not rest:
        return found.origin if found.origin and found.origin.endswith(".py") else None
    for folder in found.submodule_search_locations or ():
        base = Path(folder, *rest)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return str(path)
    return None


@functools.cache
def _foreign_roots() -> tuple[str, ...]:
    """Folders of the standard library and of installed packages (their modules are not the project's)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def _is_project(path: str, top: set[str], module: str) -> bool:
    """A module of the user's project or of a defining module's own package (hbvm_core for built-in problems)."""
    return module.partition(".")[0] in top or not _realpath(path).startswith(_foreign_roots())


@functools.lru_cache(maxsize=1024)
def _realpath(path: str) -> str:
    return os.path.realpath(path)


def module_closure(modules: Iterable[str]) -> dict[str, str]:
    """{module: ``source_digest``} of ``modules`` and of the project modules they import, transitively.

    Remembered per set of modules in this process, and given again while every file it read still holds the same
    bytes (read again each time; what is saved is finding the modules and walking their imports): a sweep's
    problem instances share their modules."""
    key = tuple(sorted(set(modules)))
    hit = _CLOSURES.get(key)
    snapshot = _SNAPSHOT.get()
    if hit is not None and snapshot is not None and key in snapshot:
        return dict(hit[0])  # read already in this snapshot
    if hit is None or not all(_read(path) == data for path, data in hit[1]):
        hit = _CLOSURES[key] = _closure(key)
    if snapshot is not None:
        snapshot.add(key)
    return dict(hit[0])


#: the sets of modules whose files ``module_closure`` has read within the current ``sources_snapshot``
_SNAPSHOT: contextvars.ContextVar[set | None] = contextvars.ContextVar("hbvm_sources_snapshot", default=None)


@contextlib.contextmanager
def sources_snapshot():
    """Within the block, ``module_closure`` reads each set of modules' files once (the sources as they were when
    first asked): a study's grid instances share their modules, and one parse sees one version of them."""
    token = _SNAPSHOT.set(set())
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)


#: module_closure's results: modules -> (the closure, (path, bytes) of every file it read)
_CLOSURES: dict[tuple[str, ...], tuple[dict[str, str], tuple]] = {}


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _closure(modules: tuple[str, ...]) -> tuple[dict[str, str], tuple]:
    """(module_closure's result, the (path, bytes) of the files it read)."""
    defining = set(modules)
    top = {m.partition(".")[0] for m in defining}
    todo = sorted(defining)
    seen: dict[str, str] = {}
    files: list[tuple[str, bytes | None]] = []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        path = _module_file(module)
        if path is None or module not in defining and not _is_project(path, top, module):
            continue
        data = _read(path)
        files.append((path, data))
        if data is None:
            seen[module] = "unreadable"
            continue
        seen[module] = _parsed(data)[0]
        todo += [n for n in _imports(data, module, path.endswith("__init__.py")) if n not in seen]
    return dict(sorted(seen.items())), tuple(files)


def _defining_module(f) -> str | None:
    """The module that defines callable ``f`` (a numba function's Python function, a partial's function)."""
    if isinstance(f, str):  # a compiled callback named 'module:function'
        return f.partition(":")[0] or None
    f = getattr(f, "py_func", f)
    while isinstance(f, functools.partial):
        f = f.func
    module = getattr(f, "__module__", None) or type(f).__module__
    return None if module in (None, "builtins") else module  # __main__: a script's file, where it has one


def _qualname(f) -> str:
    if isinstance(f, str):
        return f
    f = getattr(f, "py_func", f)
    while isinstance(f, functools.partial):
        f = f.func
    return getattr(f, "__qualname__", type(f).__qualname__)


# --------------------------------------------------------------------------- problems
def problem_structure(problem) -> str:
    """A hex digest of what is exact about ``problem`` on every host (see the module docstring); cached."""
    cached = problem.__dict__.get(_STRUCTURE)
    if cached is not None:
        return cached
    what = {
        "name": json.dumps(problem.name, default=repr),
        "params": json.dumps(problem.params, sort_keys=True, default=repr),
        "sizes": json.dumps([problem.m, problem.nu]),
    }
    snapshot = _SNAPSHOT.get()
    code = code_key(problem) if snapshot is not None else None
    parts = _CODE_PARTS.get(code) if code is not None and code in snapshot else None
    if parts is None:
        parts = _code_parts(problem)
        if code is not None:  # the instances of one code share them within the snapshot of the sources
            _CODE_PARTS[code] = parts
            snapshot.add(code)
    what |= parts
    value = _structure_digest(_structure_text(what))
    problem.__dict__[_STRUCTURE] = value
    return value


def _structure_text(what: dict[str, str]) -> str:
    """The sorted JSON of a structure's record, written from its parts' (each sorted JSON, as json.dumps nests them)."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in sorted(what.items())) + "}"


def _structure_digest(text: str) -> str:
    return hashlib.sha256(b"hbvm-problem-structure/2\n" + text.encode()).hexdigest()[:16]


def structures_at(problem, params_texts: Iterable[str]) -> list[str]:
    """The ``problem_structure`` of problems of ``problem``'s code, name and sizes whose params have the JSON texts
    ``params_texts`` (``json.dumps(params, sort_keys=True, default=repr)``): a grid's instances, none built."""
    mark = "\x00params\x00"
    what = {
        "name": json.dumps(problem.name, default=repr),
        "params": mark,
        "sizes": json.dumps([problem.m, problem.nu]),
    } | _code_parts(problem)
    before, after = _structure_text(what).split(mark)
    return [_structure_digest(before + text + after) for text in params_texts]


def fingerprint_of(structure: str) -> str:
    """``problem_fingerprint`` of a problem whose ``problem_structure`` is ``structure``."""
    return _fingerprint(structure)


#: code_key -> the structure's parts of that code (``_code_parts``), valid within a ``sources_snapshot``
_CODE_PARTS: dict[tuple, dict[str, str]] = {}


def _code_parts(problem) -> dict[str, str]:
    """The parts of ``problem_structure`` that its code determines (its identity, or its callbacks and the
    sources they are defined in), each as sorted JSON."""
    identity = getattr(problem, "identity", None)
    if identity is not None:
        return {"identity": json.dumps(str(identity))}
    callbacks = {key: getattr(problem, key, None) for key in _CALLBACKS}
    kernels = problem.kernels
    for key in ("grad_U", "G", "g"):
        callbacks[f"kernels.{key}"] = getattr(kernels, key, None) if kernels is not None else None
    named = {k: None if f is None else _qualname(f) for k, f in callbacks.items()}
    modules = {_defining_module(f) for f in callbacks.values() if f is not None} - {None}
    return {
        "callbacks": json.dumps(named, sort_keys=True, default=repr),
        "sources": json.dumps(module_closure(modules), sort_keys=True, default=repr),
    }


def code_key(problem) -> tuple:
    """What a problem's code is, not its values: its name, sizes, mass form, identity, the optional features it
    has, and each callback's (and compiled callback's) defining module and name. Instances of one factory with
    one key differ only in values (a study checks the callbacks of one of them, ``hbvm_workflow.study``)."""
    cached = problem.__dict__.get(_CODE)
    if cached is not None:
        return cached
    mass = "identity" if problem.M is None else "diagonal" if problem._diag is not None else "full"
    callbacks = {key: getattr(problem, key, None) for key in _CALLBACKS}
    kernels = problem.kernels
    for key in ("grad_U", "G", "g", "d2g"):
        callbacks[f"kernels.{key}"] = getattr(kernels, key, None) if kernels is not None else None
    named = tuple((k, None if f is None else (_defining_module(f), _qualname(f))) for k, f in callbacks.items())
    identity = getattr(problem, "identity", None)
    key = (problem.name, problem.m, problem.nu, mass, problem.period is None, identity, named, type(kernels))
    problem.__dict__[_CODE] = key
    return key


def _record(value) -> dict | str | None:
    """A value for a probe record: {"shape", "data"} (non-finite entries as the strings nan, inf, -inf)."""
    if value is None or isinstance(value, str):
        return value
    arr = np.asarray(value, dtype=float)
    data = arr.reshape(-1).tolist()
    if not np.isfinite(arr).all():
        data = [x if math.isfinite(x) else repr(x) for x in data]
    return {"shape": list(arr.shape), "data": data}


def _call(f, *args):
    """f(*args) as a float array, or the name of what it raised (a probe never fails on a callback)."""
    try:
        return np.asarray(f(*args), dtype=float)  # within problem_probe's np.errstate(all="ignore")
    except Exception as exc:  # noqa: BLE001 - the record says so instead
        return f"raised {type(exc).__name__}"


def problem_probe(problem) -> dict:
    """The values of ``problem`` compared with a tolerance (see the module docstring); cached on the instance."""
    cached = problem.__dict__.get(_PROBE)
    if cached is not None:
        return cached
    with np.errstate(all="ignore"):
        out = _probe(problem)
    problem.__dict__[_PROBE] = out
    return out


@functools.lru_cache(maxsize=64)
def _directions(m: int, n: int = 3) -> np.ndarray:
    """The directions of ``probes.probe_points`` from q0, shape (n, m): computed as there, once per size."""
    return np.array([np.cos(0.7 * (j + 1) * np.arange(1, m + 1) + j) for j in range(n)], dtype=float)


def _points(q0: np.ndarray) -> np.ndarray:
    """``probes.probe_points(q0)``, the same values, with the directions computed once per size."""
    m = q0.size
    if not m:
        return probe_points(q0)
    scale = 1e-2 * (1.0 + float(np.max(np.abs(q0))))
    return np.concatenate([q0[None, :], q0 + scale * _directions(m)])


def _probe(problem) -> dict:
    Q = _points(problem.q0)
    V = _points(problem.p0)[::-1]
    out = {
        "q0": _record(problem.q0),
        "p0": _record(problem.p0),
        "M": _record(None if problem.M is None else np.asarray(problem.M, dtype=float)),
        "period": _record(None if problem.period is None else [float(problem.period)]),
    }
    sparse = getattr(problem, "sparse", None)
    for key in ("U", "grad_U", "g", "G"):
        f = getattr(problem, key)
        out[key] = None if f is None or (key == "G" and sparse is not None) else _record(_call(f, Q))
    if sparse is not None:  # G by its nonzeros (pattern and values): a 1000-link chain's dense G is 2 10^6 numbers
        out["G"] = _record(_call(sparse.values, Q))
        out["G.pattern"] = _record(np.concatenate([sparse.rows, sparse.cols]).astype(float))
    out["d2g"] = None if problem.d2g is None else _record(_call(problem.d2g, Q, V))
    kernels = problem.kernels
    if kernels is not None:
        params = np.asarray(getattr(kernels, "params", ()), dtype=float)
        out["kernels.params"] = _record(params)
        for key, shape in (("grad_U", (len(Q), problem.m)), ("G", (len(Q), problem.m, problem.nu)), ("g", None)):
            f = getattr(kernels, key, None)
            if f is None or isinstance(f, str):  # by name: its module's source is in the structure
                continue
            py = getattr(f, "py_func", f)
            buf = np.zeros(shape or (len(Q), problem.nu))
            try:
                py(Q, buf, params)
                out[f"kernels.{key}"] = _record(buf)
            except Exception as exc:  # noqa: BLE001
                out[f"kernels.{key}"] = f"raised {type(exc).__name__}"
    return out


def probe_mismatch(a: dict, b: dict, rtol: float = PROBE_RTOL) -> str | None:
    """None when probe records ``a`` and ``b`` agree to ``rtol`` times each quantity's scale, else one phrase
    naming the first quantity that differs and by how much."""
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if not isinstance(x, dict) or not isinstance(y, dict):
            if x != y:
                return f"{key} is {_short(y)} instead of {_short(x)}"
            continue
        if x.get("shape") != y.get("shape"):
            return f"{key} has shape {y.get('shape')} instead of {x.get('shape')}"
        u, v = _floats(x["data"]), _floats(y["data"])
        fin = np.isfinite(u)
        if not np.array_equal(fin, np.isfinite(v)) or not np.array_equal(u[~fin], v[~fin], equal_nan=True):
            return f"{key} is not finite at other entries"
        scale = float(max(np.max(np.abs(u[fin]), initial=0.0), np.max(np.abs(v[fin]), initial=0.0)))
        diff = float(np.max(np.abs(u[fin] - v[fin]), initial=0.0))
        if diff > rtol * scale:
            return f"{key} differs by {diff:.3g} (scale {scale:.3g}, tolerance {rtol:g} x scale)"
    return None


def _floats(data: list) -> np.ndarray:
    return np.array([float(x) for x in data], dtype=float)


def _short(value) -> str:
    return "absent" if value is None else repr(value) if isinstance(value, str) else "a value"


def problem_fingerprint(problem) -> str:
    """The identity of ``problem``'s structure (``problem_structure``): the same on every host."""
    return _fingerprint(problem_structure(problem))


def _fingerprint(structure: str) -> str:
    return hashlib.sha256(f"hbvm-problem/2 {structure}".encode()).hexdigest()[:16]


def minted_fingerprint(structure: str, probe: dict) -> str:
    """The identity of a structure whose values differ from every recorded one: the structure and the values
    to ``MINT_DIGITS`` significant digits (a name only; a value on a rounding boundary gets another name on
    another host, and the next plan snaps to whichever the stores record)."""
    rounded = {
        k: v if not isinstance(v, dict) else [f"{x:.{MINT_DIGITS - 1}e}" for x in _floats(v["data"])]
        for k, v in sorted(probe.items())
    }
    text = json.dumps(rounded, sort_keys=True)
    return hashlib.sha256(f"hbvm-problem/2 {structure} {text}".encode()).hexdigest()[:16]


def problem_identity(problem, recorded: Iterable[dict], structure: str | None = None) -> tuple[str, dict]:
    """(fingerprint, reference probe) of ``problem`` given the identities ``recorded`` for it before (dicts with
    problem_fingerprint, problem_structure, problem_probe: a study's store attrs).

    The first record of the same structure whose values agree (``probe_mismatch``) gives its fingerprint and
    probe; with no record of the structure it is ``problem_fingerprint``; with records of the structure whose
    values all differ by more than round-off, a new one (``minted_fingerprint``). ``structure``: the problem's
    ``problem_structure`` where the caller has it already."""
    structure, probe = structure or problem_structure(problem), problem_probe(problem)
    same = False
    for rec in recorded:
        if rec.get("problem_structure") != structure or not isinstance(rec.get("problem_probe"), dict):
            continue
        same = True
        if probe_mismatch(rec["problem_probe"], probe) is None and rec.get("problem_fingerprint"):
            return rec["problem_fingerprint"], rec["problem_probe"]
    return (minted_fingerprint(structure, probe) if same else _fingerprint(structure)), probe


def problem_mismatch(problem, structure: str | None, probe: dict | None) -> str | None:
    """None when ``problem`` is the one recorded as (``structure``, ``probe``), else one phrase saying why not."""
    return identity_mismatch(problem_structure(problem), lambda: problem_probe(problem), structure, probe)


def identity_mismatch(structure: str, probe, recorded_structure: str | None, recorded_probe: dict | None) -> str | None:
    """None when the identity (``structure``, ``probe``: a dict, or a function that computes it) is the recorded
    one, else one phrase saying why not (``problem_mismatch`` for a problem's own identity)."""
    if recorded_structure != structure:
        return (
            "no recorded structure (an older store)"
            if recorded_structure is None
            else f"its source, params or sizes changed (structure {structure}, recorded {recorded_structure})"
        )
    if not isinstance(recorded_probe, dict):
        return "no recorded values (an older store)"
    return probe_mismatch(recorded_probe, probe() if callable(probe) else probe)


# --------------------------------------------------------------------------- numerics
def numerics_digest(cls, package: str | os.PathLike = PACKAGE) -> str:
    """A hex digest of the numerics of a ``Method`` class: the canonical form of its ``numerics_sources``
    (relative to the folder ``package``) and of the class among them (``canonical.canonical_digest``: names,
    files and where a definition stands do not count). Cached per process and on disk by the sources' bytes."""
    sources = read_sources(package, getattr(cls, "numerics_sources", ()))
    module = cls.__module__.split(".")
    rel = "/".join(module[1:]) + ".py"
    if rel not in sources:
        rel = "/".join([*module[1:], "__init__.py"])
    return _numerics(Path(package).name, tuple(sources.items()), f"{rel}:{cls.__qualname__.partition('.')[0]}")


@functools.cache
def _canonical_version() -> str:
    """The hash of ``canonical.py`` itself: a changed canonical form is not read from the cache of the old one."""
    return hashlib.sha256(Path(canonical.__file__).read_bytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _numerics(package: str, sources: tuple[tuple[str, bytes | None], ...], root: str) -> str:
    """``canonical_digest`` of the sources, cached on disk in the kernel cache folder by their bytes, their
    paths, the root and the Python version (some 50 ms a method, at every plan)."""
    d = hashlib.sha256(f"numerics/3 {sys.version} {_canonical_version()} {package} {root}".encode())
    for rel, data in sources:
        d.update(f"\n{rel} {hashlib.sha256(data).hexdigest() if data is not None else '-'}".encode())
    path = _digest_cache() / f"numerics-{d.hexdigest()[:32]}.json"
    try:
        with open(path) as fh:
            return str(json.load(fh))
    except (OSError, ValueError):
        pass
    found = canonical_digest(dict(sources), package, root)
    _cache_write(path, found)
    return found


def method_fingerprint(entry: dict) -> str:
    """A hex digest of the numerics of ``entry``'s method class (``numerics_digest``)."""
    return numerics_digest(type(method_from_entry(entry)))


__all__ = [
    "PROBE_RTOL",
    "method_fingerprint",
    "numerics_digest",
    "probe_mismatch",
    "probe_points",
    "problem_fingerprint",
    "problem_identity",
    "problem_mismatch",
    "problem_probe",
    "problem_structure",
    "source_digest",
]
