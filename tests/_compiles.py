"""What each test compiles: the guard that keeps the quick tier (``pytest -m "not slow"``) free of compiles.

A test *compiles a loop* when it builds one of the generated loop modules (a compiled loop, an ensemble
block, a lockstep module, a GPU module: ``_hbvm_*``; a problem from expressions: ``hbvm_expr_*``) and numba
compiles or loads one of its functions -- a load from a warm kernel cache counts, since from a cold cache it
is a compile of seconds. Seen three ways: numba's ``numba:compile`` events (in this process), numba's disk
cache loads of those modules (in this process), and new numba cache files under the kernel cache (a
subprocess's compiles too, from a cold cache). Other jitted functions count only once a test spends more
than ``OTHER_SECONDS`` of CPU compiling them.

The quick tier fails on such a test (``tests/conftest.py``). ``HBVM_COMPILE_REPORT=1 pytest ...`` lists them in
any run; ``=every`` also forgets the loop modules before each test, so that each test that uses a loop is
listed, not only the first (a diagnostic: a test that counts on those memos may then fail).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

#: CPU seconds of compiling functions other than the generated loops' above which a test counts as compiling
OTHER_SECONDS = 2.0
#: the names of the generated modules whose functions are loops (hbvm_core.kernels.registry, lanes, cuda;
#: hbvm_core.expressions)
LOOP_MODULES = ("_hbvm_", "hbvm_expr_")
#: numba's cache index of a function of a generated module (``<template>_kernel_<hash>``, ``hbvm_expr_<hash>``)
LOOP_FILE = re.compile(r"(\w+_kernel|hbvm_expr)_[0-9a-f]{20}\.")


def _is_loop(py_func) -> bool:
    return str(getattr(py_func, "__module__", "") or "").startswith(LOOP_MODULES)


@dataclass
class Compiles:
    """The compiles seen since the last ``take``: loop functions by name, and other compiles' CPU seconds."""

    loops: set[str] = field(default_factory=set)
    other_seconds: float = 0.0
    _depth: int = 0
    _t0: float = 0.0
    _top_is_loop: bool = False
    _files: set[str] = field(default_factory=set)
    _folders: tuple[Path, ...] = ()

    def on_compile_start(self, py_func) -> None:
        if _is_loop(py_func):
            self.loops.add(f"{py_func.__module__}.{py_func.__name__}")
        if self._depth == 0:
            self._t0, self._top_is_loop = time.thread_time(), _is_loop(py_func)
        self._depth += 1

    def on_compile_end(self, py_func) -> None:
        self._depth -= 1
        if self._depth == 0 and not self._top_is_loop:
            self.other_seconds += time.thread_time() - self._t0

    def on_cache_load(self, py_func) -> None:
        if _is_loop(py_func):
            self.loops.add(f"{py_func.__module__}.{py_func.__name__} (from the cache)")

    def _cache_files(self) -> set[str]:
        return {str(p) for folder in self._folders for p in folder.rglob("*.nbi") if LOOP_FILE.match(p.name)}

    def start(self, folders: tuple[Path, ...]) -> None:
        """Begin a test: forget what was seen, note the numba cache files there are now."""
        self.loops, self.other_seconds, self._folders = set(), 0.0, folders
        self._files = self._cache_files()

    def take(self) -> str | None:
        """What the test compiled, in a few words; None if nothing."""
        new = self._cache_files() - self._files
        parts = sorted(self.loops)[:3]
        if len(self.loops) > 3:
            parts.append(f"and {len(self.loops) - 3} more")
        if new and not self.loops:
            parts.append(f"{len(new)} new numba cache entries of loops, e.g. {Path(sorted(new)[0]).name}")
        if self.other_seconds > OTHER_SECONDS:
            parts.append(f"{self.other_seconds:.1f} s of CPU compiling other jitted functions")
        return ", ".join(parts) or None


def install() -> Compiles:
    """Listen to numba's compiles and cache loads; returns the record to ``start`` and ``take`` per test."""
    from numba.core import caching, event

    seen = Compiles()

    class _Listener(event.Listener):
        def on_start(self, ev):
            seen.on_compile_start(ev.data["dispatcher"].py_func)

        def on_end(self, ev):
            seen.on_compile_end(ev.data["dispatcher"].py_func)

    event.register("numba:compile", _Listener())
    load = caching.Cache.load_overload

    def load_overload(self, sig, target_context):
        data = load(self, sig, target_context)
        if data is not None:
            seen.on_cache_load(self._py_func)
        return data

    caching.Cache.load_overload = load_overload
    return seen


def forget_loops() -> None:
    """Forget the loop modules this process built (HBVM_COMPILE_REPORT=every): each test then builds those it
    uses again, loading them from the kernel cache, so that every test that uses a loop is seen, not only the
    first (a problem's compiled reference, kept on the problem, is seen only once)."""
    from hbvm_core.integrate import _RUNNERS
    from hbvm_core.kernels import modules

    modules.forget()
    _RUNNERS.clear()


def cache_folders() -> tuple[Path, ...]:
    """Where numba writes the loops' cache files: the kernel cache, and NUMBA_CACHE_DIR if set."""
    from hbvm_core.kernels.modules import cache_dir

    folders = [cache_dir()]
    if os.environ.get("NUMBA_CACHE_DIR"):
        folders.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return tuple(f for f in folders if f.is_dir())
