"""Faults injected on purpose into the harness's workers: hangs, crashes and wrong programs.

The test writes {config_id: fault} to the file named by AUTOTUNE_TEST_FAULTS; these functions
replace the builder's and runner's defaults and misbehave for the configs named there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import time
import zlib

from search.config import config_id
from tuner.measure import tasks


def _fault(config: dict) -> str | None:
    """The fault named for this config; with AUTOTUNE_TEST_FAULT_CYCLE ('a,b,none'), one chosen by
    the config's hash, for configs a tuner picks by itself."""
    cycle = os.environ.get("AUTOTUNE_TEST_FAULT_CYCLE")
    if cycle:
        kinds = cycle.split(",")
        return kinds[zlib.crc32(config_id(config).encode()) % len(kinds)]
    with open(os.environ["AUTOTUNE_TEST_FAULTS"]) as table:
        return json.load(table).get(config_id(config))


def write_faults(path, faults: dict) -> None:
    with open(path, "w") as table:
        json.dump({config_id(c.to_json()): f for c, f in faults.items()}, table)


def faulty_build(task: tasks.BuildTask) -> str:
    fault = _fault(task.config)
    if fault == "build_hang":
        time.sleep(3600)
    if fault == "build_segfault":
        print("about to crash in code generation", flush=True)
        ctypes.string_at(0)
    if fault == "wrong":  # a program of the same signature computing something else
        wrong = dataclasses.replace(task.workload, epilogue="relu")
        return tasks.build(dataclasses.replace(task, workload=wrong))
    library = tasks.build(task)
    if fault in ("run_crash", "run_hang"):
        with open(library + ".fault", "w") as marker:
            marker.write(fault)
    return library


def faulty_run(task: tasks.RunTask) -> dict:
    if os.path.exists(task.library + ".fault"):
        with open(task.library + ".fault") as marker:
            fault = marker.read()
        if fault == "run_crash":
            ctypes.string_at(0)
        if fault == "run_hang":
            sum(range(10**13))  # busy in C code, holding the GIL
    return tasks.run(task)


def slow_build(task: tasks.BuildTask) -> str:
    time.sleep(1.5)
    return tasks.build(task)
