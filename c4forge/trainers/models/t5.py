"""The t5 family — the GLU-Transformer: a T5.1.1 encoder-decoder with any FFN of "GLU Variants Improve Transformer".

One file, read top to bottom (model.md §1). Design choices that matter:

* Parameter names are HF ``T5ForConditionalGeneration``'s (``shared``, ``encoder.block.0.layer.0.
  SelfAttention.q`` …, ``lm_head``), so exporting is a state-dict copy and HF can check our numerics.
* Pre-norm residual blocks, RMSNorm with ``mean(x²)`` in fp32, no biases, no 1/√d_kv scaling (it is
  folded into the q initialisation), relative position bias computed in block 0 of each stack and
  reused by every layer, no bias in cross-attention, fp32 logits.
* Attention goes through ``F.scaled_dot_product_attention`` with one float mask per stack =
  position bias where allowed, the dtype's lowest finite value where not (causality and packed
  segments folded in, never ``is_causal``). Fully masked rows (padding) stay finite. An eager
  matmul-softmax path is the numerics reference; FlexAttention is opt-in.
* No mask larger than the constraint: a key-padding mask is ``[B, 1, 1, Lk]``, and rows the caller
  declares full (``full_inputs``: no padding, no segments; span-corruption rows in concat mode)
  give the encoder the bare ``[1, H, L, L]`` bias and the cross-attention no mask at all, so SDPA
  may pick its fused kernels (flash for cross-attention). Under
  ``torch.use_deterministic_algorithms`` both stay off: the masks are built as before.
* Shapes depend only on (batch, inputs_length, targets_length): no boolean indexing, no
  ``.nonzero()``, no ``.item()``, so the model compiles with static shapes and runs under XLA.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from c4forge.trainers.config import PRESETS, ModelConfig, make_config
from c4forge.trainers.data import T5_COLUMNS, to_device
from c4forge.trainers.families import no_padding, part_stats
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.models.family import Family

# ----------------------------------------------------------------------------------------------
# Relative position buckets (model.md §1.1), written as HF's T5Attention._relative_position_bucket
# so the float32 log and the truncation toward zero are bit-identical (export relies on it).


def relative_position_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Bucket of ``r = key − query``: exact below ``max_exact``, log-spaced up to ``max_distance``."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # float32 log ratio, as HF and Mesh TensorFlow; .to(long) truncates toward zero.
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.clamp(if_large, max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, if_large)


# ----------------------------------------------------------------------------------------------
# Masks. A MaskSpec describes which (query, key) pairs may attend (objectives.md §5.4):
#   key_seg[k] != 0, and query_seg[q] == key_seg[k] when query_seg is given, and k <= q if causal.
# Segment id 0 is padding. In concat mode the encoder side uses (ids != 0) as its segment ids and
# the decoder side passes no segments: pads are trailing, so causality alone keeps real target
# positions away from them (HF does the same), and pad query rows have loss weight 0.


class MaskSpec(NamedTuple):
    query_seg: torch.Tensor | None  # [B, Lq] int, or None: every query row is alike
    key_seg: torch.Tensor | None  # [B, Lk] int (0 = padding), or None: every key is real
    causal: bool


def unconstrained(spec: MaskSpec) -> bool:
    """Every query may attend to every key: no padding, no segments, no causality."""
    return spec.key_seg is None and not spec.causal


def allowed_pairs(
    spec: MaskSpec, lq: int, lk: int, device: torch.device, narrow: bool = False
) -> torch.Tensor:
    """Boolean ``[B or 1, Lq, Lk]``: True where the query may attend to the key.

    ``narrow``: ``[B, 1, Lk]`` when only the keys matter (no query segments, not causal)."""
    if narrow and spec.query_seg is None and not spec.causal:
        lq = 1
    allowed = torch.ones(1, lq, lk, dtype=torch.bool, device=device)
    if spec.key_seg is not None:
        allowed = allowed & (spec.key_seg != 0)[:, None, :]
        if spec.query_seg is not None:
            allowed = allowed & (spec.query_seg[:, :, None] == spec.key_seg[:, None, :])
    if spec.causal:
        q = torch.arange(lq, device=device)[:, None]
        k = torch.arange(lk, device=device)[None, :]
        allowed = allowed & (k <= q)[None]
    return allowed


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype q will have: the autocast dtype when autocast is on, else the activation dtype."""
    device_type = x.device.type
    try:
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
    except (RuntimeError, TypeError):  # a backend without autocast support
        pass
    return x.dtype


