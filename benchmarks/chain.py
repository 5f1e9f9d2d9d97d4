"""Cost of a step against the size of the problem: a planar chain of n links (m = 2 n, nu = n) on the numpy path.

    python -m benchmarks.chain [--json] [--sizes 10 100 1000 10000] [--no-memory] [--indexed]

For each n: the chain of ``hbvm_core.problems.chain`` (masses 1 +- 0.5, a bent shape, angular speeds varying
along it) at h = 0.1 / sqrt(n) (the chain's fastest frequency grows like sqrt(n), so the fixed point's sweeps
per step stay about constant), with HBVM(2,2) and HBVM(4,2) (fixed point), HBVM(4,2) blended and RATTLE, each
on the path the size chooses ("auto": dense below ``sparse.path.SPARSE_MIN_M`` coordinates, sparse above) and,
for n <= 100, on the dense path too; the sparse fixed-point sweep compiled where it applies (``sparse.compiled``;
``HBVM_SPARSE_SWEEP=numpy`` times the numpy sweep). Times are process CPU seconds (``time.process_time``: the machine is
shared), the best of three runs of ``steps`` steps; per step and per sweep (a step's fixed-point sweeps or Newton
iterations).
Also: the growth exponent of the CPU time per step and per sweep from the second size to the last, the time to
build the problem (validation, the pattern of G^T M^-1 G and its ordering) against n, and the peak memory
(tracemalloc) of building and running 10 steps of the largest chain.

``--indexed`` times instead the chain written in the indexed form (``INDEXED``, hbvm_core.indexed: one constraint
over i in 1..links, masses 1 + 0.5 sin(i - 1), straight at theta = 0.5) against the built-in chain of the same
data: CPU seconds to build it cold (its terms read and derived, then numbered, validated and its pattern ordered) and
warm (the model kept: another size of a study's grid), and HBVM(2,2)'s ms per step on each.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import tracemalloc

import numpy as np

import hbvm_core as hc
from hbvm_core.methods import HBVM, RATTLE
from hbvm_core.problems import chain

from ._common import NullSink, machine

METHODS = {
    "HBVM(2,2)": HBVM(2, 2),
    "HBVM(4,2)": HBVM(4, 2),
    "HBVM(4,2) blended": HBVM(4, 2, solver="blended"),
    "RATTLE": RATTLE(),
}


def build(n: int, linear_algebra: str = "auto"):
    """The benchmark's chain of n links, its pattern's ordering found (part of the build)."""
    j = np.arange(n)
    problem = chain(n=n, mass=1.0 + 0.5 * np.sin(j), theta0=0.4 * np.sin(np.pi * (j + 1) / n),
                    omega0=0.2 * np.cos(0.3 * j), linear_algebra=linear_algebra)  # fmt: skip
    problem.sparse.factorisation  # noqa: B018 - found once per structure: counted in the build
    return problem


#: the chain in the indexed form (a config's ``problem:`` mapping): bead i from 1, the pin x[0] = y[0] = 0
INDEXED = {
    "name": "indexed_chain",
    "params": {"links": 10, "length": 1.0, "gravity": 1.0, "theta": 0.5},
    "coordinates": {"x": "i in 1..links", "y": "i in 1..links"},
    "fixed": {"x[0]": 0, "y[0]": 0},
    "mass": "1 + 0.5*sin(i - 1)",
    "potential": {"sum": "i in 1..links", "term": "gravity*(1 + 0.5*sin(i - 1))*y[i]"},
    "constraints": [{"for": "i in 1..links", "g": "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - length**2"}],
    "q0": {"x": "i*length*sin(theta)", "y": "-i*length*cos(theta)"},
    "p0": 0,
}


def indexed_builds(sizes: list[int], repeat: int = 3) -> list[dict]:
    """Per n: the best CPU seconds to build the indexed chain cold and warm and the built-in chain of the same data,
    and HBVM(2,2)'s ms per step on the indexed and the built-in chain (``time_case``)."""
    from hbvm_core.indexed import IndexedModel
    from hbvm_core.problems.chain import _structure

    def best(f) -> tuple[float, object]:
        times, out = [], None
        for _ in range(repeat):
            _structure.cache_clear()
            t0 = time.process_time()
            out = f()
            out.sparse.factorisation  # noqa: B018 - found once per structure: counted in the build
            times.append(time.process_time() - t0)
        return min(times), out

    model = IndexedModel(**INDEXED)
    rows = []
    for n in sizes:
        cold, problem = best(lambda n=n: IndexedModel(**INDEXED).problem(links=n))
        warm, _ = best(lambda n=n: model.problem(links=n))
        builtin_s, builtin = best(lambda n=n: chain(n=n, mass=1.0 + 0.5 * np.sin(np.arange(n)), theta0=0.5))
        step = {name: time_case(p, HBVM(2, 2), n, "auto")["cpu_ms_per_step"]
                for name, p in (("indexed", problem), ("builtin", builtin))}  # fmt: skip
        rows.append({"n": n, "cold_s": cold, "warm_s": warm, "builtin_s": builtin_s, "nnz": problem.sparse.nnz,
                     "ms_per_step": step})  # fmt: skip
    return rows


def step_h(n: int) -> float:
    return 0.1 / math.sqrt(n)


