"""Measuring on a Ray cluster: a two-node cluster on loopback, started and shut down here (never
`ray stop`, which would kill every Ray process on the host), with its temp and token files under
the test's temporary folder."""

from __future__ import annotations

import ipaddress
import logging
import os
import threading

import numpy as np
import psutil
import pytest

import tuner
import workloads
from search.records import MeasureResult, RecordStore, make_record
from search.targets import host_target
from tuner import ErrorKind, ReplayMeasurer, Session, run
from tuner.cli import main
from tuner.measure.cluster import RayMeasurer, loopback_cluster

ray = pytest.importorskip("ray", reason="Ray is installed with the dev or distributed extra")

RESOURCE = "autotune_test_node"
CORES = len(os.sched_getaffinity(0))
LOOPBACK = {"node_ip_address": "127.0.0.1"}
WORKLOAD = workloads.matmul(32, 32, 32)
SECONDS_PER_CONFIG = 0.3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with loopback_cluster(tmp_path_factory.mktemp("ray"), nodes=2, cores=CORES, resource=RESOURCE) as nodes:
        yield nodes


def _listening_hosts() -> set[str]:
    """Where the cluster's processes (this one's children) accept connections."""
    hosts = set()
    for child in psutil.Process().children(recursive=True):
        try:
            hosts |= {c.laddr.ip for c in child.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:  # gone meanwhile
            pass
    return hosts


def _is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback


def test_a_tuned_kernel_measured_on_two_nodes_is_correct_and_recorded_once(cluster, tmp_path):
    records = tmp_path / "runs.jsonl"
    with RayMeasurer(resource=RESOURCE) as measurer:
        assert _listening_hosts() and all(_is_loopback(host) for host in _listening_hosts())
        assert len(measurer.nodes) == 2 and measurer.target == host_target(CORES) and measurer.cores == 2 * CORES
        result = tuner.tune(WORKLOAD, trials=8, batch_size=8, records=str(records), measurer=measurer,
                            progress=False)
        assert sorted(measurer.measured_by) == sorted(measurer.nodes) and all(measurer.measured_by.values())
    assert result.ok and len(result.trace) == 8
    saved = RecordStore(records).select(WORKLOAD.key)
    assert len(saved) == 8 and len({str(r["config"]) for r in saved}) == 8
    a, b = WORKLOAD.random_inputs(0)
    np.testing.assert_allclose(result.compile()(a, b), a @ b, rtol=1e-4, atol=1e-4)


def _paced_records(path, count: int) -> None:
    """`count` configs of WORKLOAD with made-up latencies, each taking SECONDS_PER_CONFIG to replay."""
    space = tuner.Session(WORKLOAD, host_target(CORES), pretrained=False).template.space
    store = RecordStore(path)
    rng = np.random.default_rng(0)
    for config in space.sample(rng, count):
        result = MeasureResult([float(rng.uniform(1e-5, 1e-4))], build_s=SECONDS_PER_CONFIG / 2,
                               run_s=SECONDS_PER_CONFIG / 2)
        store.append(make_record(WORKLOAD.key, host_target(CORES).key, config.to_json(), result,
                                 build_s=result.build_s, run_s=result.run_s))


def test_a_node_removed_mid_batch_loses_no_config_and_duplicates_none(cluster, tmp_path, caplog):
    recorded, records = tmp_path / "recorded.jsonl", tmp_path / "runs.jsonl"
    _paced_records(recorded, 48)
    doomed = cluster.add_node(num_cpus=CORES, resources={RESOURCE: 1}, **LOOPBACK)
    with RayMeasurer(resource=RESOURCE, make=lambda target: ReplayMeasurer(str(recorded), paced=True)) as measurer:
        assert doomed.node_id in measurer.nodes and len(measurer.nodes) == 3
        replay = ReplayMeasurer(str(recorded))
        session = Session(WORKLOAD, measurer.target, records=str(records), pretrained=False,
                          candidates=replay.configs(WORKLOAD.key))
        removal = threading.Timer(SECONDS_PER_CONFIG, cluster.remove_node, args=(doomed,))
        first_call = threading.Lock()

        class RemovingANode:
            """The cluster's measurer; the node goes in the middle of the first chunk it was given
            (16 configs over 3 nodes: 6 chunks of up to 3 configs)."""

            remote = True

            def measure(self, *args, **options):
                if first_call.acquire(blocking=False):  # batches may begin in two threads at once
                    removal.start()
                return measurer.measure(*args, **options)

        with caplog.at_level(logging.WARNING, logger="tuner.measure.cluster"):
            measured = run([session], RemovingANode(), 32, batch_size=16)
        assert doomed.node_id in measurer.lost and doomed.node_id not in measurer.nodes
        assert "stopped measuring" in caplog.text
        assert doomed.node_id not in measurer.measured_by  # its chunk was cut short and measured elsewhere
    assert measured == 32
    saved = RecordStore(records).select(WORKLOAD.key)
    assert len(saved) == 32 and len({str(r["config"]) for r in saved}) == 32
    assert all(r["error"] == ErrorKind.NONE.value for r in saved)
    expected = {c: replay.measure(WORKLOAD, session.target, [c])[0].costs for c in session.measured}
    assert all(session.measured[c] == pytest.approx(float(np.median(costs))) for c, costs in expected.items())


def test_a_node_unlike_the_others_is_refused_with_a_clear_error(cluster):
    odd = cluster.add_node(num_cpus=max(CORES - 1, 1) if CORES > 1 else 2, resources={RESOURCE: 1}, **LOOPBACK)
    try:
        with pytest.raises(ValueError, match=r"refused 1 node.*num-cores=.*another resource"):
            RayMeasurer(resource=RESOURCE)
        assert ray.is_initialized()  # the test's own connection stays open
    finally:
        cluster.remove_node(odd)


def test_a_cluster_without_measuring_nodes_says_how_to_start_them(cluster):
    with pytest.raises(ConnectionError, match="no live node.*autotune_nowhere"):
        RayMeasurer(resource="autotune_nowhere")


def test_the_cli_says_how_to_install_ray_when_it_is_missing(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(SystemExit) as exit_:
        main(["suite", "bert_base", "--trials", "8", "--ray-address", "auto", "--quiet"])
    assert exit_.value.code == 2 and 'pip install "autotune[distributed]"' in capsys.readouterr().err
