"""The clusters the workflow starts take no client without their credentials; an unreachable scheduler
fails at once, naming its address."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from hbvm_core.errors import HBVMError
from hbvm_workflow.cluster import dask_client

#: three clients that must be refused, run in another process (as another user would be; and a refused
#: distributed.Client left in this process would later restore dask's scheduler setting behind our back)
REFUSED = """
import sys
from distributed import Client
from distributed.security import Security

address = sys.argv[1]
for name, kw in (
    ("no TLS context", {}),
    ("TLS with credentials of its own", {"security": Security.temporary()}),
    ("plain TCP", {"address": address.replace("tls://", "tcp://")}),
):
    try:
        Client(kw.pop("address", address), timeout=3, **kw).close()
        print(name, "CONNECTED")
    except Exception as exc:
        print(name, "refused", type(exc).__name__)
"""


@pytest.mark.slow  # starts a Dask cluster (tens of seconds on 2 cores)
def test_the_local_cluster_refuses_a_client_without_its_credentials():
    # spawned, not forked: a worker forked from this test process (its other threads: zarr's event loop,
    # a compiled loop's) can deadlock before it starts
    with dask_client({"n_workers": 1, "start_method": "spawn"}) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(lambda x: x + 1, 1).result() == 2
        out = subprocess.run([sys.executable, "-c", REFUSED, address], capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and all(" refused " in line for line in lines), out.stdout + out.stderr


def test_an_unreachable_scheduler_fails_at_once_naming_it():
    t0 = time.monotonic()
    with pytest.raises(HBVMError) as info, dask_client({"address": "tcp://127.0.0.1:1"}):
        pass
    assert time.monotonic() - t0 < 5
    assert str(info.value).startswith("dask.address = 'tcp://127.0.0.1:1': cannot reach the Dask scheduler")


def test_a_missing_scheduler_file_is_named(tmp_path):
    with (
        pytest.raises(HBVMError, match="dask.scheduler_file = .*: no such file"),
        dask_client({"scheduler_file": str(tmp_path / "none.json")}),
    ):
        pass