def additive_mask(allowed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
    """``[B, H|1, Lq, Lk]`` float mask: the bias (or 0) where allowed, the lowest finite value else.

    ``torch.where`` (not ``bias + min``) so the masked entries are exactly finfo.min and never
    overflow to −inf; built directly in q's dtype (fp32's min rounds to −inf in bf16).
    """
    lowest = torch.finfo(dtype).min
    if bias is None:
        keep = torch.zeros((), dtype=dtype, device=allowed.device)
    else:
        keep = bias.to(dtype)
    return torch.where(allowed[:, None], keep, lowest)


# ----------------------------------------------------------------------------------------------
# Layers


class RMSNorm(nn.Module):
    """T5LayerNorm: ``w · x / sqrt(mean(x²) + eps)``, statistics in fp32, no mean, no bias."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


_ACTIVATIONS = {
    "relu": F.relu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # Mesh TF / HF gelu_new
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


class DenseReluDense(nn.Module):
    """FFN (model.md §1.2): ``act(x·W) [⊗ x·V] · W₂`` with HF names wi / wi_0, wi_1 / wo."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gated = cfg.is_gated
        if self.gated:
            self.wi_0 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.wi_1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        else:
            self.wi = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wo = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.act = _ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            h = self.act(self.wi_0(x)) * self.wi_1(x)
        else:
            h = self.act(self.wi(x))
        return self.wo(self.dropout(h))


class Attention(nn.Module):
    """Multi-head attention without scaling; block 0 of a stack also owns the bias table."""

    def __init__(self, cfg: ModelConfig, has_relative_attention_bias: bool = False):
        super().__init__()
        self.n_heads, self.d_kv = cfg.num_heads, cfg.d_kv
        self.impl = cfg.attn
        self.dropout = cfg.dropout_rate
        self.q = nn.Linear(cfg.d_model, cfg.d_attn, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_attn, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_attn, bias=False)
        self.o = nn.Linear(cfg.d_attn, cfg.d_model, bias=False)
        if has_relative_attention_bias:
            self.num_buckets = cfg.relative_attention_num_buckets
            self.max_distance = cfg.relative_attention_max_distance
            self.relative_attention_bias = nn.Embedding(self.num_buckets, cfg.num_heads)

    def buckets(self, lq: int, lk: int, bidirectional: bool, device) -> torch.Tensor:
        """``[Lq, Lk]`` bucket ids from plain row indices (a constant under static shapes)."""
        ctx = torch.arange(lq, dtype=torch.long, device=device)[:, None]
        mem = torch.arange(lk, dtype=torch.long, device=device)[None, :]
        return relative_position_bucket(
            mem - ctx, bidirectional, self.num_buckets, self.max_distance
        )

    def position_bias(self, lq: int, lk: int, bidirectional: bool) -> torch.Tensor:
        """``[1, H, Lq, Lk]`` learned bias gathered from the ``[buckets, H]`` table."""
        device = self.relative_attention_bias.weight.device
        values = self.relative_attention_bias(self.buckets(lq, lk, bidirectional, device))
        return values.permute(2, 0, 1)[None]

    def forward(self, x: torch.Tensor, kv: torch.Tensor, mask) -> torch.Tensor:
        b, lq, _ = x.shape
        lk = kv.shape[1]
        q = self.q(x).view(b, lq, self.n_heads, self.d_kv).transpose(1, 2)
        k = self.k(kv).view(b, lk, self.n_heads, self.d_kv).transpose(1, 2)
        v = self.v(kv).view(b, lk, self.n_heads, self.d_kv).transpose(1, 2)
        p = self.dropout if self.training else 0.0
        if self.impl == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=1.0)
        elif self.impl == "eager":  # the numerics reference: scores in q's dtype, softmax in fp32
            scores = torch.matmul(q, k.transpose(-1, -2))
            if mask is not None:
                scores = scores + mask
            weights = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), p, self.training)
            out = torch.matmul(weights, v)
        else:  # flex: mask is (score_mod, block_mask) from FlexMasks
            from torch.nn.attention.flex_attention import flex_attention

            score_mod, block_mask = mask
            out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=1.0)
        return self.o(out.transpose(1, 2).reshape(b, lq, self.n_heads * self.d_kv))


class LayerSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, has_relative_attention_bias: bool):
        super().__init__()
        self.SelfAttention = Attention(cfg, has_relative_attention_bias)
        self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x, mask):
        h = self.layer_norm(x)
        return x + self.dropout(self.SelfAttention(h, h, mask))


class LayerCrossAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.EncDecAttention = Attention(cfg)
        self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x, enc, mask):
        return x + self.dropout(self.EncDecAttention(self.layer_norm(x), enc, mask))


class LayerFF(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.DenseReluDense = DenseReluDense(cfg)
        self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x):
        return x + self.dropout(self.DenseReluDense(self.layer_norm(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, is_decoder: bool, first: bool):
        super().__init__()
        layers: list[nn.Module] = [LayerSelfAttention(cfg, has_relative_attention_bias=first)]
        if is_decoder:
            layers.append(LayerCrossAttention(cfg))
        layers.append(LayerFF(cfg))
        self.layer = nn.ModuleList(layers)
        self.is_decoder = is_decoder

    def forward(self, x, self_mask, enc=None, cross_mask=None):
        x = self.layer[0](x, self_mask)
        if self.is_decoder:
            x = self.layer[1](x, enc, cross_mask)
        return self.layer[-1](x)


class FlexMasks:
    """FlexAttention equivalents of the dense masks (``--attn flex``; model.md §4.4).

    The bias is a ``score_mod`` gathering ``table[bucket[q, kv], h]``; padding, causality and
    segments are a ``block_mask`` (never materialising ``[B, H, L, L]``).
    """

    @staticmethod
    def build(spec: MaskSpec, b: int, lq: int, lk: int, device, table=None, buckets=None):
        from torch.nn.attention.flex_attention import create_block_mask

        qs, ks, causal = spec

        def mask_mod(bi, h, q_idx, kv_idx):
            ok = kv_idx >= 0
            if ks is not None:
                ok = ok & (ks[bi, kv_idx] != 0)
                if qs is not None:
                    ok = ok & (qs[bi, q_idx] == ks[bi, kv_idx])
            if causal:
                ok = ok & (kv_idx <= q_idx)
            return ok

        batch = b if ks is not None else None
        block_mask = create_block_mask(mask_mod, batch, None, lq, lk, device=device)
        score_mod = None
        if table is not None:

            def score_mod(score, bi, h, q_idx, kv_idx):
                return score + table[buckets[q_idx, kv_idx], h].to(score.dtype)

        return score_mod, block_mask


class Stack(nn.Module):
    """Encoder or decoder: blocks + final RMSNorm; the position bias comes from block 0."""

    def __init__(self, cfg: ModelConfig, is_decoder: bool, n_layers: int):
        super().__init__()
        self.is_decoder = is_decoder
        self.cfg = cfg
        self.block = nn.ModuleList(Block(cfg, is_decoder, i == 0) for i in range(n_layers))
        self.final_layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)
        self.gradient_checkpointing = cfg.gradient_checkpointing

    def _masks(self, x, self_spec: MaskSpec, enc, cross_spec: MaskSpec | None):
        b, lq = x.shape[:2]
        attn0 = self.block[0].layer[0].SelfAttention
        bidirectional = not self.is_decoder
        if self.cfg.attn == "flex":
            table = attn0.relative_attention_bias.weight
            buckets = attn0.buckets(lq, lq, bidirectional, x.device)
            self_mask = FlexMasks.build(self_spec, b, lq, lq, x.device, table, buckets)
            cross_mask = None
            if cross_spec is not None:
                cross_mask = FlexMasks.build(cross_spec, b, lq, enc.shape[1], x.device)
            return self_mask, cross_mask
        dtype = compute_dtype(x)
        bias = attn0.position_bias(lq, lq, bidirectional)
        fast = not torch.are_deterministic_algorithms_enabled()
        if fast and unconstrained(self_spec):
            self_mask = bias.to(dtype)
        else:
            self_mask = additive_mask(allowed_pairs(self_spec, lq, lq, x.device), bias, dtype)
        cross_mask = None
        if cross_spec is not None and not (fast and unconstrained(cross_spec)):
            allowed = allowed_pairs(cross_spec, lq, enc.shape[1], x.device, narrow=fast)
            cross_mask = additive_mask(allowed, None, dtype)
        return self_mask, cross_mask

    def forward(
        self,
        x,
        self_spec: MaskSpec,
        enc=None,
        cross_spec: MaskSpec | None = None,
        states: list[torch.Tensor] | None = None,
    ):
        """The stack's output; ``states`` (if given) gets H_0 (input after dropout) … H_L."""
        self_mask, cross_mask = self._masks(x, self_spec, enc, cross_spec)
        x = self.dropout(x)
        if states is not None:
            states.append(x)
        for block in self.block:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, self_mask, enc, cross_mask, use_reentrant=False)
            else:
                x = block(x, self_mask, enc, cross_mask)
            if states is not None:
                states.append(x)
        return self.dropout(self.final_layer_norm(x))


