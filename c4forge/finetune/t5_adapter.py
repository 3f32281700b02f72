"""Greedy decoding over the T5 model's modules (c4forge.trainers T5 ``GLUTransformer``): what
fine-tuning's text head needs and pretraining does not. (Every hidden state of the encoder comes
from the model itself, ``GLUTransformer.encode(..., hidden_states=[])``; the fine-tuning dropout
from the family, ``models.t5.finetune_backbone``.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from c4forge.trainers.models.t5 import MaskSpec


def decoder_logits(
    model: nn.Module, enc: torch.Tensor, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor
) -> torch.Tensor:
    """Logits ``[B, L, E]`` of the decoder given the encoder output (concat-mode masks, as
    ``GLUTransformer.forward``)."""
    enc_seg = (input_ids != 0).to(torch.int32)
    h = model.decoder(
        model.shared(decoder_input_ids),
        MaskSpec(None, None, True),
        enc,
        MaskSpec(None, enc_seg, False),
    )
    if model.config.tie_embeddings:
        return F.linear(h * model.config.d_model**-0.5, model.shared.weight).float()
    return model.lm_head(h).float()


@torch.no_grad()
def greedy_decode(
    model: nn.Module, input_ids: torch.Tensor, max_tokens: int, vocab_size: int, eos_id: int = 1
) -> list[list[int]]:
    """Greedy decoding (T5's evaluation): start token 0, argmax over the real vocabulary (ids ≥ V
    are embedding padding rows), stop at EOS or after ``max_tokens``."""
    enc = model.encoder(model.shared(input_ids), _enc_spec(input_ids))
    b = input_ids.shape[0]
    dec = torch.zeros(b, 1, dtype=torch.long, device=input_ids.device)
    done = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
    for _ in range(max_tokens):
        logits = decoder_logits(model, enc, input_ids, dec)[:, -1, :vocab_size]
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        dec = torch.cat([dec, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    out = []
    for row in dec[:, 1:].tolist():
        out.append(row[: row.index(eos_id)] if eos_id in row else row)
    return out


def _enc_spec(input_ids: torch.Tensor) -> MaskSpec:
    seg = (input_ids != 0).to(torch.int32)
    return MaskSpec(seg, seg, False)
