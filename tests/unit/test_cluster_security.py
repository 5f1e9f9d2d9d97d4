"""The clusters the workflow starts take no client without their credentials; an unreachable scheduler
fails at once, naming its address."""

from __future__ import annotations

import time

import pytest
from distributed import Client
from distributed.security import Security

from hbvm_core.errors import HBVMError
from hbvm_workflow.cluster import dask_client


def test_the_local_cluster_refuses_a_client_without_its_credentials():
    # spawned, not forked: a worker forked from this test process (its other threads: zarr's event loop,
    # a compiled loop's) can deadlock before it starts
    with dask_client({"n_workers": 1, "start_method": "spawn"}) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(lambda x: x + 1, 1).result() == 2
        with pytest.raises((OSError, TypeError)):  # no TLS context at all
            Client(address, timeout=3)
        with pytest.raises(OSError):  # a TLS client with credentials of its own
            Client(address, timeout=3, security=Security.temporary())
        with pytest.raises(OSError):  # plain TCP on the same port
            Client(address.replace("tls://", "tcp://"), timeout=3)


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
