"""Shared helpers for the decode-gather GPU conformance tier (conformance/gpu) and the benchmarks (bench/).

One module on purpose: the conformance tests, the pytest-benchmark suite, the ceiling sweep and the
report renderer all build the same geometry, the same pinned banks and the same device timer, so a
number in a report and a check in a test always mean the same thing.

Nothing here imports torch or freetoken at module import time: ``bench/report.py`` and the CPU smoke
paths import this module on machines without either.

Vocabulary
----------
bank        one of the expert's weight arrays (NVFP4: 6 banks per expert), one row per expert
row_bytes   bytes of one expert's row in a bank (multiple of 16)
source      a layer's host bank, ``[experts, row_bytes]`` uint8 in pinned, GPU-mapped host memory
slot cache  the VRAM copy, ``[slots, row_bytes]`` per bank
miss list   ``dst_indices[i] <- src_indices[i]`` for ``i < n`` (``n`` read on the device)
ring        decode_gather's ``(ctas, stages, chunk_bytes)`` template configuration
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime as _dt
import functools
import json
import math
import mmap
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------

# Qwen3.6-35B-A3B MoE: the model the decode-gather proposal was measured on.
MODEL = {
    "name": "Qwen3.6-35B-A3B",
    "hidden": 2048,
    "intermediate": 512,
    "experts": 256,
    "top_k": 8,
    "moe_layers": 40,
}

_ITEMSIZE = {"uint8": 1, "float8_e4m3fn": 1, "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}


@dataclasses.dataclass(frozen=True)
class BankGeom:
    """One bank of the upstream ``nvfp4`` schema (``freetoken.moe.offload_cache._BANK_SCHEMAS``)."""

    name: str
    shape: tuple[int, ...]  # per-expert row shape
    dtype: str  # torch dtype name

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE[self.dtype]

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)


def nvfp4_banks(hidden: int = MODEL["hidden"], intermediate: int = MODEL["intermediate"]) -> list[BankGeom]:
    """The six NVFP4 banks in schema order, as ``TritonNvfp4MoEKernel.layout`` declares them:
    packed e2m1 codes (uint8), fp8-e4m3 per-16 block scales, fp32 per-output-row globals."""
    h, i = hidden, intermediate
    return [
        BankGeom("gate_up_packed", (2 * i, h // 2), "uint8"),
        BankGeom("gate_up_scale", (2 * i, h // 16), "float8_e4m3fn"),
        BankGeom("gate_up_global", (2 * i,), "float32"),
        BankGeom("down_packed", (h, i // 2), "uint8"),
        BankGeom("down_scale", (h, i // 16), "float8_e4m3fn"),
        BankGeom("down_global", (h,), "float32"),
    ]


NVFP4_ROW_BYTES: list[int] = [b.row_bytes for b in nvfp4_banks()]
NVFP4_EXPERT_BYTES: int = sum(NVFP4_ROW_BYTES)


def geometry_rows(chunk_bytes: int) -> list[int]:
    """Row sizes that hit the ring's edges: 16 B, 48 B, one chunk -16/+16/exact, 4 KiB + 16 B,
    1 MiB + 16 B and a multi-chunk row that ends 32 B into its last chunk."""
    return [16, 48, chunk_bytes - 16, chunk_bytes + 16, 4096 + 16, (1 << 20) + 16, chunk_bytes, 3 * chunk_bytes + 32]


def rows_for_bank_count(num_banks: int, chunk_bytes: int) -> list[int]:
    base = [r for r in geometry_rows(chunk_bytes) if r > 0]
    return [base[(num_banks + i) % len(base)] for i in range(num_banks)]


class Ring(NamedTuple):
    ctas: int
    stages: int
    chunk_bytes: int

    @property
    def tag(self) -> str:
        c = self.chunk_bytes
        size = f"{c // 1024}K" if c % 1024 == 0 else f"{c}B"
        return f"{self.ctas}x{self.stages}x{size}"

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.chunk_bytes

    @property
    def bytes_in_flight(self) -> int:
        return self.ctas * self.stages * self.chunk_bytes

    def kwargs(self) -> dict[str, int]:
        return {"ctas": self.ctas, "stages": self.stages, "chunk_bytes": self.chunk_bytes}

    @classmethod
    def parse(cls, text: str) -> "Ring":
        """``16x4x8192`` or ``16x4x8K``."""
        parts = text.lower().split("x")
        if len(parts) != 3:
            raise ValueError(f"ring {text!r}: expected CTASxSTAGESxCHUNK, e.g. 16x4x8K")
        chunk = parts[2]
        mult = 1024 if chunk.endswith("k") else 1
        return cls(int(parts[0]), int(parts[1]), int(chunk.rstrip("kb")) * mult)


# Rings the conformance tier exercises besides the module default: one CTA, the 48 KiB ring that
# needs the shared-memory opt-in once the static bank table is counted, an odd CTA count whose
# stride is not a multiple of the chunks per row, and a 64 KiB ring.
CONFORMANCE_EXTRA_RINGS = [Ring(1, 2, 4096), Ring(8, 3, 16384), Ring(7, 5, 2048), Ring(32, 2, 32768)]

UPSTREAM_THREADS = 1024
UPSTREAM_BLOCKS_PER_BANK = 8


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


# ---------------------------------------------------------------------------
# Paths, names, JSON
# ---------------------------------------------------------------------------


def device_slug(name: str | None) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA GeForce RTX 5090' -> 'geforce-rtx-5090'."""
    s = (name or "unknown").strip().lower()
    s = re.sub(r"^nvidia\s+", "", s)
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "unknown"


