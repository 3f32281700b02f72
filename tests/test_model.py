"""The GLU-Transformer (model.md §1, §4): config, shapes, masks, numerics, FLOPs, HF agreement."""

from __future__ import annotations

import math

import pytest
import torch

from c4forge.errors import ConfigError
from c4forge.trainers.config import FFN_VARIANTS, PRESETS, ModelConfig, make_config
from c4forge.trainers.data import decoder_input_tokens
from c4forge.trainers.flops import device_peak, flops_per_example, mfu, param_counts
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.models.t5 import GLUTransformer, relative_position_bucket

E = 1024  # a small test vocabulary (the tiny preset's intended use)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and spin-waiting threads are 10x slower
    when the cores are shared (CI runs tests in parallel)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(**kw) -> GLUTransformer:
    torch.manual_seed(0)
    return GLUTransformer(make_config("tiny", E, **kw))


def packed_batch(seed: int = 0):
    """Two rows: row 0 packs two examples and trailing padding, row 1 is one full example."""
    g = torch.Generator().manual_seed(seed)
    enc_seg = torch.tensor([[1] * 20 + [2] * 20 + [0] * 8, [1] * 48])
    dec_seg = torch.tensor([[1] * 8 + [2] * 6 + [0] * 2, [1] * 16])
    inputs = torch.randint(3, E, enc_seg.shape, generator=g) * (enc_seg != 0)
    targets = torch.randint(3, E, dec_seg.shape, generator=g) * (dec_seg != 0)
    return inputs, targets, enc_seg, dec_seg


# --- config ------------------------------------------------------------------------------------


def test_two_thirds_rule_and_explicit_d_ff():
    assert make_config("base", 32128, ffn="relu").d_ff == 3072
    assert make_config("base", 32128, ffn="geglu").d_ff == 2048
    assert make_config("small", 32128, ffn="swiglu").d_ff == 1024
    assert make_config("tiny", E, ffn="glu").d_ff == 256
    assert make_config("base", 32128, ffn="geglu", d_ff=3000).d_ff == 3000  # given: used as is
    assert make_config("tiny", E, d_ff=None).d_ff == 256  # None = not given


def test_config_errors_name_the_valid_choices():
    with pytest.raises(ConfigError, match="tiny, small, base"):
        make_config("huge", E)
    with pytest.raises(ConfigError, match="relu, gelu, swish, glu, bilinear, reglu, geglu, swiglu"):
        make_config("tiny", E, ffn="gegelu")
    with pytest.raises(ConfigError, match="d_model"):
        make_config("tiny", E, dmodel=64)
    with pytest.raises(ConfigError, match="sdpa, eager, flex"):
        make_config("tiny", E, attn="flash")
    with pytest.raises(ConfigError, match="positive"):
        make_config("tiny", E, num_heads=0)
    cfg = make_config("small", 32128, ffn="reglu", tie_embeddings=True)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown key"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_layer": 3})


# --- parameter counts and FLOPs (published figures, model.md §1.3 / §4) -------------------------


@pytest.mark.parametrize(
    "preset, total, non_embedding",
    [("tiny", 9.0, 0.79), ("small", 77.0, 44.1), ("base", 247.6, 198.2)],
)
@pytest.mark.parametrize("ffn", ["relu", "geglu"])
def test_preset_parameter_counts(preset, total, non_embedding, ffn):
    cfg = make_config(preset, 32128, ffn=ffn)
    with torch.device("meta"):  # no memory, same module tree
        model = GLUTransformer(cfg)
    n = model.num_parameters()
    n_non_emb = model.num_parameters(exclude_embeddings=True)
    digits = 2 if preset == "tiny" else 1
    assert round(n / 1e6, 1) == total
    assert round(n_non_emb / 1e6, digits) == non_embedding
    counts = param_counts(cfg)
    assert (counts["total"], counts["non_embedding"]) == (n, n_non_emb)


