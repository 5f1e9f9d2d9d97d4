"""hbvm's ensemble against diffrax (JAX, jit of vmap), the conical pendulum at equal accuracy, one core.

    python -m benchmarks.peer_diffrax [--runs 10000] [--quick] [--json] [--cpu C] [--repeats 3]

Needs the benchmarks extra (``pip install -e ".[bench]"``: jax[cpu], diffrax); without it one line and exit 0.

Two families of R runs of the conical pendulum (U = gravity z, g = |q|^2 - length^2, gravity = 1) on [0, T],
each run on a conical orbit, so each has a closed form (``orbit``):

- ``params``: a parameter family, run i of length l_i in [0.5, 1.5] at 45 degrees from the vertical; hbvm
  takes the lengths as ``params`` (lockstep lanes of different params rows: ``backend_note`` says so);
- ``initial data``: one problem (length 1), the runs differing only in their initial data, the orbit's angle
  from the vertical in [30, 60] degrees and its phase about the vertical in [0, 2 pi).

Error: the largest |q(T) - q_exact(T)| (2-norm) over all runs. For each target (1e-6, 1e-10) each side's
cheapest setting that meets it: hbvm HBVM(k,s) from ``MENU``, fixed point, h = T/N with N by doubling and then
bisection (to 2%; status != 0 counts as a miss); diffrax Dopri8 and Tsit5 with a PID step-size controller,
rtol = atol over half decades, two ways: ``vmap`` (``jax.jit(jax.vmap(diffeqsolve))``, each run its own steps:
the peer) and ``stacked`` (the R runs as one ODE under ``jax.jit``, one step size for all, the error norm an RMS
over all runs). The search runs on ``SEARCH_RUNS`` runs spread over the family (its ends included), then the
setting is checked on all R runs (N up by 5%, or the tolerance down half a decade, until it passes), and the
faster method (hbvm) or solver (diffrax) on all runs (process CPU, the better of two calls) is kept. The kept
settings are then timed alternately (hbvm, vmap, stacked), best of ``--repeats``, process CPU and wall; diffrax's
jit compile (ahead of time, ``lower().compile()``) is reported apart, as is hbvm's first call (its loop loaded
from the disk cache, or compiled).

diffrax integrates the index-reduced ODE in Cartesian coordinates (``acceleration``): q' = p,
p' = -grad U - 2 lambda q with lambda(q, p) from the hidden constraint d^2 g/dt^2 = 0, the formulation of the
project's own reference (``errors.reference: reference``). Not the angle coordinates: there the conical orbit is
a relative equilibrium (polar angle constant, azimuth linear in t) that every Runge-Kutta method reproduces to
round-off with any step, which would compare nothing. max |H - H0| and max |g| are taken at t = 0 and T.

One core: the process pinned to one CPU (``os.sched_setaffinity``, ``--cpu``), NUMBA_NUM_THREADS=1 and
``threads=1``; XLA_FLAGS ``--xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1``; float64 (``jax_enable_x64``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time

import numpy as np

from . import _common

T_END = 20.0  #: end time: 3-6 periods over the families
GRAVITY = 1.0
TARGETS = (1e-6, 1e-10)
#: HBVM(k, s) tried by hbvm. H and g are quadratic here, so HBVM(k, s) with k > s is HBVM(s, s) (the quadrature
#: is exact for their line integrals) at more cost per step: (4,2), (6,3), (8,4) stay as the usual choices.
MENU = ((2, 2), (4, 2), (3, 3), (6, 3), (4, 4), (8, 4), (5, 5), (6, 6))
SOLVERS = ("Dopri8", "Tsit5")  #: diffrax solvers tried
TOLERANCES = tuple(10.0 ** (-e / 2) for e in range(8, 29))  #: rtol = atol, 1e-4 .. 1e-14, loose to tight
SEARCH_RUNS = 64
MAX_STEPS = 200_000  #: diffrax's step budget per run
NEED = 'benchmarks.peer_diffrax needs jax and diffrax: pip install -e ".[bench]"'


def orbit(length, angle, phase, t, gravity=GRAVITY) -> tuple[np.ndarray, np.ndarray]:
    """Exact (q, p) [R, 3] at time t of the conical orbits of pendula of the given lengths: at ``angle`` from the
    downward vertical, radius r = length sin(angle), depth d = length cos(angle), angular speed w = sqrt(gravity/d)
    (tension along q: tan(angle) = w^2 r / gravity), starting at azimuth ``phase`` and turning anticlockwise."""
    length, angle, phase = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (length, angle, phase)))
    r, d = length * np.sin(angle), length * np.cos(angle)
    w = np.sqrt(gravity / d)
    a = phase + w * t
    q = np.stack([r * np.cos(a), r * np.sin(a), -d], axis=-1)
    p = np.stack([-r * w * np.sin(a), r * w * np.cos(a), np.zeros_like(a)], axis=-1)
    return q, p


def acceleration(q, p, gravity):
    """p' of the index-reduced ODE (M = I): -grad U - G lambda with G = 2 q and, from g'' = 2|p|^2 + 2 q.p' = 0,
    lambda = (|p|^2 - q . grad U) / (2 |q|^2), grad U = (0, 0, gravity). Arithmetic only: numpy or jax arrays."""
    pp = (p * p).sum(axis=-1, keepdims=True)
    qq = (q * q).sum(axis=-1, keepdims=True)
    g = gravity[..., None] if hasattr(gravity, "ndim") and gravity.ndim else gravity
    lam = (pp - g * q[..., 2:3]) / (2.0 * qq)
    return -2.0 * lam * q - g * np.array([0.0, 0.0, 1.0])


def energy(q, p, gravity=GRAVITY) -> np.ndarray:
    """H = |p|^2/2 + gravity z."""
    return 0.5 * (p * p).sum(axis=-1) + gravity * q[..., 2]


def families(runs: int) -> dict[str, dict]:
    """Lengths, angles and phases [R] of each family (``orbit``)."""
    quarter = np.full(runs, math.pi / 4)
    golden = np.mod(np.arange(runs) * 0.6180339887498949, 1.0)  # phases spread evenly, in no order
    return {
        "params": {"length": np.linspace(0.5, 1.5, runs), "angle": quarter, "phase": np.zeros(runs)},
        "initial data": {"length": np.ones(runs), "angle": np.linspace(math.pi / 6, math.pi / 3, runs),
                         "phase": 2 * math.pi * golden},
    }  # fmt: skip


def subset(family: dict, count: int) -> dict:
    """``count`` runs spread over the family, its first and last included."""
    runs = next(iter(family.values())).size
    idx = np.unique(np.linspace(0, runs - 1, min(count, runs)).round().astype(int))
    return {key: val[idx] for key, val in family.items()}


def summary(family: dict, q, p) -> dict:
    """Largest position error at T, |H - H0| at T and |g| at 0 and T over the runs, from q, p [R, 3] at T."""
    q_ex, p_ex = orbit(family["length"], family["angle"], family["phase"], T_END)
    q0, p0 = orbit(family["length"], family["angle"], family["phase"], 0.0)
    L2 = family["length"] ** 2
    err = np.linalg.norm(q - q_ex, axis=-1)
    return {
        "error": float(np.max(err)) if np.all(np.isfinite(err)) else math.inf,
        "H_error": float(np.max(np.abs(energy(q, p) - energy(q0, p0)))),
        "g_error": float(np.max(np.abs((q * q).sum(axis=-1) - L2))),
    }


def once(fn) -> float:
    """Process CPU seconds of fn()."""
    c0 = time.process_time()
    fn()
    return time.process_time() - c0


# --------------------------------------------------------------------------- hbvm
class Hbvm:
    """hbvm's ``integrate_ensemble`` on one thread: the params family by ``params``, the other by q0, p0."""

    def __init__(self, name: str):
        import hbvm_core as hc

        self.hc, self.name = hc, name
        self.problem = hc.get_problem("conical_pendulum")
        self.note = ""

    def solve(self, family: dict, ks: tuple[int, int], N: int) -> dict:
        R = family["length"].size
        if self.name == "params":
            kw = {"params": {"length": family["length"]}}
        else:
            q0, p0 = orbit(family["length"], family["angle"], family["phase"], 0.0)
            kw = {"q0": q0, "p0": p0}
        res = self.hc.integrate_ensemble(self.problem, self.hc.HBVM(*ks), T_END / N, N, sample_every=N, threads=1, **kw)
        self.note = res.backend_note
        if np.any(res.status != 0):
            return {"error": math.inf}
        last = res.n_saved - 1
        out = summary(family, res.q[np.arange(R), last], res.p[np.arange(R), last])
        out["H_error_hbvm"] = float(np.max(res.H_error))  # the library's own, over the same two points
        out["sweeps_per_step"] = float(np.sum(res.iterations) / np.sum(res.steps))
        return out

    def search(self, family: dict, small: dict, target: float) -> dict:
        """The fastest HBVM(k,s) of ``MENU`` at its fewest steps meeting ``target`` on all runs."""
        found = []
        for ks in MENU:
            t0 = time.perf_counter()
            self.solve(small, ks, 4)  # load (or compile) the loop, untimed
            first = time.perf_counter() - t0
            lo, hi = 0, 8
            while self.solve(small, ks, hi)["error"] > target:
                lo, hi = hi, 2 * hi
                if hi > 2**20:
                    raise RuntimeError(f"HBVM{ks}: no N up to 2^20 meets {target:g}")
            while hi - lo > max(1, hi // 50):
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if self.solve(small, ks, mid)["error"] <= target else (mid, hi)
            N = hi
            while True:
                c0 = time.process_time()
                full = self.solve(family, ks, N)
                cpu = time.process_time() - c0
                if full["error"] <= target:
                    break
                N = math.ceil(1.05 * N)
            cpu = min(cpu, once(lambda: self.solve(family, ks, N)))  # noqa: B023 (called at once)
            found.append({"method": f"HBVM{ks}", "ks": ks, "N": N, "cpu_once": cpu, "first_call_s": first, **full})
        return min(found, key=lambda row: row["cpu_once"])


# --------------------------------------------------------------------------- diffrax
class Diffrax:
    """diffrax's ``diffeqsolve``: per run under ``jax.jit(jax.vmap(...))`` (each run its own steps), or
    ``stacked``: all runs as one ODE of R x 6 unknowns under ``jax.jit`` (one step size, the controller's RMS norm
    over every run). rtol and atol are traced: one compile per solver, mode and R."""

    def __init__(self, stacked: bool):
        import jax

        jax.config.update("jax_enable_x64", True)
        self.jax, self.stacked = jax, stacked
        self.mode = "stacked" if stacked else "vmap"
        self.compiled: dict = {}

    def _function(self, solver_name: str, R: int):
        key = (solver_name, R)
        if key in self.compiled:
            return self.compiled[key]
        import diffrax
        import jax.numpy as jnp

        solver = getattr(diffrax, solver_name)()
        adjoint = diffrax.ForwardMode() if hasattr(diffrax, "ForwardMode") else diffrax.RecursiveCheckpointAdjoint()

        def field(t, y, gravity):
            return jnp.concatenate([y[..., 3:], acceleration(y[..., :3], y[..., 3:], gravity)], axis=-1)

        def solve(y0, gravity, rtol, atol):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field), solver, t0=0.0, t1=T_END, dt0=None, y0=y0, args=gravity,
                saveat=diffrax.SaveAt(t1=True), stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
                max_steps=MAX_STEPS, adjoint=adjoint, throw=False,
            )  # fmt: skip
            return sol.ys[-1], sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful

        batched = self.jax.jit(solve if self.stacked else self.jax.vmap(solve, in_axes=(0, 0, None, None)))
        tol = jnp.asarray(1e-6)
        t0 = time.perf_counter()
        fn = batched.lower(jnp.zeros((R, 6)), jnp.ones(R), tol, tol).compile()
        self.compiled[key] = (fn, time.perf_counter() - t0)
        return self.compiled[key]

    def solve(self, family: dict, solver_name: str, tol: float) -> dict:
        import jax.numpy as jnp

        R = family["length"].size
        fn, _ = self._function(solver_name, R)
        q0, p0 = orbit(family["length"], family["angle"], family["phase"], 0.0)
        y0 = jnp.asarray(np.concatenate([q0, p0], axis=1))
        y, steps, ok = fn(y0, jnp.full(R, GRAVITY), jnp.asarray(tol), jnp.asarray(tol))
        y = np.asarray(self.jax.block_until_ready(y))
        if not np.all(np.asarray(ok)):
            return {"error": math.inf}
        return {**summary(family, y[:, :3], y[:, 3:]), "max_steps": int(np.max(steps))}

    def search(self, family: dict, small: dict, target: float) -> dict:
        """The faster of ``SOLVERS`` at its loosest tolerance meeting ``target`` on all runs."""
        found = []
        R = family["length"].size
        for name in SOLVERS:
            i = next((i for i, tol in enumerate(TOLERANCES) if self.solve(small, name, tol)["error"] <= target), None)
            if i is None:
                continue
            while i < len(TOLERANCES):
                c0 = time.process_time()
                full = self.solve(family, name, TOLERANCES[i])
                cpu = time.process_time() - c0
                if full["error"] <= target:
                    break
                i += 1
            else:
                continue
            cpu = min(cpu, once(lambda: self.solve(family, name, TOLERANCES[i])))  # noqa: B023 (called at once)
            compile_s = self._function(name, R)[1]
            found.append({"method": name, "tol": TOLERANCES[i], "cpu_once": cpu, "compile_s": compile_s, **full})
        if not found:
            raise RuntimeError(f"diffrax ({self.mode}): no solver meets {target:g} down to rtol = {TOLERANCES[-1]:g}")
        return min(found, key=lambda row: row["cpu_once"])


