#!/usr/bin/env python
"""How good are the programs in our CPU search space? Random, hand-picked, torch and MetaSchedule.

For matmul 512^3 and a ResNet-50 3x3 convolution, in one process:

* ``random``   : N random configs of our space (built, checked against the numpy reference, timed);
                 best and median GFLOPS.
* ``hand``     : a few configs designed for this CPU (AVX2, 8 fp32 lanes, 16 ymm registers); best kept.
* ``explore``  : optional wider search of our space (systematic variants of the hand-picked family,
                 quick random draws, then local search around the leaders), re-timed with the full
                 settings; the best config found in the space.
* ``torch``    : torch.matmul / torch.nn.functional.conv2d on the same float32 inputs.
* ``ms``       : MetaSchedule ``tune_tir`` with N trials, its best re-timed with our evaluator.

All TVM programs are timed with the same ``time_evaluator`` settings (median of ``repeat``;
``f_preproc="cache_flush_cpu_non_first_arg"``). TVM_NUM_THREADS is set to the cores this process may
run on before tvm is imported, and torch gets the same number of threads.

Another process may share the CPU. Before each timing the script waits (up to --quiet-wait s) until
other processes use less than --quiet-cores cores, records the other processes' CPU use during the
timing, and re-times a measurement that was disturbed (keeping the least disturbed one).

Example (about 10-15 minutes on 2 cores):
    python benchmarks/space_quality.py --random 64 --ms-trials 64 --explore 192
"""

from __future__ import annotations

import os

CORES = len(os.sched_getaffinity(0))
os.environ["TVM_NUM_THREADS"] = str(CORES)  # must precede the first `import tvm` (search imports it)

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from quiet import CpuWatch, wait_quiet  # noqa: E402  (benchmarks/quiet.py)

WORKLOADS = {
    "matmul512": lambda workloads: workloads.matmul(512, 512, 512),
    "conv56": lambda workloads: workloads.conv2d(1, 64, 56, 56, 64, 3, 3, padding=1),
    "conv28": lambda workloads: workloads.conv2d(1, 128, 28, 28, 128, 3, 3, padding=1),
}


# --------------------------------------------------------------------------------------------------
# Hand-picked configs. Rationale (AMD EPYC znver3: AVX2 FMA x2, 8 fp32 lanes, 16 ymm registers):
# the innermost register tile S3 holds the accumulators (4x16 fp32 = 8 ymm leaves room for the two
# B vectors and the A broadcast; 8 independent FMA chains cover the 4-cycle FMA latency on 2 pipes),
# B is packed so the vector loads are contiguous, S0 gives 2-8 parallel chunks for 2 cores, and the
# accumulator lives at S1 (write_at=1) so that it is small and written back once per tile.
# --------------------------------------------------------------------------------------------------

