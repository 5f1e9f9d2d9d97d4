"""One compiled loop module per set of problem callbacks, cached on disk across processes.

Numba does not cache a function that takes other jitted functions as arguments
(the dispatcher types in the cache key differ from process to process; closures
over them miss the cache too -- both measured, see benchmarks/README.md). So the
loop is specialised by code generation instead: the source of ``kernels/hbvm.py``
is written to ``<cache dir>/hbvm_kernel_<hash>.py`` with ``grad_U`` and ``G``
bound to the problem's callbacks by import (as copies that numba inlines into
the loop: 1.6x faster than calls on the conical pendulum), and numba caches
that module like any other (``__pycache__`` next to it). The hash covers the template, the
callbacks' names and source, the constants (m, nu, M != I, solver) and the
numba version, so a changed callback gets a new module; an existing file is
never rewritten (that would invalidate its cache). It does not cover what a
callback uses from elsewhere -- a helper it calls, a module-level constant
(numba freezes globals into the compiled code): after changing such a thing,
``python -m hbvm_core.kernels clear``. Callbacks that cannot be imported by
name (``__main__``, closures) get an in-memory module, compiled in every
process.

Cache directory: ``$HBVM_KERNEL_CACHE``, else ``~/.cache/hbvm/kernels``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
import types
from pathlib import Path

from ..errors import ConfigError, ProblemError
from . import BUILTIN_MODULE, Kernels

TEMPLATE = Path(__file__).with_name("hbvm.py")
_MODULES: dict[str, types.ModuleType] = {}
_BY_KEY: dict[tuple, types.ModuleType] = {}  # (kernels, m, nu, has_M, solver) -> module: skips the hashing


def cache_dir() -> Path:
    """Where the generated loop modules (and numba's cache of them) live; created if missing."""
    env = os.environ.get("HBVM_KERNEL_CACHE")
    path = Path(env) if env else Path.home() / ".cache" / "hbvm" / "kernels"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    path = Path(tempfile.gettempdir()) / f"hbvm-kernels-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_callback(key: str, value) -> tuple[object, str | None]:
    """(dispatcher, 'module:qualname' if it can be imported by that name, else None)."""
    if isinstance(value, str):
        module, _, attr = value.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"kernels.{key} = {value!r}: cannot import it ({exc})") from None
        value = obj
    py_func = getattr(value, "py_func", None)
    if py_func is None or not hasattr(value, "compile"):
        raise ConfigError(f"kernels.{key} = {value!r}: expected a numba @njit function or a 'module:function' string")
    module, qual = py_func.__module__, py_func.__qualname__
    name = None
    if module != "__main__" and "<locals>" not in qual:
        try:
            obj = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
            if obj is value:
                name = f"{module}:{qual}"
        except (ImportError, AttributeError):
            pass
    return value, name


def callback_source(f) -> str:
    """The source of a numba dispatcher's Python function ('' where there is none to read)."""
    try:
        return inspect.getsource(f.py_func)
    except (OSError, TypeError):
        return ""


def loop_module(
    kernels: Kernels, m: int, nu: int, has_M: bool = False, solver: int = 0, ks: tuple[int, int] | None = None
) -> types.ModuleType:
    """The module whose ``run_chunk`` is the compiled HBVM loop for these callbacks, sizes and solver.

    ``ks = (k, s)`` fixes k and s in the module as well (one compile per HBVM(k, s); faster loops)."""
    if not isinstance(kernels, Kernels):
        raise ConfigError(f"kernels = {kernels!r}: expected hbvm_core.kernels.Kernels(grad_U=..., G=...)")
    ks = (0, 0) if ks is None else (int(ks[0]), int(ks[1]))
    key = (kernels.grad_U, kernels.G, int(m), int(nu), bool(has_M), int(solver), ks)
    try:
        if key in _BY_KEY:
            return _BY_KEY[key]
    except TypeError:  # unhashable callbacks: no shortcut
        key = None
    module = _loop_module(kernels, m, nu, has_M, solver, ks)
    if key is not None:
        _BY_KEY[key] = module
    return module


def _loop_module(kernels: Kernels, m: int, nu: int, has_M: bool, solver: int, ks: tuple) -> types.ModuleType:
    G = kernels.G
    if G is None:
        if nu > 0:
            raise ProblemError(f"kernels.G is missing: the problem has nu = {nu} constraints")
        G = f"{BUILTIN_MODULE}:no_constraints"
    callbacks = {"grad_U": resolve_callback("grad_U", kernels.grad_U), "G": resolve_callback("G", G)}
    import numba

    template = TEMPLATE.read_text()
    digest = hashlib.sha256(template.encode())
    digest.update(numba.__version__.encode())
    for key, (f, name) in callbacks.items():
        digest.update(f"{key}={name or id(f)}\n{callback_source(f)}".encode())
    constants = {"M_SIZE": int(m), "NU_SIZE": int(nu), "HAS_M": bool(has_M), "SOLVER": int(solver)}
    if ks != (0, 0):
        constants |= {"K_SIZE": ks[0], "S_SIZE": ks[1]}
    digest.update(repr(sorted(constants.items())).encode())
    tag = digest.hexdigest()[:20]
    if tag in _MODULES:
        return _MODULES[tag]
    if all(name is not None for _, name in callbacks.values()):
        module = _from_file(tag, template, {key: name for key, (_, name) in callbacks.items()}, constants)
    else:
        module = _in_memory(tag, template, {key: f for key, (f, _) in callbacks.items()} | constants)
    _MODULES[tag] = module
    return module


def _from_file(tag: str, template: str, names: dict[str, str], constants: dict) -> types.ModuleType:
    lines = [f"# Generated by hbvm_core.kernels.registry from {TEMPLATE.name}; do not edit.", template, ""]
    for i, (key, name) in enumerate(names.items()):
        module, _, qual = name.partition(":")
        lines.append(f"import {module} as _callbacks{i}  # noqa: E402")
        lines.append(f"{key}_original = _callbacks{i}.{qual}")
        lines.append(f"{key} = _inline({key}_original)")
    lines += [f"{key} = {val!r}" for key, val in constants.items()]
    text = "\n".join(lines) + "\n"
    return import_generated(f"hbvm_kernel_{tag}", f"_hbvm_kernel_{tag}", text)


def import_generated(stem: str, name: str, text: str) -> types.ModuleType:
    """Write the generated module ``text`` as <cache>/<stem>.py (atomically) and import it from there as ``name``.

    Importing it from a file is what lets numba cache its jitted functions on disk (and numba's cache
    refers to the module by ``name``: keep it stable).
    """
    path = cache_dir() / f"{stem}.py"
    if not path.exists() or path.read_text() != text:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        try:
            if path.exists():  # different content under our hash: replace it (should not happen)
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # atomic, and never overwrites a concurrent writer's identical file
        except FileExistsError:
            pass
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _in_memory(tag: str, template: str, functions: dict[str, object]) -> types.ModuleType:
    module = types.ModuleType(f"_hbvm_kernel_{tag}")
    code = template.replace("\nCACHE = True", "\nCACHE = False", 1)
    exec(compile(code, f"<hbvm kernel {tag}>", "exec"), module.__dict__)
    for key, f in functions.items():
        if key in ("grad_U", "G"):
            module.__dict__[f"{key}_original"] = f
            module.__dict__[key] = module._inline(f)
        else:
            module.__dict__[key] = f
    return module
