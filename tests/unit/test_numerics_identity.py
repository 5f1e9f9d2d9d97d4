"""The numerics identity of a method (hbvm_core.fingerprint.numerics_digest, hbvm_core.canonical): it changes
when the computation can, and only then.

The oracle is the definition: variants of a small method's sources written into tmp_path, each either the same
computation under other names and files (the same digest) or another computation (another digest)."""

from __future__ import annotations

import itertools
import re
import shutil
import textwrap

import pytest

from hbvm_core.fingerprint import PACKAGE, numerics_digest
from hbvm_core.methods.hbvm import HBVM

#: a toy method: a class that steps with a helper of another file and a coefficient table
STEPPER = '''
    """A toy method."""
    import numpy as np

    from .helpers import scaled_sum, scaled_difference

    COEFFICIENTS = (0.5, 0.25)


    class Stepper:
        """Doc."""

        numerics_sources = ("numerics.py", "helpers.py")

        def step(self, q, h):
            weight = COEFFICIENTS[0] * h
            total = np.sum(q)
            q = q * weight
            shift = scaled_sum(q, weight)
            return shift * total + COEFFICIENTS[1]
'''
HELPERS = """
    def scaled_sum(values, factor):
        doubled = values * factor
        return doubled + factor


    def scaled_difference(values, factor):
        doubled = values * factor
        return doubled - factor
"""
_FOLDERS = itertools.count()


def digest(tmp_path, files: dict[str, str], root: str = "numerics.py:Stepper") -> str:
    """numerics_digest of a class ``root`` ('file:Class') whose numerics are ``files``, in a package pkg."""
    package = tmp_path / f"v{next(_FOLDERS)}" / "pkg"
    package.mkdir(parents=True)
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(textwrap.dedent(text))
    rel, _, name = root.partition(":")
    module = "pkg." + rel.removesuffix(".py").replace("/", ".")
    cls = type(name, (), {"numerics_sources": tuple(files), "__module__": module, "__qualname__": name})
    return numerics_digest(cls, package)


def base(**edits: tuple[str, str]) -> dict[str, str]:
    """The toy method's files, each edited by replacing ``old`` with ``new`` (every occurrence): file=(old, new)."""
    files = {"numerics.py": STEPPER, "helpers.py": HELPERS}
    for key, (old, new) in edits.items():
        rel = key.replace("_py", ".py")
        assert old in files[rel], (rel, old)
        files[rel] = files[rel].replace(old, new)
    return files


def renamed(files: dict[str, str], pattern: str, new: str) -> dict[str, str]:
    """Every file with the whole word ``pattern`` renamed to ``new``."""
    return {rel: re.sub(rf"\b{pattern}\b", new, text) for rel, text in files.items()}


SAME = {
    "a renamed local variable": lambda: renamed(base(), "weight", "w"),
    "a renamed argument": lambda: renamed(base(), "factor", "k"),
    "a renamed function": lambda: renamed(base(), "scaled_sum", "weighted"),
    "a renamed module-level table": lambda: renamed(base(), "COEFFICIENTS", "B"),
    "a renamed import alias": lambda: renamed(base(), "np", "numpy_"),
    "a docstring and comments": lambda: base(numerics_py=('"""Doc."""', '"""Other."""  # a comment')),
}


@pytest.mark.parametrize("what", SAME)
def test_a_renaming_leaves_the_identity(tmp_path, what):
    assert digest(tmp_path, SAME[what]()) == digest(tmp_path, base())


def test_a_renamed_module_file_leaves_the_identity(tmp_path):
    files = base(numerics_py=(".helpers", ".tools"))
    files["numerics.py"] = files["numerics.py"].replace('"helpers.py"', '"tools.py"')
    files["tools.py"] = files.pop("helpers.py")
    assert digest(tmp_path, files) == digest(tmp_path, base())


def test_a_renamed_class_leaves_the_identity(tmp_path):
    files = renamed(base(), "Stepper", "Other")
    assert digest(tmp_path, files, "numerics.py:Other") == digest(tmp_path, base())


def test_a_helper_moved_to_another_file_leaves_the_identity(tmp_path):
    """scaled_sum moved from helpers.py into numerics.py, its import dropped; and the top-level order changed."""
    moved, kept = HELPERS.split("\n\n\n")
    files = base(numerics_py=("import scaled_sum, scaled_difference", "import scaled_difference"))
    files["numerics.py"] = files["numerics.py"] + "\n\n" + moved
    files["helpers.py"] = kept
    assert digest(tmp_path, files) == digest(tmp_path, base())


