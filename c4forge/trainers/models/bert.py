"""The bert family: a BERT encoder with the MLM and NSP pretraining heads (finetune.md §2).

Post-LN blocks as google-research/bert ``modeling.py``: ``x = LN(x + Dropout(SelfAttn(x)))``,
``x = LN(x + Dropout(FFN(x)))``; token + learned absolute position + segment embeddings, summed,
LayerNorm (eps 1e-12) and dropout; attention scaled by 1/√d_head with biases everywhere and padding
masked; the MLM decoder tied to the token embeddings plus an output bias; the pooler (dense + tanh)
on position 0 feeds NSP.

Choices where the spec leaves room (said here once):

* Parameter names are HF ``BertForPreTraining``'s, so export is a state-dict copy (the tied
  decoder is not stored; HF ties it on load).
* ``--ffn`` takes every variant of model.md §1.2. In this family GELU is BERT's exact (erf)
  GELU for ``gelu`` and ``geglu`` (HF ``hidden_act: "gelu"``), not the T5 family's tanh
  approximation; gated variants add a linear gate ``intermediate.gate`` (no HF equivalent, so only
  ``gelu`` exports).
* The MLM head is applied only at the ``max_predictions`` gathered positions of each row
  (``gather_indexes`` in BERT's ``run_pretraining.py``): static shapes, and the vocabulary matmul
  costs P, not T, rows.
* Rows the caller declares full (``full_rows``: no padding, known from the host copy) attend
  without a mask, so SDPA may take its flash kernel; under ``torch.use_deterministic_algorithms``
  the padding mask is built as before.
* The embedding table has E rows (V rounded up to 128, as the t5 family; the extra rows are never
  targets); logits are fp32.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from c4forge.errors import ConfigError, InputError
from c4forge.objectives.registry import BERT_COLUMNS
from c4forge.trainers.config import FFN_VARIANTS, config_from_dict, preset_values
from c4forge.trainers.families import no_padding, part_stats, widen
from c4forge.trainers.models.family import Family

NAME = "bert"
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")

# finetune.md §2 table (Turc et al. 2019 compact sizes; bert-base = the BERT paper's).
PRESETS: dict[str, dict[str, int]] = {
    "bert-tiny": dict(d_model=128, n_layers=2, num_heads=2, d_ff=512),
    "bert-mini": dict(d_model=256, n_layers=4, num_heads=4, d_ff=1024),
    "bert-small": dict(d_model=512, n_layers=4, num_heads=8, d_ff=2048),
    "bert-medium": dict(d_model=512, n_layers=8, num_heads=8, d_ff=2048),
    "bert-base": dict(d_model=768, n_layers=12, num_heads=12, d_ff=3072),
}

# --ffn name -> activation of this family (exact GELU; see the module docstring)
_FAMILY_ACTIVATION = {"gelu_tanh": "gelu"}


@dataclass
class BertConfig:
    """Shape and numerics of the encoder. ``vocab_size`` is the number of embedding rows (E)."""

    vocab_size: int
    d_model: int = 768
    n_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    ffn: str = "gelu"
    max_position: int = 512
    type_vocab_size: int = 2
    layer_norm_epsilon: float = 1e-12
    dropout_rate: float = 0.1
    initializer_range: float = 0.02
    attn: str = "sdpa"
    family: str = NAME  # marks config.json as this family's (the t5 config has no such key)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def embedding_size(self) -> int:
        return self.vocab_size

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def is_gated(self) -> bool:
        return FFN_VARIANTS[self.ffn][0] == 3

    @property
    def activation(self) -> str:
        act = FFN_VARIANTS[self.ffn][1]
        return _FAMILY_ACTIVATION.get(act, act)

    def validate(self) -> None:
        if self.family != NAME:
            raise ConfigError(f"bert config: family must be {NAME!r}, got {self.family!r}")
        if self.ffn not in FFN_VARIANTS:
            raise ConfigError(f"unknown FFN variant {self.ffn!r}; valid: {', '.join(FFN_VARIANTS)}")
        if self.attn not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(
                f"unknown attention implementation {self.attn!r} for the bert family; "
                f"valid: {', '.join(ATTN_IMPLEMENTATIONS)}"
            )
        for name in ("vocab_size", "d_model", "n_layers", "num_heads", "d_ff", "max_position"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"bert config: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ConfigError(
                f"bert config: d_model {self.d_model} is not a multiple of num_heads {self.num_heads}"
            )
        if not 0.0 <= float(self.dropout_rate) < 1.0:
            raise ConfigError(
                f"bert config: dropout_rate must be in [0, 1), got {self.dropout_rate}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertConfig:
        return config_from_dict(cls, data, "bert config", "vocab_size")


def make_config(preset: str, embedding_size: int, **overrides: Any) -> BertConfig:
    """Preset + FFN (gated variants at 2/3 of ``d_ff`` unless ``d_ff`` is given) + overrides."""
    values = preset_values(PRESETS, preset, "gelu", BertConfig, "bert", overrides)
    return BertConfig(vocab_size=embedding_size, **values)


# ----------------------------------------------------------------------------------------------
# Layers (HF module names)

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact erf GELU, as BERT
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


def padding_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, 1, 1, T]`` additive mask: 0 for real keys, the dtype's lowest finite value for pads."""
    keep = attention_mask[:, None, None, :].to(torch.bool)
    return torch.where(keep, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.d_model)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # word + segment, then + position: google-research/bert's (and HF's) order
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions)[None]
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.n_heads, self.d_head, self.impl = cfg.num_heads, cfg.d_head, cfg.attn
        self.dropout = cfg.dropout_rate
        self.query = nn.Linear(cfg.d_model, cfg.d_model)
        self.key = nn.Linear(cfg.d_model, cfg.d_model)
        self.value = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(proj: nn.Linear) -> torch.Tensor:
            return proj(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = heads(self.query), heads(self.key), heads(self.value)
        p = self.dropout if self.training else 0.0
        if self.impl == "sdpa":
            if mask is not None:
                mask = mask.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        else:  # eager: the numerics reference (and the XLA path); softmax in fp32
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)
            if mask is not None:
                scores = scores + mask
            weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
            out = torch.matmul(F.dropout(weights, p, self.training), v)
        return out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    """``act(x·W)`` (``dense``), times ``x·V`` (``gate``) for the gated variants."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_ff)
        if cfg.is_gated:
            self.gate = nn.Linear(cfg.d_model, cfg.d_ff)
        self.gated = cfg.is_gated
        self.act = _ACTIVATIONS[cfg.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.dense(x))
        return h * self.gate(x) if self.gated else h


class BertOutput(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_ff, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertOutput(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.n_layers))


class BertPooler(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, last_hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(last_hidden[:, 0]))


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)
        self.pooler = BertPooler(cfg)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Transform, then the token-embedding matrix (tied; passed in) plus an output bias."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, x: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(x), embeddings, self.bias)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(cfg)
        self.seq_relationship = nn.Linear(cfg.d_model, 2)


# ----------------------------------------------------------------------------------------------
# The model


class BertForPreTraining(nn.Module):
    """Encoder + MLM/NSP heads; ``forward`` returns fp32 ``(mlm_logits [B, P, E], nsp [B, 2])``.

    ``hidden_states`` and ``pooled`` are the fine-tuning API (finetune.md §5): every layer's
    output for HIRE, the pooler for the ``cls`` head.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg)
        self.cls = BertPreTrainingHeads(cfg)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """normal(0, 0.02) weights and embeddings, zero biases, LayerNorm 1/0 (finetune.md §2)."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.zeros_(self.cls.predictions.bias)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        full_rows: bool = False,
    ) -> list[torch.Tensor]:
        """``[H_0 … H_L]``, each ``[B, T, H]``: the embedding output, then every layer's output.

        ``attention_mask`` (1 = real token) defaults to ``input_ids != 0`` (pad id 0);
        ``full_rows`` (no padding anywhere, no ``attention_mask``) attends without a mask.
        """
        input_ids = input_ids.long()
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.bert.embeddings(input_ids, token_type_ids.long())
        mask = None
        if (
            attention_mask is not None
            or not full_rows
            or torch.are_deterministic_algorithms_enabled()
        ):
            if attention_mask is None:
                attention_mask = input_ids != 0
            mask = padding_mask(attention_mask, _compute_dtype(x))
        states = [x]
        for layer in self.bert.encoder.layer:
            x = layer(x, mask)
            states.append(x)
        return states

    def pooled(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """The pooler (dense + tanh) on position 0 (``[CLS]``): ``[B, H]``."""
        return self.bert.pooler(last_hidden)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        masked_lm_positions: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        full_rows: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        last = self.hidden_states(input_ids, token_type_ids, attention_mask, full_rows)[-1]
        index = masked_lm_positions.long()[:, :, None].expand(-1, -1, last.shape[-1])
        picked = torch.gather(last, 1, index)  # [B, P, H]
        emb = self.bert.embeddings.word_embeddings.weight
        mlm = self.cls.predictions(picked, emb)
        nsp = self.cls.seq_relationship(self.pooled(last))
        return mlm.float(), nsp.float()

    def full_mlm_logits(self, input_ids, token_type_ids, attention_mask=None) -> torch.Tensor:
        """MLM logits at every position ``[B, T, E]`` (what HF's BertForPreTraining returns)."""
        last = self.hidden_states(input_ids, token_type_ids, attention_mask)[-1]
        emb = self.bert.embeddings.word_embeddings.weight
        return self.cls.predictions(last, emb).float()

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.bert.embeddings.word_embeddings.weight.numel()
        return n


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    from c4forge.trainers.models.t5 import compute_dtype

    return compute_dtype(x)


# ----------------------------------------------------------------------------------------------
# What the trainer and fine-tuning read of this family (trainers/families.py has what glues share)


@dataclass
class BertBatch:
    """One bert micro-batch on the device, widened."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    masked_lm_positions: torch.Tensor
    masked_lm_ids: torch.Tensor
    masked_lm_weights: torch.Tensor  # float32
    next_sentence_label: torch.Tensor
    full_rows: bool = False  # no padding in input_ids (checked on the host copy)


class BertTraining:
    """The encoder with MLM + NSP heads on ``bert_mlm_nsp`` rows (objectives.md §4.1)."""

    name = "bert"
    parts = ("mlm_loss", "nsp_loss")
    stats = (("mlm_acc", 0), ("nsp_acc", 1))
    columns = BERT_COLUMNS
    checks_rows = True

    def row_tokens(self, inputs_length: int, targets_length: int) -> int:
        return inputs_length  # targets_length is max_predictions_per_seq: not extra tokens

    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]:
        return part_stats(self.stats, sums, weights)

    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> BertBatch:
        def move(name: str, dtype: Any = torch.int64) -> torch.Tensor:
            return widen(item, name, device, non_blocking, dtype)

        return BertBatch(
            move("input_ids"),
            move("token_type_ids"),
            move("masked_lm_positions"),
            move("masked_lm_ids"),
            move("masked_lm_weights", torch.float32),
            move("next_sentence_label"),
            no_padding(item["input_ids"]),
        )

    @staticmethod
    def _rows(batch: BertBatch) -> torch.Tensor:
        return (batch.input_ids[:, 0] != 0).float()  # real rows start with [CLS]

    def counts(self, batch: BertBatch) -> torch.Tensor:
        return torch.stack([batch.masked_lm_weights.sum(), self._rows(batch).sum()])

    def nonpad(self, batch: BertBatch) -> torch.Tensor:
        return (batch.input_ids != 0).sum()

    def forward_sums(
        self, model: Any, batch: BertBatch, z_loss: float, autocast: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast:
            mlm, nsp = model(
                batch.input_ids,
                batch.token_type_ids,
                batch.masked_lm_positions,
                full_rows=batch.full_rows,
            )
        w = batch.masked_lm_weights.reshape(-1)
        labels = batch.masked_lm_ids.reshape(-1)
        flat = mlm.float().reshape(-1, mlm.shape[-1])
        mlm_ce = F.cross_entropy(flat, labels, reduction="none")
        rows = self._rows(batch)
        nsp_ce = F.cross_entropy(nsp.float(), batch.next_sentence_label, reduction="none")
        sums = torch.stack([(mlm_ce * w).sum(), (nsp_ce * rows).sum()])
        with torch.no_grad():
            mlm_hits = ((flat.argmax(-1) == labels).float() * w).sum()
            nsp_hits = ((nsp.argmax(-1) == batch.next_sentence_label).float() * rows).sum()
        return sums, torch.stack([mlm_hits, nsp_hits])

    def check_rows(self, data: dict[str, np.ndarray], where: str, cfg: Any) -> None:
        """Predictions must point inside the sequence (not at [CLS]) and name real ids."""
        seq = data["input_ids"].shape[1]
        real = data["masked_lm_weights"] > 0
        pos = data["masked_lm_positions"].astype(np.int64)
        bad = real & ((pos < 1) | (pos >= seq))
        if bad.any():
            row, slot = (int(v[0]) for v in np.nonzero(bad))
            raise InputError(
                f"{where}: row {row} has a masked-LM prediction at position {pos[row, slot]}, "
                f"outside its {seq}-token sequence (positions 1…{seq - 1})"
            )
        top = max(int(data["masked_lm_ids"].max(initial=0)), int(data["input_ids"].max(initial=0)))
        if top >= cfg.vocab_size:
            raise InputError(
                f"{where}: token id {top} is beyond the model's {cfg.vocab_size} embedding rows"
            )

    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict:
        if counts[0] <= 0 or counts[1] <= 0:
            return {}
        mlm, nsp = sums[0] / counts[0], sums[1] / counts[1]
        return {
            "eval_loss": mlm + nsp,
            "eval_mlm_loss": mlm,
            "eval_nsp_loss": nsp,
            "eval_mlm_acc": stats[0] / counts[0],
            "eval_nsp_acc": stats[1] / counts[1],
        }

    def eval_text(self, record: dict) -> str:
        return (
            f"held-out MLM loss {record['eval_mlm_loss']:.4f} (acc {record['eval_mlm_acc']:.3f}), "
            f"NSP loss {record['eval_nsp_loss']:.4f} (acc {record['eval_nsp_acc']:.3f})"
        )

    def flops_per_example(self, cfg: Any, inputs_length: int, targets_length: int) -> float:
        from c4forge.trainers.flops import bert_flops_per_example

        return bert_flops_per_example(cfg, inputs_length, targets_length)


def hidden_states(
    model: BertForPreTraining, batch: dict[str, torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([H_0 … H_L], R)`` for the fine-tuning heads (``Family.hidden_states``): every layer's
    output from the model's own ``hidden_states``; R is the last."""
    states = model.hidden_states(
        batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    )
    return list(states), states[-1]


def finetune_backbone(model: BertForPreTraining, generates: bool) -> BertForPreTraining:
    """Its config's dropout; a classifier head never uses the MLM and NSP heads (the pooler
    stays: the ``cls`` head reads it) (``Family.finetune_backbone``)."""
    if not generates:
        del model.cls
    return model


# the shard set's objective decides the family (finetune.md §1): bert trains bert_mlm_nsp rows
FAMILY = Family(
    name=NAME,
    presets=PRESETS,
    config=BertConfig,
    make_config=make_config,
    model=BertForPreTraining,
    training=BertTraining(),
    exporter_ref="c4forge.trainers.export_bert:BERT_EXPORT",
    hidden_states=hidden_states,
    finetune_backbone=finetune_backbone,
    optimizer="adamw",
    objectives=("bert_mlm_nsp",),
    cls_inputs=True,
    learned_positions=True,
)
