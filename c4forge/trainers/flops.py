"""Training FLOPs of the encoder-decoder and MFU (model.md §4).

Each parameter only sees its own stack's tokens, so "6·N·tokens" over-counts by ~2× here; this
counts matmuls per stack on the row shape (padding included), forward + backward = 3 × forward,
2 FLOPs per multiply-accumulate.
"""

from __future__ import annotations

from c4forge.trainers.config import ModelConfig

# Dense bf16 peaks (no sparsity), FLOP/s per device.
DEVICE_PEAKS: dict[str, float] = {
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "L4": 121e12,
    "A10G": 70e12,
    "V100": 125e12,  # fp16 tensor cores (no bf16)
    "TPU v4": 275e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
}


def ffn_params(cfg: ModelConfig) -> int:
    return (3 if cfg.is_gated else 2) * cfg.d_model * cfg.d_ff


def flops_breakdown(cfg: ModelConfig, inputs_length: int, targets_length: int) -> dict[str, float]:
    """Training FLOPs per example by component (sums to ``flops_per_example``)."""
    d, da, e = cfg.d_model, cfg.d_attn, cfg.embedding_size
    n_enc, n_dec = cfg.num_layers, cfg.num_decoder_layers
    li, lt = inputs_length, targets_length
    f = ffn_params(cfg)
    return {
        "encoder_attn_proj": 6.0 * n_enc * 4 * d * da * li,
        "encoder_ffn": 6.0 * n_enc * f * li,
        "encoder_attn_scores": 12.0 * da * n_enc * li * li,
        "decoder_self_proj": 6.0 * n_dec * 4 * d * da * lt,
        "decoder_cross_qo": 6.0 * n_dec * 2 * d * da * lt,
        "decoder_cross_kv": 6.0 * n_dec * 2 * d * da * li,
        "decoder_ffn": 6.0 * n_dec * f * lt,
        "decoder_attn_scores": 12.0 * da * n_dec * (lt * lt + lt * li),
        "lm_head": 6.0 * d * e * lt,
    }


def flops_per_example(cfg: ModelConfig, inputs_length: int, targets_length: int) -> float:
    """C of model.md §4 (forward + backward) for one ``(inputs_length, targets_length)`` row."""
    return float(sum(flops_breakdown(cfg, inputs_length, targets_length).values()))


def mfu(flops_per_example: float, examples_per_s: float, peak: float, devices: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the dense peak of all devices."""
    if peak <= 0 or devices <= 0:
        return 0.0
    return flops_per_example * examples_per_s / (peak * devices)


def device_peak(name: str) -> float | None:
    """Peak for a device name as torch reports it ("NVIDIA H100 80GB HBM3" → H100), else None."""
    upper = name.upper()
    for key in sorted(DEVICE_PEAKS, key=len, reverse=True):
        if key.upper() in upper:
            return DEVICE_PEAKS[key]
    return None


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Analytic parameter counts: total, embedding (shared + untied head), non-embedding."""
    d, da, h = cfg.d_model, cfg.d_attn, cfg.num_heads
    attn = 4 * d * da
    bias_table = cfg.relative_attention_num_buckets * h
    enc_layer = attn + ffn_params(cfg) + 2 * d
    dec_layer = 2 * attn + ffn_params(cfg) + 3 * d
    non_emb = (
        cfg.num_layers * enc_layer
        + cfg.num_decoder_layers * dec_layer
        + 2 * bias_table
        + 2 * d  # final norms
    )
    emb = cfg.embedding_size * d * (1 if cfg.tie_embeddings else 2)
    return {"total": non_emb + emb, "embedding": emb, "non_embedding": non_emb}


def bert_flops_breakdown(cfg, seq_length: int, predictions: int) -> dict[str, float]:
    """Training FLOPs per bert row by component: the encoder on ``seq_length`` tokens, the MLM
    head (transform + tied decoder) on the ``predictions`` gathered positions, pooler + NSP once."""
    d, n, t, e = cfg.d_model, cfg.n_layers, seq_length, cfg.vocab_size
    ffn = (3 if cfg.is_gated else 2) * d * cfg.d_ff
    return {
        "encoder_attn_proj": 6.0 * n * 4 * d * d * t,
        "encoder_ffn": 6.0 * n * ffn * t,
        "encoder_attn_scores": 12.0 * d * n * t * t,
        "mlm_transform": 6.0 * d * d * predictions,
        "mlm_decoder": 6.0 * d * e * predictions,
        "pooler_nsp": 6.0 * (d * d + 2 * d),
    }


def bert_flops_per_example(cfg, seq_length: int, predictions: int) -> float:
    return float(sum(bert_flops_breakdown(cfg, seq_length, predictions).values()))
