"""`RayMeasurer`: measures on the machines of a Ray cluster, one long-lived actor per machine.

Each machine that offers the custom resource (`autotune_node` by default) gets one actor that
builds and times on that machine with the local harness, so isolation, timeouts and correctness
checks are the same as on one machine, and no library travels. The driver keeps everything that
learns or writes (session, cost model, records): the actors only measure. A batch is split into
chunks handed to idle actors; the chunk of a node that dies goes to the others, and a chunk's
results are delivered once, when the whole chunk is back, so none is lost and none duplicated.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search import Config, TargetInfo
from search.records import ErrorKind, MeasureResult
from search.targets import cpu_model, host_target
from workloads import Workload

from .measurer import Harness, Measurer, OnResult

log = logging.getLogger(__name__)

DEFAULT_RESOURCE = "autotune_node"
INSTALL_HINT = 'tuning on a Ray cluster needs Ray: pip install "autotune[distributed]"'
STARTUP_TIMEOUT_S = 300.0  # an actor imports TVM and detects its CPU before it answers
MAX_ATTEMPTS = 3  # a chunk whose node dies this often is reported failed instead of tried again
CHUNKS_PER_NODE = 2  # chunks per node and batch: a slow node holds back at most half its share
POLL_S = 0.05  # how often a batch with chunks waiting looks for a node another batch freed


def import_ray() -> Any:
    """Ray, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return ray


@dataclass(frozen=True)
class NodeFacts:
    """What a measuring node is: the cluster refuses nodes whose `identity` differs."""

    node_id: str
    hostname: str
    cpu_model: str
    target: TargetInfo

    @property
    def identity(self) -> tuple[str, str, tuple[str, ...]]:
        """CPU model, target key (mcpu and cores) and ISA: what makes timings comparable."""
        return self.cpu_model, self.target.key, self.target.isa

    def __str__(self) -> str:
        return f"{self.hostname} (node {self.node_id[:8]}): {self.cpu_model}, {self.target.key}"


def local_harness(target: TargetInfo) -> Measurer:
    """A node's default measurer: builds and times on its CPU, on the cores the node offers."""
    return Harness.local(target, threads=target.cores)


class NodeMeasurer:
    """The actor on one node: its target (this CPU, on the cores the node offers Ray) and the
    measurer `make(target)` returns (the local harness by default), started on first use so that
    a refused node never starts worker processes."""

    def __init__(self, node_id: str, cores: int, make: Callable[[TargetInfo], Measurer]) -> None:
        self.facts = NodeFacts(node_id, socket.gethostname(), cpu_model(), host_target(cores))
        self._make = make
        self._measurer: Measurer | None = None

    def describe(self) -> NodeFacts:
        return self.facts

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config]) -> list[MeasureResult]:
        if target.key != self.facts.target.key:
            raise ValueError(f"asked to measure for {target.key} on {self.facts}")
        if self._measurer is None:
            self._measurer = self._make(self.facts.target)
        return self._measurer.measure(workload, self.facts.target, configs)

    def close(self) -> None:
        if self._measurer is not None:
            self._measurer.close()


