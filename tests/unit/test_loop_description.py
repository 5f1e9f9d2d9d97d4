"""Each compiled method declares its loop once (``kernels/description.py``); the generators read it (no compile)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from hbvm_core.__main__ import compiled_loops, loop_method, warm_tasks
from hbvm_core.errors import ConfigError
from hbvm_core.kernels import cuda_source
from hbvm_core.kernels.description import INFO, STATE, LoopDescription, field_constants, template_source
from hbvm_core.kernels.driver import LoopRunner
from hbvm_core.kernels.ensemble import block_source, chunk_parameters
from hbvm_core.kernels.registry import expanded_template
from hbvm_core.methods import HBVM, RATTLE, PolynomialHBVM, method_from_entry
from hbvm_core.problem import REFERENCE_LOOP

DESCRIBED = (HBVM, PolynomialHBVM, RATTLE)
#: a bare index into run_chunk's state or info in generated text (the fields are read by name)
BARE = re.compile(r"\b_?(state|info)\[\d")


@pytest.mark.parametrize("cls", DESCRIBED, ids=lambda c: c.__name__)
def test_a_description_agrees_with_its_template_and_its_method(cls):
    """The template's run_chunk takes the carried multiplier and the tail arguments the description names (the tail
    last, after info); the driver is a LoopRunner; each warm entry builds a method of this very loop."""
    loop = cls.LOOP
    names = chunk_parameters(loop.path.read_text())
    assert loop.carried is None or loop.carried in names
    assert names[len(names) - len(loop.tail) - 1 :] == ["info", *loop.tail]
    assert issubclass(loop.runner_class(), LoopRunner)
    assert loop.warm and all(method_from_entry(dict(entry)).LOOP is loop for _, entry in loop.warm.values())
    assert {"loop", "block"} <= loop.forms


def test_warm_reads_the_loops_from_the_methods():
    """The command line's loops are the registered methods' descriptions, in the registry's order."""
    assert list(compiled_loops()) == ["hbvm", "polynomial", "rattle"]
    assert warm_tasks(["p"], ["fixed-point"], ["rattle", "hbvm"]) == [("p", "fixed-point"), ("p", "rattle")]
    assert type(loop_method("rattle")) is RATTLE and loop_method("blended").solver == "blended"


def test_fields_are_named_by_position():
    """Oracle by hand: the state is (n, have_prev, points, steps, iterations, max_iterations, compensated), the info
    (status, step, iterations, increment)."""
    fields = field_constants()
    assert (fields["STATE_N"], fields["STATE_POINTS"], fields["STATE_STEPS"], fields["STATE_COMPENSATED"]) == (
        0,
        2,
        3,
        6,
    )
    assert (fields["INFO_STATUS"], fields["INFO_STEP"], fields["INFO_INCREMENT"]) == (0, 1, 3)
    assert (fields["STATE_SIZE"], fields["INFO_SIZE"]) == (len(STATE), len(INFO)) == (7, 4)


@pytest.mark.parametrize("cls", DESCRIBED, ids=lambda c: c.__name__)
def test_generated_text_reads_state_and_info_by_name(cls):
    """The ensemble block and the GPU kernel of each loop, and its pasted template, index state and info by the
    fields' names, which the generated module defines."""
    loop = cls.LOOP
    expanded = expanded_template(loop)
    block = block_source(expanded, loop.carried)
    sizes = {"k": 3, "s": 2, "m": 4, "nu": 2, "sm": 8}
    kernel = cuda_source.run_block_source(chunk_parameters(expanded), sizes, 4, 2, loop.fields())
    for text in (expanded, block, kernel):
        code = "\n".join(line for line in text.splitlines() if not line.strip().startswith(("#", '"""')))
        assert BARE.search(code) is None, BARE.search(code)
    assert "_state[STATE_POINTS]" in block and "_state[STATE_N]" in kernel
    for key, index in loop.fields().items():
        assert re.search(rf"^{key} = {index}$", expanded, re.M), key


def test_a_description_names_a_template_and_forms_that_exist():
    """A misspelt template or form is refused when the method is defined, in one line naming it."""
    with pytest.raises(ConfigError, match="no template"):
        LoopDescription(template="hbvmm", callbacks=("grad_U",))
    with pytest.raises(ConfigError, match="forms \\['gpu'\\]"):
        LoopDescription(template="hbvm", callbacks=("grad_U",), forms=frozenset({"gpu"}))
    with pytest.raises(ConfigError, match="callbacks \\['gradU'\\]"):
        LoopDescription(template="hbvm", callbacks=("gradU",))
    assert REFERENCE_LOOP.runner is None and REFERENCE_LOOP.forms == {"functions"}


@pytest.mark.parametrize("template", ["hbvm", "polynomial", "rattle", "reference"])
def test_a_template_with_its_preamble_pasted_defines_every_name_it_reads(template):
    """A template imports the shared preamble whole (kernels/preamble.py; ruff's F405 is off for the templates):
    pasted in (``template_source``), the text holds the preamble's lines, the in-memory module's ``CACHE = True``
    among them, and reads no name it does not define or import, by ruff's pyflakes rules on that text."""
    pytest.importorskip("ruff")
    source = template_source(template)
    assert "import *" not in source and "\nCACHE = True" in source
    args = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F", "--stdin-filename", f"{template}.py"]
    run = subprocess.run([*args, "-"], input=source, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