def test_param_counts_tied():
    cfg = make_config("tiny", E, tie_embeddings=True)
    model = GLUTransformer(cfg)
    assert not hasattr(model, "lm_head")
    assert param_counts(cfg)["total"] == model.num_parameters()


@pytest.mark.parametrize("preset, flops", [("tiny", 5.3e9), ("small", 1.06e11), ("base", 4.26e11)])
def test_flops_per_example_matches_spec(preset, flops):
    for ffn in ("relu", "geglu"):  # equal by the 2/3 rule
        c = flops_per_example(make_config(preset, 32128, ffn=ffn), 512, 114)
        assert abs(c / flops - 1) < 0.005


def test_mfu_and_device_peaks():
    assert device_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert device_peak("NVIDIA A100-SXM4-40GB") == 312e12
    assert device_peak("cpu") is None
    # nanoT5 reference: 128 examples / 0.56 s of base ≈ 31 % of an A100
    c = flops_per_example(make_config("base", 32128), 512, 114)
    assert 0.29 < mfu(c, 128 / 0.56, 312e12) < 0.33
    assert mfu(c, 128 / 0.56, 312e12, devices=2) == pytest.approx(mfu(c, 128 / 0.56, 312e12) / 2)


# --- relative position buckets ----------------------------------------------------------------


def test_buckets_equal_hf():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    r = torch.arange(-700, 700)[None, :] - torch.arange(0, 3)[:, None]
    for bidirectional in (True, False):
        ours = relative_position_bucket(r, bidirectional, 32, 128)
        hf = t5.T5Attention._relative_position_bucket(r, bidirectional, 32, 128)
        assert torch.equal(ours, hf)
    # spot values from model.md §1.1 (encoder: offset 16 for keys to the right)
    enc = relative_position_bucket(torch.tensor([0, 7, 8, 12, 127, 1000, -1, -8, -1000]), True)
    assert enc.tolist() == [0, 16 + 7, 16 + 8, 16 + 9, 16 + 15, 16 + 15, 1, 8, 15]
    dec = relative_position_bucket(torch.tensor([3, 0, -15, -16, -1000]), False)
    assert dec.tolist() == [0, 0, 15, 16, 31]


# --- shapes, masks, variants ------------------------------------------------------------------


@pytest.mark.parametrize("ffn", list(FFN_VARIANTS))
def test_every_ffn_forward_backward(ffn):
    model = tiny(ffn=ffn)
    dense = model.encoder.block[0].layer[1].DenseReluDense
    assert hasattr(dense, "wi_0") == (FFN_VARIANTS[ffn][0] == 3)
    inputs, targets, enc_seg, dec_seg = packed_batch()
    logits = model(inputs, decoder_input_tokens(targets, segments=dec_seg), enc_seg, dec_seg)
    assert logits.shape == (2, 16, E) and logits.dtype == torch.float32
    loss_sum, w = weighted_cross_entropy(logits, targets)
    (loss_sum / w).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_packed_examples_equal_examples_alone():
    """Masks built from segment ids connect exactly the pairs of one example: each packed
    example's logits equal those of the same example alone in a padded row (concat mode)."""
    model = tiny().eval()
    inputs, targets, enc_seg, dec_seg = packed_batch()
    with torch.no_grad():
        packed = model(
            inputs[:1],
            decoder_input_tokens(targets[:1], segments=dec_seg[:1]),
            enc_seg[:1],
            dec_seg[:1],
        )
        for seg in (1, 2):
            e_idx = (enc_seg[0] == seg).nonzero().flatten()
            d_idx = (dec_seg[0] == seg).nonzero().flatten()
            alone_in = torch.zeros(1, 48, dtype=torch.long)
            alone_in[0, : len(e_idx)] = inputs[0, e_idx]
            alone_tg = torch.zeros(1, 16, dtype=torch.long)
            alone_tg[0, : len(d_idx)] = targets[0, d_idx]
            alone = model(alone_in, decoder_input_tokens(alone_tg))
            torch.testing.assert_close(packed[0, d_idx], alone[0, : len(d_idx)], atol=2e-5, rtol=0)