class RayMeasurer:
    """A `Measurer` over every node of a Ray cluster that offers `resource`.

    `address` is the cluster's (`"auto"`: the one this machine belongs to; None: Ray's own
    choice, e.g. `RAY_ADDRESS`); a connection made here is closed by `close`, one the caller made
    with `ray.init` is left open. The nodes must be alike: the target of the head node (or of the
    first node listed, when the head does not measure) is the cluster's `target`, and a node whose
    CPU model, ISA or cores differ is refused, with an error at start and a warning when it joins
    later. Nodes that join later are used from the next batch on. `make(target)` builds each
    node's measurer on that node (the local harness by default; replay or simulation in tests).
    """

    remote = True  # measures elsewhere: the loop proposes the next batch meanwhile

    def __init__(self, address: str | None = "auto", *, resource: str = DEFAULT_RESOURCE,
                 make: Callable[[TargetInfo], Measurer] = local_harness) -> None:
        ray = import_ray()
        self._ray = ray
        self.resource = resource
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            except ConnectionError as err:
                raise ConnectionError(f"no Ray cluster at {address!r} ({err}); start one with "
                                      f"`ray start --head --resources '{{\"{resource}\": 1}}'`") from None
        self._node_class = ray.remote(NodeMeasurer)
        self._make = make
        self._actors: dict[str, Any] = {}  # node id -> actor handle
        self._idle: list[str] = []  # nodes with no chunk to measure
        self._changed = threading.Condition()  # guards the nodes: batches in several threads share them
        self._calls = itertools.count()  # measure calls in the order they began
        self._waiting_calls: set[int] = set()  # those with chunks no node has taken yet
        self.nodes: dict[str, NodeFacts] = {}  # node id -> facts, of the nodes measuring
        self.refused: dict[str, str] = {}  # node id -> why
        self.lost: set[str] = set()  # nodes whose actor died; not used again (a restarted node has a new id)
        self.measured_by: dict[str, int] = {}  # node id -> configs it measured
        self.target: TargetInfo | None = None
        try:
            self._discover(strict=True)
            if not self._actors:
                raise ConnectionError(f"no live node of the Ray cluster offers the resource {resource!r}; start the "
                                   f"workers with `ray start --address <head> --resources '{{\"{resource}\": 1}}'`")
        except BaseException:
            self.close()
            raise

    @property
    def cores(self) -> int:
        """The cores of the measuring nodes, together: the loop's default batch gives each one config."""
        return sum(facts.target.cores for facts in self.nodes.values())

    def _alive_nodes(self) -> list[dict[str, Any]]:
        nodes = [n for n in self._ray.nodes() if n["Alive"] and n["Resources"].get(self.resource, 0) >= 1]
        return sorted(nodes, key=lambda n: not any(k.startswith("node:__internal_head__") for k in n["Resources"]))

    def _discover(self, strict: bool) -> None:
        """Start an actor on every node not seen yet; refuse those unlike the cluster's target."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        known = self._actors.keys() | self.refused.keys() | self.lost
        fresh = [n for n in self._alive_nodes() if n["NodeID"] not in known]
        started = {}
        for node in fresh:
            placement = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            started[node["NodeID"]] = self._node_class.options(
                num_cpus=0, resources={self.resource: 1}, scheduling_strategy=placement, max_restarts=0,
            ).remote(node["NodeID"], int(node["Resources"].get("CPU", 1)), self._make)
        unlike = []
        for node_id, actor in started.items():
            try:
                facts: NodeFacts = self._ray.get(actor.describe.remote(), timeout=STARTUP_TIMEOUT_S)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError) as err:
                log.warning("node %s did not start its measuring actor: %s", node_id[:8], err)
                self._ray.kill(actor)
                continue
            reference = next(iter(self.nodes.values()), facts)
            if facts.identity != reference.identity:
                self.refused[node_id] = f"{facts} differs from {reference}"
                unlike.append(facts)
                self._ray.kill(actor)
                continue
            self._actors[node_id], self.nodes[node_id] = actor, facts
            self._idle.append(node_id)
            self.target = reference.target
        if not unlike:
            return
        message = (f"refused {len(unlike)} node(s) unlike the cluster's target ("
                   + "; ".join(self.refused[f.node_id] for f in unlike)
                   + "): timings from different machines cannot share one search. Give those nodes another "
                   f"resource than {self.resource!r} and tune on them with RayMeasurer(resource=...) separately")
        if strict:
            raise ValueError(message)
        log.warning(message)

    def _drop(self, node_id: str, error: Exception) -> None:
        log.warning("node %s stopped measuring (%s); its configs go to the other nodes",
                    self.nodes[node_id], str(error).splitlines()[0] if str(error) else type(error).__name__)
        self._ray.kill(self._actors.pop(node_id))
        del self.nodes[node_id]
        self.lost.add(node_id)
        if node_id in self._idle:
            self._idle.remove(node_id)

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config],
                on_result: OnResult | None = None) -> list[MeasureResult]:
        """Measure `configs` over the idle nodes, a chunk at a time. Several batches may be measured
        at once (from several threads): they share the nodes, each node taking one chunk at a time."""
        assert self.target is not None  # set when the first node started
        if target.key != self.target.key:
            raise ValueError(f"the cluster measures on {self.target.key}, not {target.key}")
        with self._changed:
            self._discover(strict=False)
            size = max(1, math.ceil(len(configs) / (CHUNKS_PER_NODE * max(len(self._actors), 1))))
            call = next(self._calls)
        waiting = deque((list(range(start, min(start + size, len(configs)))), 0)
                        for start in range(0, len(configs), size))
        results: list[MeasureResult | None] = [None] * len(configs)
        running: dict[Any, tuple[str, list[int], int]] = {}  # object ref -> node, chunk, attempts before
        try:
            while waiting or running:
                self._hand_out(call, waiting, running, workload, configs)
                ready, _ = self._ray.wait(list(running), num_returns=1, timeout=POLL_S if waiting else None)
                for ref in ready:
                    node_id, chunk, attempts = running.pop(ref)
                    measured = self._chunk_results(ref, node_id, chunk, attempts, waiting)
                    for index, result in zip(chunk, measured):
                        results[index] = result
                        if on_result is not None:
                            on_result(index, result)
        finally:
            with self._changed:
                self._waiting_calls.discard(call)
                self._changed.notify_all()
        return [r for r in results if r is not None]

    def _hand_out(self, call: int, waiting: deque[tuple[list[int], int]], running: dict[Any, Any],
                  workload: Workload, configs: Sequence[Config]) -> None:
        """Give waiting chunks to idle nodes, the oldest batch first (so that batches end in the order
        they began); wait while this batch has nothing running and no node is free for it."""
        with self._changed:
            if waiting:
                self._waiting_calls.add(call)
            while True:
                first = bool(waiting) and min(self._waiting_calls) == call
                while first and self._idle:
                    node_id, (chunk, attempts) = self._idle.pop(0), waiting.popleft()
                    ref = self._actors[node_id].measure.remote(workload, self.target, [configs[i] for i in chunk])
                    running[ref] = (node_id, chunk, attempts)
                    first = bool(waiting)
                if not waiting:
                    self._waiting_calls.discard(call)
                    self._changed.notify_all()
                if running or not waiting:
                    return
                if not self._actors:
                    self._discover(strict=False)  # maybe others joined
                if not self._actors:
                    raise ConnectionError(f"every measuring node is gone; {sum(len(c) for c, _ in waiting)} "
                                          "configs of the batch were not measured")
                self._changed.wait_for(lambda: (bool(self._idle) and min(self._waiting_calls) == call)
                                       or not self._actors, timeout=1.0)

    def _chunk_results(self, ref: Any, node_id: str, chunk: list[int], attempts: int,
                       waiting: deque[tuple[list[int], int]]) -> list[MeasureResult]:
        """A finished chunk's results, its node idle again; if the node died, none, and the chunk
        waits for another node (or, after MAX_ATTEMPTS deaths, fails)."""
        try:
            measured: list[MeasureResult] = self._ray.get(ref)
        except self._ray.exceptions.RayActorError as err:
            with self._changed:
                if node_id in self._actors:
                    self._drop(node_id, err)
                self._changed.notify_all()
            if attempts + 1 < MAX_ATTEMPTS:
                waiting.appendleft((chunk, attempts + 1))
                return []
            message = f"the measuring node died {MAX_ATTEMPTS} times while measuring this config"
            return [MeasureResult(error=ErrorKind.RUN_ERROR, message=message)] * len(chunk)
        with self._changed:
            self._idle.append(node_id)
            self.measured_by[node_id] = self.measured_by.get(node_id, 0) + len(chunk)
            self._changed.notify_all()
        return measured

    def close(self) -> None:
        """Stop the actors (and their worker processes); disconnect if the connection is ours."""
        ray = self._ray
        if self._actors:
            ray.wait([actor.close.remote() for actor in self._actors.values()], num_returns=len(self._actors),
                     timeout=30)
        for actor in self._actors.values():
            ray.kill(actor)
        self._actors.clear()
        self._idle.clear()
        self.nodes.clear()
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> "RayMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def loopback_cluster(folder: str | Path, nodes: int = 2, *, cores: int | None = None,
                     resource: str = DEFAULT_RESOURCE) -> Iterator[Any]:
    """A Ray cluster of `nodes` measuring nodes on this machine, for tests, benchmarks and trying
    the cluster path before deploying it: bound to 127.0.0.1, token auth with a fresh token, every
    file under `folder`, this process connected; on exit, disconnected and shut down (never
    `ray stop`, which would kill every Ray process on the host). Yields the
    `ray.cluster_utils.Cluster`: `add_node(num_cpus=..., resources=..., node_ip_address="127.0.0.1")`
    and `remove_node` grow and shrink it. Each node offers `cores` CPUs (this process's by default)."""
    ray = import_ray()
    from ray._private import ray_constants
    from ray._private.authentication_test_utils import reset_auth_token_state
    from ray.cluster_utils import Cluster

    folder = Path(folder)
    (folder / "ray").mkdir(parents=True, exist_ok=True)  # where the cluster writes its address
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    settings = {"RAY_TMPDIR": str(folder), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    saved_env = {name: os.environ.get(name) for name in settings}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    node: dict[str, Any] = {"num_cpus": cores or len(os.sched_getaffinity(0)), "resources": {resource: 1},
                            "node_ip_address": "127.0.0.1"}
    os.environ.update(settings)
    reset_auth_token_state()  # Ray reads the auth settings once, when it is imported
    # Otherwise a driver on this machine turns 127.0.0.1 into the host's network address.
    ray_constants.ENABLE_RAY_CLUSTER = False
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={**node, "temp_dir": str(folder),
                                                                "include_dashboard": False})
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        reset_auth_token_state()