def steps_for(n: int, path: str = "auto") -> int:
    """About 20000 bead-steps per run (200 at most); the dense path of 100 links (~0.1 s a step) 20."""
    return max(3, min(200 if path == "auto" or n < 100 else 20, 20000 // n))


def time_case(problem, method, n: int, path: str, repeat: int = 3) -> dict:
    """Best CPU time of ``repeat`` runs of steps_for(n, path) steps: per step and per sweep."""
    h, steps = step_h(n), steps_for(n, path)
    best, traj = math.inf, None
    for _ in range(repeat):
        t0 = time.process_time()
        traj = hc.integrate(problem, method, h, h * steps, sink=NullSink(), backend="numpy")
        best = min(best, time.process_time() - t0)
    sweeps = traj.attrs["mean_iterations"]
    return {"n": n, "m": problem.m, "h": h, "steps": steps, "linear_algebra": traj.attrs["linear_algebra"],
            "sparse_sweep": traj.attrs["sparse_sweep"], "cpu_ms_per_step": 1e3 * best / steps,
            "mean_iterations": sweeps, "cpu_us_per_sweep": 1e6 * best / steps / sweeps}  # fmt: skip


def build_time(n: int, repeat: int = 3) -> float:
    """Best CPU seconds to build the chain (a fresh pattern each time: the structure cache cleared)."""
    from hbvm_core.problems.chain import _structure

    best = math.inf
    for _ in range(repeat):
        _structure.cache_clear()
        t0 = time.process_time()
        build(n)
        best = min(best, time.process_time() - t0)
    return best


def peak_memory(n: int, steps: int = 10) -> dict:
    """Peak traced memory (MB) of building the chain and running HBVM(2,2) ``steps`` steps, kept in memory."""
    from hbvm_core.problems.chain import _structure

    _structure.cache_clear()
    tracemalloc.start()
    problem = build(n)
    h = step_h(n)
    hc.integrate(problem, HBVM(2, 2), h, h * steps)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"n": n, "steps": steps, "peak_MB": peak / 2**20, "state_MB": 2 * problem.m * 8 * (steps + 1) / 2**20}


def exponent(rows: list[dict], key: str, method: str, lo: int, hi: int) -> float:
    """log(cost(hi) / cost(lo)) / log(hi / lo) of one method on the automatic path."""
    at = {r["n"]: r[key] for r in rows if r["method"] == method and r["path"] == "auto"}
    return math.log(at[hi] / at[lo]) / math.log(hi / lo)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--indexed", action="store_true", help="the chain in the indexed form: build time against n")
    args = ap.parse_args(argv)
    if args.indexed:
        rows = indexed_builds(args.sizes)
        if args.json:
            print(json.dumps({"machine": machine(), "indexed": rows}, indent=1))
            return
        print(
            f"{'n':>6s} {'nnz':>6s} {'cold s':>8s} {'warm s':>8s} {'built-in s':>10s} {'ms/step':>8s} {'built-in':>8s}"
        )
        for r in rows:
            print(f"{r['n']:6d} {r['nnz']:6d} {r['cold_s']:8.3f} {r['warm_s']:8.3f} {r['builtin_s']:10.3f} "
                  f"{r['ms_per_step']['indexed']:8.3f} {r['ms_per_step']['builtin']:8.3f}")  # fmt: skip
        return
    rows = []
    for n in args.sizes:
        paths = ["auto"] + (["dense"] if n <= 100 else [])
        for path in paths:
            problem = build(n, path)
            for name, method in METHODS.items():
                rows.append({"method": name, "path": path, **time_case(problem, method, n, path)})
    # the growth from the second size to the last (the first may be dense): none with fewer than three sizes
    lo, hi = args.sizes[min(1, len(args.sizes) - 1)], args.sizes[-1]
    keys = ("cpu_ms_per_step", "cpu_us_per_sweep")
    growth = {} if lo == hi else {name: {key: exponent(rows, key, name, lo, hi) for key in keys} for name in METHODS}
    builds = [{"n": n, "build_s": build_time(n)} for n in args.sizes]
    memory = None if args.no_memory else peak_memory(args.sizes[-1])
    out = {"machine": machine(), "rows": rows, "growth": {"from": lo, "to": hi, **growth}, "build": builds,
           "memory": memory}  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'method':18s} {'path':5s} {'n':>6s} {'algebra':7s} {'ms/step':>9s} {'sweeps':>6s} {'us/sweep':>9s}")
    for r in rows:
        print(f"{r['method']:18s} {r['path']:5s} {r['n']:6d} {r['linear_algebra']:7s} {r['cpu_ms_per_step']:9.3f} "
              f"{r['mean_iterations']:6.2f} {r['cpu_us_per_sweep']:9.1f}")  # fmt: skip
    for name, g in growth.items():
        print(
            f"growth {lo} -> {hi}: {name}: per step n^{g['cpu_ms_per_step']:.2f}, "
            f"per sweep n^{g['cpu_us_per_sweep']:.2f}"
        )
    print("build: " + ", ".join(f"n = {b['n']}: {b['build_s'] * 1e3:.1f} ms" for b in builds))
    if memory:
        print(f"peak memory, {memory['n']} links, {memory['steps']} steps: {memory['peak_MB']:.1f} MB "
              f"(the saved states: {memory['state_MB']:.1f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