def test_causality_and_padding_independence():
    model = tiny().eval()
    inputs, targets, _, _ = packed_batch()
    dec_in = decoder_input_tokens(targets)
    with torch.no_grad():
        base = model(inputs, dec_in)
        later = dec_in.clone()
        later[:, 10:] = torch.randint(3, E, later[:, 10:].shape)
        changed = model(inputs, later)
        # positions < 10 never see decoder inputs >= 10
        torch.testing.assert_close(base[:, :10], changed[:, :10], atol=1e-6, rtol=0)
        assert (base[:, 10:] - changed[:, 10:]).abs().max() > 1e-3
        # encoder padding (id 0) is invisible: more padding changes nothing
        longer = torch.cat([inputs, torch.zeros(2, 16, dtype=torch.long)], dim=1)
        torch.testing.assert_close(model(longer, dec_in), base, atol=2e-5, rtol=0)


def test_fully_masked_rows_are_finite_in_fp32_and_bf16():
    model = tiny()
    inputs, targets, enc_seg, dec_seg = packed_batch()
    inputs[1] = 0  # a whole row of padding: every attention row masked
    enc_seg[1] = 0
    dec_seg[1] = 0
    targets[1] = 0
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(
                inputs, decoder_input_tokens(targets, segments=dec_seg), enc_seg, dec_seg
            )
        assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
        loss_sum, w = weighted_cross_entropy(logits, targets)
        (loss_sum / w).backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        model.zero_grad()


def test_segments_must_come_in_pairs():
    model = tiny()
    inputs, targets, enc_seg, _ = packed_batch()
    with pytest.raises(ValueError, match="both"):
        model(inputs, decoder_input_tokens(targets), enc_seg, None)


