"""What every integration method implements, and the stable label of a study's method entry.

A method is a small immutable object: a display ``name``, a file-name safe
``label()``, the ``attrs()`` recorded with its trajectories, ``stepper(problem)``
(the numpy reference, one step at a time) and ``compiled_runner(problem)`` (a
compiled time loop, or None). ``from_entry`` builds one from a study's method
entry (a mapping without its ``method`` key) and owns that entry's checks.

Each class also declares itself, for the workflow and the tests to read:

- ``ENTRY_KEYS``: its entry keys with their types and defaults (the config schema's
  method entry is built from them, ``hbvm_workflow.schema``);
- ``NEEDS``, ``COMPILED_NEEDS``: what it needs from a problem (``check_problem``,
  ``has_compiled``);
- ``STEP_SECONDS``, ``work_units``: its cost model (``hbvm_workflow.runs.Job``);
- ``orders`` and ``conserves``: its claims, checked by one test over every
  registered method (tests/verification/test_claims.py) and tabled in
  docs/baselines.md (``hbvm_core.methods.table``);
- ``EXAMPLES``, ``SUMMARY``: entries that show it and one line on what it is.

Adding a method: one module with a ``Method`` subclass, and one line in the
``hbvm_core.methods.METHODS`` registry (from any module: a study loads a module
outside this package by the config's ``method_modules``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError


def entry_text(entry: dict) -> str:
    """A method entry as written in messages: {k: 6, s: 2}."""
    return "{" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}"


def only_keys(entry: dict, allowed: set, what: str) -> None:
    """ConfigError naming the first key of ``entry`` that ``what`` does not take."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigError(f"method entry {entry_text(entry)}: unknown key {unknown[0]!r} for {what}")


@dataclass(frozen=True)
class EntryKey:
    """One key of a method entry: its JSON-schema type, its default (``None``: required, or none) and what it is."""

    type: dict = field(default_factory=dict)
    default: Any = None
    doc: str = ""

    def schema(self) -> dict:
        """The key's fragment of the config schema (the default is described, not filled in: the entry stays
        as written, and so do its label and hash)."""
        doc = self.doc + (f" (default {self.default})" if self.default is not None else "")
        return {**({"description": doc} if doc else {}), **self.type}


#: the JSON-schema types of the keys the built-in methods share
POSITIVE = {"$ref": "#/$defs/positive"}
BOOLEAN = {"type": "boolean"}
QUANTITIES = ("H", "g", "hidden")