def test_the_class_among_the_files_counts(tmp_path):
    """Two classes of the same files are two identities (the class enters, not its name)."""
    extra = "\n\n    class Second:\n        pass\n"
    files = base(numerics_py=("COEFFICIENTS = (0.5, 0.25)", "COEFFICIENTS = (0.5, 0.25)" + extra))
    assert digest(tmp_path, files, "numerics.py:Second") != digest(tmp_path, files)


OTHER = {
    "a changed coefficient (the last digit of its double)": base(numerics_py=("0.25", "0.25000000000000006")),
    "+ changed to -": base(helpers_py=("return doubled + factor", "return doubled - factor")),
    "a*b+c changed to c+a*b": base(numerics_py=("shift * total + COEFFICIENTS[1]", "COEFFICIENTS[1] + shift * total")),
    "two statements with a dependency swapped": base(
        numerics_py=("total = np.sum(q)\n            q = q * weight", "q = q * weight\n            total = np.sum(q)")
    ),
    "the other helper called": base(numerics_py=("shift = scaled_sum(q", "shift = scaled_difference(q")),
    "the arguments swapped": base(numerics_py=("scaled_sum(q, weight)", "scaled_sum(weight, q)")),
    "another library function": base(numerics_py=("np.sum(q)", "np.prod(q)")),
}


@pytest.mark.parametrize("what", OTHER)
def test_another_computation_changes_the_identity(tmp_path, what):
    assert digest(tmp_path, OTHER[what]) != digest(tmp_path, base())


@pytest.mark.parametrize("spelling", ["v0", "_0", "ext_numpy"])
def test_a_local_is_not_a_global_spelled_as_locals_are_numbered(tmp_path, spelling):
    """``values - x`` with x the first argument, against an unbound global named as a numbered local might be."""
    local = base(helpers_py=("return doubled - factor", "return doubled - values"))
    unbound = base(helpers_py=("return doubled - factor", f"return doubled - {spelling}"))
    assert digest(tmp_path, unbound) != digest(tmp_path, local)


def test_the_order_of_top_level_effects_counts(tmp_path):
    """Two registrations under one key: the later one wins, so swapping them is another computation."""
    effects = '\n    CHOSEN = {}\n    CHOSEN["rule"] = scaled_sum\n    CHOSEN["rule"] = scaled_difference\n'
    files = base(numerics_py=("COEFFICIENTS = (0.5, 0.25)", "COEFFICIENTS = (0.5, 0.25)" + effects))
    swapped = {**files, "numerics.py": files["numerics.py"].replace("= scaled_sum\n", "= SWAP\n")}
    swapped["numerics.py"] = swapped["numerics.py"].replace("= scaled_difference\n", "= scaled_sum\n")
    swapped["numerics.py"] = swapped["numerics.py"].replace("= SWAP\n", "= scaled_difference\n")
    assert digest(tmp_path, swapped) != digest(tmp_path, files)
    assert digest(tmp_path, renamed(files, "CHOSEN", "RULES")) == digest(tmp_path, files)


def test_moved_kernel_files_leave_the_identity_of_hbvm(tmp_path):
    """In a copy of the package: kernels/driver.py renamed to kernels/time_loop.py (its imports rewritten) and the
    template kernels/hbvm.py moved into kernels/templates/ (imported by none: the generator reads it by path)."""
    copy = tmp_path / "hbvm_core"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    moves = {"kernels/driver.py": "kernels/time_loop.py", "kernels/hbvm.py": "kernels/templates/hbvm.py"}
    for old, new in moves.items():
        (copy / new).parent.mkdir(exist_ok=True)
        (copy / old).rename(copy / new)
    for path in copy.rglob("*.py"):
        text = path.read_text()
        edited = re.sub(r"\bkernels\.driver\b", "kernels.time_loop", text).replace("from .driver ", "from .time_loop ")
        for old, new in moves.items():
            edited = edited.replace(f'"{old}"', f'"{new}"')
        if edited != text:
            path.write_text(edited)
    assert "kernels/time_loop.py" in (copy / "methods/hbvm.py").read_text()
    sources = tuple(moves.get(rel, rel) for rel in HBVM.numerics_sources)
    moved = type("HBVM", (), {"numerics_sources": sources, "__module__": HBVM.__module__, "__qualname__": "HBVM"})
    assert numerics_digest(moved, copy) == numerics_digest(HBVM)
    # and an edit of the moved driver still shows
    driver = copy / "kernels/time_loop.py"
    driver.write_text(driver.read_text().replace("import numpy as np", "import numpy as np\nEXTRA = 1", 1))
    assert numerics_digest(moved, copy) != numerics_digest(HBVM)
