"""What a compiled loop is, declared once by the method that owns it: ``LoopDescription``.

A compiled loop exists in several forms, all generated from one template ``kernels/<template>.py`` (its
``run_chunk``; its imports and the names the generator binds are the templates' shared preamble,
``kernels/preamble.py``, pasted by ``template_source``): the per-run loop and the ensemble's block (``registry``),
the lockstep block (``lanes``), the GPU kernel (``cuda``). What those generators, the Python driver (``runner``),
the command line (``python -m hbvm_core kernels warm``) and the tests need to know of a loop is its description: the
template, the callbacks its module binds, the roles of ``run_chunk``'s arguments that are not the same for every
template, the named fields of its ``state`` and ``info`` vectors, the failure reason of each status code, the forms
it has, and the loops ``warm`` compiles. Each method declares its own (``HBVM.LOOP``, ``PolynomialHBVM.LOOP``,
``RATTLE.LOOP``; the reference's ``problem.REFERENCE_LOOP``); the tables of the generators are read from them.

The fields of ``state`` and ``info`` (``STATE``, ``INFO``) become module constants of every generated module
(``field_source``: ``STATE_POINTS = 2``, ...), which the generated text and the driver read by name. Imports no
numba.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .callbacks import CALLBACK_NAMES

#: run_chunk's state (int64), by field: the next step n, whether a previous step's guess is kept, the rows in the
#: point and step buffers, the total and largest iteration counts, whether the update is compensated
STATE = ("n", "have_prev", "points", "steps", "iterations", "max_iterations", "compensated")
#: run_chunk's info (float64) after a failed step: its status code, the step, the iterations, the last increment
INFO = ("status", "step", "iterations", "increment")
#: the forms a compiled loop can have: the per-run loop (``run_chunk``), the ensemble's per-run block
#: (``run_block`` in the same module), the lockstep block (``lanes``), the GPU kernel (``cuda``); a module of
#: functions that is no time loop (the reference's lambda(q, p) and right-hand side) has the form ``functions``
FORMS = frozenset({"loop", "block", "lanes", "cuda", "functions"})


#: the module of the Python drivers of the loops (``LoopDescription.runner`` names a class of it)
DRIVERS = "hbvm_core.kernels.driver"


def template_path(template: str) -> Path:
    """The file of a template: ``kernels/<template>.py``."""
    return Path(__file__).with_name(f"{template}.py")


#: the line that opens a template: its preamble, which ``template_source`` pastes in its place
PREAMBLE_LINE = re.compile(r"^from hbvm_core\.kernels\.preamble import \*.*\n", re.M)


def template_source(template: str) -> str:
    """The text of a template with its preamble pasted (``kernels/preamble.py``'s code, its docstring left out,
    in the place of the line that imports it): the text every generator starts from."""
    text = template_path(template).read_text()
    preamble = template_path("preamble").read_text()
    tree = ast.parse(preamble)
    start = tree.body[0].end_lineno if ast.get_docstring(tree) is not None else 0
    code = "".join(preamble.splitlines(keepends=True)[start:]).lstrip("\n")
    pasted, count = PREAMBLE_LINE.subn(lambda _: code, text, count=1)
    if count != 1:
        raise ConfigError(f"template {template!r}: no line 'from hbvm_core.kernels.preamble import *'")
    return pasted


def field_constants(state: tuple[str, ...] = STATE, info: tuple[str, ...] = INFO) -> dict[str, int]:
    """``STATE_<FIELD>`` and ``INFO_<FIELD>`` -> the field's index; ``STATE_SIZE``, ``INFO_SIZE`` -> the lengths."""
    named = {f"STATE_{name.upper()}": i for i, name in enumerate(state)}
    named |= {f"INFO_{name.upper()}": i for i, name in enumerate(info)}
    return named | {"STATE_SIZE": len(state), "INFO_SIZE": len(info)}


def field_source(state: tuple[str, ...] = STATE, info: tuple[str, ...] = INFO) -> str:
    """The fields as module constants, the text a generator appends to a module (numba folds them)."""
    lines = [f"{key} = {index}" for key, index in field_constants(state, info).items()]
    return "\n# the fields of run_chunk's state and info (kernels/description.py)\n" + "\n".join(lines) + "\n"


@dataclass(frozen=True, eq=False)  # one object per loop: compared and hashed by identity
class LoopDescription:
    """One compiled loop, as its method declares it (module docstring).

    ``template``: ``kernels/<template>.py``; ``callbacks``: the problem's callbacks its module binds;
    ``runner``: the name of the Python driver's class of its ``run_chunk`` in ``DRIVERS`` (a name, not a
    path: the numerics identity counts its strings, and a moved driver file computes the same), None for a
    module of functions; ``forms``: of ``FORMS``; ``reasons``: status code -> the failure's reason;
    ``carried``: the ``run_chunk`` argument holding the multiplier carried from step to step (the ensemble's
    block reads the last step's there; None: from the last step's row); ``tail``: the arguments after ``info``
    (fresh per call); ``warm``: the loops ``python -m hbvm_core kernels warm`` compiles for it, name -> (label,
    a study entry of a method that runs it); ``lanes``: the module that generates its lockstep form where that is
    not ``kernels/lanes.py``'s own (HBVM's), by name (imported when used): its ``refusal(runner, m, nu)`` and
    ``lane_module(problem, runner, **options)``."""

    template: str
    callbacks: tuple[str, ...]
    runner: str | None = None
    forms: frozenset[str] = frozenset({"loop"})
    reasons: Mapping[int, str] = field(default_factory=dict)
    carried: str | None = None
    tail: tuple[str, ...] = ()
    state: tuple[str, ...] = STATE
    info: tuple[str, ...] = INFO
    warm: Mapping[str, tuple[str, dict]] = field(default_factory=dict)
    lanes: str | None = None

    def __post_init__(self):
        unbound = sorted(set(self.callbacks) - set(CALLBACK_NAMES))
        if unbound:
            raise ConfigError(f"LoopDescription {self.template!r}: callbacks {unbound} are not among {CALLBACK_NAMES}")
        unknown = sorted(set(self.forms) - FORMS)
        if unknown:
            raise ConfigError(f"LoopDescription {self.template!r}: forms {unknown} are not among {sorted(FORMS)}")
        if self.lanes is not None and "lanes" not in self.forms:
            raise ConfigError(f"LoopDescription {self.template!r}: lanes = {self.lanes!r} without the form 'lanes'")
        if not self.path.is_file():
            raise ConfigError(f"LoopDescription {self.template!r}: no template {self.path}")

    @property
    def path(self) -> Path:
        """The template's file."""
        return template_path(self.template)

    def source(self) -> str:
        """The template's text with its preamble pasted (``template_source``)."""
        return template_source(self.template)

    def has(self, form: str) -> bool:
        """Whether the loop has this form (``FORMS``)."""
        return form in self.forms

    def fields(self) -> dict[str, int]:
        """``STATE_<FIELD>``, ``INFO_<FIELD>`` -> index (``field_constants``)."""
        return field_constants(self.state, self.info)

    def field_source(self) -> str:
        """The fields as the module constants a generated module carries (``field_source``)."""
        return field_source(self.state, self.info)

    def runner_class(self) -> type:
        """The class ``runner`` names (imported now)."""
        import importlib

        if self.runner is None:
            raise ConfigError(f"LoopDescription {self.template!r}: no runner (a module of functions)")
        return getattr(importlib.import_module(DRIVERS), self.runner)
