"""A host without a CUDA driver is told it has no GPU without importing numba.cuda (about 0.6 s in every Dask
worker that a shard's backend ``auto`` asks); the simulator and a loadable driver still go through numba-cuda."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys; from hbvm_core.kernels.cuda import cuda_available; "
    "print(cuda_available(), 'numba.cuda' in sys.modules)"
)


def _driver_loads() -> bool:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DRIVER")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=clean | {"PYTHONPATH": str(ROOT)} | env,
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.split()


@pytest.mark.skipif(sys.platform != "linux" or _driver_loads(), reason="a CUDA driver loads on this host")
def test_no_driver_no_gpu_without_importing_numba_cuda():
    assert _probe() == ["False", "False"]
    # a driver named by NUMBA_CUDA_DRIVER that does not exist: still no GPU, still not imported
    assert _probe(NUMBA_CUDA_DRIVER="/nonexistent/libcuda.so") == ["False", "False"]


def test_simulator_goes_through_numba_cuda():
    assert _probe(NUMBA_ENABLE_CUDASIM="1") == ["True", "True"]
