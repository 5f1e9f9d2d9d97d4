"""Peak memory of long runs written to a Zarr store in chunks: HBVM(6,2) on the tethered satellites, h = 0.1.

    python -m benchmarks.memory [--steps 100000 1000000] [--save-every 1] [--chunk 65536] [--json]

Each case runs in a fresh Python process (so the peak is that run's alone):
``hbvm_workflow.worker.run_to_store`` integrates with the compiled kernel into a
ZarrSink, then the process reports its peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) and the store is opened again
to check that every row is there (shape, no fill values left, last time =
t_end). The baseline row is the same process after the imports and the compile
(or cache load) of the kernel, before the run: what the run itself adds is the
difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from ._common import machine

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import hbvm_core as hc
    from hbvm_workflow.worker import run_to_store
    from hbvm_workflow.storage import open_trajectory

    steps, save_every, chunk, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    pb = hc.get_problem("tethered_satellites")
    method = hc.HBVM(6, 2)
    hc.integrate(pb, method, 0.1, 0.1)  # compile or load the kernel
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    summary = {"steps": 0}
    if steps:
        summary = run_to_store(path, pb, method, 0.1, steps * 0.1, save_every=save_every, chunk=chunk)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    check = {}
    if steps:
        ds = open_trajectory(path)
        q, it = ds["q"], ds["iterations"]
        check = {
            "points": int(q.shape[0]),
            "step_rows": int(it.shape[0]),
            "last_t": float(ds["t"][-1]),
            "all_written": bool(np.isfinite(q[-1000:].values).all() and (it[-1000:].values > 0).all()),
            "complete": bool(ds.attrs.get("complete")),
            "max_energy_error": float(np.abs(ds["H"][-1000:].values - float(ds["H"][0])).max()),
        }
    print(json.dumps({"baseline_rss_mb": base / 1024, "peak_rss_mb": peak / 1024, "wall_s": wall,
                      "status": summary.get("status"), "mean_iterations": summary.get("mean_iterations"), **check}))
    """
)


def store_size_mb(path: str) -> float:
    """The store's size: its one file, or the files of a folder store."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 2**20
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total / 2**20


def measure(steps_list, save_every: int = 1, chunk: int = 65536) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for steps in [0, *steps_list]:
            path = os.path.join(tmp, f"tethered_{steps}.zarr.zip")
            res = subprocess.run(
                [sys.executable, "-c", CHILD, str(steps), str(save_every), str(chunk), path],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row.update({"problem": "tethered_satellites", "k": 6, "s": 2, "h": 0.1, "steps": steps})
            row.update({"save_every": save_every, "chunk": chunk})
            if steps:
                row["store_mb"] = store_size_mb(path)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--save-every", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = measure(args.steps, args.save_every, args.chunk)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"machine: {machine()}")
    print(f"{'steps':>9s} {'save_every':>10s} {'peak RSS MB':>12s} {'baseline MB':>12s} {'wall s':>8s} "
          f"{'points':>9s} {'store MB':>9s} {'complete':>8s}")  # fmt: skip
    for r in rows:
        print(
            f"{r['steps']:9d} {r['save_every']:10d} {r['peak_rss_mb']:12.1f} {r['baseline_rss_mb']:12.1f} "
            f"{r['wall_s']:8.2f} {r.get('points', 0):9d} {r.get('store_mb', 0):9.1f} {str(r.get('complete', '')):>8s}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
