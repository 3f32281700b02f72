"""Adapters over the T5 model's modules (c4forge.trainers T5 ``GLUTransformer``) that fine-tuning
needs and pretraining does not: every hidden state of the encoder, and greedy decoding.

The model's ``encoder.forward`` returns only the final output; HIRE needs ``H_0 … H_L``, so
``encoder_states`` walks the same blocks with the same mask the stack builds (``Stack._masks``),
in the same order and with the same dropouts, and returns the per-layer outputs too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from c4forge.trainers.models.t5 import MaskSpec


def set_dropout(model: nn.Module, rate: float) -> None:
    """Dropout ``rate`` everywhere in a T5 model (pretraining ran without; T5 fine-tuned with 0.1)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = rate
        elif hasattr(module, "SelfAttention") or hasattr(module, "EncDecAttention"):
            for attn_name in ("SelfAttention", "EncDecAttention"):
                attn = getattr(module, attn_name, None)
                if attn is not None:
                    attn.dropout = rate


def encoder_states(
    model: nn.Module, input_ids: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([H_0 … H_L], R)``: H_0 = the (dropped-out) embeddings entering block 1, H_j = block j's
    output (before the final norm), R = the encoder's output (final RMSNorm + dropout)."""
    stack = model.encoder
    seg = (input_ids != 0).to(torch.int32)
    x = model.shared(input_ids)
    mask, _ = stack._masks(x, MaskSpec(seg, seg, False), None, None)
    x = stack.dropout(x)
    states = [x]
    for block in stack.block:
        x = block(x, mask)
        states.append(x)
    return states, stack.dropout(stack.final_layer_norm(x))


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


def t5_hidden_states(
    model: nn.Module, batch: dict[str, torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The t5 family's ``Family.hidden_states``: :func:`encoder_states` of a batch."""
    return encoder_states(model, batch["input_ids"])
