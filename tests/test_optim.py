"""Optimizers and schedules against the formulas of model.md §2, computed by hand in numpy."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from optim_references import optimizer_step_ops, torch_adafactor

from c4forge.errors import ConfigError
from c4forge.trainers.adafactor import Adafactor
from c4forge.trainers.optim import (
    AdamWScale,
    build_optimizer,
    schedule_note,
    set_lr,
)
from c4forge.trainers.schedules import COSINE_MIN_LR, schedule_fn

EPS32 = float(np.finfo(np.float32).eps)


def _params(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(5, 4, generator=g) * 0.3),
        torch.nn.Parameter(torch.randn(6, generator=g) * 1e-4),  # RMS below ε₂ = 1e-3
    ]


def _grads(step: int):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(5, 4, generator=g), torch.randn(6, generator=g)]


def _run(opt, params, steps, lrs=None):
    for t in range(1, steps + 1):
        if lrs is not None:
            set_lr(opt, lrs[t - 1])
        for p, g in zip(params, _grads(t)):
            p.grad = g.clone()
        opt.step()


# --- Adafactor (§2.1) ---------------------------------------------------------------------------


def adafactor_by_hand(theta, steps, lrs):
    """T5's Adafactor: β₂,t = 1 − t^−0.8, factored second moments (means), V̂ = R·C / mean(R),
    update clipping at RMS 1, relative step ρ_t = min(lr, 1/√t), scaling max(1e-3, RMS(θ)).
    ε₁ is torch's: dtype eps as a floor on V̂ (ε₁²) and on mean(R)."""
    theta = [t.detach().double().numpy().copy() for t in theta]
    state: list[dict] = [{} for _ in theta]
    for t in range(1, steps + 1):
        beta = 1.0 - t**-0.8
        rho = min(lrs[t - 1], 1.0 / math.sqrt(t))
        for i, g in enumerate(_grads(t)):
            g = g.double().numpy()
            p, s = theta[i], state[i]
            alpha = max(1e-3, math.sqrt(np.mean(p**2))) * rho
            if g.ndim == 2:
                s["r"] = beta * s.get("r", 0.0) + (1 - beta) * np.mean(g**2, axis=1, keepdims=True)
                s["c"] = beta * s.get("c", 0.0) + (1 - beta) * np.mean(g**2, axis=0, keepdims=True)
                v = s["r"] @ s["c"] / max(np.mean(s["r"]), EPS32)
            else:
                s["v"] = beta * s.get("v", 0.0) + (1 - beta) * g**2
                v = s["v"]
            u = g / np.sqrt(np.maximum(v, EPS32**2))
            u = u / max(1.0, math.sqrt(np.mean(u**2)) / 1.0)
            theta[i] = p - alpha * u
    return theta


@pytest.mark.parametrize("schedule", ["constant", "isr"])
def test_adafactor_matches_t5_formulas(schedule):
    steps = 4
    lrs = [1e-2] * steps if schedule == "constant" else [0.3 / math.sqrt(t) for t in range(1, 5)]
    params = _params()
    expected = adafactor_by_hand(params, steps, lrs)
    opt = build_optimizer("adafactor", params)
    _run(opt, params, steps, lrs)
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.detach().double().numpy(), e, rtol=1e-5, atol=1e-9)


def test_adafactor_lr_is_a_cap_on_the_relative_step():
    """ρ_t = min(lr, 1/√t): a huge lr acts like 1/√t, so it gives the same result as lr = 1."""
    a, b = _params(), _params()
    _run(build_optimizer("adafactor", a), a, 3, [100.0] * 3)
    _run(build_optimizer("adafactor", b), b, 3, [1.0] * 3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert schedule_note("adafactor", "cosine") and "capped" in schedule_note("adafactor", "cosine")
    assert schedule_note("adafactor", "isr_decay") is None
    assert schedule_note("adamwscale", "cosine") is None


# shapes of a model (matrices, a 3-D tensor, vectors, 1-row / 1-column matrices, repeats that
# share a stack) for comparing the sync-free Adafactor with torch's
SHAPES = [(5, 4), (5, 4), (6,), (3, 7, 5), (64, 32), (1, 9), (9, 1), (128,), (6,)]


def _model_params(seed: int = 1) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g) * 0.1) for s in SHAPES]


