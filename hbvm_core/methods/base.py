"""What every integration method implements, and the stable label of a study's method entry.

A method is a small immutable object: a display ``name``, a file-name safe
``label()``, the ``attrs()`` recorded with its trajectories, ``stepper(problem)``
(the numpy reference, one step at a time) and ``compiled_runner(problem)`` (a
compiled time loop, or None). ``from_entry`` builds one from a study's method
entry (a mapping without its ``method`` key) and owns that entry's checks.
Adding a method: one module with a ``Method`` subclass, and one line in
``hbvm_core.methods.METHODS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
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


class Method(ABC):
    """The interface of an integration method (HBVM, RATTLE, DOP853, ...)."""

    #: The entry's ``method`` value (the key in ``hbvm_core.methods.METHODS``).
    kind: ClassVar[str]
    #: Entry keys that ``label_parts`` spells out (never repeated as ``key-value`` in a label).
    LABEL_KEYS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:  # set before @dataclass, which then keeps it
            cls.__repr__ = Method.__repr__

    def __repr__(self) -> str:
        """One line: the display name, the label and the entry that rebuilds it (``from_spec``)."""
        try:
            entry, label = (
                entry_text(self.entry() if callable(getattr(self, "entry", None)) else self.spec()),
                self.label(),
            )
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
    def spec(self) -> dict[str, Any]:
        """The canonical method entry of this method (defaults left out): ``from_spec(m.spec())`` rebuilds it."""

    @abstractmethod
    def stepper(self, problem):
        """The numpy stepper: ``step(q0, p0, h, n, t) -> (dq, dp, lam, iterations)``."""

    def compiled_runner(self, problem):
        """The compiled time loop for ``problem`` (called like ``integrate.python_runner``), or None."""
        return None

    def label(self) -> str:
        """The stable, file-name safe label of ``spec()`` (``method_label``)."""
        return method_label(self.spec())

    @classmethod
    def from_entry(cls, entry: dict) -> Method:
        """Build from a method entry without its ``method`` key; ConfigError for a key it does not take."""
        only_keys(entry, set(), cls.__name__)
        return cls(**entry)

    @classmethod
    def label_parts(cls, entry: dict) -> list[str]:
        """The parts of the label that follow the kind (keys in ``LABEL_KEYS``)."""
        return []


#: entry ``method`` -> class, filled in by ``hbvm_core.methods`` (one line per method there).
METHODS: dict[str, type[Method]] = {}


def method_label(entry: dict) -> str:
    """A stable, file-name safe label of a method entry: hbvm_k6_s2, rattle, dop853_rtol1e-08_proj.

    The kind, the method's own parts (``label_parts``), ``rtol``, ``proj`` and then
    ``key-value`` for every other key, sorted.
    """
    kind = entry.get("method", "hbvm")
    parts = [kind]
    cls = METHODS.get(kind)
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
