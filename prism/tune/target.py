"""The machine a kernel is tuned for: the limits that bound a parameter space and the rates of the cost model."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from prism.codegen.spec import MAX_GRID_YZ
from prism.tune.calibration import DATA, Calibration, load

__all__ = ["Target", "H100", "H200", "TARGETS", "calibrated", "device_target", "get_target", "gpu_kind"]


@dataclass(frozen=True)
class Target:
    """One GPU model. Limits are hard (a kernel over them does not run); rates feed `prism.tune.cost`.

    Rates are whole-chip figures from the vendor's data sheet (dense fp16 tensor cores, fp32 vector
    units), but DRAM's is what a copy kernel measures (H100: 3.0 TB/s of the sheet's 3.35, which is
    `peak_bandwidth`, the floor's); `sm_bandwidth` is the most one SM pulls from DRAM (bytes in flight per SM
    over DRAM latency), which is what makes a grid of few blocks slow even when it moves few bytes.
    """

    name: str
    arch: int                       # compute capability as Triton spells it: 90 = sm_90
    sms: int                        # streaming multiprocessors
    smem_per_block: int             # bytes of shared memory one block may use
    smem_per_sm: int                # bytes of shared memory per SM (shared by its resident blocks)
    regs_per_sm: int                # 32-bit registers per SM
    max_regs_per_thread: int        # more than this spills to local memory
    max_warps_per_sm: int
    max_blocks_per_sm: int
    dram_bandwidth: float           # bytes/s a copy kernel measures (a calibration keeps it near: prism.tune.fit)
    sm_bandwidth: float             # bytes/s one SM can pull from DRAM on its own
    l2_bytes: int                   # L2 cache size
    l2_bandwidth: float             # bytes/s from L2 (re-reads of a tile other blocks already loaded)
    dram_latency: float             # s, a load's round trip
    tensor_flops: float             # fp16 tensor-core FLOP/s, dense, whole chip
    vector_flops: float             # fp32 FLOP/s on the vector units, whole chip
    launch: float                   # s between two dependent kernels (launch, ramp-up, tail)
    peak_bandwidth: float = 0.0     # bytes/s on the data sheet (the DRAM floor's; 0: dram_bandwidth)
    warp_inflight: float = 2048.0   # bytes of loads one warp keeps outstanding
    iteration_latency: float = 0.4e-6  # s a loop iteration's loads take issue-to-use, over iterations in flight
    loop_overhead: float = 0.02e-6  # s a loop iteration that loads nothing takes at least
    spill_penalty: float = 1.05     # block time x this when registers spill (not fitted: prism.tune.cost)
    spill_slope: float = 1.0        # ... plus this per unit of estimated registers over what a thread may hold
    warp_cost: float = 0.04e-6      # s each warp on an SM adds per loop iteration and once after (prism.tune.cost;
                                    # no data-sheet figure: a starting point the calibrations fit)
    sector: int = 32                # bytes: DRAM is read in sectors; a narrower row still costs one
    mma_tile: int = 16 * 8          # outputs of one warp's tensor-core instruction (mma m16n8k16)
    max_blocks: int = 8192          # the tuner's cap on blocks per kernel (not a hardware limit)
    max_grid_yz: int = MAX_GRID_YZ  # CUDA's limit on grid dims y and z

    def describe(self) -> str:
        return (f"{self.name}: {self.sms} SMs, {self.dram_bandwidth / 1e12:.2f} TB/s DRAM, "
                f"{self.smem_per_block // 1024} KiB shared memory per block")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def registers(self, warps: int) -> int:
        """The most 32-bit registers a thread of a block of `warps` warps may hold without spilling: the
        per-thread limit, or the SM's register file over the block's threads if that is less (a block must fit
        one SM: at 16 warps, 128 on an H100, not 255)."""
        return min(self.max_regs_per_thread, self.regs_per_sm // (32 * warps))

    def with_(self, **changes: Any) -> Target:
        return replace(self, **changes)

    def with_calibration(self, cal: Calibration) -> Target:
        """This target with `cal`'s fitted constants, named for them (result caches keyed by the name renew)."""
        return self.with_(name=f"{self.name}, calibrated {cal.digest}", **cal.values)


H100 = Target(
    name="H100 SXM (sm_90)", arch=90, sms=132,
    smem_per_block=227 * 1024, smem_per_sm=228 * 1024, regs_per_sm=65536, max_regs_per_thread=255,
    max_warps_per_sm=64, max_blocks_per_sm=32,
    dram_bandwidth=3.0e12, sm_bandwidth=90e9, l2_bytes=50 * 2**20, l2_bandwidth=7e12, dram_latency=0.7e-6,
    tensor_flops=989e12, vector_flops=67e12, launch=3e-6, peak_bandwidth=3.35e12)

H200 = H100.with_(name="H200 SXM (sm_90)", dram_bandwidth=4.3e12, peak_bandwidth=4.8e12)
"""The H200's copy bandwidth: its peak times the H100's copy/peak ratio (3.0 / 3.35); gpu_bench measured 4.25 TB/s
on one (`copy_gbps` of the H200 runs in docs/benchmarks.md)."""

TARGETS = {"h100": H100, "h200": H200}


def get_target(name: str | Target | None = None) -> Target:
    """A Target by name ("h100", "h200"), or from a CUDA device name ("NVIDIA H200"); default H100. The
    calibration shipped for its kind (prism/tune/data/<kind>.json, prism.tune.calibration) is applied:
    `H100` and `H200` themselves hold the data sheet's figures. A Target passed in is returned as is."""
    if isinstance(name, Target):
        return name
    return calibrated(gpu_kind(name))


def device_target(device: Any = None, target: Target | str | None = None) -> Target:
    """The Target a tuning is for: a CUDA `device`'s own (its name and compute capability; candidates are timed
    on it), else `target` (the cost model's; its default GPU when None)."""
    import torch

    if device is not None and torch.device(device).type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return get_target(torch.cuda.get_device_name(device)).with_(arch=10 * major + minor)
    return get_target(target)


def gpu_kind(name: str | None) -> str:
    """The TARGETS key a name means ("h200", "NVIDIA H200" -> "h200"); "h100" by default."""
    key = (name or "h100").lower()
    return next((k for k in TARGETS if k in key), "h100")


@functools.cache
def calibrated(kind: str) -> Target:
    """TARGETS[kind] with its shipped calibration applied, if there is one."""
    path = DATA / f"{kind}.json"
    return TARGETS[kind].with_calibration(load(path)) if path.exists() else TARGETS[kind]
