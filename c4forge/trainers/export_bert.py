"""Export a bert-family checkpoint to an HF ``BertForPreTraining`` folder (finetune.md §2).

The model uses HF's parameter names, so the weights are a state-dict copy (the decoder is tied to
the word embeddings and not stored; HF ties it on load). HF BERT has no gated FFN and one
activation per model, so only ``--ffn gelu`` (exact GELU, HF ``hidden_act: "gelu"``) exports; any
other variant is refused before anything is written.

The tokenizer is a ``tokenizers`` Unigram over the run's SentencePiece pieces whose three top
extra ids are named ``[MASK]`` (V−1), ``[CLS]`` (V−2) and ``[SEP]`` (V−3) (objectives.md §4.1),
with BERT's pair template ``[CLS] A [SEP] B [SEP]`` and segment ids 0/1, so
``AutoTokenizer.from_pretrained(DIR)(a, b)`` gives the ids the shards hold.
"""

from __future__ import annotations

from typing import Any

from c4forge.errors import ConfigError

BERT_SPECIALS = ("[MASK]", "[CLS]", "[SEP]")  # ids V−1, V−2, V−3


def hf_bert_config_dict(cfg: Any, dropout_rate: float | None = None) -> dict[str, Any]:
    """``config.json`` of the HF folder; a non-``gelu`` FFN is a ConfigError (no HF equivalent)."""
    if cfg.ffn != "gelu":
        raise ConfigError(
            f"cannot export --ffn {cfg.ffn} to HF BertForPreTraining: HF BERT has only the "
            "2-matrix FFN with one activation; only --ffn gelu (exact GELU) exports"
        )
    rate = cfg.dropout_rate if dropout_rate is None else dropout_rate
    return {
        "model_type": "bert",
        "architectures": ["BertForPreTraining"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.d_ff,
        "hidden_act": "gelu",
        "hidden_dropout_prob": rate,
        "attention_probs_dropout_prob": rate,
        "max_position_embeddings": cfg.max_position,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_epsilon,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
    }


def bert_files(cfg: Any, vocab: Any, max_len: int, dropout_rate: float | None) -> dict[str, Any]:
    """The folder's files besides the weights (name → dict for JSON, or bytes). With ``vocab``
    None only the config is made (the early check that the FFN exports)."""
    files: dict[str, Any] = {"config.json": hf_bert_config_dict(cfg, dropout_rate)}
    if vocab is None:
        return files
    from tokenizers import processors

    from c4forge.trainers.export import tokenizer_json

    if vocab.extra_ids < len(BERT_SPECIALS):
        raise ConfigError(f"a bert vocabulary needs ≥ 3 extra ids, this one has {vocab.extra_ids}")
    v = vocab.vocab_size
    names = [*BERT_SPECIALS, *(f"<extra_id_{k}>" for k in range(3, vocab.extra_ids))]
    cls_id, sep_id = v - 2, v - 3
    template = processors.TemplateProcessing(
        single=["[CLS]", "$A:0", "[SEP]:0"],
        pair=["[CLS]", "$A:0", "[SEP]:0", "$B:1", "[SEP]:1"],
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    files["tokenizer.json"] = tokenizer_json(vocab, names, template).encode("utf-8")
    specials = {
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
    }
    files["tokenizer_config.json"] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(max_len),
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        **specials,
    }
    files["special_tokens_map.json"] = specials
    with open(vocab.plain_model_path, "rb") as f:
        files["spiece.model"] = f.read()  # the plain SentencePiece model, for reference
    return files


class BertExport:
    """The bert family's exporter (``Family.exporter``): a ``BertForPreTraining`` folder."""

    architecture = "BertForPreTraining"

    def check(self, cfg: Any, dropout_rate: float | None) -> None:
        bert_files(cfg, None, 0, dropout_rate)  # a non-gelu FFN is refused here

    def files(
        self,
        cfg: Any,
        vocab: Any,
        max_len: int,
        dropout_rate: float | None,
        tensors: dict[str, Any],
        embed_token_copies: bool,
    ) -> dict[str, Any]:
        return bert_files(cfg, vocab, max_len, dropout_rate)


BERT_EXPORT = BertExport()
