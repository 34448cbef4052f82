"""What the CUDA templates share: the target's limits, vector-load knobs, TVM's verifier as the last rule."""

from __future__ import annotations

from abc import abstractmethod

from .config import Config
from .space import InvalidConfig
from .template import Template, lower_schedule

MAX_REGISTERS = 255
VERIFIED_CACHE = 100_000  # verdicts kept per template; a long run does not grow without bound


class GPUTemplate(Template):
    """Subclasses call `read_limits()` in `make_space`, define `threads`, `shared_bytes` and
    `registers` (per thread), and list `gpu_code_rule` last among their rules."""

    def read_limits(self) -> None:
        self.warp = self.target.cuda_limit("thread_warp_size")
        self.max_threads = self.target.cuda_limit("max_threads_per_block")
        self.max_shared = self.target.cuda_limit("max_shared_memory_per_block")
        self.block_registers = self.target.cuda_limit("registers_per_block")
        self._verified: dict[Config, str | None] = {}

    @abstractmethod
    def threads(self, config: Config) -> int:
        """Threads per block."""

    @abstractmethod
    def shared_bytes(self, config: Config) -> int:
        """Shared memory per block, estimated from the tiles."""

    @abstractmethod
    def registers(self, config: Config) -> int:
        """Estimated registers per thread."""

    @staticmethod
    def vector_knob(buffer: str) -> str:
        return f"vector_load_{buffer}"

    def shared_memory_rule(self, config: Config) -> str | None:
        used = self.shared_bytes(config)
        if used > self.max_shared:
            return f"{used} bytes of shared memory exceed the target's {self.max_shared} per block"
        return None

    def register_rule(self, config: Config) -> str | None:
        per_thread = self.registers(config)
        if per_thread > MAX_REGISTERS:
            return f"about {per_thread} registers per thread exceed {MAX_REGISTERS}"
        if per_thread * self.threads(config) > self.block_registers:
            return f"about {per_thread} registers x {self.threads(config)} threads exceed {self.block_registers} per block"
        return None

    def gpu_code_rule(self, config: Config) -> str | None:
        """The exact check, run last and cached: TVM's own verifier on the lowered kernel.

        The templates' shared-memory estimates are fast filters; TVM's region analysis can
        allocate more than a tile's true footprint (padded windows), and only the lowered code knows.
        """
        if config not in self._verified:
            from tvm.s_tir.analysis import verify_gpu_code

            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.clear()
            limits = {"max_shared_memory_per_block": self.max_shared, "max_threads_per_block": self.max_threads,
                      "max_thread_x": self.max_threads, "max_local_memory_per_block": 1 << 31}
            try:
                lowered = lower_schedule(self.unchecked_apply(config), self.target.tvm)
            except InvalidConfig as err:
                self._verified[config] = str(err)
            else:
                ok = bool(verify_gpu_code(lowered["main"], limits))
                self._verified[config] = None if ok else "the lowered kernel fails TVM's GPU verifier (shared memory)"
        return self._verified[config]
