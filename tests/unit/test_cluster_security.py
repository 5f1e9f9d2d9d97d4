"""The clusters the workflow starts take no client without their credentials; an unreachable scheduler
fails at once, naming its address."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from hbvm_core.errors import ConfigError, HBVMError
from hbvm_workflow.cluster import dask_client, require_authenticated

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


@pytest.fixture
def no_connections(monkeypatch):
    """A connection attempt fails the test: the refusals below come before any traffic."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.parametrize("address", ["tcp://192.0.2.1:8786", "tcp://node7.example:8786"])
def test_plain_text_to_a_scheduler_on_another_host_is_refused_before_connecting(address, no_connections):
    with pytest.raises(ConfigError) as info, dask_client({"address": address}):
        pass
    msg = str(info.value)
    assert msg.startswith(f"dask.address = {address!r}: plain-text TCP to a scheduler on another host")
    assert "\n" not in msg and "tls://" in msg and "tls_ca_file" in msg and "dask: {insecure: true}" in msg


def test_a_scheduler_files_plain_text_address_is_refused_too(tmp_path, no_connections):
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": "tcp://192.0.2.1:8786"}))
    with pytest.raises(ConfigError, match=r"dask.scheduler_file = .*: plain-text TCP .*insecure: true"):
        with dask_client({"scheduler_file": str(path)}):
            pass


@pytest.mark.parametrize(
    "cfg",
    [
        {"address": "tcp://192.0.2.1:8786", "insecure": True},  # accepted explicitly
        {"address": "tls://192.0.2.1:8786"},  # authenticated by TLS
        {"address": "tcp://127.0.0.1:8786"},  # this host
        {"address": "tcp://localhost:8786"},
        {"address": "tcp://[::1]:8786"},
    ],
)
def test_tls_loopback_or_plain_text_accepted_explicitly_pass_the_check(cfg, no_connections):
    assert require_authenticated(cfg, "dask.address") is None
