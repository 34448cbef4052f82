"""Program features: our own, read off the config, and on GPUs Ansor's per-store features too.

The draft model's terms (`cost_model.draft`) and the knob features (`cost_model.knob_features`)
are computed from a config's knobs and the workload's shape, against the measuring host's facts
(lanes, FMA pipes, caches), without lowering. `PerStoreFeature` (TVM's C++ extractor) reads the
scheduled and lowered TIR: twenty times the cost on a CPU, where it no longer ranked better, so
only GPU candidates read it (`reads_per_store`); one column layout serves both.
"""

from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from search import Config, TargetInfo, Template

from .draft import DRAFT_NAMES, draft_features
from .knob_features import KNOB_NAMES, knob_features


def _per_store_names() -> list[str]:
    """The 164 columns of `PerStoreFeature` (group layout from TVM's per_store_feature.cc)."""
    ops = ["mad", "addsub", "mul", "divmod", "cmp", "math_func", "other_func"]
    names = [f"float_{o}" for o in ops] + [f"int_{o}" for o in ops] + ["bool_op", "select_op"]
    for kind in ("vec", "unroll", "parallel"):
        names += [f"{kind}_num", f"{kind}_prod", f"{kind}_len"] + [f"{kind}_pos{i}" for i in range(8)]
    names += ["is_gpu", "blockIdx_x", "blockIdx_y", "blockIdx_z", "threadIdx_x", "threadIdx_y",
              "threadIdx_z", "vthread"]
    access = ["read", "write", "readwrite", "bytes", "unique_bytes", "lines", "unique_lines",
              "reuse_loop", "reuse_serial", "reuse_none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct",
              "bytes_per_reuse", "unique_bytes_per_reuse", "lines_per_reuse", "unique_lines_per_reuse", "stride"]
    names += [f"buf{b}_{a}" for b in range(5) for a in access]
    names += [f"arith_intensity_{i}" for i in range(10)]
    names += ["alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod", "outer_prod", "num_loops",
              "auto_unroll_max_step"]
    return names


PER_STORE_NAMES = tuple(_per_store_names())
FEATURE_NAMES: tuple[str, ...] = (tuple(f"max_{n}" for n in PER_STORE_NAMES)
                                  + tuple(f"sum_{n}" for n in PER_STORE_NAMES)
                                  + ("log_stores",) + DRAFT_NAMES + KNOB_NAMES)
BASE_COLUMNS = slice(0, 2 * len(PER_STORE_NAMES) + 1)  # the PerStoreFeature part, for ablations


def _context(target: Any) -> Any:
    """A one-thread TuneContext for the extractor, without TuneContext.__init__'s tensor-intrinsic
    import, which costs 15-50 s and is not needed to read features."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

    context = ms.TuneContext.__new__(ms.TuneContext)
    context.__init_handle_by_constructor__(_ffi_api.TuneContext, None, target, None, None, "features",
                                           1, 1, get_logging_func(get_logger(__name__)))
    return context


def reads_per_store(target: TargetInfo) -> bool:
    """Whether the features of a target's candidates include `PerStoreFeature`: on GPUs only. On
    CPUs the draft terms and the knob features, read without lowering, ranked the random configs
    of CPUs and workloads held out of training at the same pairwise accuracy as with it (top-5 and
    the held-out networks' top-1 went either way), for a twentieth of the time
    (`benchmarks/results/cost_model_transfer-2026-12-06.md`); its columns are zero there."""
    return target.is_cuda


class FeatureExtractor:
    """Features of configs of one template; deterministic, `len(FEATURE_NAMES)` columns always.

    Where the target reads `PerStoreFeature` (`reads_per_store`), configs are cut into chunks
    that a thread per core takes in turn; a thread applies a chunk's schedules and reads their
    `PerStoreFeature`s itself, with a template replica of its own (`Template.replica`). Both
    steps are TVM's C++, which releases the GIL.
    """

    CHUNK = 32

    def __init__(self, template: Template, threads: int | None = None, *, per_store: bool | None = None) -> None:
        """`threads`: how many threads apply and read configs, default one per core; `per_store`:
        read `PerStoreFeature` (default: where the target does, `reads_per_store`)."""
        from tvm.s_tir import meta_schedule as ms

        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.template = template
        self.reads_per_store = reads_per_store(template.target) if per_store is None else per_store
        self.threads = threads or len(os.sched_getaffinity(0))
        self._idle: queue.SimpleQueue[Template] = queue.SimpleQueue()  # templates no thread is using
        self._idle.put(template)
        self._extractor = ms.feature_extractor.PerStoreFeature()
        self._context = _context(template.target.tvm)
        self._args = ms.arg_info.ArgInfo.from_prim_func(template.prim_func)

    def per_store(self, configs: Sequence[Config], threads: int | None = None) -> list[np.ndarray]:
        """The raw (stores x 164) `PerStoreFeature` matrix of each config, on up to `threads`
        threads (default: all of the extractor's)."""
        configs = [self.template.check(c) for c in configs]
        chunks = [configs[i:i + self.CHUNK] for i in range(0, len(configs), self.CHUNK)]
        workers = max(1, min(threads or self.threads, self.threads, len(chunks)))
        with ThreadPoolExecutor(workers) as pool:
            return [stores for chunk in pool.map(self._chunk_stores, chunks) for stores in chunk]

    def _chunk_stores(self, configs: list[Config]) -> list[np.ndarray]:
        from tvm.s_tir import meta_schedule as ms

        try:
            template = self._idle.get_nowait()
        except queue.Empty:  # replicas are made as threads need them: one per thread at most
            template = self.template.replica()
        try:
            candidates = [ms.MeasureCandidate(template.unchecked_apply(c), self._args) for c in configs]
            return [f.numpy() for f in self._extractor.extract_from(self._context, candidates)]
        finally:
            self._idle.put(template)

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
        rows = []
        if self.reads_per_store:
            every_stores = self.per_store(configs)
        else:
            configs = [self.template.check(c) for c in configs]
            every_stores = [np.zeros((1, len(PER_STORE_NAMES)))] * len(configs)
        for config, stores in zip(configs, every_stores):
            stores = stores if len(stores) else np.zeros((1, len(PER_STORE_NAMES)))
            draft, knobs = draft_features(self.template, config), knob_features(self.template, config)
            rows.append(np.concatenate([stores.max(axis=0), stores.sum(axis=0), [np.log2(len(stores))],
                                        [draft[n] for n in DRAFT_NAMES], [knobs[n] for n in KNOB_NAMES]]))
        return np.asarray(rows, dtype=np.float32)
