"""Every error the package raises is an HBVMError: a caller catches ``hbvm_core.errors.HBVMError`` and gets them all.

The source of hbvm_core and hbvm_workflow is read (ast): a ``raise`` of a builtin exception class is a failure,
except the few listed in ``ALLOWED`` with their reason.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import hbvm_workflow.beyond as beyond
import hbvm_workflow.tables as tables
import hbvm_workflow.worker as worker
from hbvm_core.errors import HBVMError
from hbvm_workflow import storage

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = {n for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, BaseException)}
#: (file, exception) -> why it is not an HBVMError
ALLOWED = {
    ("hbvm_core/kernels/driver.py", "RuntimeError"): "an invariant of the compiled loop (a bug, never raised); the "
    "file is a numerics source, whose every change recomputes every stored run",
    ("hbvm_core/kernels/registry.py", "ValueError"): "a template's @inline_source helper written against the "
    "generator's rules: an error of the package's own source, raised when the package is developed",
    ("hbvm_core/kernels/cuda_source.py", "ValueError"): "a template the GPU rewrite cannot take (a work array "
    "of no compile-time size, a numpy call numba-cuda lacks): an error of the package's own source, raised as "
    "BackendError by its one caller (kernels/cuda.py)",
    ("hbvm_workflow/zipstore.py", "ValueError"): "decode_chunk's checksum failure, caught by its one caller and "
    "raised as ZipStoreError (an HBVMError) naming the array and chunk",
    ("hbvm_core/__init__.py", "AttributeError"): "the module __getattr__ protocol (an unknown name)",
}


def raised_builtins() -> set[tuple[str, str]]:
    """(file, exception) for each ``raise <Builtin>(...)`` or ``raise <Builtin>`` in the package's source."""
    found = set()
    for package in ("hbvm_core", "hbvm_workflow"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Raise) or node.exc is None:
                    continue
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in BUILTIN and exc.id != "NotImplementedError":
                    found.add((path.relative_to(ROOT).as_posix(), exc.id))
    return found


def test_no_builtin_exception_is_raised_but_the_listed_ones():
    found = raised_builtins()
    assert found - set(ALLOWED) == set(), "raise an HBVMError subclass (hbvm_core.errors) instead"
    assert set(ALLOWED) - found == set(), "an allowed raise that is gone: remove it from ALLOWED"


def test_the_scan_finds_a_builtin_raise(tmp_path, monkeypatch):
    """The scan is not blind: a module that raises RuntimeError is found (a copy of the tree with one more)."""
    for package in ("hbvm_core", "hbvm_workflow"):
        (tmp_path / package).mkdir()
    (tmp_path / "hbvm_workflow" / "extra.py").write_text("def f():\n    raise RuntimeError('boom')\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert raised_builtins() == {("hbvm_workflow/extra.py", "RuntimeError")}


def test_the_error_classes_of_the_workflow_are_hbvm_errors_and_keep_their_builtin_bases():
    """Callers that caught the builtin class before still catch them."""
    for cls, base in (
        (worker.WorkerError, RuntimeError),
        (storage.ResultsMismatchError, ValueError),
        (storage.RunNotFoundError, KeyError),
        (storage.StoreError, RuntimeError),
    ):
        assert issubclass(cls, HBVMError) and issubclass(cls, base), cls
    assert tables.ResultsMismatchError is beyond.ResultsMismatchError is storage.ResultsMismatchError