# ----------------------------------------------------------------------------------------------
# The model


class GLUTransformer(nn.Module):
    """T5.1.1 encoder-decoder; ``forward`` returns fp32 logits ``[B, L_tgt, E]``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.shared = nn.Embedding(cfg.embedding_size, cfg.d_model)
        self.encoder = Stack(cfg, is_decoder=False, n_layers=cfg.num_layers)
        self.decoder = Stack(cfg, is_decoder=True, n_layers=cfg.num_decoder_layers)
        if not cfg.tie_embeddings:
            self.lm_head = nn.Linear(cfg.d_model, cfg.embedding_size, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """t5x-style initialisation (model.md §1.4), drawn from torch's global RNG in module order."""
        cfg = self.config
        d, d_kv, d_attn, d_ff = cfg.d_model, cfg.d_kv, cfg.d_attn, cfg.d_ff
        nn.init.normal_(self.shared.weight, std=1.0)
        for module in self.modules():
            if isinstance(module, Attention):
                nn.init.normal_(module.q.weight, std=(d * d_kv) ** -0.5)  # the folded 1/√d_kv
                nn.init.normal_(module.k.weight, std=d**-0.5)
                nn.init.normal_(module.v.weight, std=d**-0.5)
                nn.init.normal_(module.o.weight, std=d_attn**-0.5)
                if hasattr(module, "relative_attention_bias"):
                    nn.init.normal_(module.relative_attention_bias.weight, std=d**-0.5)
            elif isinstance(module, DenseReluDense):
                for name in ("wi", "wi_0", "wi_1"):
                    if hasattr(module, name):
                        nn.init.normal_(getattr(module, name).weight, std=d**-0.5)
                nn.init.normal_(module.wo.weight, std=d_ff**-0.5)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        if not cfg.tie_embeddings:
            # fan-in d^-1/2 (t5x), not HF's N(0, 1): logits start with std ≈ 1, loss ≈ ln E + 0.5
            nn.init.normal_(self.lm_head.weight, std=d**-0.5)

    def encode(
        self,
        input_ids: torch.Tensor,
        encoder_segment_ids: torch.Tensor | None = None,
        full_inputs: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
    ):
        """Encoder states and the segment ids the decoder's cross-attention masks with (None
        for ``full_inputs`` rows outside deterministic mode: nothing to mask). ``hidden_states``,
        when given, receives every layer's states ``H_0 … H_L`` (``Stack.forward``)."""
        if full_inputs and not torch.are_deterministic_algorithms_enabled():
            enc_seg = None
        else:
            enc_seg = _segments(input_ids, encoder_segment_ids)
        spec = MaskSpec(enc_seg, enc_seg, False)
        return self.encoder(self.shared(input_ids), spec, states=hidden_states), enc_seg

    def forward(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        encoder_segment_ids: torch.Tensor | None = None,
        decoder_segment_ids: torch.Tensor | None = None,
        full_inputs: bool = False,
    ) -> torch.Tensor:
        """``full_inputs``: the caller knows (from the host copy) that no input id is padding and
        passes no segments, so the encoder needs no padding mask (same result, fewer bytes)."""
        if (encoder_segment_ids is None) != (decoder_segment_ids is None):
            raise ValueError("pass both encoder_segment_ids and decoder_segment_ids, or neither")
        if full_inputs and encoder_segment_ids is not None:
            raise ValueError("full_inputs is for rows without segments (concat mode)")
        input_ids, decoder_input_ids = input_ids.long(), decoder_input_ids.long()
        enc, enc_seg = self.encode(input_ids, encoder_segment_ids, full_inputs)
        if decoder_segment_ids is None:  # concat: causal only; cross keys = non-pad inputs
            dec_seg = None
        else:
            dec_seg = decoder_segment_ids.to(torch.int32)
        h = self.decoder(
            self.shared(decoder_input_ids),
            MaskSpec(dec_seg, dec_seg, True),
            enc,
            MaskSpec(dec_seg, enc_seg, False),
        )
        if self.config.tie_embeddings:  # T5 1.0: d^-1/2 multiplier, shared table as head
            logits = F.linear(h * self.config.d_model**-0.5, self.shared.weight)
        else:
            logits = self.lm_head(h)
        return logits.float()

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.shared.weight.numel()
            if not self.config.tie_embeddings:
                n -= self.lm_head.weight.numel()
        return n