def _lockstep(opts_params, steps: int, lr_of) -> float:
    """Step every optimizer on the same gradients; the largest parameter difference between the
    first and the others, relative to the parameter's largest magnitude, over all steps."""
    worst = 0.0
    for t in range(1, steps + 1):
        g = torch.Generator().manual_seed(1000 + t)
        grads = [torch.randn(s, generator=g) * (1 + t % 7) for s in SHAPES]
        grads[-1].zero_()  # a parameter that sees no gradient (an unused embedding row)
        for opt, params in opts_params:
            set_lr(opt, lr_of(t))
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            opt.step()
        ref = opts_params[0][1]
        for _, params in opts_params[1:]:
            for a, b in zip(ref, params):
                worst = max(worst, float((a - b).abs().max() / a.abs().max()))
    return worst


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_sync_free_adafactor_matches_torch_over_many_steps(weight_decay):
    """300 steps, an ISR schedule above the 1/√t cap then under it: within 2e-6 of torch's
    (fp32 rounding of reordered products; measured 3e-7)."""
    ref = _model_params()
    ours = _model_params()
    opts = [
        (torch_adafactor(ref, weight_decay=weight_decay), ref),
        (build_optimizer("adafactor", ours, weight_decay=weight_decay), ours),
    ]
    assert isinstance(opts[1][0], Adafactor)
    assert _lockstep(opts, 300, lambda t: 0.3 / math.sqrt(t) if t < 150 else 1e-3) < 2e-6
    # same state keys and shapes as torch's, so checkpoints of either resume with the other
    for p_ref, p_ours in zip(ref, ours):
        s_ref, s_ours = opts[0][0].state[p_ref], opts[1][0].state[p_ours]
        assert {k: tuple(v.shape) for k, v in s_ref.items()} == {
            k: tuple(v.shape) for k, v in s_ours.items()
        }
        assert float(s_ref["step"]) == float(s_ours["step"]) == 300.0


def test_sync_free_adafactor_resumes_from_torch_state():
    """torch's state dict loaded into the sync-free optimizer continues torch's trajectory."""
    ref, ours = _model_params(), _model_params()
    torch_opt = torch_adafactor(ref)
    _lockstep([(torch_opt, ref)], 5, lambda t: 1e-2)
    with torch.no_grad():
        for a, b in zip(ours, ref):
            a.copy_(b)
    ours_opt = Adafactor(ours)
    # a copy: load_state_dict keeps tensors that already fit, which would share the state
    ours_opt.load_state_dict(copy.deepcopy(torch_opt.state_dict()))
    assert all(ours_opt.state[p]["step"].device == p.device for p in ours)
    assert _lockstep([(torch_opt, ref), (ours_opt, ours)], 20, lambda t: 1e-2) < 2e-6


def test_sync_free_adafactor_reads_nothing_back_on_t5_small():
    """One step over T5 ``small``'s 190 tensors: no scalar read back to the host and at most 600
    top-level ops (torch's foreach Adafactor: 1,900 reads, 1,994 ops). The embedding is cut to
    128 rows: the counts depend on the tensors and their shapes, not on their sizes."""
    from c4forge.trainers.config import make_config
    from c4forge.trainers.models.t5 import GLUTransformer

    torch.manual_seed(0)
    params = list(GLUTransformer(make_config("small", 128)).parameters())
    assert len(params) == 190
    count = optimizer_step_ops(build_optimizer("adafactor", params), params)
    assert count.host_reads == 0, count.line()
    assert count.top_level <= 600, count.line()
    reference = optimizer_step_ops(torch_adafactor(params), params)
    assert reference.host_reads >= 1900  # the counter sees the reads it is meant to catch


# --- AdamWScale (§2.2) ----------------------------------------------------------------------


