"""HBVM(k, s) with a constant multiplier per step (docs/method.md section 3).

The method object carries only (k, s), its tableau and solver settings; the
problem supplies the callbacks; ``hbvm_core.integrate`` owns the time loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, ConvergenceError
from ..fixed_point import StoppingRule, fixed_point
from ..kernels.description import LoopDescription
from ..kernels.rules import DIVERGED, NO_CONVERGENCE, NON_FINITE_STATE, SINGULAR
from ..legendre import Tableau, tableau
from ..problem import Problem
from ..sparse.hbvm import SparseSweep
from ..sparse.path import sparse_path
from .base import BOOLEAN, EntryKey, Method, entry_text, only_keys

SOLVERS = ("fixed-point", "blended")
WARM_STARTS = ("extrapolate", "previous", "p0")


#: the HBVM loops' failures by run_chunk's status code, worded as HBVMStepper words them
HBVM_REASONS = {
    NO_CONVERGENCE: "no convergence",
    DIVERGED: "non-finite increment (diverged)",
    SINGULAR: "singular multiplier system (Singular matrix)",
    NON_FINITE_STATE: "non-finite state after the step",
}


class HBVMBase(Method):
    """What HBVM(k, s) with a constant and with a polynomial multiplier share: k, s, the tableau, the
    name, attrs, entry and label. Each variant sets ``multiplier`` and registers under it."""

    method_name: ClassVar[str] = "hbvm"
    LABEL_KEYS: ClassVar[tuple[str, ...]] = ("k", "s", "multiplier", "solver", "warm_start")
    #: multiplier name -> variant class, filled in by the subclasses
    VARIANTS: ClassVar[dict[str, type[HBVMBase]]] = {}
    multiplier: ClassVar[str]
    #: the keys of an ``hbvm`` entry, of every variant (each variant checks which it takes)
    ENTRY_KEYS: ClassVar[dict[str, EntryKey]] = {
        "k": EntryKey({"type": "integer", "minimum": 1}, doc="Gauss nodes of the quadrature, k >= s"),
        "s": EntryKey({"type": "integer", "minimum": 1}, doc="degree of the polynomial approximation"),
        "solver": EntryKey({"enum": list(SOLVERS)}, "fixed-point", "the study's solver otherwise"),
        "warm_start": EntryKey({"enum": list(WARM_STARTS)}, "extrapolate"),
        "multiplier": EntryKey({"enum": ["constant", "polynomial"]}, "constant"),
        "projection": EntryKey(BOOLEAN, False, "multiplier: polynomial only"),
    }
    NEEDS: ClassVar[frozenset[str]] = frozenset()
    COMPILED_NEEDS: ClassVar[frozenset[str] | None] = frozenset()
    #: about a microsecond per step and quadrature node compiled (benchmarks/README.md: 0.63 us for
    #: HBVM(2,2), 5.2 us for HBVM(6,2)), a hundred times more on the numpy path
    STEP_SECONDS: ClassVar[tuple[float | None, float]] = (1e-6, 1e-4)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "multiplier" in cls.__dict__:
            HBVMBase.VARIANTS[cls.multiplier] = cls

    def __post_init__(self) -> None:
        tableau(self.k, self.s)  # validates k, s
        self._check_options()
        if self.warm_start not in WARM_STARTS:
            raise ConfigError(f"warm_start = {self.warm_start!r}: expected one of {', '.join(WARM_STARTS)}")

    @classmethod
    def variants(cls) -> tuple[type[Method], ...]:
        return tuple(HBVMBase.VARIANTS.values()) if cls is HBVMBase else (cls,)

    @classmethod
    def work_units(cls, entry: dict) -> int:
        return max(1, int(entry.get("k", 1)))

    def _check_options(self) -> None:
        """The variant's own settings (solver, projection)."""

    def _name_suffix(self) -> str:
        return ""

    def _extra_attrs(self) -> dict:
        return {}

    @property
    def name(self) -> str:
        return f"HBVM({self.k},{self.s})" + self._name_suffix()

    @property
    def tableau(self) -> Tableau:
        return tableau(self.k, self.s)

    def attrs(self) -> dict:
        return {
            "method": "hbvm",
            "k": self.k,
            "s": self.s,
            "multiplier": self.multiplier,
            **self._extra_attrs(),
            "solver": self.solver,
            "warm_start": self.warm_start,
            "rtol": self.rule.rtol,
            "max_iter": self.rule.max_iter,
        }

    def entry(self) -> dict:
        entry = {"method": "hbvm", "k": self.k, "s": self.s}
        if self.multiplier != "constant":
            entry["multiplier"] = self.multiplier
        if self.solver != "fixed-point":
            entry["solver"] = self.solver
        if getattr(self, "projection", False):
            entry["projection"] = True
        if self.warm_start != "extrapolate":
            entry["warm_start"] = self.warm_start
        return entry

    @classmethod
    def from_entry(cls, entry: dict) -> HBVMBase:
        """``{k, s, multiplier: constant | polynomial, ...}``: the variant named by ``multiplier`` checks the rest."""
        entry = dict(entry)
        multiplier = entry.pop("multiplier", "constant")
        variants = sorted(HBVMBase.VARIANTS)
        if multiplier not in variants:
            raise ConfigError(f"multiplier = {multiplier!r}: expected one of {', '.join(variants)}")
        if "k" not in entry or "s" not in entry:
            raise ConfigError(f"method entry {entry_text(entry)}: HBVM needs both k and s")
        return HBVMBase.VARIANTS[multiplier].from_variant_entry(entry)

    @classmethod
    def from_variant_entry(cls, entry: dict) -> HBVMBase:
        raise NotImplementedError

    @classmethod
    def label_parts(cls, entry: dict) -> list[str]:
        parts = [f"k{entry.get('k')}", f"s{entry.get('s')}"]
        if entry.get("multiplier", "constant") != "constant":
            parts.append({"polynomial": "poly"}.get(entry["multiplier"], str(entry["multiplier"])))
        if entry.get("solver", "fixed-point") != "fixed-point":
            parts.append(str(entry["solver"]))
        if entry.get("warm_start", "extrapolate") != "extrapolate":
            parts.append(f"ws-{entry['warm_start']}")
        return parts


