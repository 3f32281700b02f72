"""The HF ``T5ForConditionalGeneration`` equivalent of a ``ModelConfig`` (benchmarks, tests).

transformers 5.x always ties ``lm_head`` to ``shared`` when a model is *constructed* (its
``T5Config`` forces ``tie_word_embeddings = True``; only ``from_pretrained`` with two different
tensors unties), so for an untied config we give the HF model its own head after construction.
"""

from __future__ import annotations

from c4forge.trainers.config import ModelConfig
from c4forge.trainers.export import hf_config_dict


def hf_config(cfg: ModelConfig, attn_implementation: str | None = None):
    from transformers import T5Config

    values = hf_config_dict(cfg)
    values.pop("model_type")
    config = T5Config(**values)
    if attn_implementation:
        config._attn_implementation = attn_implementation
    return config


def build_hf_model(cfg: ModelConfig, model=None, attn_implementation: str | None = None):
    """An HF T5 of the same shape; with ``model`` (a GLUTransformer) it gets the same weights."""
    import torch
    from torch import nn
    from transformers import T5ForConditionalGeneration

    hf = T5ForConditionalGeneration(hf_config(cfg, attn_implementation))
    if not cfg.tie_embeddings:
        hf.lm_head = nn.Linear(cfg.d_model, cfg.embedding_size, bias=False)
        hf.config.scale_decoder_outputs = False  # 5.x flag; 4.x reads tie_word_embeddings
    if model is not None:
        with torch.no_grad():
            result = hf.load_state_dict(model.state_dict(), strict=False)
        tied = ("embed_tokens", "lm_head") if cfg.tie_embeddings else ("embed_tokens",)
        bad = [k for k in result.missing_keys if not any(t in k for t in tied)]
        if bad or result.unexpected_keys:
            raise RuntimeError(
                f"HF T5 does not match: missing {bad}, unexpected {result.unexpected_keys}"
            )
        hf.encoder.embed_tokens = hf.shared
        hf.decoder.embed_tokens = hf.shared
    return hf


def hf_bert_config(cfg, attn_implementation: str | None = None):
    """HF ``BertConfig`` of a c4forge bert config (only the ``gelu`` FFN has an HF equivalent)."""
    from transformers import BertConfig

    from c4forge.trainers.export_bert import hf_bert_config_dict

    config = BertConfig(**{k: v for k, v in hf_bert_config_dict(cfg).items() if k != "model_type"})
    if attn_implementation:
        config._attn_implementation = attn_implementation
    return config


def build_hf_bert(cfg, model=None, attn_implementation: str | None = None):
    """An HF ``BertForPreTraining`` of the same shape; with ``model`` it gets the same weights."""
    import torch
    from transformers import BertForPreTraining

    hf = BertForPreTraining(hf_bert_config(cfg, attn_implementation))
    if model is not None:
        with torch.no_grad():
            result = hf.load_state_dict(model.state_dict(), strict=False)
        bad = [k for k in result.missing_keys if not k.startswith("cls.predictions.decoder")]
        if bad or result.unexpected_keys:
            raise RuntimeError(
                f"HF BERT does not match: missing {bad}, unexpected {result.unexpected_keys}"
            )
        hf.tie_weights()
    return hf


def cross_entropy_reference(logits, targets):
    """HF's loss convention (labels −100 where the weight is 0, mean over the rest): what
    ``trainers.loss.weighted_cross_entropy`` must equal once divided by its weight."""
    import torch.nn.functional as F

    labels = targets.long().masked_fill(targets == 0, -100)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
