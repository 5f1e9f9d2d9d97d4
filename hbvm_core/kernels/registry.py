"""The one generator of compiled loop modules: a template + a problem's callbacks, cached on disk across processes.

Numba does not cache a function that takes other jitted functions as arguments (the dispatcher types in the
cache key differ from process to process; closures over them miss the cache too -- both measured, see
benchmarks/README.md). So a loop is specialised by code generation instead: the source of a template (named by
the method's loop description, ``method.LOOP``, ``kernels/description.py``: ``hbvm.py`` for the constant
multiplier, ``polynomial.py`` for the polynomial one, ``rattle.py`` for RATTLE), with its ``@inline_source``
helpers and those of ``rules.py`` and ``linalg.py`` (``SHARED``) pasted into their call sites
(``expand_inline``) and the fields of ``state`` and ``info`` as constants (``expanded_template``), and the
ensemble's ``run_block`` where the loop has that form, is built by ``modules.generated_module`` (the builder
every form shares) as ``<cache>/<template>_kernel_<hash>.py`` followed by a footer that binds the callbacks
the description names (``grad_U`` and ``G``, and the constraint ``g`` for RATTLE) to the problem's callbacks
by import (as copies that numba inlines into the loop: 1.6x faster than calls on the conical pendulum) and
sets the template's compile-time constants; numba caches that module like any other (``__pycache__`` next to
it). The hash covers the template, the callbacks' names and source, the constants and the numba version, so a
changed callback gets a new module. It does not cover what a callback uses from elsewhere -- a helper it
calls, a module-level constant (numba freezes globals into the compiled code): after changing such a thing,
``python -m hbvm_core kernels clear``. Callbacks that cannot be imported by name (``__main__``, closures) get
an in-memory module, compiled in every process.

Once a module's ``run_chunk`` has been compiled (and so saved by numba) or
loaded, ``note_compiled`` writes a marker file of ours next to it, keyed by the
numba and Python versions and numba's cache directory: ``is_compiled`` reads
it, so telling a cold loop from a cached one needs no numba internals.

Every generated module's loops (``LOOPS``) time their compilation: the first call of ``run_chunk``,
``run_block``, ``lane_block`` (or the reference's ``rhs``, ``multiplier``) for a signature appends a
``LoopTime`` to ``LOOP_TIMES`` -- the module, the loop, the seconds, and whether numba loaded it from its disk
cache -- which the workflow reads and logs (``loop_times``).

Cache directory: ``modules.cache_dir``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import re
import shutil
import sys
import textwrap
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ProblemError
from .callbacks import Kernels, kernel
from .description import LoopDescription
from .ensemble import block_source
from .modules import Binding, by_key, cache_dir, generated_module, module_tag

#: how the CPU loops bind a callback: a copy that numba inlines into the loop (``inline_copy``)
LOOP_BINDING = Binding("hbvm_core.kernels.registry:inline_copy")

#: what every template shares, pasted into each: the rules (the stopping rule, the compensated update, the save
#: rule, the status codes) and the small linear algebra (M^{-1} x by Cholesky, a small solve)
SHARED = tuple(Path(__file__).with_name(name) for name in ("rules.py", "linalg.py"))
#: what stands in for a missing callback of an unconstrained problem (nu = 0)
NO_CONSTRAINTS = {
    "G": "hbvm_core.kernels.registry:no_constraints",
    "g": "hbvm_core.kernels.registry:no_constraint_values",
    "d2g": "hbvm_core.kernels.registry:no_constraint_curvature",
}
_COMPILED: dict[object, object] = {}  # plain function marked by ``kernel`` -> its numba dispatcher
#: a generated module's compiled loops (the others are pasted into them or are callbacks) -> what the log calls them
LOOPS = {
    "run_chunk": "per-run loop",
    "run_block": "ensemble block",
    "lane_block": "lockstep block",
    "rhs": "reference right-hand side",
    "multiplier": "reference multiplier",
}


@dataclass(frozen=True)
class LoopTime:
    """One compilation (or load from numba's disk cache) of a generated module's loop, in this process."""

    module: str  # the module's tag: ``<template>_<hash>`` (``lanes_<hash>`` for a lockstep block)
    loop: str  # the function: a key of ``LOOPS``
    seconds: float
    cached: bool  # loaded from numba's disk cache, not compiled

    @property
    def template(self) -> str:
        return self.module.split("_", 1)[0]

    def phrase(self) -> str:
        """``per-run loop of hbvm_1a2b...: compiled in 12.3 s`` (or ``loaded from the kernel cache in``)."""
        how = "loaded from the kernel cache" if self.cached else "compiled"
        return f"{LOOPS.get(self.loop, self.loop)} of {self.module}: {how} in {self.seconds:.1f} s"


#: the loops compiled or loaded in this process, in order (``loop_times``)
LOOP_TIMES: list[LoopTime] = []
_DEPTH = threading.local()  # a loop compiled inside another's compilation is timed as part of the outer one


def loop_times(since: int = 0) -> list[LoopTime]:
    """The loops compiled or loaded in this process from the ``since``-th on (``len(LOOP_TIMES)`` before a
    call marks where its own begin)."""
    return LOOP_TIMES[since:]


def timed_loops(module: types.ModuleType) -> types.ModuleType:
    """Wrap the ``compile`` of the module's loops (``LOOPS``) so that each compilation or cache load of a
    signature is recorded in ``LOOP_TIMES``; a dispatcher that is not a CPU one is left as it is."""
    from numba.core.registry import CPUDispatcher

    tag = module.__name__.removeprefix("_hbvm_")
    for name in LOOPS:
        dispatcher = module.__dict__.get(name)
        if type(dispatcher) is not CPUDispatcher or "compile" in dispatcher.__dict__:
            continue
        dispatcher.compile = _timed_compile(dispatcher, dispatcher.compile, tag, name)
    return module


def _timed_compile(dispatcher, compile_, tag: str, name: str):
    def compile(sig):
        outer = getattr(_DEPTH, "n", 0) == 0
        hits, fresh = sum(dispatcher._cache_hits.values()), len(dispatcher.overloads)
        _DEPTH.n = getattr(_DEPTH, "n", 0) + 1
        t0 = time.perf_counter()
        try:
            return compile_(sig)
        finally:
            _DEPTH.n -= 1
            seconds = time.perf_counter() - t0
            if outer and len(dispatcher.overloads) > fresh:  # a new signature (not one compiled before)
                cached = sum(dispatcher._cache_hits.values()) > hits
                LOOP_TIMES.append(LoopTime(tag, name, seconds, cached))

    return compile


def compiled(f):
    """The numba dispatcher of a callback: ``f`` itself, or the (memoised) njit of a ``kernel``-marked function."""
    if getattr(f, "_hbvm_kernel", False) and not hasattr(f, "py_func"):
        if f not in _COMPILED:
            import numba

            _COMPILED[f] = numba.njit(cache=True)(f)
        return _COMPILED[f]
    return f


@kernel
def no_constraints(Q, out, params):
    """G for an unconstrained problem (nu = 0): nothing to write."""


@kernel
def no_constraint_values(Q, out, params):
    """g for an unconstrained problem (nu = 0): nothing to write."""


@kernel
def no_constraint_curvature(Q, V, out, params):
    """d2g for an unconstrained problem (nu = 0): nothing to write."""


def inline_copy(f):
    """A copy of a compiled callback that numba inlines into the loop (at IR level; a call costs 1.6x on the
    conical pendulum). The generated module keeps the original, with its own cache, as ``<name>_original``."""
    from numba import njit

    options = {key: val for key, val in f.targetoptions.items() if key not in ("cache", "inline", "nopython")}
    return njit(inline="always", **options)(f.py_func)


def expand_inline(source: str, *shared: str) -> str:
    """Paste the template's ``@inline_source`` helpers, and those of the ``shared`` sources (``SHARED``: what
    every template shares), into their call sites (a macro expansion).

    A helper is a plain function whose only ``return`` is its last statement; a call site is a line
    ``name(args)`` or ``targets = name(args)`` (targets: names or subscripts, ``x[a], c[a]``). The call
    becomes the helper's body with each parameter replaced by its argument (by name: the arguments are names or
    simple expressions), and a final ``return expr`` becomes ``targets = expr``. Expanded again until no call
    is left (helpers may use helpers); the helpers' definitions are dropped. The helpers' locals thus live in the
    caller: numba then compiles one function with no array passed to a call (the reference counting of
    array arguments made a helper-structured loop 3-10x slower, benchmarks/README.md).
    """
    macros: dict[str, tuple[list[str], str, str | None]] = {}
    for text in shared:
        _macros(text, macros)
    lines = source.splitlines()
    for start, stop in sorted(_macros(source, macros), reverse=True):
        del lines[start:stop]
    if not macros:
        return "\n".join(lines) + "\n"
    return _expand(lines, macros)


def _macros(source: str, macros: dict) -> list[tuple[int, int]]:
    """Collect the ``@inline_source`` helpers of ``source`` into ``macros``; returns the line ranges to drop."""
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if node.name == "inline_source":
            drop.append((min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1, node.end_lineno))
        if not any(isinstance(d, ast.Name) and d.id == "inline_source" for d in node.decorator_list):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        result = None
        if isinstance(body[-1], ast.Return):
            result = ast.get_source_segment(source, body[-1].value)
            end = body[-1].lineno - 1
            body = body[:-1]
        else:
            end = node.end_lineno
        if any(isinstance(n, ast.Return) for stmt in body for n in ast.walk(stmt)):
            raise ValueError(f"@inline_source {node.name}: only a final return is allowed")
        text = textwrap.dedent("\n".join(lines[body[0].lineno - 1 : end])) if body else "pass"
        macros[node.name] = ([a.arg for a in node.args.args], text, result)
        drop.append((min(d.lineno for d in node.decorator_list) - 1, node.end_lineno))
    return drop


def _expand(lines: list[str], macros: dict) -> str:
    call = re.compile(rf"^(\s*)(?:([\w, \[\]]+?) = )?({'|'.join(macros)})\((.*)\)\s*(#.*)?$")
    for _ in range(8):
        out, changed = [], False
        for line in lines:
            hit = call.match(line)
            if hit is None:
                out.append(line)
                continue
            indent, targets, name, args = hit.group(1), hit.group(2), hit.group(3), _split_args(hit.group(4))
            params, text, result = macros[name]
            if len(args) != len(params) or (targets is not None) != (result is not None):
                raise ValueError(f"inline call {line.strip()!r} does not match {name}({', '.join(params)})")
            names = {p: a if a.isidentifier() else f"({a})" for p, a in zip(params, args)}
            rename = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, params)) + r")\b")
            body = rename.sub(lambda m, names=names: names[m.group(1)], text).splitlines()
            if targets is not None:
                body.append(f"{targets} = {rename.sub(lambda m, names=names: names[m.group(1)], result)}")
            out.append(f"{indent}# inlined: {line.strip()}")
            out += [indent + b if b.strip() else b for b in body]
            changed = True
        lines = out
        if not changed:
            return "\n".join(lines) + "\n"
    raise ValueError("@inline_source helpers nested too deep (or recursive)")


def _split_args(text: str) -> list[str]:
    """The comma-separated arguments of a call, split at depth 0."""
    args, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        args.append(cur.strip())
    return args


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
    value = compiled(value)
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
            if obj is value or compiled(obj) is value:
                name = f"{module}:{qual}"
        except (ImportError, AttributeError):
            pass
    return value, name


def loop_module(description: LoopDescription, kernels: Kernels, constants: dict) -> types.ModuleType:
    """The generated module of a loop (its ``description``: template, callbacks, forms) for these callbacks and
    compile-time ``constants``.

    Its ``run_chunk`` is the compiled loop (and ``run_block`` the ensemble's, where the loop has that form),
    ``<name>_original`` the callbacks as given (``description.callbacks``).
    """
    if not isinstance(kernels, Kernels):
        raise ConfigError(f"kernels = {kernels!r}: expected hbvm_core.kernels.Kernels(grad_U=..., G=...)")
    bound = tuple(getattr(kernels, name) for name in description.callbacks)
    key = ("loop", description, bound, tuple(sorted(constants.items())))
    return by_key(key, lambda: _loop_module(description, kernels, constants))


def bound_callbacks(names, kernels: Kernels, nu: int) -> dict[str, tuple[object, str | None]]:
    """``name -> (dispatcher, 'module:qualname' or None)`` of the callbacks ``names`` of ``kernels``; a missing G,
    g or d2g of an unconstrained problem (``nu`` = 0) bound to a no-op (``NO_CONSTRAINTS``)."""
    callbacks = {}
    for name in names:
        f = getattr(kernels, name)
        if f is None and name in NO_CONSTRAINTS:
            if nu > 0:
                raise ProblemError(f"kernels.{name} is missing: the problem has nu = {nu} constraints")
            f = NO_CONSTRAINTS[name]
        callbacks[name] = resolve_callback(name, f)
    return callbacks


def expanded_template(description: LoopDescription) -> str:
    """The template's source (its preamble pasted, ``description.source``) with its helpers and the shared ones
    pasted (``expand_inline``), and the module
    constants of the state and info fields (``description.field_source``): the text every form starts from."""
    source = expand_inline(description.source(), *(path.read_text() for path in SHARED))
    return source + description.field_source()


def _loop_module(description: LoopDescription, kernels: Kernels, constants: dict) -> types.ModuleType:
    callbacks = bound_callbacks(description.callbacks, kernels, constants.get("NU_SIZE", 0))
    import numba

    source = expanded_template(description)
    if description.has("block"):  # the block loop of the ensemble, next to run_chunk (kernels/ensemble.py)
        source += block_source(source, description.carried)
    tag = module_tag(description.template, (source,), numba.__version__, callbacks, constants)
    origin = f"hbvm_core.kernels.registry from {description.path.name}"
    return generated_module(tag, source, callbacks, constants, LOOP_BINDING, origin, finish=timed_loops)


# --------------------------------------------------------------------------- what the disk cache holds
def _marker(module: types.ModuleType) -> Path | None:
    """<module>.<key>.compiled next to a generated module file; None for an in-memory module."""
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    import numba

    key = f"{numba.__version__}|{sys.version_info[0]}.{sys.version_info[1]}|{numba.config.CACHE_DIR}"
    return Path(path).with_suffix(f".{hashlib.sha256(key.encode()).hexdigest()[:12]}.compiled")


def note_compiled(module: types.ModuleType) -> None:
    """After a call of the module's ``run_chunk``: record that numba's disk cache holds its loop."""
    if getattr(module, "_hbvm_noted", False):  # once per process and module: not a file-system call per run
        return
    marker = _marker(module)
    if marker is not None and not marker.exists() and module.run_chunk.signatures:
        try:
            marker.touch()
        except OSError:
            return
    if marker is None or marker.exists():
        module._hbvm_noted = True


def is_compiled(module: types.ModuleType) -> bool:
    """Whether the module's loop is in numba's disk cache (an in-memory module never is)."""
    marker = _marker(module)
    return marker is not None and marker.exists()


def cache_info() -> list[str]:
    """Lines describing the cache: its folder, and each generated module with its bound callbacks and constants."""
    folder = cache_dir()
    mods = sorted(folder.glob("*_kernel_*.py"))
    lines = [f"{folder}: {len(mods)} generated loop modules"]
    for mod in mods:
        bound = [line[len("# bound: ") :] for line in mod.read_text().splitlines() if line.startswith("# bound: ")]
        cached = " (compiled)" if any(folder.glob(f"{mod.stem}.*.compiled")) else ""
        lines.append(f"  {mod.name}{cached}: {bound[-1] if bound else '?'}")
    return lines


def clear_cache() -> Path:
    """Remove the generated loop modules, their markers, the modules of problems from expressions
    (``hbvm_core.expressions``) and numba's cache of them; returns the folder."""
    folder = cache_dir()
    patterns = ("*_kernel_*.py", "*_kernel_*.compiled", "hbvm_kernel_*.py", "poly_kernel_*.py", "hbvm_expr_*.py")
    for pattern in patterns:
        for path in folder.glob(pattern):
            path.unlink()
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    return folder
