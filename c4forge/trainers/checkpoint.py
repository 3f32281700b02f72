"""Checkpoints (model.md §7): safetensors weights and optimizer state, JSON trainer state.

```
RUN/checkpoints/step-00000100/{model,optimizer}.safetensors, trainer_state.json, config.json
RUN/checkpoints/latest        names the newest complete checkpoint directory
```

Written into ``step-XXXXXXXX.tmp-<pid>/``, fsynced, renamed, then ``latest`` is replaced
atomically, so a crash leaves either the old or the new checkpoint, never half of one. Loading
uses safetensors only (no pickle): ``torch.load`` is never called. ``trainer_state.json`` records
the sha256 of both tensor files, so a truncated or bit-flipped checkpoint is refused with its
path instead of silently restarting or resuming from garbage.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
from typing import Any

import torch

from c4forge.errors import InputError, VerificationError
from c4forge.io.storage import (
    atomic_write_text,
    check_format,
    chmod_as_created,
    read_json,
    sha256,
    write_json,
)

FORMAT = "c4forge.trainer_state"
FORMAT_VERSION = 1
CHECKPOINTS = "checkpoints"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


_DEBRIS = re.compile(r"^(step-\d{8,}\.tmp-\d+|latest\.tmp-\d+-[0-9a-f]{8})$")


def remove_debris(run_dir: str) -> list[str]:
    """Delete what a killed ``save_checkpoint`` left in ``checkpoints/`` (a ``step-N.tmp-PID``
    folder, a ``latest`` temporary); returns their names. Only the run that holds the run
    folder calls it, so no live writer of them exists."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    found = sorted(n for n in os.listdir(root) if _DEBRIS.match(n))
    for name in found:
        path = os.path.join(root, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    return found


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS)


def list_checkpoints(run_dir: str) -> list[str]:
    """Complete checkpoint directories (renamed, not ``.tmp-``), oldest first."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    names = sorted(n for n in os.listdir(root) if _STEP_DIR.match(n))
    return [os.path.join(root, n) for n in names]


def latest_checkpoint(run_dir: str) -> str | None:
    """The directory ``latest`` names; None when the run has no checkpoint yet."""
    pointer = os.path.join(checkpoints_dir(run_dir), LATEST)
    if not os.path.exists(pointer):
        return None
    with open(pointer, encoding="utf-8") as f:
        name = f.read().strip()
    path = os.path.join(checkpoints_dir(run_dir), name)
    if not _STEP_DIR.match(name) or not os.path.isdir(path):
        raise VerificationError(f"{pointer}: names {name!r}, which is not a checkpoint directory")
    return path


def resolve_checkpoint(path: str) -> str:
    """A step directory from a run dir, its ``checkpoints/`` dir, or a step dir itself."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such run or checkpoint")
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    for ckpt_dir in (os.path.join(path, CHECKPOINTS), path):
        latest = os.path.join(ckpt_dir, LATEST)
        if os.path.isfile(latest):
            with open(latest, encoding="utf-8") as f:
                name = f.read().strip()
            if not name:
                raise VerificationError(f"{latest}: empty (no complete checkpoint recorded)")
            if not _STEP_DIR.match(name):  # an absolute path, ../, a subfolder: not followed
                raise VerificationError(
                    f"{latest}: names {name!r}, which is not a step-NNNNNNNN folder inside "
                    f"{ckpt_dir}"
                )
            step_dir = os.path.join(ckpt_dir, name)
            if not os.path.isfile(os.path.join(step_dir, "model.safetensors")):
                raise VerificationError(
                    f"{latest} names {name!r}, but {step_dir} has no model.safetensors"
                )
            return step_dir
    raise InputError(
        f"{path}: not a run (no checkpoints/latest) nor a checkpoint (no model.safetensors)"
    )


def read_model_tensors(
    step_dir: str, shapes: dict[str, tuple[int, ...]]
) -> tuple[dict[str, torch.Tensor], str]:
    """fp32 tensors of ``step_dir/model.safetensors``, checked name by name and shape by shape
    against ``shapes`` (the state-dict shapes of the model its config.json describes), and the
    sha256 of the bytes they were loaded from: checked against ``trainer_state.json``'s record
    before use, so a bit-flipped or replaced file is refused (export, fine-tuning, evaluation),
    and what a results file records is what was read, not what was expected."""
    path = os.path.join(step_dir, "model.safetensors")
    tensors, digest = read_verified_tensors(step_dir, "model.safetensors")
    missing = sorted(set(shapes) - set(tensors))
    unexpected = sorted(set(tensors) - set(shapes))
    if missing or unexpected:
        raise VerificationError(
            f"{path}: does not match its config.json — missing {missing[:5]}"
            f"{'…' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
        )
    for name, shape in shapes.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise VerificationError(
                f"{path}: {name} has shape {tuple(tensors[name].shape)}, config says {shape}"
            )
    return {k: v.float().contiguous() for k, v in tensors.items()}, digest


