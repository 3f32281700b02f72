"""The model a fine-tuning run trains: the T5 model itself (text head), or an encoder with a
``cls``/``hire`` head. Parts a head never uses are removed (never trained, never saved): T5's
decoder and LM head, BERT's MLM/NSP heads (``cls``; the pooler stays, the ``cls`` head uses it).
T5's dropout is set to 0.1 as T5 fine-tuned (pretraining ran without); BERT keeps its config's."""

from __future__ import annotations

from torch import nn

from c4forge.finetune.head_registry import get_head
from c4forge.finetune.heads import EncoderClassifier
from c4forge.trainers.models import get_family

FINETUNE_DROPOUT = 0.1


def build_finetune_model(
    family: str, backbone: nn.Module, head: str, d_model: int, num_labels: int
) -> nn.Module:
    if get_family(family).encoder_decoder:
        from c4forge.finetune.t5_adapter import set_dropout

        set_dropout(backbone, FINETUNE_DROPOUT)
        if get_head(head).generates:
            return backbone
        del backbone.decoder
        if hasattr(backbone, "lm_head"):
            del backbone.lm_head
    elif hasattr(backbone, "cls"):  # BertForPreTraining's MLM + NSP heads
        del backbone.cls
    return EncoderClassifier(family, backbone, head, d_model, num_labels)