def adamwscale_by_hand(theta, steps, lr, wd, b1=0.9, b2=0.999, eps=1e-6):
    theta = [t.detach().double().numpy().copy() for t in theta]
    m = [np.zeros_like(p) for p in theta]
    v = [np.zeros_like(p) for p in theta]
    for t in range(1, steps + 1):
        for i, g in enumerate(_grads(t)):
            g = g.double().numpy()
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            scale = max(1e-3, math.sqrt(np.mean(theta[i] ** 2)))
            step = lr * math.sqrt(1 - b2**t) / (1 - b1**t) * scale
            theta[i] = theta[i] - step * m[i] / (np.sqrt(v[i]) + eps)
            theta[i] = theta[i] - lr * wd * theta[i]
    return theta


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_adamwscale_matches_formula(wd):
    params = _params()
    expected = adamwscale_by_hand(params, 4, lr=2e-2, wd=wd)
    opt = build_optimizer("adamwscale", params, weight_decay=wd)
    assert isinstance(opt, AdamWScale) and opt.param_groups[0]["lr"] == 2e-2
    _run(opt, params, 4)
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.detach().double().numpy(), e, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("name", ["adafactor", "adamwscale"])
def test_state_dict_round_trip_resumes_exactly(name):
    """k steps + save + load into a fresh optimizer + k steps == 2k steps (bitwise)."""
    from safetensors.torch import load, save

    ref = _params()
    _run(build_optimizer(name, ref), ref, 4, [1e-2] * 4)

    params = _params()
    opt = build_optimizer(name, params)
    _run(opt, params, 2, [1e-2] * 2)
    sd = opt.state_dict()
    # every state value is a tensor, so the trainer can store "<param>.<key>" in safetensors
    flat = {f"{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items()}
    assert flat and all(isinstance(v, torch.Tensor) for v in flat.values())
    flat = load(save(flat))
    restored = {"state": {}, "param_groups": sd["param_groups"]}
    for key, value in flat.items():
        i, k = key.split(".", 1)
        restored["state"].setdefault(int(i), {})[k] = value
    resumed = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = build_optimizer(name, resumed)
    opt2.load_state_dict(restored)
    for t in (3, 4):
        set_lr(opt2, 1e-2)
        for p, g in zip(resumed, _grads(t)):
            p.grad = g.clone()
        opt2.step()
    for a, b in zip(resumed, ref):
        assert torch.equal(a, b)


def test_unknown_optimizer():
    with pytest.raises(ConfigError, match="adafactor, adamwscale"):
        build_optimizer("adam", _params())


# --- schedules (§2.3) -------------------------------------------------------------------------


def test_isr():
    r = schedule_fn("isr", 100_000)
    assert r(1) == r(10_000) == pytest.approx(0.01)
    assert r(40_000) == pytest.approx(0.005)


def test_isr_decay_reaches_zero_at_n():
    n_total = 65_536
    r = schedule_fn("isr_decay", n_total)
    n0 = math.floor(0.9 * n_total)  # 58982
    assert r(n0) == pytest.approx(1 / math.sqrt(n0))
    assert n_total - n0 == 6554
    assert r(n0 + 3277) == pytest.approx(r(n0) * 0.5)  # linear: half-way down at half the tail
    assert r(n_total) == 0.0
    values = [r(n) for n in range(n0, n_total + 1, 97)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert all(r(n) <= 1 / math.sqrt(n) for n in (1, 5000, n0, n_total - 1))  # never capped
    short = schedule_fn("isr_decay", 10)  # short runs: ISR 0.01, then to 0 over the last step
    assert short(9) == pytest.approx(0.01) and short(10) == 0.0


def test_cosine_and_constant():
    lr, n_total, w = 2e-2, 65_536, 10_000
    r = schedule_fn("cosine", n_total, warmup=w, lr=lr)
    assert r(0) == pytest.approx(0.5 * lr)
    assert r(w // 2) == pytest.approx(0.75 * lr)
    assert r(w) == pytest.approx(lr)
    mid = w + (n_total - w) // 2
    assert r(mid) == pytest.approx(COSINE_MIN_LR + (lr - COSINE_MIN_LR) / 2)
    assert r(n_total) == pytest.approx(COSINE_MIN_LR)
    assert schedule_fn("constant", 10, lr=3e-3)(7) == 3e-3
    with pytest.raises(ConfigError, match="isr, isr_decay, cosine, constant, linear"):
        schedule_fn("polynomial", 10)
    with pytest.raises(ConfigError, match="learning rate"):
        schedule_fn("cosine", 10)


def test_bert_linear_warmup_then_linear_decay():
    r = schedule_fn("linear", 100, warmup=10, lr=1e-3)
    assert r(5) == pytest.approx(5e-4) and r(10) == pytest.approx(1e-3)  # warm-up from 0
    assert r(55) == pytest.approx(5e-4) and r(100) == 0.0  # linear to 0 at N
    values = [r(n) for n in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert schedule_fn("linear", 5, warmup=0, lr=1e-3)(1) == pytest.approx(8e-4)


def test_bert_adamw_decays_weights_not_biases_or_layernorm():
    from c4forge.trainers.optim import weight_decay_groups

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("dense", torch.nn.Linear(4, 4))
    model.add_module("LayerNorm", torch.nn.LayerNorm(4))
    groups = weight_decay_groups(model.named_parameters())
    assert [len(g["params"]) for g in groups] == [1, 3]  # dense.weight | bias, LN weight+bias
    assert groups[0]["params"][0] is model.dense.weight
    opt = build_optimizer("adamw", groups, lr=1e-2)
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert all(g["eps"] == 1e-6 and g["betas"] == (0.9, 0.999) for g in opt.param_groups)
    before = model.LayerNorm.weight.detach().clone()
    model(torch.randn(2, 4)).sum().backward()
    model.LayerNorm.weight.grad.zero_()  # zero gradient: only decay could move it
    weight = model.dense.weight.detach().clone()
    model.dense.weight.grad.zero_()
    opt.step()
    assert torch.equal(model.LayerNorm.weight, before)  # not decayed
    assert torch.allclose(model.dense.weight, weight * (1 - 1e-2 * 0.01))  # decayed
