"""The one builder of generated modules: one memo, one tag scheme, one file-or-memory branch.

Every form of a compiled loop -- the per-run loop and ensemble block (``registry``), the lockstep block
(``lanes``), the GPU kernel (``cuda``) -- is a generated source plus a footer that binds the problem's callbacks
and sets the module's compile-time constants. ``generated_module`` builds it:

- its tag, ``<prefix>_<hash>`` (``module_tag``), hashes what makes the module: the parts the caller names (the
  generated source, or what generates it), the compiler's version, the bound callbacks (names and source) and
  the constants; the memo ``_MODULES`` maps a tag to its module, once per process;
- callbacks that can all be imported by name: the module is a file ``<cache>/<stem>.py`` (``import_generated``)
  whose footer imports them, so that numba caches its compiled functions on disk; an existing file is imported
  as it stands (its name is its content's hash);
- otherwise (``__main__``, closures): an in-memory module, compiled in every process (``CACHE = False``).

A ``Binding`` says how a form binds a callback: ``<name>_original`` is the callback as given (its numba
dispatcher), ``<name>`` what the loop calls (``registry.inline_copy``: a copy numba inlines;
``cuda.device_function``: a numba-cuda device function). Imports no numba.

Cache directory: ``$HBVM_KERNEL_CACHE``, else ``~/.cache/hbvm/kernels``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .fold import fold_constants

#: tag -> generated module, every form's (the tags differ by prefix and content)
_MODULES: dict[str, types.ModuleType] = {}
#: what makes a module, before any hashing (a form's key: its name, the callbacks, the constants) -> the module:
#: a process that asks again skips generating and hashing the source
_BY_KEY: dict[tuple, types.ModuleType] = {}


def by_key(key: tuple, build: Callable[[], types.ModuleType]) -> types.ModuleType:
    """The module ``build()`` made for ``key`` in this process, built now if none (unhashable keys: every time)."""
    try:
        hit = _BY_KEY.get(key)
    except TypeError:  # unhashable callbacks: no shortcut
        return build()
    if hit is None:
        hit = _BY_KEY[key] = build()
    return hit


def forget() -> None:
    """Forget every module built in this process (the next request builds or loads it again)."""
    _MODULES.clear()
    _BY_KEY.clear()


@dataclass(frozen=True)
class Binding:
    """How a form's generated module binds a callback, and how its file and module are named.

    ``function``: ``"module:name"`` of what makes ``<callback>`` from ``<callback>_original``; ``stem``: the file
    name's infix (``<prefix>_<stem>_<hash>.py``); ``module``: the module name's prefix (``<module><tag>``)."""

    function: str
    stem: str = "kernel"
    module: str = "_hbvm_"

    def resolve(self) -> Callable:
        name, _, attr = self.function.partition(":")
        return getattr(importlib.import_module(name), attr)


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


def callback_source(f) -> str:
    """The source of a numba dispatcher's Python function ('' where there is none to read)."""
    try:
        return inspect.getsource(f.py_func)
    except (OSError, TypeError):
        return ""


def module_tag(prefix: str, parts: Iterable[str | bytes], compiler: str, callbacks: dict, constants: dict) -> str:
    """``<prefix>_<hash>``: the hash of what makes a generated module -- ``parts`` (its source, or what generates
    it), the compiler's version, the bound callbacks (``name -> (dispatcher, 'module:qualname' or None)``: their
    names and sources) and the constants."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
    digest.update(compiler.encode())
    for key, (f, name) in callbacks.items():
        digest.update(f"{key}={name or id(f)}\n{callback_source(f)}".encode())
    digest.update(repr(sorted(constants.items())).encode())
    return f"{prefix}_{digest.hexdigest()[:20]}"


def generated_module(
    tag: str,
    source: str | Callable[[], str],
    callbacks: dict[str, tuple[object, str | None]],
    constants: dict,
    binding: Binding,
    origin: str,
    finish: Callable[[types.ModuleType], types.ModuleType] = lambda module: module,
    in_memory: bool = False,
) -> types.ModuleType:
    """The module of ``tag``: from the memo, else from its file (callbacks all named), else built in memory.

    ``source``: the generated source, or a function that generates it (called only when the module is neither
    in the memo nor on disk); ``callbacks``: ``name -> (dispatcher, 'module:qualname' or None)``; ``origin``:
    what generated it (the file's first line); ``finish``: applied to a new module (``registry``'s loop timers);
    ``in_memory``: built in memory even where the callbacks are named.
    """
    if tag in _MODULES:
        return _MODULES[tag]
    prefix, _, digest = tag.rpartition("_")
    stem, name = f"{prefix}_{binding.stem}_{digest}", f"{binding.module}{tag}"
    text = source if isinstance(source, str) else None
    if not in_memory and all(named is not None for _, named in callbacks.values()):
        path = cache_dir() / f"{stem}.py"
        if path.exists():  # its tag hashes what generates it: the text is the one generated before (no fold again)
            module = import_generated(stem, name, path.read_text())
        else:
            text = fold_constants(source() if text is None else text, constants)
            module = import_generated(stem, name, _with_footer(text, callbacks, constants, binding, origin))
    else:
        module = types.ModuleType(name)
        code = fold_constants(source() if text is None else text, constants)
        code = code.replace("\nCACHE = True", "\nCACHE = False", 1)
        exec(compile(code, f"<hbvm kernel {tag}>", "exec"), module.__dict__)  # noqa: S102
        bind = binding.resolve()
        for key, (f, _) in callbacks.items():
            module.__dict__[f"{key}_original"] = f
            module.__dict__[key] = bind(f)
        module.__dict__.update(constants)
    module = finish(module)
    _MODULES[tag] = module
    return module


def _with_footer(source: str, callbacks: dict, constants: dict, binding: Binding, origin: str) -> str:
    """The module file's text: the source, then the callbacks imported by name and bound, and the constants."""
    where, _, bind = binding.function.partition(":")
    lines = [f"# Generated by {origin}; do not edit.", source, ""]
    lines.append("from hbvm_core.kernels.registry import compiled as _compiled  # noqa: E402")
    lines.append(f"from {where} import {bind} as _bind  # noqa: E402")
    bound = [f"{key}={named}" for key, (_, named) in callbacks.items()]
    lines.append(f"# bound: {', '.join(bound + [f'{key}={val!r}' for key, val in constants.items()])}")
    for i, (key, (_, named)) in enumerate(callbacks.items()):
        module, _, qual = named.partition(":")
        lines.append(f"import {module} as _callbacks{i}  # noqa: E402")
        lines.append(f"{key}_original = _compiled(_callbacks{i}.{qual})")
        lines.append(f"{key} = _bind({key}_original)")
    lines += [f"{key} = {val!r}" for key, val in constants.items()]
    return "\n".join(lines) + "\n"


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
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module