# --------------------------------------------------------------------------- timing
def timed(fn, repeats: int) -> tuple[list[float], list[float]]:
    """(wall, process-CPU seconds) of each call: the CPU of every thread (XLA's and numba's)."""
    return _common.timed(fn, repeats, clock=time.process_time)


def compare(name: str, family: dict, target: float, hbvm: Hbvm, peers: list[Diffrax], repeats: int) -> dict:
    """Each side's setting for ``target``, then all timed alternately (best of ``repeats``)."""
    small = subset(family, SEARCH_RUNS)
    settings = {"hbvm": hbvm.search(family, small, target)}
    note = hbvm.note
    for peer in peers:
        settings[f"diffrax-{peer.mode}"] = peer.search(family, small, target)
    ours = settings["hbvm"]
    runs = {"hbvm": lambda: hbvm.solve(family, ours["ks"], ours["N"])}
    for peer in peers:
        theirs = settings[f"diffrax-{peer.mode}"]
        runs[f"diffrax-{peer.mode}"] = lambda p=peer, t=theirs: p.solve(family, t["method"], t["tol"])
    times = {side: ([], []) for side in runs}
    for _ in range(repeats):
        for side, fn in runs.items():
            w, c = timed(fn, 1)
            times[side][0].extend(w)
            times[side][1].extend(c)
    row = {"family": name, "runs": family["length"].size, "target": target, "hbvm_note": note}
    for side, (w, c) in times.items():
        row[side] = {**{k: v for k, v in settings[side].items() if k != "ks"}, "wall_s": min(w), "cpu_s": min(c)}
    for side in runs:
        if side != "hbvm":
            row[f"ratio_cpu_{side}"] = row["hbvm"]["cpu_s"] / row[side]["cpu_s"]
            row[f"ratio_wall_{side}"] = row["hbvm"]["wall_s"] / row[side]["wall_s"]
    row["load"] = [round(x, 2) for x in os.getloadavg()]
    return row