def _segments(ids: torch.Tensor, segment_ids: torch.Tensor | None) -> torch.Tensor:
    """Segment ids, or (ids != 0) in concat mode (every non-pad token in segment 1)."""
    if segment_ids is None:
        return (ids != 0).to(torch.int32)
    return segment_ids.to(torch.int32)


# ----------------------------------------------------------------------------------------------
# The family: what the trainer and fine-tuning read of it (families.py: what glues share)


class T5Training:
    """The encoder-decoder on inputs/targets rows."""

    name = "t5"
    parts = ("loss",)
    stats: tuple[tuple[str, int], ...] = ()  # (metric name, index of the part count it divides)
    columns = T5_COLUMNS
    checks_rows = False  # span-corruption rows need no check beyond the shard set's own

    def row_tokens(self, inputs_length: int, targets_length: int) -> int:
        return inputs_length + targets_length

    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]:
        return part_stats(self.stats, sums, weights)

    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> Any:
        batch = to_device(item, device, non_blocking)
        full = "targets_segment_ids" not in item and no_padding(item["inputs"])
        return dataclasses.replace(batch, full_inputs=full)

    def counts(self, batch: Any) -> torch.Tensor:
        return batch.weights().sum()[None]

    def nonpad(self, batch: Any) -> torch.Tensor:
        return (batch.input_ids != 0).sum() + (batch.targets != 0).sum()

    def logits(self, model: Any, batch: Any, autocast: Any) -> torch.Tensor:
        with autocast:
            return model(
                batch.input_ids,
                batch.decoder_input_ids,
                batch.encoder_segment_ids,
                batch.decoder_segment_ids,
                full_inputs=batch.full_inputs,
            )

    def forward_sums(
        self, model: Any, batch: Any, z_loss: float, autocast: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum, _ = weighted_cross_entropy(
            self.logits(model, batch, autocast), batch.targets, z_loss
        )
        return loss_sum[None], loss_sum.new_zeros(0)

    def check_rows(self, data: dict[str, np.ndarray], where: str, cfg: Any) -> None:
        return None

    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict:
        if counts[0] <= 0:
            return {}
        nll = sums[0] / counts[0]
        return {"eval_nll": nll, "eval_ppl": math.exp(min(nll, 700.0))}

    def eval_text(self, record: dict) -> str:
        return f"held-out NLL {record['eval_nll']:.4f} (ppl {record['eval_ppl']:.2f})"

    def flops_per_example(self, cfg: Any, inputs_length: int, targets_length: int) -> float:
        from c4forge.trainers.flops import flops_per_example

        return flops_per_example(cfg, inputs_length, targets_length)


def hidden_states(
    model: GLUTransformer, batch: dict[str, torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([H_0 … H_L], R)`` of the encoder, as the fine-tuning heads read them (``encode``)."""
    states: list[torch.Tensor] = []
    final, _ = model.encode(batch["input_ids"], hidden_states=states)
    return states, final


FINETUNE_DROPOUT = 0.1  # T5's fine-tuning dropout


def finetune_backbone(model: GLUTransformer, generates: bool) -> GLUTransformer:
    """T5's fine-tuning dropout everywhere; for a classifier head, no decoder nor LM head."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = FINETUNE_DROPOUT
        elif isinstance(module, Attention):  # SDPA's dropout_p
            module.dropout = FINETUNE_DROPOUT
    if not generates:
        del model.decoder
        if hasattr(model, "lm_head"):
            del model.lm_head
    return model


FAMILY = Family(
    name="t5",
    presets=PRESETS,
    config=ModelConfig,
    make_config=make_config,
    model=GLUTransformer,
    training=T5Training(),
    exporter_ref="c4forge.trainers.export:T5_EXPORT",
    hidden_states=hidden_states,
    finetune_backbone=finetune_backbone,
    mixture_training_ref="c4forge.trainers.mixture_family:MixtureT5Training",
    optimizer="adafactor",
    options=frozenset({"tie_embeddings", "z_loss"}),
    encoder_decoder=True,
    unmarked_configs=True,
)