@pytest.mark.parametrize("packed", [False, True])
def test_sdpa_matches_eager(packed):
    inputs, targets, enc_seg, dec_seg = packed_batch()
    segs = (enc_seg, dec_seg) if packed else (None, None)
    dec_in = decoder_input_tokens(targets, segments=segs[1])
    results = {}
    for attn in ("sdpa", "eager"):
        model = tiny(attn=attn)
        logits = model(inputs, dec_in, *segs)
        loss_sum, w = weighted_cross_entropy(logits, targets)  # pad rows weigh 0
        (loss_sum / w).backward()
        real = targets != 0
        results[attn] = (logits[real].detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(results["sdpa"][0], results["eager"][0], atol=1e-5, rtol=0)
    for name, g in results["eager"][1].items():
        torch.testing.assert_close(results["sdpa"][1][name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_flex_matches_eager_forward():
    pytest.importorskip("torch.nn.attention.flex_attention")
    inputs, targets, enc_seg, dec_seg = packed_batch()
    out = {}
    for attn in ("flex", "eager"):
        model = tiny(attn=attn).eval()
        with torch.no_grad():  # flex has no CPU backward; forward runs in its eager fallback
            out[attn] = model(
                inputs, decoder_input_tokens(targets, segments=dec_seg), enc_seg, dec_seg
            )
    real = targets != 0
    torch.testing.assert_close(out["flex"][real], out["eager"][real], atol=1e-5, rtol=0)


def test_gradient_checkpointing_gives_the_same_gradients():
    inputs, targets, enc_seg, dec_seg = packed_batch()
    grads = []
    for ckpt in (False, True):
        model = tiny(gradient_checkpointing=ckpt)
        loss_sum, w = weighted_cross_entropy(
            model(inputs, decoder_input_tokens(targets, segments=dec_seg), enc_seg, dec_seg),
            targets,
        )
        (loss_sum / w).backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_tied_head_uses_scaled_shared_table():
    model = tiny(tie_embeddings=True).eval()
    inputs, targets, _, _ = packed_batch()
    dec_in = decoder_input_tokens(targets)
    with torch.no_grad():
        logits = model(inputs, dec_in)
        enc, _ = model.encode(inputs)
        assert logits.shape == (2, 16, E)
        model.shared.weight.mul_(2.0)  # the head reads the shared table
        assert not torch.allclose(model(inputs, dec_in), logits)
        assert enc.shape == (2, 48, 128)


# --- initialisation and learning ---------------------------------------------------------------


def test_init_statistics():
    torch.manual_seed(0)
    cfg = make_config("small", 4096)
    model = GLUTransformer(cfg)
    d = cfg.d_model
    sa = model.encoder.block[3].layer[0].SelfAttention
    assert sa.q.weight.std().item() == pytest.approx((d * cfg.d_kv) ** -0.5, rel=0.02)
    assert sa.k.weight.std().item() == pytest.approx(d**-0.5, rel=0.02)
    assert sa.o.weight.std().item() == pytest.approx(cfg.d_attn**-0.5, rel=0.02)
    ff = model.decoder.block[1].layer[2].DenseReluDense
    assert ff.wo.weight.std().item() == pytest.approx(cfg.d_ff**-0.5, rel=0.02)
    assert model.lm_head.weight.std().item() == pytest.approx(d**-0.5, rel=0.02)
    assert model.shared.weight.std().item() == pytest.approx(1.0, rel=0.02)
    assert not hasattr(model.encoder.block[1].layer[0].SelfAttention, "relative_attention_bias")
    assert not hasattr(model.decoder.block[0].layer[1].EncDecAttention, "relative_attention_bias")


def test_first_loss_near_ln_e_and_a_fixed_batch_overfits():
    from c4forge.trainers.optim import build_optimizer

    model = tiny()
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(3, E, (4, 32), generator=g)
    targets = torch.randint(3, E, (4, 8), generator=g)
    targets[:, -1] = 1  # EOS
    dec_in = decoder_input_tokens(targets)
    opt = build_optimizer("adamwscale", model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        loss_sum, w = weighted_cross_entropy(model(inputs, dec_in), targets)
        loss = loss_sum / w
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert math.log(E) - 0.5 <= losses[0] <= math.log(E) + 1.5
    assert losses[-1] < 0.5, losses[-10:]


# --- loss and decoder inputs ---------------------------------------------------------------------


def test_decoder_inputs_shift_per_segment():
    targets = torch.tensor([[3, 9, 1, 4, 1, 0, 0]])
    seg = torch.tensor([[1, 1, 1, 2, 2, 0, 0]])
    assert decoder_input_tokens(targets, segments=seg).tolist() == [[0, 3, 9, 0, 4, 0, 0]]
    assert decoder_input_tokens(targets).tolist() == [[0, 3, 9, 1, 4, 1, 0]]


def test_weighted_cross_entropy():
    from hf_reference import cross_entropy_reference

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 50, generator=g)
    targets = torch.randint(1, 50, (3, 7), generator=g)
    targets[0, 5:] = 0
    targets[2, 2:] = 0
    loss_sum, w = weighted_cross_entropy(logits, targets)
    assert w.item() == (targets != 0).sum().item() == 21 - 2 - 5
    torch.testing.assert_close(loss_sum / w, cross_entropy_reference(logits, targets))
    chunked = weighted_cross_entropy(logits, targets, chunk_size=4)
    torch.testing.assert_close(chunked[0], loss_sum)
    # by hand, one token: −log softmax(logits)[target] (+ z·lse² with z-loss)
    lse = torch.logsumexp(logits[0, 0], -1)
    one = weighted_cross_entropy(logits[:1, :1], targets[:1, :1], z_loss=1e-4)[0]
    torch.testing.assert_close(one, lse - logits[0, 0, targets[0, 0]] + 1e-4 * lse**2)
    bf16 = weighted_cross_entropy(logits.bfloat16(), targets)[0]
    assert bf16.dtype == torch.float32


def test_presets_table_shapes():
    assert PRESETS["base"]["d_model"] == 768 and PRESETS["base"]["num_layers"] == 12
    assert make_config("small", 32128).d_attn == 384  # d_attn need not equal d_model


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def _full_rows_step(attn: str, full_inputs: bool):
    """Logits and every gradient (the bias tables' included) on rows without padding."""
    g = torch.Generator().manual_seed(3)
    inputs = torch.randint(3, E, (2, 48), generator=g)
    targets = torch.randint(3, E, (2, 16), generator=g)
    model = tiny(attn=attn)
    logits = model(inputs, decoder_input_tokens(targets), full_inputs=full_inputs)
    loss_sum, w = weighted_cross_entropy(logits, targets)
    (loss_sum / w).backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_full_inputs_skip_the_masks_and_match_the_math_path():
    """Rows declared full: the encoder attends with the bare bias, the cross-attention with no
    mask; logits and gradients (the relative-position tables' included) match the masked SDPA
    path and the eager matmul-softmax reference."""
    fast = _full_rows_step("sdpa", True)
    for reference in (_full_rows_step("sdpa", False), _full_rows_step("eager", False)):
        torch.testing.assert_close(fast[0], reference[0], atol=1e-5, rtol=0)
        for name, grad in reference[1].items():
            torch.testing.assert_close(fast[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    assert fast[1][bias].abs().sum() > 0
    model = tiny()
    inputs, targets, enc_seg, dec_seg = packed_batch()
    with pytest.raises(ValueError, match="without segments"):
        model(
            inputs,
            decoder_input_tokens(targets, segments=dec_seg),
            enc_seg,
            dec_seg,
            full_inputs=True,
        )


def test_deterministic_mode_keeps_the_masked_path(deterministic):
    """Under torch.use_deterministic_algorithms the hint changes nothing: the same bits."""
    fast = _full_rows_step("sdpa", True)
    masked = _full_rows_step("sdpa", False)
    assert torch.equal(fast[0], masked[0])
    assert all(torch.equal(fast[1][n], g) for n, g in masked[1].items())


def _encoder_walk(model: GLUTransformer, ids: torch.Tensor):
    """The block-by-block walk fine-tuning ran before ``encode`` gave hidden states: the
    stack's own mask, dropout on the embeddings, each block, the final norm and dropout."""
    from c4forge.trainers.models.t5 import MaskSpec

    stack, seg = model.encoder, (ids != 0).to(torch.int32)
    x = model.shared(ids)
    mask, _ = stack._masks(x, MaskSpec(seg, seg, False), None, None)
    x = stack.dropout(x)
    states = [x]
    for block in stack.block:
        x = block(x, mask)
        states.append(x)
    return states, stack.dropout(stack.final_layer_norm(x))


@pytest.mark.parametrize("training", [False, True])
def test_encode_hidden_states_equal_the_block_by_block_walk(training):
    """Every layer's states from ``encode`` are bit-identical to walking the blocks (with
    dropout drawn in the same order), and asking for them leaves the output unchanged."""
    from c4forge.trainers.models.t5 import hidden_states

    model = tiny(dropout_rate=0.1).train(training)
    ids = packed_batch()[0]
    torch.manual_seed(7)
    want_states, want_final = _encoder_walk(model, ids)
    torch.manual_seed(7)
    states: list[torch.Tensor] = []
    final, _ = model.encode(ids, hidden_states=states)
    assert len(states) == len(want_states) == model.config.num_layers + 1
    assert all(torch.equal(a, b) for a, b in zip(states, want_states))
    assert torch.equal(final, want_final)
    torch.manual_seed(7)
    assert torch.equal(model.encode(ids)[0], want_final)
    torch.manual_seed(7)
    got_states, got_final = hidden_states(model, {"input_ids": ids})  # the family's, for heads
    assert torch.equal(got_final, want_final) and torch.equal(got_states[-1], want_states[-1])
