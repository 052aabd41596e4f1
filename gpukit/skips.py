"""Why a GPU path cannot run here: the one wording of each reason, for skips and for errors."""

from __future__ import annotations

NO_TORCH = "torch is not importable ({error}): the GPU paths need torch with CUDA"
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
ROCM = "ROCm build: the decode-gather TMA path is CUDA-only"


def cuda_skip_reason() -> str | None:
    """None where a CUDA device is usable through torch, else the reason it is not."""
    try:
        import torch
    except ImportError as e:
        return NO_TORCH.format(error=e)
    if getattr(torch.version, "hip", None):
        return ROCM
    if not torch.cuda.is_available():
        return NO_CUDA
    return None