def hand_configs(name: str) -> list[dict]:
    if name == "matmul512":
        base = dict(vector_axis="j", pack=1, unroll=64, write_at=1)
        return [dict(base, tile_i=ti, tile_j=tj, tile_k=tk, **extra) for ti, tj, tk, extra in [
            ((4, 16, 2, 4), (2, 16, 1, 16), (8, 64), {}),
            ((4, 32, 1, 4), (2, 16, 1, 16), (16, 32), {}),
            ((4, 32, 1, 4), (2, 16, 1, 16), (64, 8), {}),
            ((2, 64, 1, 4), (1, 32, 1, 16), (64, 8), {}),
            ((4, 16, 2, 4), (2, 16, 1, 16), (8, 64), dict(unroll=512)),
            ((2, 8, 8, 4), (2, 4, 4, 16), (4, 128), {}),
            ((4, 16, 1, 8), (2, 32, 1, 8), (16, 32), {}),
            ((4, 64, 1, 2), (2, 8, 1, 32), (16, 32), {}),
        ]]
    if name == "conv56":  # K=64 C=64 56x56, 3x3
        # Vectorizing k (weights packed [k/16, c, r, s, 16]); the template lays the accumulator out
        # with k innermost, so a register tile of w3 = 4 outputs x k3 = 16 channels (8 ymm, 8 FMA
        # chains) reuses each broadcast input 2x and each weight vector 4x.
        k = dict(vector_axis="k", pack=1, unroll=64, write_at=1, tile_n=(1, 1, 1, 1), tile_rw=(1, 3), tile_rh=(3, 1))
        return [dict(k, tile_k=tk, tile_h=th, tile_w=tw, tile_rc=rc, **extra) for tk, th, tw, rc, extra in [
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (16, 4), {}),
            ((1, 4, 1, 16), (4, 14, 1, 1), (1, 14, 1, 4), (16, 4), {}),
            ((1, 4, 1, 16), (2, 28, 1, 1), (1, 14, 1, 4), (8, 8), {}),
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (8, 8), {}),
            ((1, 4, 1, 16), (2, 14, 1, 2), (1, 28, 1, 2), (16, 4), {}),
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (16, 4), dict(unroll=512)),
            # a 1 x 64 register tile (no input reuse) and the w-vectorized variant, for contrast
            ((1, 1, 1, 64), (4, 14, 1, 1), (1, 56, 1, 1), (8, 8), {}),
            ((2, 4, 1, 8), (1, 56, 1, 1), (1, 7, 1, 8), (64, 1), dict(vector_axis="w", pack=0, tile_rh=(1, 3))),
        ]]
    if name == "conv28":  # K=128 C=128 28x28, 3x3
        k = dict(vector_axis="k", pack=1, unroll=64, write_at=1, tile_n=(1, 1, 1, 1), tile_rw=(1, 3), tile_rh=(3, 1))
        return [dict(k, tile_k=tk, tile_h=th, tile_w=tw, tile_rc=rc) for tk, th, tw, rc in [
            ((2, 4, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (32, 4)),
            ((2, 4, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (16, 8)),
            ((4, 2, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (32, 4)),
            ((2, 1, 1, 64), (1, 28, 1, 1), (1, 28, 1, 1), (32, 4)),
        ]]
    raise KeyError(name)


def family_configs(name: str, template) -> list[dict]:
    """Systematic variants around the hand-picked family (register tiles that fit 16 ymm)."""
    space = template.space
    out: list[dict] = []
    s = template.structure
    axes = {s.axis_names[a]: s.extents[a] for a in s.spatial}

    def ok(cfg):
        try:
            return space.is_valid(cfg_of(cfg))
        except Exception:
            return False

    if name == "matmul512":
        for s3i, s3j in [(4, 16), (8, 8), (2, 32), (4, 32), (8, 16)]:
            for (i0, j0) in [(2, 1), (4, 2), (1, 2), (8, 1), (2, 2)]:
                for s2i, s2j in [(1, 1), (2, 1), (4, 4), (1, 2)]:
                    for k1 in [8, 32, 64, 128]:
                        for unroll in (64, 512):
                            i1 = 512 // (i0 * s2i * s3i)
                            j1 = 512 // (j0 * s2j * s3j)
                            cfg = dict(tile_i=(i0, i1, s2i, s3i), tile_j=(j0, j1, s2j, s3j),
                                       tile_k=(512 // k1, k1), vector_axis="j", pack=1,
                                       unroll=unroll, write_at=1)
                            if i1 >= 1 and j1 >= 1 and ok(cfg):
                                out.append(cfg)
    else:
        K, H, W = axes["k"], axes["h"], axes["w"]
        C = s.extents[s.axis_names.index("rc")]
        for k3, h3, w3 in [(16, 1, 4), (16, 2, 2), (16, 1, 2), (8, 1, 7), (32, 1, 2), (64, 1, 1)]:
            for k0, h0, w0 in [(1, 2, 1), (1, 1, 2), (2, 1, 1), (1, 4, 1), (2, 2, 1), (1, 2, 2)]:
                if K % (k0 * k3) or H % (h0 * h3) or W % (w0 * w3):
                    continue
                for rc1 in (1, 2, 4, 8):
                    for rh in ((1, 3), (3, 1)):
                        for rw in ((1, 3), (3, 1)):
                            for unroll in (16, 64, 512):
                                cfg = dict(tile_n=(1, 1, 1, 1), tile_k=(k0, K // (k0 * k3), 1, k3),
                                           tile_h=(h0, H // (h0 * h3), 1, h3), tile_w=(w0, W // (w0 * w3), 1, w3),
                                           tile_rc=(C // rc1, rc1), tile_rh=rh, tile_rw=rw,
                                           vector_axis="k", pack=1, unroll=unroll, write_at=1)
                                if ok(cfg):
                                    out.append(cfg)
    return out


def cfg_of(d):
    from search import Config

    return d if isinstance(d, Config) else Config(d)


class Timer:
    """Times with a quiet-CPU wait before each measurement, within a total waiting budget."""

    def __init__(self, args):
        self.args = args
        self.disturbed = 0
        self.measurements = 0
        self.waited = 0.0

    def wait(self, max_wait: float) -> None:
        allowed = min(max_wait, max(0.0, self.args.quiet_budget - self.waited))
        t0 = time.perf_counter()
        wait_quiet(self.args.quiet_cores, allowed)
        self.waited += time.perf_counter() - t0

    def measure(self, fn, retries: int | None = None, quick: bool = False):
        """fn() -> seconds. Returns (seconds, other_load); re-times a disturbed run."""
        retries = self.args.retries if retries is None else retries
        best = None
        for attempt in range(retries + 1):
            self.wait(self.args.quick_quiet_wait if quick else self.args.quiet_wait)
            with CpuWatch() as w:
                sec = fn()
            if best is None or w.other < best[1]:
                best = (sec, w.other)
            if w.other < self.args.quiet_cores or self.waited >= self.args.quiet_budget:
                break
        self.measurements += 1
        if best[1] >= self.args.quiet_cores:
            self.disturbed += 1
        return best


# --------------------------------------------------------------------------------------------------
# TVM programs
# --------------------------------------------------------------------------------------------------

def fast_build(mod, target, _params):
    """MetaSchedule's default_build minus the slow `import tvm.s_tir.tensor_intrin` (notes §5.4)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.build(mod, target=target)


class Bench:
    """One workload: inputs, reference, template, and how to build, check and time a program."""

    def __init__(self, name: str, args, timer: Timer):
        import tvm
        import search
        import workloads

        self.name, self.args, self.timer = name, args, timer
        self.w = WORKLOADS[name](workloads)
        self.template = search.template_for(self.w, "llvm")
        self.target = self.template.target
        self.dev = tvm.cpu(0)
        self.inputs = self.w.random_inputs(0)
        self.ref = self.w.reference(*self.inputs)
        self.tvm_args = [tvm.runtime.tensor(x, self.dev) for x in self.inputs] + \
                        [tvm.runtime.empty(s, self.w.dtype, self.dev) for s in self.w.output_shapes]

    def gflops(self, seconds: float | None) -> float | None:
        return None if not seconds else self.w.flops / seconds / 1e9

    def build(self, mod):
        import tvm

        return tvm.compile(mod, target=self.target)

    def check(self, ex) -> bool:
        out = self.tvm_args[-1]
        out.copyfrom(np.full(out.shape, np.nan, dtype=self.w.dtype))
        ex.mod["main"](*self.tvm_args)
        rtol, atol = self.w.tolerance
        return bool(np.allclose(out.numpy(), self.ref, rtol=rtol, atol=atol))

    def tvm_fn(self, ex):
        a = self.args
        ev = ex.mod.time_evaluator("main", self.dev, number=a.number, repeat=a.repeat, min_repeat_ms=a.min_repeat_ms,
                                   f_preproc="cache_flush_cpu_non_first_arg")
        return lambda: ev(*self.tvm_args).median

    def time_tvm(self, ex, quick: bool = False, patient: bool = True) -> tuple[float, float]:
        a = self.args
        number, repeat, min_ms = (a.quick_number, a.quick_repeat, a.quick_min_repeat_ms) if quick else \
            (a.number, a.repeat, a.min_repeat_ms)
        ev = ex.mod.time_evaluator("main", self.dev, number=number, repeat=repeat, min_repeat_ms=min_ms,
                                   f_preproc="cache_flush_cpu_non_first_arg")
        retries = 0 if quick else (None if patient else min(1, a.retries))
        return self.timer.measure(lambda: ev(*self.tvm_args).median, retries=retries, quick=quick or not patient)

    def run_config(self, cfg, quick: bool = False, patient: bool = True) -> dict:
        """Build, check and time one config of our space: a result dict (gflops None on failure)."""
        from search import InvalidConfig

        cfg = cfg_of(cfg)
        rec = {"config": cfg.to_json(), "gflops": None, "ok": False}
        try:
            t0 = time.perf_counter()
            ex = self.build(self.template.apply(cfg).mod)
            rec["build_s"] = round(time.perf_counter() - t0, 3)
            rec["ok"] = self.check(ex)
            if not rec["ok"]:
                rec["error"] = "wrong result"
                return rec
            sec, other = self.time_tvm(ex, quick, patient)
            rec.update(seconds=sec, gflops=self.gflops(sec), other_load=round(other, 3))
        except InvalidConfig as err:
            rec["error"] = f"invalid: {str(err)[:200]}"
        except Exception as err:  # a build or runtime failure of this config
            rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        return rec

    # --- torch ---------------------------------------------------------------------------------
    def time_torch(self) -> dict:
        import torch
        import torch.nn.functional as F

        x = [torch.from_numpy(np.ascontiguousarray(a)) for a in self.inputs]
        w = self.w
        if w.op == "matmul":
            fn = lambda: torch.matmul(x[0], x[1])  # noqa: E731
        else:
            fn = lambda: F.conv2d(x[0], x[1], stride=w.stride, padding=w.padding, dilation=w.dilation)  # noqa: E731
        with torch.no_grad():
            out = fn().numpy()
            rtol, atol = w.tolerance
            ok = bool(np.allclose(out, self.ref, rtol=rtol, atol=atol))
            for _ in range(10):
                fn()

            def once():
                # the same protocol as time_evaluator: `repeat` repeats of >= min_repeat_ms, median
                t0 = time.perf_counter(); fn(); single = time.perf_counter() - t0
                number = max(self.args.number, math.ceil(self.args.min_repeat_ms / 1e3 / max(single, 1e-7)))
                means = []
                for _ in range(self.args.repeat):
                    t0 = time.perf_counter()
                    for _ in range(number):
                        fn()
                    means.append((time.perf_counter() - t0) / number)
                return statistics.median(means)

            threads = torch.get_num_threads()

            def once_1thread():  # a sanity number: one thread is least hurt by a busy core
                torch.set_num_threads(1)
                try:
                    with torch.no_grad():
                        return once()
                finally:
                    torch.set_num_threads(threads)

            def once_grad_off():
                with torch.no_grad():
                    return once()

            self.torch_fns = {"torch": once_grad_off, "torch_1thread": once_1thread}
            sec, other = self.timer.measure(once)
            sec1, other1 = self.timer.measure(once_1thread)
        return {"seconds": sec, "gflops": self.gflops(sec), "ok": ok, "other_load": round(other, 3),
                "threads": threads, "gflops_1thread": self.gflops(sec1), "other_load_1thread": round(other1, 3)}

    # --- MetaSchedule -----------------------------------------------------------------------------
    def tune_metaschedule(self) -> dict:
        import logging

        import tvm
        from tvm.s_tir import meta_schedule as ms

        a = self.args
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        mod = tvm.IRModule({"main": self.w.prim_func()})
        rec: dict = {"trials": a.ms_trials, "trials_per_iter": a.ms_per_iter}
        with tempfile.TemporaryDirectory(prefix="space_quality_ms_") as work_dir:
            wait_quiet(a.quiet_cores, a.quiet_wait)
            t0 = time.perf_counter()
            with CpuWatch() as watch:
                db = ms.tune_tir(
                    mod, self.target, work_dir=work_dir, max_trials_global=a.ms_trials,
                    num_trials_per_iter=a.ms_per_iter,
                    builder=ms.builder.LocalBuilder(f_build=fast_build),
                    runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
                        number=3, repeat=1, min_repeat_ms=50, enable_cpu_cache_flush=True)),
                    cost_model="xgb", strategy="evolutionary", seed=a.seed, num_tuning_cores=CORES)
            rec["tune_s"] = round(time.perf_counter() - t0, 1)
            rec["other_load_during_tuning_excl_own_workers"] = round(watch.other, 3)
            records = db.get_all_tuning_records()
            secs = [float(np.mean([float(s) for s in r.run_secs])) for r in records if r.run_secs]
            secs = [s for s in secs if s < 1e9]
            rec["measured"] = len(secs)
            rec["ms_own_best_gflops"] = self.gflops(min(secs)) if secs else None
            sch = ms.tir_integration.compile_tir(db, mod, self.target)
            if sch is None:
                rec["error"] = "compile_tir returned None"
                return rec
            ex = self.build(sch.mod)
            rec["ok"] = self.check(ex)
            self.ms_ex = ex
            sec, other = self.time_tvm(ex)
            rec.update(seconds=sec, gflops=self.gflops(sec), other_load=round(other, 3))
            rec["trace"] = str(sch.trace)
        return rec


def head_to_head(bench: Bench, entry: dict, args) -> dict:
    """Time the contenders alternately for a few rounds, so that a quiet window serves them all.

    Per contender, the fastest measurement taken while other processes used < --quiet-cores cores is
    kept (or the least disturbed one if none was quiet).
    """
    fns = {}
    for label, key in (("hand", "hand"), ("space", "space")):
        cfg = entry["hand"]["best_config"] if key == "hand" else entry.get("space_best_config")
        if cfg is None or (key == "space" and cfg == entry["hand"]["best_config"]):
            continue
        ex = bench.build(bench.template.apply(cfg_of(cfg)).mod)
        fns[label] = bench.tvm_fn(ex)
    if getattr(bench, "ms_ex", None) is not None:
        fns["metaschedule"] = bench.tvm_fn(bench.ms_ex)
    fns.update(getattr(bench, "torch_fns", {}))
    names = list(fns)
    runs: dict[str, list] = {n: [] for n in names}
    for r in range(args.final_rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            bench.timer.wait(args.final_quiet_wait)
            with CpuWatch() as w:
                sec = fns[n]()
            runs[n].append((sec, round(w.other, 3)))
    out = {}
    for n, meas in runs.items():
        quiet = [m for m in meas if m[1] < args.quiet_cores]
        sec, other = min(quiet) if quiet else min(meas, key=lambda m: m[1])
        out[n] = {"seconds": sec, "gflops": bench.gflops(sec), "other_load": other, "quiet": bool(quiet),
                  "rounds": [{"seconds": a, "gflops": bench.gflops(a), "other_load": b} for a, b in meas]}
        bench.timer.measurements += 1
        bench.timer.disturbed += 0 if quiet else 1
    if "space" not in out and "hand" in out:
        out["space"] = out["hand"]
    return out


def summarize(results: list[dict]) -> dict:
    g = [r["gflops"] for r in results if r.get("gflops")]
    best = max((r for r in results if r.get("gflops")), key=lambda r: r["gflops"], default=None)
    return {"count": len(results), "valid": len(g), "best_gflops": max(g) if g else None,
            "median_gflops": statistics.median(g) if g else None,
            "best_config": best["config"] if best else None}


def explore(bench: Bench, args, rng, seen: set) -> list[dict]:
    """Systematic family + quick random draws + local search, all with quick timing."""
    from search import Config

    space = bench.template.space
    pool: dict[str, dict] = {}

    def try_cfg(cfg):
        c = cfg_of(cfg)
        if c.id in pool or not space.is_valid(c):
            return
        pool[c.id] = bench.run_config(c, quick=True)

    family = family_configs(bench.name, bench.template)
    order = rng.permutation(len(family))
    n_family = min(len(family), args.explore // 2)
    t0 = time.perf_counter()
    for i in order[:n_family]:
        try_cfg(family[int(i)])
    for c in space.sample(rng, args.explore // 4, exclude=seen):
        try_cfg(c)
    print(f"  explore: {len(pool)} family/random configs in {time.perf_counter() - t0:.0f} s", flush=True)
    rounds = 0
    budget = args.explore - len(pool)
    while budget > 0:
        ranked = sorted((r for r in pool.values() if r.get("gflops")), key=lambda r: -r["gflops"])[:4]
        before = len(pool)
        for r in ranked:
            for nb in space.neighbors(Config.from_json(r["config"]), rng, n=max(2, min(8, budget // 4))):
                try_cfg(nb)
        rounds += 1
        added = len(pool) - before
        budget -= max(added, 1)
        if added == 0 and rounds > 20:
            break
    print(f"  explore: {len(pool)} configs after {rounds} local rounds ({time.perf_counter() - t0:.0f} s)", flush=True)
    ranked = sorted((r for r in pool.values() if r.get("gflops")), key=lambda r: -r["gflops"])
    final = [bench.run_config(r["config"]) for r in ranked[:args.explore_retime]]
    return list(pool.values()), final


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def machine_info() -> dict:
    info = {"cores_available": CORES, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS")}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info.update(model=fields.get("Model name"), cpus=fields.get("CPU(s)"),
                    threads_per_core=fields.get("Thread(s) per core"), l1d=fields.get("L1d cache"),
                    l2=fields.get("L2 cache"), l3=fields.get("L3 cache"),
                    avx2="avx2" in fields.get("Flags", ""), avx512f="avx512f" in fields.get("Flags", ""),
                    hypervisor=fields.get("Hypervisor vendor"))
    except Exception as err:  # lscpu missing
        info["lscpu_error"] = str(err)
    return info


def versions() -> dict:
    import torch
    import tvm

    v = {"python": platform.python_version(), "tvm": tvm.__version__, "torch": torch.__version__,
         "numpy": np.__version__}
    for mod in ("xgboost", "tvm_ffi"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:
            pass
    try:
        v["repo_commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        pass
    return v


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return None if not a or not b else a / b


def table_numbers(r: dict) -> dict:
    """The table's numbers: head-to-head timings when present, else each phase's own."""
    f = r.get("final") or {}
    g = lambda k, default: (f[k]["gflops"] if k in f else default)  # noqa: E731
    return {"random_best": r["random"]["best_gflops"], "random_median": r["random"]["median_gflops"],
            "hand": g("hand", r["hand"]["best_gflops"]),
            "space": max(x for x in (g("space", r.get("space_best_gflops")), g("hand", r["hand"]["best_gflops"]),
                                     r["random"]["best_gflops"], 0) if x is not None) or None,
            "torch": g("torch", r["torch"].get("gflops")), "torch_1thread": g("torch_1thread", r["torch"].get("gflops_1thread")),
            "ms": g("metaschedule", r["metaschedule"].get("gflops"))}


def table_rows(report: dict) -> list[list[str]]:
    rows = []
    for name, r in report["workloads"].items():
        t = table_numbers(r)
        rows.append([name, fmt(t["random_best"]), fmt(t["random_median"]), fmt(t["hand"]), fmt(t["space"]),
                     fmt(t["torch"]), fmt(t["torch_1thread"]), fmt(t["ms"]),
                     fmt(ratio(t["hand"], t["torch"]), 2), fmt(ratio(t["hand"], t["ms"]), 2),
                     fmt(ratio(t["space"], t["torch"]), 2), fmt(ratio(t["space"], t["ms"]), 2)])
    return rows


HEADER = ["workload", "random best", "random median", "hand", "space best", "torch", "torch 1thr", "MS@N",
          "hand/torch", "hand/MS", "space/torch", "space/MS"]


def print_table(report: dict) -> None:
    rows = [HEADER] + table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for i, r in enumerate(rows):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_markdown(report: dict, path: Path) -> None:
    m, v, a = report["machine"], report["versions"], report["settings"]
    lines = [f"# Search-space quality, {report['date']}", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {m.get('model')} ({m.get('cpus')} CPUs, {m.get('threads_per_core')} thread/core, "
             f"L1d {m.get('l1d')}, L2 {m.get('l2')}, L3 {m.get('l3')}, AVX2 {m.get('avx2')}, "
             f"AVX-512 {m.get('avx512f')}, hypervisor {m.get('hypervisor')}); "
             f"TVM_NUM_THREADS={m.get('TVM_NUM_THREADS')}, torch threads={report.get('torch_threads')}.", "",
             "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()), "",
             f"TVM timing: time_evaluator number={a['number']} repeat={a['repeat']} "
             f"min_repeat_ms={a['min_repeat_ms']} f_preproc=cache_flush_cpu_non_first_arg, median. "
             f"torch: same protocol with perf_counter loops, warm (no cache flush). "
             f"MetaSchedule: tune_tir max_trials_global={a['ms_trials']} num_trials_per_iter={a['ms_per_iter']}, "
             f"xgb, evolutionary, seed={a['seed']}, fast_build, EvaluatorConfig(number=3, repeat=1, "
             f"min_repeat_ms=50, cache flush); its best re-timed with our settings. "
             f"Random: {a['random']} configs, seed {a['seed']}. Explore: {a['explore']} quick-timed configs.", "",
             "GFLOPS (higher is better):", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(report)]
    lines += ["", f"Measurements still disturbed after re-timing: {report['disturbed']} of "
              f"{report['measurements']} (other processes using >= {a['quiet_cores']} cores during the timing; "
              f"{report['quiet_waited_s']} s spent waiting for a quiet CPU).", ""]
    for name, r in report["workloads"].items():
        lines += [f"## {name}: `{r['key']}` ({r['flops'] / 1e9:.3f} GFLOP)", "",
                  f"- random: {r['random']['valid']}/{r['random']['count']} valid, best config "
                  f"`{json.dumps(r['random']['best_config'])}`",
                  f"- hand-picked best ({fmt(r['hand']['best_gflops'])} GFLOPS): "
                  f"`{json.dumps(r['hand']['best_config'])}`"]
        for h in r["hand"]["results"]:
            lines.append(f"  - {fmt(h.get('gflops'))} GFLOPS `{json.dumps(h['config'])}`"
                         + (f" ({h['error']})" if h.get("error") else ""))
        if r.get("explore"):
            e = r["explore"]
            lines.append(f"- explored {e['count']} configs (quick timing); best re-timed "
                         f"{fmt(e['best_gflops'])} GFLOPS: `{json.dumps(e['best_config'])}`")
        ms_ = r["metaschedule"]
        lines.append(f"- torch {fmt(r['torch'].get('gflops'))} GFLOPS with {r['torch'].get('threads')} threads "
                     f"({fmt(r['torch'].get('gflops_1thread'))} with 1 thread; correct: {r['torch'].get('ok')}); "
                     f"MetaSchedule {fmt(ms_.get('gflops'))} GFLOPS re-timed, "
                     f"{fmt(ms_.get('ms_own_best_gflops'))} by its own runner, {ms_.get('measured')} measured, "
                     f"tuning {ms_.get('tune_s')} s, correct: {ms_.get('ok')}")
        lines.append("")
    if report.get("notes"):
        lines += ["## Notes", "", report["notes"], ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=["matmul512", "conv56"], choices=sorted(WORKLOADS))
    p.add_argument("--random", type=int, default=64, help="random configs of our space per workload")
    p.add_argument("--explore", type=int, default=0, help="extra quick-timed configs searched per workload")
    p.add_argument("--explore-retime", type=int, default=5, help="explored leaders re-timed with full settings")
    p.add_argument("--ms-trials", type=int, default=64, help="MetaSchedule max_trials_global (0: skip)")
    p.add_argument("--ms-per-iter", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=50)
    p.add_argument("--quick-number", type=int, default=1)
    p.add_argument("--quick-repeat", type=int, default=3)
    p.add_argument("--quick-min-repeat-ms", type=int, default=10)
    p.add_argument("--quiet-cores", type=float, default=0.25, help="other-process load counted as disturbed")
    p.add_argument("--quiet-wait", type=float, default=10.0, help="max seconds to wait for a quiet CPU")
    p.add_argument("--quiet-budget", type=float, default=900.0, help="total seconds spent waiting for quiet")
    p.add_argument("--quick-quiet-wait", type=float, default=3.0, help="the same for quick (explore) timings")
    p.add_argument("--retries", type=int, default=2, help="re-timings of a disturbed full measurement")
    p.add_argument("--final-rounds", type=int, default=3,
                   help="rounds of alternate timing of hand/space/MetaSchedule/torch for the table (0: off)")
    p.add_argument("--final-quiet-wait", type=float, default=30.0, help="quiet wait before each head-to-head timing")
    p.add_argument("--verbose", action="store_true", help="a line per random config")
    p.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--notes", default="", help="free text appended to the markdown report")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(CORES)
    timer = Timer(args)
    today = datetime.date.today().isoformat()
    report = {"date": today, "command": " ".join(["python", "benchmarks/space_quality.py"] + (argv or sys.argv[1:])),
              "machine": machine_info(), "versions": versions(), "settings": {k: (str(v) if isinstance(v, Path) else v)
                                                                              for k, v in vars(args).items()},
              "torch_threads": torch.get_num_threads(), "workloads": {}, "notes": args.notes}
    import tvm

    report["tvm_runtime_threads"] = tvm.runtime.num_threads() if hasattr(tvm.runtime, "num_threads") else None
    print(f"cores={CORES} TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']} torch threads={torch.get_num_threads()} "
          f"model={report['machine'].get('model')}", flush=True)
    t_start = time.perf_counter()
    for name in args.workloads:
        bench = Bench(name, args, timer)
        print(f"\n== {name}: {bench.w.key}, {bench.w.flops / 1e9:.3f} GFLOP, target {bench.target}", flush=True)
        entry = {"key": bench.w.key, "flops": bench.w.flops, "target": str(bench.target)}
        rng = np.random.default_rng(args.seed)

        t0 = time.perf_counter()
        configs = bench.template.space.sample(rng, args.random)
        rand = []
        for i, c in enumerate(configs):
            rand.append(bench.run_config(c, patient=False))  # full timing, short quiet waits
            if args.verbose:
                r = rand[-1]
                print(f"  random {i + 1:3d} {fmt(r.get('gflops')):>7} GFLOPS other={r.get('other_load')} "
                      f"{r.get('error', '')}", flush=True)
        entry["random"] = dict(summarize(rand), results=rand)
        print(f"  random x{len(rand)}: best {fmt(entry['random']['best_gflops'])} median "
              f"{fmt(entry['random']['median_gflops'])} GFLOPS ({time.perf_counter() - t0:.0f} s)", flush=True)

        hand = []
        for cfg in hand_configs(name):
            r = bench.run_config(cfg)
            hand.append(r)
            print(f"  hand {fmt(r.get('gflops')):>7} GFLOPS {r.get('error', '')} {json.dumps(r['config'])}", flush=True)
        entry["hand"] = dict(summarize(hand), results=hand)
        print(f"  hand best {fmt(entry['hand']['best_gflops'])} GFLOPS: {json.dumps(entry['hand']['best_config'])}",
              flush=True)
        space_best = entry["hand"]["best_gflops"] or 0
        space_best_cfg = entry["hand"]["best_config"]
        if (entry["random"]["best_gflops"] or 0) > space_best:
            space_best, space_best_cfg = entry["random"]["best_gflops"], entry["random"]["best_config"]

        if args.explore:
            seen = {cfg_of(c) for c in configs} | {cfg_of(c) for c in hand_configs(name)}
            pool, final = explore(bench, args, rng, seen)
            best_e = summarize(final)
            entry["explore"] = {"count": len(pool), "best_gflops": best_e["best_gflops"],
                                "best_config": best_e["best_config"], "retimed": final,
                                "quick_top": sorted((r for r in pool if r.get("gflops")),
                                                    key=lambda r: -r["gflops"])[:20]}
            print(f"  explore best (re-timed) {fmt(best_e['best_gflops'])} GFLOPS: "
                  f"{json.dumps(best_e['best_config'])}", flush=True)
            if (best_e["best_gflops"] or 0) > space_best:
                space_best, space_best_cfg = best_e["best_gflops"], best_e["best_config"]
        entry["space_best_gflops"] = space_best or None
        entry["space_best_config"] = space_best_cfg

        entry["torch"] = bench.time_torch()
        print(f"  torch {fmt(entry['torch']['gflops'])} GFLOPS, 1 thread {fmt(entry['torch']['gflops_1thread'])} "
              f"(ok={entry['torch']['ok']}, other load {entry['torch']['other_load']})", flush=True)

        if args.ms_trials:
            t0 = time.perf_counter()
            try:
                entry["metaschedule"] = bench.tune_metaschedule()
            except Exception as err:
                entry["metaschedule"] = {"error": f"{type(err).__name__}: {err}"[:500]}
            print(f"  MetaSchedule@{args.ms_trials} {fmt(entry['metaschedule'].get('gflops'))} GFLOPS "
                  f"(own runner best {fmt(entry['metaschedule'].get('ms_own_best_gflops'))}, "
                  f"ok={entry['metaschedule'].get('ok')}, {time.perf_counter() - t0:.0f} s)", flush=True)
        else:
            entry["metaschedule"] = {}
        if args.final_rounds:
            entry["final"] = head_to_head(bench, entry, args)
            print("  head-to-head: " + ", ".join(f"{k} {fmt(v['gflops'])}{'' if v['quiet'] else ' (disturbed)'}"
                                                for k, v in entry["final"].items()), flush=True)
        report["workloads"][name] = entry

    report["disturbed"] = timer.disturbed
    report["measurements"] = timer.measurements
    report["quiet_waited_s"] = round(timer.waited, 1)
    report["total_s"] = round(time.perf_counter() - t_start, 1)
    print()
    print_table(report)
    print(f"\n(disturbed measurements: {timer.disturbed} of {timer.measurements}; waited {timer.waited:.0f} s "
          f"for a quiet CPU; total {report['total_s']} s)")
    for name, e in report["workloads"].items():
        print(f"{name} space best config ({fmt(e['space_best_gflops'])} GFLOPS): {json.dumps(e['space_best_config'])}")
    if not args.no_write:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        stem = args.out_dir / f"space_quality-{today}"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
        write_markdown(report, stem.with_suffix(".md"))
        print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