@dataclass(frozen=True)
class HBVM(HBVMBase):
    """HBVM(k, s) with a constant multiplier per step (docs/method.md section 3).

    Parameters
    ----------
    k : int
        Number of Gauss nodes (order-2k quadrature), k >= s.
    s : int
        Degree of the polynomial approximation, s >= 1.
    solver : {"fixed-point", "blended"}
        Fixed-point sweeps, or the simplified-Newton (blended) iteration.
    warm_start : {"extrapolate", "previous", "p0"}
        Initial gamma: the previous step's polynomial extrapolated, its
        coefficients, or gamma_0 = M^{-1} p0, gamma_j = 0.
    rule : StoppingRule
        When the iteration stops (round-off by default).

    Raises
    ------
    ConfigError
        For k < s, s < 1, or an unknown solver or warm start.
    """

    multiplier: ClassVar[str] = "constant"
    #: the compiled loop (kernels/description.py): template kernels/hbvm.py, in every form
    LOOP: ClassVar[LoopDescription] = LoopDescription(
        template="hbvm",
        callbacks=("grad_U", "G"),
        runner="CompiledRunner",
        forms=frozenset({"loop", "block", "lanes", "cuda"}),
        reasons=HBVM_REASONS,
        carried="lam_prev",
        warm={
            "fixed-point": ("HBVM fixed-point", {"method": "hbvm", "k": 2, "s": 1}),
            "blended": ("HBVM blended", {"method": "hbvm", "k": 2, "s": 1, "solver": "blended"}),
        },
    )
    numerics_sources: ClassVar[tuple[str, ...]] = (
        "methods/hbvm.py", "methods/_small.py", "sparse/hbvm.py", "sparse/structure.py", "sparse/normal.py",
        "sparse/factor.py", "sparse/path.py", "sparse/blended.py", "legendre.py", "fixed_point.py", "blended.py",
        "integrate.py",
        "kernels/hbvm.py", "kernels/driver.py", "kernels/rules.py", "kernels/linalg.py", "kernels/lanes.py",
    )  # fmt: skip
    #: H and g where U and g are polynomials of degree <= 2k/s (docs/method.md 3)
    conserves: ClassVar[frozenset[str]] = frozenset({"H", "g"})
    EXAMPLES: ClassVar[tuple[dict, ...]] = ({"k": 6, "s": 2}, {"k": 6, "s": 2, "solver": "blended"})
    SUMMARY: ClassVar[str] = (
        "HBVM(k,s) with a constant multiplier per step ([method.md](method.md) section 3); with a constant "
        "exact multiplier (the conical pendulum) order 2s in q and p"
    )

    k: int
    s: int
    solver: str = "fixed-point"
    warm_start: str = "extrapolate"
    rule: StoppingRule = field(default_factory=StoppingRule)

    @property
    def orders(self) -> dict[str, float | None]:
        """Order 2 in q and p, 1 in lambda, with a varying multiplier (docs/method.md 3)."""
        return {"q": 2, "p": 2, "lam": 1}

    @property
    def summary(self) -> str:
        if self.solver == "blended":
            return (
                "the same with the simplified-Newton (blended) iteration (method.md section 3): the same "
                "trajectory to round-off"
            )
        return self.SUMMARY

    def _check_options(self) -> None:
        if self.solver not in SOLVERS:
            raise ConfigError(f"solver = {self.solver!r}: expected one of {', '.join(SOLVERS)}")

    @classmethod
    def from_variant_entry(cls, entry: dict) -> HBVM:
        if "projection" in entry:
            raise ConfigError(
                f"projection = {entry['projection']!r}: only for multiplier: polynomial (this entry is constant)"
            )
        only_keys(entry, {"k", "s", "solver", "warm_start"}, "HBVM")
        return cls(**entry)

    def stepper(self, problem: Problem) -> HBVMStepper:
        """The numpy stepper (its sweeps on the problem's sparse G where ``sparse.path`` says so)."""
        return HBVMStepper(self, problem)

    def compiled_runner(self, problem: Problem):
        """The compiled (numba) time loop when the problem has ``kernels``, else None (hbvm_core.kernels)."""
        if not self.has_compiled(problem):
            return None
        return self.LOOP.runner_class()(self, problem)


