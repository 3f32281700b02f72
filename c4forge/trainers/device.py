"""Which device a run uses, its precision settings and its peak FLOP/s (model.md §4, §6).

``--device auto`` picks CUDA, then XLA (torch_xla, imported lazily so the package works without
it), then the CPU. Asking for a device that is not there is a clear error, never a silent
fallback. CUDA gets bf16 autocast and TF32 matmuls; XLA bf16 autocast; the CPU stays fp32 (the
exact-resume reference).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass

import torch

from c4forge.errors import ConfigError
from c4forge.trainers.flops import device_peak
from c4forge.trainers.options import DEVICES


def xla_available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


@dataclass
class DeviceInfo:
    device: torch.device
    kind: str  # "cpu" | "cuda" | "xla"
    name: str
    peak_flops: float | None  # per device, in the training precision; None when unknown

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.kind in ("cuda", "xla") else None

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.kind, dtype=self.autocast_dtype)


def resolve_device(request: str, local_rank: int = 0) -> DeviceInfo:
    """Turn ``--device`` into a DeviceInfo; set TF32 on CUDA."""
    if request not in DEVICES:
        raise ConfigError(f"unknown --device {request!r}; valid: {', '.join(DEVICES)}")
    if request == "auto":
        if torch.cuda.is_available():
            request = "cuda"
        elif xla_available():
            request = "xla"
        else:
            request = "cpu"
    if request == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no visible GPU"
            raise ConfigError(
                f"--device cuda: CUDA is not available ({build}, torch {torch.__version__}); "
                "use --device cpu or auto"
            )
        torch.cuda.set_device(local_rank)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
        name = torch.cuda.get_device_name(local_rank)
        peak = device_peak(name)
        return DeviceInfo(torch.device("cuda", local_rank), "cuda", name, peak)
    if request == "xla":
        if not xla_available():
            raise ConfigError("--device xla: torch_xla is not installed")
        import torch_xla

        dev = torch_xla.device()
        name = os.environ.get("TPU_ACCELERATOR_TYPE", "xla")  # e.g. "v5litepod-8"
        name = (
            name.replace("v5litepod", "TPU v5e").replace("v5p", "TPU v5p").replace("v4", "TPU v4")
        )
        return DeviceInfo(dev, "xla", name, device_peak(name))
    return DeviceInfo(torch.device("cpu"), "cpu", "cpu", None)


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the RuntimeErrors the CPU and XLA allocators raise."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text or "resource_exhausted" in text
    )
