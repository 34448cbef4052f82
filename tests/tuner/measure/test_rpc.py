"""Measuring through TVM's RPC tracker on loopback, and surviving a server that dies mid-run."""

from __future__ import annotations

import threading
import time

import numpy as np
import psutil
import pytest

import search
import workloads
from tuner import ErrorKind, Harness, LocalBuilder, RPCRunner
from tuner.measure.rpc import start_server, start_tracker

pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado (installed with the dev extra)")

WORKLOAD = workloads.matmul(64, 64, 64)
KEY = "test-cpu"


def _listening_hosts(ports: range) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port in ports}


@pytest.fixture
def farm():
    tracker = start_tracker(port=19590, port_end=19690)
    servers = [start_server(tracker.port, KEY, port=19700 + 50 * i, port_end=19749 + 50 * i) for i in range(2)]
    time.sleep(1.0)  # let the servers register
    yield tracker, servers
    for server in servers:
        server.terminate()
    tracker.terminate()


def test_servers_and_tracker_listen_on_loopback_only(farm):
    tracker, servers = farm
    assert 19590 <= tracker.port < 19690 and all(19700 <= s.port < 19800 for s in servers)
    hosts = _listening_hosts(range(19590, 19800))
    assert hosts == {"127.0.0.1"}, hosts


def test_rpc_measures_and_survives_a_dying_server(farm):
    tracker, servers = farm
    template = search.template_for(WORKLOAD, "llvm")
    configs = template.space.sample(np.random.default_rng(0), 12)
    runner = RPCRunner("127.0.0.1", tracker.port, KEY, workers=2, timeout_s=30, session_timeout_s=20)
    with Harness(LocalBuilder(workers=2), runner) as measurer:
        first = measurer.measure(WORKLOAD, template.target, configs[:4])
        assert all(r.ok for r in first), [r.message for r in first]
        killer = threading.Timer(0.5, servers[0].terminate)
        killer.start()
        second = measurer.measure(WORKLOAD, template.target, configs[4:])
        killer.join()
    kinds = {r.error for r in second}
    assert kinds <= {ErrorKind.NONE, ErrorKind.RUN_ERROR, ErrorKind.RUN_TIMEOUT}, kinds
    assert sum(r.ok for r in second) >= 4  # the live server carried on
