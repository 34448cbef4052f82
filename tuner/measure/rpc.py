"""Starting TVM RPC trackers and servers for a device farm, bound to 127.0.0.1 unless asked.

TVM's own defaults bind every interface, and its RPC runs whatever library it is sent, so a
server reachable from the network is a remote code execution service; loopback is the safe default.
"""

from __future__ import annotations

from typing import Any

LOOPBACK = "127.0.0.1"


def start_tracker(host: str = LOOPBACK, port: int = 19190, port_end: int = 19290) -> Any:
    """A `tvm.rpc.tracker.Tracker` (needs `tornado`); call `.terminate()` when done."""
    from tvm.rpc.tracker import Tracker

    return Tracker(host=host, port=port, port_end=port_end, silent=True)


def start_server(tracker_port: int, key: str, *, host: str = LOOPBACK, tracker_host: str = LOOPBACK,
                 port: int = 19300, port_end: int = 19400) -> Any:
    """A `tvm.rpc.server.Server` registered with the tracker under `key`; `.terminate()` stops it."""
    from tvm.rpc.server import Server

    return Server(host=host, port=port, port_end=port_end, key=key, silent=True,
                  tracker_addr=(tracker_host, tracker_port))