def resolve_dir(template: str | os.PathLike, slug: str) -> Path:
    """A directory from a template that may hold ``{device}`` (made absolute against the repo root)."""
    p = Path(str(template).replace("{device}", slug))
    return p if p.is_absolute() else REPO_ROOT / p


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False, default=_json_default) + "\n")
    tmp.replace(path)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def fmt_bytes(n: float) -> str:
    """1024 -> '1 KiB', 1572864 -> '1.5 MiB', 1069056000 -> '1020 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            if unit == "B" or abs(n) >= 100:
                return f"{n:.0f} {unit}"
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} B"


# ---------------------------------------------------------------------------
# Statistics of paired alternating rounds
# ---------------------------------------------------------------------------


def median(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def verdict(speedup: float | None, aa_spread: float | None) -> str:
    """'tie' when |speedup - 1| is inside the A/A spread (the noise of upstream against itself)."""
    if speedup is None or aa_spread is None:
        return "n/a"
    if abs(speedup - 1.0) <= aa_spread:
        return "tie"
    return "faster" if speedup > 1.0 else "slower"


def summarize_rounds(
    rounds_us: dict[str, list[float]], *, ours: str = "ours", base: str = "upstream", aa: str = "upstream_aa"
) -> dict[str, Any]:
    """Medians of per-round times, the speedup base/ours (>1: ours faster), its paired (per-round)
    median, the A/A ratios base/aa per round and their spread max|r-1|, and the verdict."""
    med = {k: median(v) for k, v in rounds_us.items() if v}
    out: dict[str, Any] = {"median_us": med}
    b, o = rounds_us.get(base) or [], rounds_us.get(ours) or []
    a = rounds_us.get(aa) or []
    out["speedup"] = (med[base] / med[ours]) if med.get(base) and med.get(ours) else None
    paired = [x / y for x, y in zip(b, o) if y]
    out["speedup_paired"] = median(paired)
    aa_ratios = [x / y for x, y in zip(b, a) if y]
    out["aa_ratios"] = aa_ratios
    out["aa_ratio"] = median(aa_ratios)
    out["aa_spread"] = max((abs(r - 1.0) for r in aa_ratios), default=None)
    out["verdict"] = verdict(out["speedup"], out["aa_spread"])
    return out


# ---------------------------------------------------------------------------
# Skewed routing traces and an LRU model (pure Python; the bench calibrates the skew with it)
# ---------------------------------------------------------------------------


def zipf_routing_trace(
    steps: int, layers: int, experts: int, top_k: int, exponent: float, *, batch: int = 1, seed: int = 0
):
    """``int32 [steps, layers, batch, top_k]`` CPU tensor of expert ids: every layer has its own
    popularity order (a seeded permutation), ids ~ Zipf(exponent) over ranks, distinct per token."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, experts + 1, dtype=torch.float64)
    weights = ranks.pow(-float(exponent))
    perm = torch.stack([torch.randperm(experts, generator=g) for _ in range(layers)])  # [layers, experts]
    rows = steps * layers * batch
    picks = torch.multinomial(weights.expand(rows, experts), top_k, replacement=False, generator=g)
    picks = picks.view(steps, layers, batch, top_k)
    layer_idx = torch.arange(layers).view(1, layers, 1, 1).expand_as(picks)
    ids = perm[layer_idx, picks]
    return ids.to(torch.int32).contiguous()


def lru_miss_rate(trace, experts: int, cache_size: int, warm_steps: int = 0) -> float:
    """Miss rate (misses / distinct active experts per layer call) of one global LRU of
    ``cache_size`` slots over ids ``layer * experts + expert`` -- flashlib's lru_ensure policy."""
    from collections import OrderedDict

    rows = trace.tolist() if hasattr(trace, "tolist") else trace
    lru: OrderedDict[int, None] = OrderedDict()
    misses = active = 0
    for t, step in enumerate(rows):
        for layer, tokens in enumerate(step):
            uniq = list(dict.fromkeys(layer * experts + e for tok in tokens for e in tok))
            miss = [k for k in uniq if k not in lru]
            for k in uniq:
                if k in lru:
                    lru.move_to_end(k)
            for k in miss:
                if len(lru) >= cache_size:
                    lru.popitem(last=False)
                lru[k] = None
            if t >= warm_steps:
                misses += len(miss)
                active += len(uniq)
    return misses / active if active else 0.0


def calibrate_zipf(
    target: float,
    *,
    steps: int,
    layers: int,
    experts: int,
    top_k: int,
    cache_size: int,
    warm_steps: int,
    batch: int = 1,
    seed: int = 0,
    lo: float = 0.0,
    hi: float = 4.0,
    iters: int = 14,
) -> tuple[float, float]:
    """Bisect the Zipf exponent so the LRU model's miss rate is ``target``; returns (exponent, rate)."""
    best = (hi, 0.0)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        tr = zipf_routing_trace(steps, layers, experts, top_k, mid, batch=batch, seed=seed)
        rate = lru_miss_rate(tr, experts, cache_size, warm_steps)
        best = (mid, rate)
        if rate > target:
            lo = mid  # not skewed enough
        else:
            hi = mid
    return best