class Method(ABC):
    """The interface of an integration method (HBVM, RATTLE, DOP853, ...)."""

    #: The entry's ``method`` value (the key in ``hbvm_core.methods.METHODS``); ``name`` is the display name.
    method_name: ClassVar[str]
    #: Entry keys that ``label_parts`` spells out (never repeated as ``key-value`` in a label).
    LABEL_KEYS: ClassVar[tuple[str, ...]] = ()
    #: The modules (relative to hbvm_core) whose canonical form identifies its numbers (``hbvm_core.canonical``).
    numerics_sources: ClassVar[tuple[str, ...]] = ()
    #: The keys its entry takes besides ``method`` (the schema's method entry is their union over ``METHODS``).
    ENTRY_KEYS: ClassVar[dict[str, EntryKey]] = {}
    #: What it needs from a problem with constraints (nu > 0): "d2g" (for lambda(q, p) of docs/method.md 1).
    NEEDS: ClassVar[frozenset[str]] = frozenset()
    #: The compiled callbacks (``Problem.kernels``) its compiled loop needs besides grad_U where nu > 0
    #: ("G", "g"); None: it has no compiled loop.
    COMPILED_NEEDS: ClassVar[frozenset[str] | None] = None
    #: The cost model: seconds per step and work unit (``work_units``) of its compiled loop (None: none
    #: estimated) and of the numpy path, on one core (``hbvm_workflow.runs.Job.estimated_seconds``).
    STEP_SECONDS: ClassVar[tuple[float | None, float]] = (None, 1e-4)
    #: Its claims: the orders in h of the global errors of q, p and lambda (None: the error follows a
    #: tolerance, not h). A class whose orders depend on its parameters makes this a property.
    orders: ClassVar[dict[str, float | None]] = {"q": None, "p": None, "lam": None}
    #: Its claims: what it keeps at round-off over a run, of QUANTITIES: H, g, the hidden constraint
    #: G^T M^{-1} p (for H and g: where the quadrature of the step is exact, docs/method.md 3).
    conserves: ClassVar[frozenset[str]] = frozenset()
    #: Entries that show the method (docs/baselines.md's table, the claims test), and one line on what it is.
    EXAMPLES: ClassVar[tuple[dict, ...]] = ()
    SUMMARY: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:  # set before @dataclass, which then keeps it
            cls.__repr__ = Method.__repr__

    def __repr__(self) -> str:
        """One line: the display name, the label and the entry that rebuilds it (``method_from_entry``)."""
        try:
            entry, label = entry_text(self.entry()), self.label()
        except Exception:  # a half-built method (in an error message) still prints
            return f"<hbvm_core method {type(self).__name__}>"
        return f"<hbvm_core.{type(self).__name__}> {self.name}, label {label}, entry {entry}"

    @property
    @abstractmethod
    def name(self) -> str:
        """The display name, e.g. HBVM(6,2)."""

    @abstractmethod
    def attrs(self) -> dict[str, Any]:
        """What identifies the method in a trajectory's metadata."""

    @abstractmethod
    def entry(self) -> dict[str, Any]:
        """The canonical method entry of this method (defaults left out): ``method_from_entry(m.entry())`` rebuilds
        it."""

    @abstractmethod
    def stepper(self, problem):
        """The numpy stepper: ``step(q0, p0, h, n, t) -> (dq, dp, lam, iterations)``."""

    def compiled_runner(self, problem):
        """The compiled time loop for ``problem`` (called like ``integrate.python_runner``), or None."""
        return None

    def label(self) -> str:
        """The stable, file-name safe label of ``entry()`` (``method_label``)."""
        return method_label(self.entry())

    @classmethod
    def from_entry(cls, entry: dict) -> Method:
        """Build from a method entry without its ``method`` key; ConfigError for a key it does not take."""
        only_keys(entry, set(cls.ENTRY_KEYS), cls.__name__)
        return cls(**entry)

    @classmethod
    def variants(cls) -> tuple[type[Method], ...]:
        """The concrete classes an entry of this ``method_name`` builds (HBVM: one per multiplier)."""
        return (cls,)

    @classmethod
    def work_units(cls, entry: dict) -> int:
        """The work of one step in the units of ``STEP_SECONDS`` (HBVM: its k quadrature nodes)."""
        return 1

    @property
    def summary(self) -> str:
        """One line on what this method is (``SUMMARY``; a class whose options change it overrides this)."""
        return self.SUMMARY

    def check_problem(self, problem) -> None:
        """ConfigError naming what ``NEEDS`` asks of a constrained problem and ``problem`` lacks."""
        if problem.nu and "d2g" in self.NEEDS and problem.d2g is None:
            name = problem.name
            raise ConfigError(f"method = {self.method_name}: problem {name} has no d2g, needed for lambda(q, p)")

    def has_compiled(self, problem) -> bool:
        """Whether ``problem`` has the compiled callbacks (``COMPILED_NEEDS``) of this method's compiled loop."""
        kernels = problem.kernels
        if self.COMPILED_NEEDS is None or kernels is None:
            return False
        return problem.nu == 0 or all(getattr(kernels, key, None) is not None for key in self.COMPILED_NEEDS)

    @classmethod
    def label_parts(cls, entry: dict) -> list[str]:
        """The parts of the label that follow the method name (keys in ``LABEL_KEYS``)."""
        return []


#: entry ``method`` -> class, filled in by ``hbvm_core.methods`` (one line per method there).
METHODS: dict[str, type[Method]] = {}


def method_label(entry: dict) -> str:
    """A stable, file-name safe label of a method entry: hbvm_k6_s2, rattle, dop853_rtol1e-08_proj.

    The method name, the method's own parts (``label_parts``), ``rtol``, ``proj`` and then
    ``key-value`` for every other key, sorted.
    """
    method_name = entry.get("method", "hbvm")
    parts = [method_name]
    cls = METHODS.get(method_name)
    if cls is not None:
        parts += cls.label_parts(entry)
    if "rtol" in entry:
        parts.append(f"rtol{float(entry['rtol']):.0e}")
    if entry.get("projection"):
        parts.append("proj")
    known = {"method", "rtol", "projection"}.union(*(c.LABEL_KEYS for c in METHODS.values()))
    for key in sorted(set(entry) - known):
        parts.append(f"{key}-{entry[key]}")
    return "_".join(str(p) for p in parts).replace("/", "-").replace(" ", "")
