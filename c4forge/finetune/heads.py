"""Classifier heads on an encoder (finetune.md §5) and the encoder + head model.

``cls`` (BERT §4.1): the pooled ``[CLS]`` vector C (BERT's own pretrained pooler: dense + tanh on
position 0), dropout 0.1, a linear layer. A T5 encoder has no ``[CLS]`` token: DECISION (as the
spec says) C = dense + tanh on the mean of the encoder's final states over real tokens, with the
dense layer new and trained from scratch.

``hire`` (HIRE §3.2–3.4): one shared 2-layer BiGRU reads every hidden state ``H_i`` (packed, so
padding never reaches the final states); ``U_i`` = its four final states; ``S = softmax(wᵀU_i + b)``
over the layers; ``A = Σ S_i H_i``; the fusion ``[R; A; R+A; R∘A]`` goes through a second 2-layer
BiGRU; ``C = F[0]``; output ``W₂ᵀ tanh(W₁ᵀC + b₁) + b₂``. Dropout 0.1 between GRU layers.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from c4forge.finetune.head_registry import HEADS, get_head
from c4forge.trainers.models import get_family

__all__ = [
    "HEADS",
    "ClsHead",
    "EncoderClassifier",
    "HireHead",
    "build_hire",
    "encoder_outputs",
]

HEAD_DROPOUT = 0.1


def encoder_outputs(
    family: str, model: nn.Module, batch: dict[str, torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([H_0 … H_L], R)`` of the family's encoder (``Family.hidden_states``)."""
    return get_family(family).hidden_states(model, batch)


class ClsHead(nn.Module):
    def __init__(self, family: str, d: int, num_labels: int):
        super().__init__()
        self.family = family
        self.own_pooler = get_family(family).cls_inputs  # BERT's pretrained [CLS] pooler
        if not self.own_pooler:  # T5: a new pooler over the mean of the final states
            self.pool = nn.Linear(d, d)
        self.dropout = nn.Dropout(HEAD_DROPOUT)
        self.out = nn.Linear(d, num_labels)

    def forward(self, backbone: nn.Module, states, final, mask) -> dict[str, torch.Tensor]:
        if self.own_pooler:
            pooled = backbone.pooled(final)
        else:
            m = mask[..., None].to(final.dtype)
            mean = (final * m).sum(1) / m.sum(1).clamp_min(1.0)
            pooled = torch.tanh(self.pool(mean))
        return {"logits": self.out(self.dropout(pooled))}


def _final_states(gru: nn.GRU, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[N, 2·layers·d]``: the final states of every layer and direction of a packed run."""
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    _, h_n = gru(packed)  # [layers·2, N, d], in the original batch order
    return h_n.transpose(0, 1).reshape(x.shape[0], -1)


class HireHead(nn.Module):
    def __init__(self, d: int, num_labels: int):
        super().__init__()
        self.extractor = nn.GRU(
            d, d, num_layers=2, bidirectional=True, batch_first=True, dropout=HEAD_DROPOUT
        )
        self.score = nn.Linear(4 * d, 1)  # α_i = wᵀ U_i + b
        self.fusion = nn.GRU(
            4 * d, d, num_layers=2, bidirectional=True, batch_first=True, dropout=HEAD_DROPOUT
        )
        self.w1 = nn.Linear(2 * d, d)
        self.w2 = nn.Linear(d, num_labels)

    def forward(self, backbone: nn.Module, states, final, mask) -> dict[str, torch.Tensor]:
        n_states = len(states)
        b, n, d = final.shape
        lengths = mask.sum(1).clamp_min(1)
        stacked = torch.stack([h.float() for h in states], dim=1)  # [B, L+1, n, d]
        flat = stacked.reshape(b * n_states, n, d)
        u = _final_states(self.extractor, flat, lengths.repeat_interleave(n_states))
        alpha = self.score(u).view(b, n_states)
        scores = torch.softmax(alpha, dim=-1)  # S, Σ_i S_i = 1
        a = (scores[:, :, None, None] * stacked).sum(1)  # A = Σ S_i H_i
        r = final.float()
        fused = torch.cat([r, a, r + a, r * a], dim=-1)
        packed = pack_padded_sequence(fused, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.fusion(packed)
        f, _ = pad_packed_sequence(out, batch_first=True, total_length=n)
        c = f[:, 0]
        return {"logits": self.w2(torch.tanh(self.w1(c))), "scores": scores}


def build_hire(family: str, d: int, num_labels: int) -> HireHead:
    """The registry's builder: the HIRE head is the same on every family."""
    return HireHead(d, num_labels)


class EncoderClassifier(nn.Module):
    """A family's encoder (readied by ``Family.finetune_backbone``: T5's without its decoder)
    + a classifier head (``cls``, ``hire`` or any registered one: ``head_registry.HEADS``)."""

    def __init__(self, family: str, backbone: nn.Module, head: str, d: int, num_labels: int):
        super().__init__()
        self.family = family
        self.backbone = backbone
        self.head = get_head(head).build(family, d, num_labels)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        states, final = encoder_outputs(self.family, self.backbone, batch)
        return self.head(self.backbone, states, final, batch["attention_mask"])