# ---------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------


def _run(cmd: Sequence[str], timeout: float = 20.0) -> str | None:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def nvidia_smi(gpu_id: str | None = None) -> dict[str, Any]:
    """Driver, PCIe link generation/width (current and max) of one GPU, from nvidia-smi."""
    fields = [
        "name",
        "driver_version",
        "pcie.link.gen.current",
        "pcie.link.width.current",
        "pcie.link.gen.max",
        "pcie.link.width.max",
    ]
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    out = _run(cmd + (["-i", gpu_id] if gpu_id else []))
    if out is None and gpu_id:
        out = _run(cmd + ["-i", "0"])
    if not out:
        return {}
    vals = [v.strip() for v in out.splitlines()[0].split(",")]
    if len(vals) != len(fields):
        return {"nvidia_smi_raw": out}
    d = dict(
        zip(["smi_name", "driver", "pcie_gen_current", "pcie_width_current", "pcie_gen_max", "pcie_width_max"], vals)
    )
    return d


def nvcc_version() -> str | None:
    exe = shutil.which("nvcc") or (
        os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None
    )
    if not exe:
        return None
    out = _run([exe, "--version"])
    if not out:
        return None
    m = re.search(r"release\s+([\d.]+)", out)
    return m.group(1) if m else out.splitlines()[-1]


def freetoken_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("freetoken")
    except Exception:
        pass
    try:
        import freetoken

        return getattr(freetoken, "__version__", None)
    except Exception:
        return None


def series_hash() -> str | None:
    """``freetoken_overlay.series_hash()`` when the overlay package is importable (repo root on sys.path)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        import freetoken_overlay  # type: ignore

        fn = getattr(freetoken_overlay, "series_hash", None)
        return str(fn()) if callable(fn) else None
    except Exception:
        return None


def decode_gather_defaults() -> dict[str, Any] | None:
    try:
        from freetoken.kernel import decode_gather as dgm
    except Exception:
        return None
    return {
        "ctas": getattr(dgm, "DEFAULT_CTAS", None),
        "stages": getattr(dgm, "DEFAULT_STAGES", None),
        "chunk_bytes": getattr(dgm, "DEFAULT_CHUNK_BYTES", None),
        "max_banks": getattr(dgm, "MAX_BANKS", None),
    }


def gpu_smi_id() -> str | None:
    """nvidia-smi's id of CUDA device 0 (its UUID), so CUDA_VISIBLE_DEVICES remapping is honoured."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        if uuid is None:
            return None
        s = str(uuid)
        return s if s.startswith("GPU-") else f"GPU-{s}"
    except Exception:
        return None


@functools.lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """Everything a results file needs to say which machine and software produced it."""
    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        import torch
    except Exception:
        torch = None
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info["device_name"] = p.name
            info["device_slug"] = device_slug(p.name)
            info["capability"] = f"{p.major}.{p.minor}"
            info["sm_count"] = p.multi_processor_count
            info["total_memory_bytes"] = p.total_memory
            rt = cuda_runtime_versions()
            info.update(rt)
    info.update(nvidia_smi(gpu_smi_id() if torch is not None and torch.cuda.is_available() else None))
    info["nvcc"] = nvcc_version()
    info["freetoken"] = freetoken_version()
    info["series_hash"] = series_hash()
    info["decode_gather_defaults"] = decode_gather_defaults()
    return info


def machine_line(info: dict[str, Any]) -> str:
    """One line: device, PCIe link, driver, torch/CUDA, freetoken, series."""
    parts = [info.get("device_name") or info.get("smi_name") or "unknown device"]
    if info.get("capability"):
        parts[-1] += f" (sm_{info['capability'].replace('.', '')})"
    gen = info.get("pcie_gen_under_load") or info.get("pcie_gen_current")
    width = info.get("pcie_width_under_load") or info.get("pcie_width_current")
    if gen:
        parts.append(
            f"PCIe Gen{gen} x{width}"
            + (
                f" (max Gen{info.get('pcie_gen_max')} x{info.get('pcie_width_max')})"
                if info.get("pcie_gen_max")
                else ""
            )
        )
    if info.get("driver"):
        parts.append(f"driver {info['driver']}")
    if info.get("torch"):
        parts.append(f"torch {info['torch']} (CUDA {info.get('torch_cuda')})")
    if info.get("nvcc"):
        parts.append(f"nvcc {info['nvcc']}")
    if info.get("freetoken"):
        parts.append(f"freetoken {info['freetoken']}")
    if info.get("series_hash"):
        parts.append(f"series {info['series_hash']}")
    return ", ".join(parts)


def pcie_under_load(work: Callable[[], None]) -> dict[str, Any]:
    """nvidia-smi's link gen/width sampled while ``work`` keeps the link busy (an idle link may
    report a power-saving lower generation)."""
    result: dict[str, Any] = {}

    def sample() -> None:
        time.sleep(0.05)
        d = nvidia_smi(gpu_smi_id())
        if d:
            result["pcie_gen_under_load"] = d.get("pcie_gen_current")
            result["pcie_width_under_load"] = d.get("pcie_width_current")

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    work()
    th.join(timeout=30)
    return result