def recorded_sha256(step_dir: str, name: str) -> str | None:
    """The sha256 ``trainer_state.json`` records for ``name``; None when the checkpoint has no
    trainer state (a bare exported step folder) or it records no such file."""
    state_path = os.path.join(step_dir, "trainer_state.json")
    if not os.path.isfile(state_path):
        return None
    try:
        state = read_json(state_path)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise VerificationError(f"{state_path}: corrupt checkpoint state ({err})") from err
    files = state.get("files") if isinstance(state, dict) else None
    if files is None:
        return None
    digest = files.get(name) if isinstance(files, dict) else None
    if digest is not None and not isinstance(digest, str):
        raise VerificationError(f"{state_path}: malformed files record for {name}")
    return digest


def read_verified_tensors(step_dir: str, name: str) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of ``step_dir/name`` and the sha256 of exactly the bytes they come from
    (one read: the bytes are hashed, compared with the recorded sha256, then parsed)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = os.path.join(step_dir, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise VerificationError(f"{path}: unreadable checkpoint file ({err})") from err
    digest = hashlib.sha256(data).hexdigest()
    recorded = recorded_sha256(step_dir, name)
    if recorded is not None and recorded != digest:
        raise VerificationError(
            f"{path}: corrupt checkpoint (sha256 {digest}, trainer_state.json says {recorded})"
        )
    try:
        return load(data), digest
    except (SafetensorError, ValueError) as err:
        raise VerificationError(f"{path}: unreadable safetensors file ({err})") from err


# ----------------------------------------------------------------------------- RNG state


def rng_state() -> dict[str, Any]:
    """torch CPU and per-device CUDA generator states, base64 (no dropout today; kept for exactness)."""
    state = {"torch_cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = [
            base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()
        ]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    def decode(text: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    if "torch_cpu" in state:
        torch.set_rng_state(decode(state["torch_cpu"]))
    cuda = state.get("torch_cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([decode(s) for s in cuda])


# ----------------------------------------------------------------------------- tensors


def model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """fp32 CPU copies of the weights under HF names; an aliased tensor is stored once."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=False).items():
        key = tensor.data_ptr()
        if key in seen:  # e.g. encoder.embed_tokens aliasing shared: keep the first name
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu", torch.float32).contiguous().clone()
    return out


def optimizer_tensors(
    optimizer: torch.optim.Optimizer, param_names: dict[int, str]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Flatten the optimizer state to ``"<param name>.<state key>"`` tensors plus JSON groups.

    Python scalars in the state become 0-d tensors (their type is recorded so loading gives back
    exactly the same object); ``param_groups`` hyper-parameters go to JSON.
    """
    sd = optimizer.state_dict()
    index_to_name: dict[int, str] = {}
    flat = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            index_to_name[flat] = param_names[id(p)]
            flat += 1
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, str] = {}
    for idx, state in sd["state"].items():
        name = index_to_name[idx]
        for key, value in state.items():
            full = f"{name}.{key}"
            if isinstance(value, torch.Tensor):
                tensors[full] = value.detach().to("cpu").contiguous().clone()
            elif isinstance(value, bool | int | float):
                kind = type(value).__name__
                dtype = torch.float64 if kind == "float" else torch.int64
                tensors[full] = torch.tensor(value, dtype=dtype)
                scalars[full] = kind
            else:
                raise TypeError(f"optimizer state {full} has unsupported type {type(value)}")
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
        for g in sd["param_groups"]
    ]
    return tensors, {"param_groups": groups, "python_scalars": scalars}


def _load_optimizer(
    optimizer: torch.optim.Optimizer,
    param_names: dict[int, str],
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    path: str,
) -> None:
    current = optimizer.state_dict()
    by_name = {}
    flat = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            by_name[param_names[id(p)]] = flat
            flat += 1
    scalars = meta.get("python_scalars", {})
    state: dict[int, dict[str, Any]] = {}
    # longest parameter name first, so "a.b.weight.step" never matches a shorter prefix "a.b"
    names = sorted(by_name, key=len, reverse=True)
    for full, tensor in tensors.items():
        owner = next((n for n in names if full.startswith(n + ".")), None)
        if owner is None:
            raise VerificationError(f"{path}: optimizer tensor {full} belongs to no parameter")
        key = full[len(owner) + 1 :]
        value: Any = tensor
        if full in scalars:
            value = {"float": float, "int": int, "bool": bool}[scalars[full]](tensor.item())
        state.setdefault(by_name[owner], {})[key] = value
    groups = current["param_groups"]
    saved = meta.get("param_groups", [])
    if len(saved) != len(groups):
        raise VerificationError(
            f"{path}: {len(saved)} optimizer parameter groups, this run has {len(groups)}"
        )
    for g, s in zip(groups, saved):
        for k, v in s.items():
            if k in g:
                g[k] = tuple(v) if isinstance(g[k], tuple) else v
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def param_name_map(model: torch.nn.Module) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- save / load


def save_checkpoint(
    run_dir: str,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    model_config: dict[str, Any],
    keep: int = 3,
) -> str:
    """Write checkpoint ``step`` atomically, point ``latest`` at it, prune to ``keep``."""
    root = checkpoints_dir(run_dir)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, step_dir_name(step))
    tmp = f"{final}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    weights = model_tensors(model)
    opt_tensors, opt_meta = optimizer_tensors(optimizer, param_name_map(model))
    model_path = os.path.join(tmp, "model.safetensors")
    opt_path = os.path.join(tmp, "optimizer.safetensors")
    save_tensors(weights, model_path)
    save_tensors(opt_tensors, opt_path)
    state = dict(trainer_state)
    state.update(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        step=step,
        optimizer_meta=opt_meta,
        files={
            "model.safetensors": sha256(model_path),
            "optimizer.safetensors": sha256(opt_path),
        },
    )
    write_json(os.path.join(tmp, "config.json"), model_config)
    write_json(os.path.join(tmp, "trainer_state.json"), state)
    for name in os.listdir(tmp):
        with open(os.path.join(tmp, name), "rb") as f:
            os.fsync(f.fileno())
    if os.path.exists(final):  # a rerun of the same step (after a resume): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    atomic_write_text(os.path.join(root, LATEST), os.path.basename(final) + "\n")
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_tensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    """A safetensors file with the mode of every other file of the run (safetensors writes
    0600; ``chmod_as_created`` applies the umask as ``open`` would)."""
    from safetensors.torch import save_file

    save_file(tensors, path, metadata={"format": "pt"})
    chmod_as_created(path)


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_trainer_state(path: str) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint, with the checksums of its tensor files verified."""
    state_path = os.path.join(path, "trainer_state.json")
    try:
        state = read_json(state_path)
    except FileNotFoundError as err:
        raise VerificationError(
            f"{path}: not a complete checkpoint (no trainer_state.json)"
        ) from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise VerificationError(f"{state_path}: corrupt checkpoint state ({err})") from err
    check_format(state, state_path, FORMAT, (FORMAT_VERSION,))
    for name, digest in state.get("files", {}).items():
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise VerificationError(f"{file}: missing from checkpoint {path}")
        found = sha256(file)
        if found != digest:
            raise VerificationError(
                f"{file}: corrupt checkpoint (sha256 {found}, trainer_state.json says {digest})"
            )
    return state


def _read_tensors(path: str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise VerificationError(f"{path}: unreadable safetensors file ({err})") from err


def load_checkpoint(
    path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict[str, Any]:
    """Load weights (and optimizer state) into existing objects; return the trainer state."""
    state = read_trainer_state(path)
    weights = _read_tensors(os.path.join(path, "model.safetensors"))
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if missing or unexpected:
        raise VerificationError(
            f"{path}/model.safetensors does not fit this model: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    for k, v in weights.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise VerificationError(
                f"{path}/model.safetensors: {k} has shape {tuple(v.shape)}, "
                f"model expects {tuple(expected[k].shape)}"
            )
    model.load_state_dict(weights, strict=True)
    if optimizer is not None:
        tensors = _read_tensors(os.path.join(path, "optimizer.safetensors"))
        _load_optimizer(optimizer, param_name_map(model), tensors, state["optimizer_meta"], path)
    restore_rng_state(state.get("rng", {}))
    return state


# ----------------------------------------------------------------------------- trainer state


def versions() -> dict[str, str]:
    """The library versions a checkpoint was written with (recorded, never checked)."""
    import numpy
    import pyarrow

    from c4forge import __version__

    return {
        "c4forge": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def trainer_state(
    step: int,
    batch_size: int,
    row_tokens: int,
    nonpad_tokens: int,
    training: dict[str, Any],
    total_steps: int,
    lr_now: float,
    config: dict[str, Any],
    log_window: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``trainer_state.json`` of checkpoint ``step`` before ``save_checkpoint`` adds the file
    checksums: the position in the data, the schedule, the RNG and the run's ``config``
    (``lr_now``: the schedule's value at ``max(step, 1)``). ``log_window``: the sums of the
    metrics window still open at ``step`` (``metrics.LogWindow.to_state``), so a resumed run
    logs the same averages as an uninterrupted one; absent when the save fell on a log step."""
    state = {
        "examples": step * batch_size,
        "tokens": step * batch_size * row_tokens,
        "nonpad_tokens": nonpad_tokens,
        "schedule": {
            "name": training["schedule"],
            "total_steps": total_steps,
            "warmup": training["warmup"],
            "lr": training["lr"],
            "value": lr_now,
        },
        "data": {"position_step": step, "global_rows_consumed": step * batch_size},
        "rng": rng_state(),
        "config": config,
        "versions": versions(),
    }
    if log_window is not None:
        state["log_window"] = log_window
    return state
