"""Machine facts for every result file: device, PCIe link (idle and under load), driver, torch/CUDA,
nvcc, freetoken (the provenance of the patched tree is the document's own: ``suite.results``)."""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
import threading
import time
from typing import Any, Callable, Sequence

from freetoken_overlay.toolchain import find_nvcc
from gpukit.runtime import versions as cuda_versions
from suite.results import device_slug, freetoken_version


def _run(cmd: Sequence[str], timeout: float = 20.0) -> str | None:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def nvidia_smi(gpu_id: str | None = None) -> dict[str, Any]:
    """Driver, PCIe link generation/width (current and max) of one GPU, from nvidia-smi."""
    fields = ["name", "driver_version", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max",
              "pcie.link.width.max"]  # fmt: skip
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
    return dict(zip(["smi_name", "driver", "pcie_gen_current", "pcie_width_current", "pcie_gen_max", "pcie_width_max"],
                    vals))  # fmt: skip


def nvcc_version() -> str | None:
    """The release of the nvcc ``freetoken_overlay.toolchain`` finds (the one the SASS gate uses)."""
    exe = find_nvcc()
    out = _run([exe, "--version"]) if exe else None
    if not out:
        return None
    m = re.search(r"release\s+([\d.]+)", out)
    return m.group(1) if m else out.splitlines()[-1]


def decode_gather_defaults() -> dict[str, Any] | None:
    try:
        from freetoken.kernel import decode_gather
    except Exception:
        return None
    names = {"ctas": "DEFAULT_CTAS", "stages": "DEFAULT_STAGES", "chunk_bytes": "DEFAULT_CHUNK_BYTES",
             "max_banks": "MAX_BANKS"}  # fmt: skip
    return {k: getattr(decode_gather, attr, None) for k, attr in names.items()}


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
            info.update(device_name=p.name, device_slug=device_slug(), capability=f"{p.major}.{p.minor}",
                        sm_count=p.multi_processor_count, total_memory_bytes=p.total_memory, **cuda_versions())
    info.update(nvidia_smi(gpu_smi_id() if torch is not None and torch.cuda.is_available() else None))
    info.update(nvcc=nvcc_version(), freetoken=freetoken_version(), decode_gather_defaults=decode_gather_defaults())
    return info


def pcie_under_load(work: Callable[[], None]) -> dict[str, Any]:
    """nvidia-smi's link gen/width sampled while ``work`` keeps the link busy (an idle link may
    report a power-saving lower generation)."""
    result: dict[str, Any] = {}

    def sample() -> None:
        time.sleep(0.05)
        if d := nvidia_smi(gpu_smi_id()):
            result["pcie_gen_under_load"] = d.get("pcie_gen_current")
            result["pcie_width_under_load"] = d.get("pcie_width_current")

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    work()
    th.join(timeout=30)
    return result