def one_core(cpu: int | None) -> str:
    """Pin this process to one CPU and one thread for numba and XLA (before either is imported)."""
    os.environ["NUMBA_NUM_THREADS"] = "1"
    flags = "--xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {chosen})
    return f"pinned to CPU {chosen} of {allowed}; NUMBA_NUM_THREADS=1; XLA_FLAGS={os.environ['XLA_FLAGS']}"


def have_peer() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("jax", "diffrax"))
    except ValueError:  # a module in sys.modules without a spec
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="1000 runs, target 1e-6 only, best of 2")
    ap.add_argument("--json", action="store_true", help="print a JSON object")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=None, help="the CPU to pin to (default: the last allowed)")
    args = ap.parse_args(argv)
    if not have_peer():
        print(NEED)
        return 0
    pinned = one_core(args.cpu)
    runs, targets, repeats = (1000, TARGETS[:1], 2) if args.quick else (args.runs, TARGETS, args.repeats)
    from ._common import machine

    peers = [Diffrax(stacked=False), Diffrax(stacked=True)]
    import diffrax

    rows = []
    for name, family in families(runs).items():
        hbvm = Hbvm(name)
        for target in targets:
            rows.append(compare(name, family, target, hbvm, peers, repeats))
            if not args.json:
                show(rows[-1])
    versions = {"jax": peers[0].jax.__version__, "diffrax": diffrax.__version__}
    if args.json:
        print(json.dumps({"machine": machine(), "one_core": pinned, **versions, "T": T_END, "rows": rows}, indent=1))
        return 0
    print(f"machine: {machine()}; {versions}; {pinned}")
    return 0


def show(r: dict) -> None:
    h = r["hbvm"]
    print(
        f"{r['family']} R={r['runs']} target {r['target']:.0e} (load {r['load']}):\n"
        f"  hbvm {h['method']} N={h['N']} ({h['sweeps_per_step']:.1f} sweeps/step): cpu {h['cpu_s']:.3f} s, "
        f"wall {h['wall_s']:.3f} s; error {h['error']:.2e}, "
        f"|H-H0| {h['H_error']:.1e}, |g| {h['g_error']:.1e}; first call {h['first_call_s']:.1f} s [{r['hbvm_note']}]",
        flush=True,
    )
    for side in (key for key in r if key.startswith("diffrax-")):
        d = r[side]
        print(
            f"  {side} {d['method']} rtol=atol={d['tol']:.0e} ({d['max_steps']} steps): cpu {d['cpu_s']:.3f} s, "
            f"wall {d['wall_s']:.3f} s; error {d['error']:.2e}, |H-H0| {d['H_error']:.1e}, |g| {d['g_error']:.1e}; "
            f"compile {d['compile_s']:.1f} s; hbvm/diffrax cpu {r['ratio_cpu_' + side]:.3f}, "
            f"wall {r['ratio_wall_' + side]:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