# ---------------------------------------------------------------------------
# CUDA runtime / driver through ctypes (the same libraries torch loaded)
# ---------------------------------------------------------------------------


def _loaded_library(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if fragment in line:
                    path = line.split()[-1]
                    if path.startswith("/"):
                        return path
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=1)
def cudart() -> ctypes.CDLL | None:
    """torch's libcudart (found in /proc/self/maps), else the first loadable one."""
    import torch

    torch.cuda.init()
    candidates = [_loaded_library("libcudart.so")] + ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for c in candidates:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError:
            continue
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaMemcpyAsync.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaHostGetDevicePointer.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint]
        return lib
    return None


@functools.lru_cache(maxsize=1)
def libcuda() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    lib.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return lib


def _cuda_check(lib: ctypes.CDLL, err: int, what: str) -> None:
    if err != 0:
        try:
            msg = lib.cudaGetErrorString(err).decode()
        except Exception:
            msg = f"error {err}"
        raise RuntimeError(f"{what} failed: {msg} ({err})")


def cuda_runtime_versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    lib = cudart()
    if lib is None:
        return out
    v = ctypes.c_int(0)
    if lib.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
        out["cuda_runtime"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    if lib.cudaDriverGetVersion(ctypes.byref(v)) == 0:
        out["cuda_driver_api"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    return out


CUDA_LIMIT_STACK_SIZE = 0
CUDA_LIMIT_MALLOC_HEAP_SIZE = 2


def device_limit(limit: int = CUDA_LIMIT_STACK_SIZE) -> tuple[int, str]:
    """cudaDeviceGetLimit of the current device, through torch's libcudart, else cupy, else the driver."""
    value = ctypes.c_size_t(0)
    lib = cudart()
    if lib is not None and lib.cudaDeviceGetLimit(ctypes.byref(value), limit) == 0:
        return int(value.value), "cudart"
    try:
        import cupy

        return int(cupy.cuda.runtime.deviceGetLimit(limit)), "cupy"
    except Exception:
        pass
    drv = libcuda()
    if drv is not None and drv.cuCtxGetLimit(ctypes.byref(value), limit) == 0:
        return int(value.value), "driver"
    raise RuntimeError("no way to read the CUDA device limit (libcudart, cupy, libcuda all failed)")


def memcpy_h2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """cudaMemcpyAsync host->device on ``stream`` (capturable into a CUDA graph as a memcpy node)."""
    lib = cudart()
    if lib is not None:
        _cuda_check(lib, lib.cudaMemcpyAsync(dst, src, nbytes, 1, stream), "cudaMemcpyAsync")
        return
    drv = libcuda()
    if drv is None:
        raise RuntimeError("neither libcudart nor libcuda is loadable")
    err = drv.cuMemcpyHtoDAsync_v2(dst, src, nbytes, stream)
    if err != 0:
        raise RuntimeError(f"cuMemcpyHtoDAsync failed ({err})")


# ---------------------------------------------------------------------------
# Memory: pinned host banks, guarded slot caches, miss lists, the reference check
# ---------------------------------------------------------------------------


PINNED_ENV = "GATHER_PINNED"  # register (default) | torch | freetoken


class PinnedBuffer:
    """One GPU-mapped host allocation of ``nbytes`` whose LAST byte is the last byte of its mapping.

    ``register`` (default): an anonymous mmap rounded up to whole pages, registered with
    ``cudaHostRegister(PORTABLE | MAPPED)`` (the path FreeToken's pin-after-fill banks take), the
    tensor placed so it ends exactly at the end of the registered range, followed by one
    ``PROT_NONE`` page that is never registered: a GPU read one byte past the end faults instead
    of reading a neighbour. ``freetoken``: ``freetoken.kernel.pinned.alloc_pinned_tensor`` (exact
    cudaHostAlloc). ``torch``: ``torch.empty(pin_memory=True)`` (the caching host allocator rounds
    the block up, so the end is not the allocation's end; ``end_exact`` is False).
    """

    def __init__(self, nbytes: int, *, method: str | None = None, guard: bool = True):
        import torch

        self.nbytes = int(nbytes)
        self.method = method or os.environ.get(PINNED_ENV, "register")
        self.fallback_reason: str | None = None
        self._registered: int | None = None
        self._mm: mmap.mmap | None = None
        self.end_exact = False
        if self.method == "host":  # CPU self-test only: same layout, no CUDA registration
            self._init_register(guard, register=False)
            return
        if self.method == "register":
            try:
                self._init_register(guard)
                return
            except Exception as e:  # recorded in the conformance summary
                self.fallback_reason = f"register failed: {e!r}"
                self.method = "torch"
        if self.method == "freetoken":
            from freetoken.kernel.pinned import alloc_pinned_tensor

            self.tensor = alloc_pinned_tensor(self.nbytes, dtype=torch.uint8)
            self.end_exact = True
            return
        if self.method != "torch":
            raise ValueError(f"{PINNED_ENV}={self.method!r}: expected register, freetoken, torch (or host on a CPU)")
        self.tensor = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)

    def _init_register(self, guard: bool, register: bool = True) -> None:
        import torch

        page = mmap.PAGESIZE
        span = align_up(max(self.nbytes, 1), page)
        total = span + (page if guard else 0)
        self._mm = mmap.mmap(
            -1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
        full = torch.frombuffer(self._mm, dtype=torch.uint8)
        base = full.data_ptr()
        if guard:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            if libc.mprotect(base + span, page, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
        if not register:
            self.tensor = full[span - self.nbytes : span]
            self.end_exact = True
            return
        err = int(torch.cuda.cudart().cudaHostRegister(base, span, 3))  # PORTABLE | MAPPED
        if err != 0:
            raise RuntimeError(f"cudaHostRegister({span} B) returned {err}")
        self._registered = base
        lib = cudart()
        if lib is not None:
            dptr = ctypes.c_void_p(0)
            if lib.cudaHostGetDevicePointer(ctypes.byref(dptr), ctypes.c_void_p(base), 0) == 0 and dptr.value != base:
                self.close()
                raise RuntimeError("registered host memory is not GPU-visible at its host address (no UVA identity)")
        self.tensor = full[span - self.nbytes : span]
        self.end_exact = True

    def close(self) -> None:
        """Unregister (after a device sync); views of the buffer must not be used by the GPU afterwards.
        The mmap itself is unmapped when its last view dies (views keep it alive), always after this."""
        import torch

        if self._registered is not None:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaHostUnregister(self._registered)
            self._registered = None
        self.tensor = None

    def __del__(self) -> None:  # never leave a registered range behind an unmapped mmap
        try:
            self.close()
        except Exception:
            pass

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "end_exact": self.end_exact, "fallback_reason": self.fallback_reason}


class HostBanks:
    """``layers`` x ``len(row_bytes)`` host sources ``[experts, row]`` packed in ONE PinnedBuffer, in
    layer-major order, each bank 256-byte aligned, the last layer's last bank ending exactly at the
    end of the allocation; plus a device copy of every source (the reference) and one int64
    ``[num_banks]`` device tensor of source base addresses per layer."""

    def __init__(
        self,
        layers: int,
        experts: int,
        row_bytes: Sequence[int],
        device,
        *,
        seed: int = 0,
        align: int = 256,
        pinned_method: str | None = None,
    ):
        import torch

        self.layers, self.experts, self.row_bytes = layers, experts, list(row_bytes)
        self.device = torch.device(device)
        offsets: list[list[int]] = []
        pos = 0
        for _ in range(layers):
            offsets.append([])
            for r in self.row_bytes:
                pos = align_up(pos, align)
                offsets[-1].append(pos)
                pos += experts * r
        self.total_bytes = pos
        self.buf = PinnedBuffer(pos, method=pinned_method or ("host" if self.device.type == "cpu" else None))
        flat = self.buf.tensor
        self.host = [
            [flat[o : o + experts * r].view(experts, r) for o, r in zip(offs, self.row_bytes)] for offs in offsets
        ]
        self.dev = [
            [torch.empty((experts, r), dtype=torch.uint8, device=self.device) for r in self.row_bytes]
            for _ in range(layers)
        ]
        self.src_ptrs = [
            torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device=self.device) for layer in self.host
        ]
        self.fill(seed)

    @property
    def ends_at_allocation_end(self) -> bool:
        last = self.host[-1][-1]
        return self.buf.end_exact and last.data_ptr() + last.numel() == self.buf.tensor.data_ptr() + self.buf.nbytes

    def fill(self, seed: int) -> None:
        """Fresh random bytes: drawn on the device (fast), then copied into the pinned sources."""
        import torch

        g = torch.Generator(device=self.device)
        g.manual_seed(int(seed))
        for dev_layer, host_layer in zip(self.dev, self.host):
            for d, h in zip(dev_layer, host_layer):
                d.random_(0, 256, generator=g)
                h.copy_(d)
        sync(self.device)

    def typed(self, layer: int, banks: Sequence[BankGeom]) -> dict[str, Any]:
        """Layer ``layer``'s host sources as the nvfp4 schema's typed ``[experts, *shape]`` tensors."""
        return {
            b.name: self.host[layer][k].view(b.torch_dtype()).view(self.experts, *b.shape) for k, b in enumerate(banks)
        }

    @property
    def bytes_per_expert(self) -> int:
        return sum(self.row_bytes)

    def close(self) -> None:
        self.dev = []
        self.host = []
        self.buf.close()


class SlotCache:
    """Per-bank slot caches ``[slots, row]`` uint8, each inside one allocation with a canary region
    before and after; ``dst_ptrs`` is the int64 device descriptor of the slot-cache bases."""

    def __init__(self, slots: int, row_bytes: Sequence[int], device, *, guard: int = 4096, seed: int = 1234):
        import torch

        self.slots, self.row_bytes = slots, list(row_bytes)
        self.device = torch.device(device)
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        self.flat, self.dst, self.guards = [], [], []
        for r in self.row_bytes:
            gb = max(guard, align_up(r, 256))
            flat = torch.empty(gb + slots * r + gb, dtype=torch.uint8, device=self.device)
            flat.random_(0, 256, generator=g)
            self.flat.append(flat)
            self.guards.append(gb)
            self.dst.append(flat[gb : gb + slots * r].view(slots, r))
        self.canary_lo = [f[:gb].clone() for f, gb in zip(self.flat, self.guards)]
        self.canary_hi = [f[-gb:].clone() for f, gb in zip(self.flat, self.guards)]
        self.dst_ptrs = torch.tensor([d.data_ptr() for d in self.dst], dtype=torch.int64, device=self.device)
        self.feat = torch.tensor(self.row_bytes, dtype=torch.int64, device=self.device)

    def poison(self, value: int) -> None:
        for d in self.dst:
            d.fill_(value)

    def guard_error(self) -> str | None:
        import torch

        for b, (f, gb, lo, hi) in enumerate(zip(self.flat, self.guards, self.canary_lo, self.canary_hi)):
            if not torch.equal(f[:gb], lo):
                return f"bank {b}: canary BEFORE the slot cache was overwritten"
            if not torch.equal(f[-gb:], hi):
                return f"bank {b}: canary AFTER the slot cache was overwritten"
        return None

    def snapshot(self) -> list:
        return [f.clone() for f in self.flat]

    def equals_snapshot(self, snap: list) -> bool:
        import torch

        return all(torch.equal(f, s) for f, s in zip(self.flat, snap))

    @property
    def nbytes(self) -> int:
        return self.slots * sum(self.row_bytes)


POISON_CYCLE = (0xA5, 0x5A, 0x00, 0xFF, 0x3C)


def poison_value(i: int, rng=None) -> int:
    """Poison byte of call ``i``: a fixed cycle with a random byte every other call."""
    if rng is not None and i % 2:
        return int(rng.randrange(256))
    return POISON_CYCLE[i % len(POISON_CYCLE)]


def check_slot_cache(cache: SlotCache, poison: int, writes: Sequence[tuple[Any, Any, Sequence[Any]]]) -> str | None:
    """Compare every byte of the slot cache against an independent reference built by torch indexing.

    ``writes`` is a list of ``(slots, rows, sources)`` applied in order (a later write to the same slot
    wins, as a later launch does): ``slots``/``rows`` long tensors (or lists) on the device,
    ``sources[b]`` the device copy of bank ``b``'s source. Everything else must still hold ``poison``;
    the canaries around each bank must be intact. Returns None, or what differs."""
    import torch

    dev = cache.device
    norm = []
    for slots, rows, sources in writes:
        s = torch.as_tensor(slots, device=dev).long().flatten()
        r = torch.as_tensor(rows, device=dev).long().flatten()
        norm.append((s, r, sources))
    for b, d in enumerate(cache.dst):
        exp = torch.full_like(d, poison)
        for s, r, sources in norm:
            if s.numel():
                exp[s] = sources[b][r]
        if not torch.equal(d, exp):
            diff = (d != exp).any(dim=1).nonzero().flatten()
            rows_bad = diff[:8].tolist()
            written = set(torch.cat([s for s, _, _ in norm]).tolist()) if norm else set()
            kinds = ["written" if x in written else "untouched" for x in rows_bad]
            return (
                f"bank {b} ({d.shape[1]} B rows): {diff.numel()} slot rows differ from the reference, "
                f"first {list(zip(rows_bad, kinds))} (poison {poison:#04x})"
            )
    return cache.guard_error()


class MissList:
    """Device miss-list buffers of capacity ``capacity`` that are views into twice-larger buffers whose
    tail holds trap entries (slot ``trap_slot``, row ``trap_row``): a kernel that reads past the
    capacity writes the trap slot, which the whole-cache comparison catches."""

    def __init__(self, capacity: int, dtype: str, device, *, trap_slot: int = 0, trap_row: int = 0):
        import torch

        self.capacity = capacity
        self.dtype = getattr(torch, dtype)
        self.device = torch.device(device)
        self._dst_full = torch.full((2 * capacity + 1,), trap_slot, dtype=self.dtype, device=self.device)
        self._src_full = torch.full((2 * capacity + 1,), trap_row, dtype=self.dtype, device=self.device)
        self.dst = self._dst_full[:capacity]
        self.src = self._src_full[:capacity]
        self.num = torch.zeros(1, dtype=torch.int64, device=self.device)

    def set(self, slots: Sequence[int], rows: Sequence[int], n: int) -> None:
        import torch

        assert len(slots) == len(rows) == self.capacity, (len(slots), len(rows), self.capacity)
        self.dst.copy_(torch.tensor(list(slots), dtype=self.dtype))
        self.src.copy_(torch.tensor(list(rows), dtype=self.dtype))
        self.num.fill_(int(n))


def random_misses(
    rng, capacity: int, n: int, slots: int, experts: int, *, forbid_slot: int | None = None
) -> tuple[list[int], list[int]]:
    """``capacity`` distinct slots and as many source rows (rows may repeat), with slot ``slots-1`` /
    slot 0 at positions 0 / n-1 and row ``experts-1`` / row 0 at positions 0 / n-1, so the first
    ``n`` entries always touch the extreme slots and rows (one of each, at random, when n == 1)."""
    pool = [s for s in range(slots) if s != forbid_slot]
    assert capacity <= len(pool), (capacity, len(pool))
    dst = rng.sample(pool, capacity)
    src = [rng.randrange(experts) for _ in range(capacity)]
    if n <= 0:
        return dst, src
    want_slots = [s for s in (slots - 1, 0) if s != forbid_slot]
    want_rows = [experts - 1, 0]
    positions = [0, n - 1] if n >= 2 else [0]
    if n == 1:
        want_slots = [rng.choice(want_slots)] if want_slots else []
        want_rows = [rng.choice(want_rows)]
    for pos, want in zip(positions, want_slots):
        if want in dst:
            j = dst.index(want)
            dst[pos], dst[j] = dst[j], dst[pos]
        else:
            dst[pos] = want
    for pos, want in zip(positions, want_rows):
        src[pos] = want
    return dst, src


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def cache_rows(cache, name: str):
    """An OffloadMoeCache bank's slot cache as ``[slots, row_bytes]`` uint8 (fp8/fp32 reinterpreted)."""
    import torch

    t = cache.bank_caches[name]
    return t.view(torch.uint8).view(t.shape[0], -1)


def cache_reference_diff(
    cache, dev_of_layer: Callable[[int], Sequence[Any]], banks: Sequence[BankGeom], experts: int
) -> str | None:
    """Check a real OffloadMoeCache against its sources: every resident slot holds its (layer, expert)
    row (``dev_of_layer(layer)[k]`` is the device copy of bank k's source), every empty slot is still
    zero, and ``slot_for_id`` / ``id_of_slot`` agree. Returns None or what is wrong."""
    import torch

    ids = cache.id_of_slot.long()
    resident = (ids >= 0).nonzero().flatten()
    layer_of, expert_of = ids[resident] // experts, ids[resident] % experts
    if not torch.equal(cache.slot_for_id.long()[layer_of, expert_of], resident):
        return "slot_for_id and id_of_slot disagree"
    empty = (ids < 0).nonzero().flatten()
    layers = sorted(set(layer_of.tolist()))
    for k, g in enumerate(banks):
        rows = cache_rows(cache, g.name)
        for layer in layers:
            sel = resident[layer_of == layer]
            if not torch.equal(rows[sel], dev_of_layer(layer)[k][ids[sel] % experts]):
                return f"bank {g.name} layer {layer}: a resident slot differs from its source row"
        if empty.numel() and bool(rows[empty].any()):
            return f"bank {g.name}: an empty slot was written"
    return None


# ---------------------------------------------------------------------------
# The kernels
# ---------------------------------------------------------------------------


def load_kernels():
    """``(decode_gather module, fast_index_copy module)`` from the installed freetoken."""
    from freetoken.kernel import decode_gather as dgm
    from freetoken.kernel import fast_index_copy as fic

    return dgm, fic


def default_ring(dgm) -> Ring:
    return Ring(int(dgm.DEFAULT_CTAS), int(dgm.DEFAULT_STAGES), int(dgm.DEFAULT_CHUNK_BYTES))


def precompile(
    dgm,
    fic,
    rings: Iterable[Ring],
    upstream_blocks: Iterable[int] = (UPSTREAM_BLOCKS_PER_BANK,),
    workers: int = 8,
    progress: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """JIT-build every ring and upstream width in parallel threads (nvcc runs as subprocesses);
    returns {tag: error} for the builds that failed."""
    from concurrent.futures import ThreadPoolExecutor

    jobs: dict[str, Callable[[], Any]] = {}
    for r in dict.fromkeys(rings):
        jobs[f"ring {r.tag}"] = functools.partial(dgm._jit_decode_gather_module, **r.kwargs())
    for b in dict.fromkeys(upstream_blocks):
        jobs[f"upstream {UPSTREAM_THREADS}x{b}"] = functools.partial(
            fic._jit_fast_index_copy_multi_module, num_threads=UPSTREAM_THREADS, blocks_per_bank=b
        )
    errors: dict[str, str] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as ex:
        futs = {name: ex.submit(fn) for name, fn in jobs.items()}
        for name, fut in futs.items():
            try:
                fut.result()
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {str(e)[-400:]}"
            if progress:
                progress(f"built {name}" + (" FAILED" if name in errors else ""))
    if progress:
        progress(f"{len(jobs)} JIT modules ready in {time.perf_counter() - t0:.1f}s ({len(errors)} failed)")
    return errors


class _CountingModule:
    """A JIT module whose ``launch`` bumps a counter of a LaunchCounter."""

    def __init__(self, inner, owner, counter: str):
        self._inner, self._owner, self._counter = inner, owner, counter

    def launch(self, *a, **k):
        setattr(self._owner, self._counter, getattr(self._owner, self._counter) + 1)
        return self._inner.launch(*a, **k)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class LaunchCounter:
    """Counts launches of both JIT modules by wrapping their ``_jit_*_module`` factories (whatever
    Python path reaches them) and, for good measure, calls of the public ``decode_gather_jit``."""

    def __init__(self, dgm, fic):
        self.dgm, self.fic = dgm, fic
        self.decode_gather = 0
        self.upstream = 0
        self.decode_gather_jit_calls = 0
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap_factory(self, mod, attr: str, counter: str) -> None:
        if not hasattr(mod, attr):
            return
        orig = getattr(mod, attr)
        owner = self

        def factory(*a, **k):
            m = orig(*a, **k)
            # unwrap first: nested factories, or a wrapper an lru cache kept from an earlier counter
            while isinstance(m, _CountingModule):
                m = m._inner
            return _CountingModule(m, owner, counter)

        for name in ("cache_info", "cache_clear"):
            if hasattr(orig, name):
                setattr(factory, name, getattr(orig, name))
        self._saved.append((mod, attr, orig))
        setattr(mod, attr, factory)

    def __enter__(self) -> LaunchCounter:
        # the lru-cached factories and the loader under them (a module cached by a caller at
        # construction still goes through one of these first); a module is wrapped once
        for attr in ("_jit_decode_gather_module", "load_decode_gather_module"):
            self._wrap_factory(self.dgm, attr, "decode_gather")
        self._wrap_factory(self.fic, "_jit_fast_index_copy_multi_module", "upstream")
        orig = self.dgm.decode_gather_jit
        owner = self

        @functools.wraps(orig)
        def spy(*a, **k):
            owner.decode_gather_jit_calls += 1
            return orig(*a, **k)

        self._saved.append((self.dgm, "decode_gather_jit", orig))
        self.dgm.decode_gather_jit = spy
        return self

    def __exit__(self, *exc) -> None:
        for mod, attr, orig in reversed(self._saved):
            setattr(mod, attr, orig)
        self._saved.clear()

    def reset(self) -> None:
        self.decode_gather = self.upstream = self.decode_gather_jit_calls = 0


def call_ours(dgm, cache: SlotCache, src_ptrs, dst, src, num, ring: Ring | None = None) -> None:
    """decode_gather_jit on ``cache``'s descriptor; ``ring`` None takes the module defaults."""
    kw = ring.kwargs() if ring is not None else {}
    dgm.decode_gather_jit(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num, **kw)


def call_upstream(
    fic, cache: SlotCache, src_ptrs, dst, src, num, blocks_per_bank: int = UPSTREAM_BLOCKS_PER_BANK
) -> None:
    """Upstream fast_index_copy_multi_jit on the same descriptor (the cache's default grid: 1024 x 8 per bank)."""
    fic.fast_index_copy_multi_jit(
        cache.dst_ptrs,
        src_ptrs,
        cache.feat,
        dst,
        src,
        num,
        num_threads=UPSTREAM_THREADS,
        blocks_per_bank=blocks_per_bank,
    )


# ---------------------------------------------------------------------------
# Device timing
# ---------------------------------------------------------------------------


class DeviceClock:
    """A clock for pytest-benchmark that reads the DEVICE. pytest-benchmark calls its timer in pairs,
    around each target call; the interval between a pair is the device time from an idle GPU to the
    end of the target's work, times ``scale`` (so ``scale = 1 / (replays * layers)`` reports seconds
    per layer). ``last`` is the latest closed interval, scaled.

    The two calls of a pair differ on purpose, so that no host-side wait lands inside the interval:
    the opening call drains the device and only then records its event (the target's first launch
    follows at once); the closing call records its event right behind the target's work, in stream
    order, and only then waits for it. Synchronizing before the closing record would add the host's
    wake-up and event-creation time (tens of microseconds) to every interval measured this way but
    not to :func:`time_replays`, which is what the other kernels of a paired round are timed with."""

    __name__ = "cuda_event_clock"

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self.last: float | None = None
        self._open = None
        self._t = 0.0

    def __call__(self) -> float:
        import torch

        e = torch.cuda.Event(enable_timing=True)
        if self._open is None:
            torch.cuda.synchronize()
            e.record()
            self._open = e
        else:
            e.record()
            e.synchronize()
            self.last = self._open.elapsed_time(e) / 1e3 * self.scale
            self._t += self.last
            self._open = None
        return self._t


def time_replays(run: Callable[[], None], reps: int) -> float:
    """Device seconds of ``reps`` calls of ``run`` (graph replays) between two events, from an idle GPU."""
    import torch

    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        run()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def copy_engine_ceiling(nbytes: int = 256 << 20, reps: int = 10, device="cuda") -> dict[str, Any]:
    """Host->device copy-engine bandwidth: one ``nbytes`` pinned->VRAM copy, median of ``reps``
    event-timed copies, verified word-exact against a device copy of the source."""
    import torch

    buf = PinnedBuffer(nbytes)
    src_dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src_dev.random_(0, 256)
    buf.tensor.copy_(src_dev)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst.copy_(buf.tensor, non_blocking=True)  # warm
    times = []
    for _ in range(reps):
        dst.fill_(0xA5)
        times.append(time_replays(lambda: dst.copy_(buf.tensor, non_blocking=True), 1))
    ok = bool(torch.equal(dst, src_dev))

    def keep_link_busy() -> None:  # ~0.4 s of back-to-back copies while nvidia-smi samples the link
        for _ in range(max(1, int(2e10 // nbytes))):
            dst.copy_(buf.tensor, non_blocking=True)
        torch.cuda.synchronize()

    load = pcie_under_load(keep_link_busy)
    med = statistics.median(times)
    buf.close()
    return {
        "bytes": nbytes,
        "reps": reps,
        "seconds": times,
        "median_s": med,
        "gbps": nbytes / med / 1e9,
        "verified": ok,
        "pinned": buf.describe(),
        **load,
    }


def reps_for(target_s: float, est_s: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(target_s / max(est_s, 1e-9)))))