def initial_gamma(tab: Tableau, warm_start: str, previous: np.ndarray | None, Mp0: np.ndarray) -> np.ndarray:
    """The iteration's start (docs/method.md 3): gamma_0 = M^{-1} p0, gamma_j = 0 on the first step or with
    warm_start "p0"; else the previous step's polynomial extrapolated (E @ gamma) or its coefficients."""
    if previous is None or warm_start == "p0":
        gamma = np.zeros((tab.s, Mp0.size))
        gamma[0] = Mp0
        return gamma
    return tab.E @ previous if warm_start == "extrapolate" else previous.copy()


class HBVMStepper:
    """One HBVM(k, s) step at a time for one problem; keeps the warm start between steps.

    On the sparse path (``sparse.path``: a sparse G, by size) the fixed-point sweeps are those of
    ``sparse.hbvm.SparseSweep`` and the blended iteration ``sparse.blended``'s; ``linear_algebra`` (the
    trajectory's attrs) says which."""

    def __init__(self, method: HBVM, problem: Problem):
        self.method = method
        self.problem = problem
        self.tab = method.tableau
        self.gamma: np.ndarray | None = None
        self.blended_lam: np.ndarray | None = None  # the blended iteration's multiplier at the last step
        self.sparse = None
        if sparse_path(problem):
            self.sparse = SparseSweep(self.tab, problem)
            self.sweep = self.sparse.sweep
            self.constraint_force = self.sparse.constraint_force

    @property
    def linear_algebra(self) -> str:
        """How the multiplier system is solved: "sparse" or "dense"."""
        return "dense" if self.sparse is None else "sparse"

    @property
    def sparse_sweep(self) -> str:
        """The sparse path's fixed-point sweep: "compiled" (``sparse.compiled``) or "numpy"; "none" off that path
        or with the blended iteration."""
        if self.sparse is None or self.method.solver == "blended":
            return "none"
        return self.sparse.kind

    def sweep(self, q0, p0, Mp0, h, gamma):
        """One fixed-point sweep gamma -> gamma_new (docs/method.md 3); aux = (lam, psi_0, rho_0)."""
        tab, pb = self.tab, self.problem
        Q = q0 + h * (tab.Ihat @ gamma)  # stage positions (k, m)
        psi = tab.W.T @ pb.grad_U(Q)  # (s, m)
        Mpsi = pb.minv_rows(psi[:, :, None])[:, :, 0] if pb._chol is not None else psi
        XMpsi = tab.X @ Mpsi
        new = -h * XMpsi
        new[0] += Mp0
        if pb.nu == 0:
            return new, (np.zeros(0), psi[0], None, Q)
        rho = np.einsum("ij,imn->jmn", tab.W, pb.G(Q))  # (s, m, nu)
        XMrho = np.einsum("jl,lmn->jmn", tab.X, pb.minv_rows(rho))
        A = h * np.einsum("jmn,jmr->nr", rho, XMrho)
        b = rho[0].T @ Mp0 - h * np.einsum("jmn,jm->n", rho, XMpsi)
        lam = np.linalg.solve(A, b)
        new -= h * (XMrho @ lam)
        return new, (lam, psi[0], rho[0], Q)

    def initial_guess(self, Mp0: np.ndarray) -> np.ndarray:
        return initial_gamma(self.tab, self.method.warm_start, self.gamma, Mp0)

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """Advance (q0, p0) by h; returns (dq, dp, lam, iterations) with q1 = q0 + dq, p1 = p0 + dp."""
        pb = self.problem
        Mp0 = pb.minv(p0)
        gamma = self.initial_guess(Mp0)
        try:
            with np.errstate(all="ignore"):
                F, terms = self.iteration(q0, p0, Mp0, h, n, t)
                gamma, aux, iters = fixed_point(F, gamma, self.method.rule, n, t, terms)
        except (ConvergenceError, np.linalg.LinAlgError) as exc:
            self._name_non_finite(q0, h, gamma, n, t)
            if isinstance(exc, np.linalg.LinAlgError):
                raise ConvergenceError(n, t, float("nan"), 0, f"singular multiplier system ({exc})") from None
            raise
        lam, psi0, rho0, _ = aux
        self.gamma = gamma
        if self.method.solver == "blended":
            self.blended_lam = lam
        dq = h * gamma[0]
        force = psi0 if pb.nu == 0 else psi0 + self.constraint_force(rho0, lam)
        return dq, -h * force, lam, iters

    def iteration(self, q0, p0, Mp0, h, n: int, t: float):
        """The map gamma -> (gamma_new, aux) that ``fixed_point.fixed_point`` iterates to round-off, and its terms
        (None, or the sparse path's scales of the rule): the sweep, or the blended (simplified-Newton) step."""
        if self.method.solver != "blended":
            return (lambda gm: self.sweep(q0, p0, Mp0, h, gm)), (None if self.sparse is None else self.sparse.terms)
        if self.sparse is not None:
            from ..sparse.blended import newton_map
        else:
            from ..blended import newton_map
        return newton_map(self, q0, Mp0, h, n, t)

    def constraint_force(self, rho0: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """rho_0 lam, the constraint force of the step (p1 = p0 - h (psi_0 + rho_0 lam), docs/method.md 3)."""
        return rho0 @ lam

    def _name_non_finite(self, q0, h, gamma, n: int, t: float) -> None:
        """After a failed iteration: raise NonFiniteError if a callback returned NaN/inf at the stages."""
        self.problem.check_finite(q0 + h * (self.tab.Ihat @ gamma), n, t)
