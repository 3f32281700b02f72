"""The model a fine-tuning run trains: the pretrained model itself (a generating head: T5's text
head), or its encoder with a classifier head. The family readies the backbone
(``Family.finetune_backbone``): its fine-tuning dropout, and the parts a classifier head never
uses removed (never trained, never saved): T5's decoder and LM head, BERT's MLM/NSP heads."""

from __future__ import annotations

from torch import nn

from c4forge.finetune.head_registry import get_head
from c4forge.finetune.heads import EncoderClassifier
from c4forge.trainers.models import get_family


def build_finetune_model(
    family: str, backbone: nn.Module, head: str, d_model: int, num_labels: int
) -> nn.Module:
    generates = get_head(head).generates
    ready = get_family(family).finetune_backbone
    if ready is not None:
        backbone = ready(backbone, generates)
    if generates:
        return backbone
    return EncoderClassifier(family, backbone, head, d_model, num_labels)
