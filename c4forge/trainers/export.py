"""Export a checkpoint to an HF ``T5ForConditionalGeneration`` folder (model.md §7–§8).

The model already uses HF's parameter names, so the weights are a state-dict copy; the work here is
finding the checkpoint, checking it is complete and consistent, writing HF's config with the flags
that make both transformers 4.x and 5.x load it untied and unscaled, and shipping the tokenizer.
The folder is written under a temporary name and renamed, so a reader never sees half of it.
bert-family runs go to ``export_bert`` (HF ``BertForPreTraining``); the family comes from the
checkpoint's config.json.

``tie_word_embeddings: false`` is written explicitly (model.md §8). transformers 5.x's
``T5Config`` nevertheless forces ``tie_word_embeddings = True`` internally and, finding two
different tensors, logs "…so we will NOT tie them" on every load of an untied T5 (HF's own
t5-v1_1 checkpoints and its own ``save_pretrained`` output included); no config key or weights
layout silences it there without changing the logits (model.md §8 has the lines of 5.24 that
decide it). 4.x reads the flag and is quiet.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError, InputError, OutputExistsError, VerificationError
from c4forge.io import ownership
from c4forge.io.storage import read_json, sha256, write_bytes, write_json
from c4forge.trainers.checkpoint import read_model_tensors, resolve_checkpoint, save_tensors
from c4forge.trainers.config import ModelConfig
from c4forge.trainers.models import read_config, run_dir_of
from c4forge.vocab.vocab import proto_fields
from c4forge.vocab.vocab_files import copy_dir

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.json"
EXTRA_IDS = 100


def hf_config_dict(cfg: ModelConfig, dropout_rate: float | None = None) -> dict[str, Any]:
    """``config.json`` of the HF folder (model.md §8), every key written explicitly.

    ``tie_word_embeddings`` is false unless the model is tied: in 4.x it decides tying *and* the
    d^-1/2 logit scaling; 5.x infers "untied, unscaled" from this explicit false plus both tensors.
    """
    return {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": cfg.embedding_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.d_kv,
        "d_ff": cfg.d_ff,
        "num_layers": cfg.num_layers,
        "num_decoder_layers": cfg.num_decoder_layers,
        "num_heads": cfg.num_heads,
        "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
        "relative_attention_max_distance": cfg.relative_attention_max_distance,
        "layer_norm_epsilon": cfg.layer_norm_epsilon,
        "dropout_rate": cfg.dropout_rate if dropout_rate is None else dropout_rate,
        "initializer_factor": 1.0,
        "feed_forward_proj": cfg.hf_feed_forward_proj,
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "is_encoder_decoder": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        "use_cache": True,
    }


# ---------------------------------------------------------------------------------------------
# Reading a checkpoint


@dataclass
class Checkpoint:
    directory: str
    config: ModelConfig
    state: dict[str, Any]  # trainer_state.json, {} when absent


def read_checkpoint_meta(path: str) -> Checkpoint:
    step_dir = resolve_checkpoint(path)
    cfg_path = os.path.join(step_dir, CONFIG_FILE)
    if not os.path.isfile(cfg_path):
        raise VerificationError(f"{step_dir}: {CONFIG_FILE} is missing (incomplete checkpoint)")
    try:
        raw = read_json(cfg_path)
    except ValueError as err:
        raise VerificationError(f"{cfg_path}: not valid JSON ({err})") from err
    if isinstance(raw, dict) and isinstance(raw.get("model"), dict):
        raw = raw["model"]  # tolerate {"model": {...}, ...} wrappers
    try:
        _, cfg = read_config(raw)
    except (ConfigError, TypeError) as err:
        raise VerificationError(f"{cfg_path}: {err}") from err
    state: dict[str, Any] = {}
    state_path = os.path.join(step_dir, STATE_FILE)
    if os.path.isfile(state_path):
        try:
            state = read_json(state_path)
        except ValueError as err:
            raise VerificationError(f"{state_path}: not valid JSON ({err})") from err
    return Checkpoint(step_dir, cfg, state)


def load_weights(ckpt: Checkpoint) -> dict:
    """The checkpoint's tensors, checked name by name and shape by shape against the config."""
    import torch

    from c4forge.trainers.models import build_model, family_of

    with torch.device("meta"):
        model = build_model(family_of(ckpt.config), ckpt.config)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return read_model_tensors(ckpt.directory, expected)[0]


def load_model(path: str):
    """The model of its family with the weights of a run or checkpoint (eval mode, CPU)."""
    from c4forge.trainers.models import build_model, family_of

    ckpt = read_checkpoint_meta(path)
    model = build_model(family_of(ckpt.config), ckpt.config)
    model.load_state_dict(load_weights(ckpt))
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Vocabulary


def _nested(state: dict[str, Any], *keys: str) -> Any:
    cfg = state.get("config")
    for source in (cfg if isinstance(cfg, dict) else {}, state):
        for key in keys:
            if source.get(key):
                return source[key]
    return None


def find_vocabulary(ckpt: Checkpoint, override: str | None):
    """The run's vocabulary: ``--vocab`` if given, else the run's own copy (``RUN/vocab``), else
    what trainer_state.json records, else a ``spiece.model`` / ``sentencepiece.model`` next to the
    checkpoint or in the run dir."""
    from c4forge.vocab.vocab import Vocabulary

    candidates: list[str] = []
    if override:
        candidates.append(override)
    else:
        own = copy_dir(run_dir_of(ckpt.directory))  # RUN/vocab: survives moving the run
        if own:
            candidates.append(own)
        recorded = _nested(ckpt.state, "vocab_dir", "vocab_model", "vocab")
        if isinstance(recorded, str):
            candidates.append(recorded)
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(ckpt.directory)))
        for d in (ckpt.directory, run_dir):
            for name in ("spiece.model", "sentencepiece.model"):
                candidates.append(os.path.join(d, name))
    for cand in candidates:
        if os.path.exists(cand):
            vocab = (
                Vocabulary.load(cand)
                if os.path.isdir(cand)
                else Vocabulary.load(cand, extra_ids=EXTRA_IDS)
            )
            break
    else:
        raise InputError(
            f"{ckpt.directory}: cannot find the run's SentencePiece vocabulary (looked at "
            f"{', '.join(candidates) or 'nothing'}); pass --vocab VOCAB_DIR"
        )
    want = _nested(ckpt.state, "vocab_sha256")
    if want is None and isinstance(ckpt.state.get("vocabulary"), dict):
        want = ckpt.state["vocabulary"].get("sha256")
    if want and want != vocab.sha256:
        raise VerificationError(
            f"the checkpoint was trained with vocabulary {want[:12]}…, "
            f"{vocab.plain_model_path} is {vocab.sha256[:12]}…"
        )
    if vocab.vocab_size > ckpt.config.embedding_size:
        raise VerificationError(
            f"vocabulary has {vocab.vocab_size} ids but the model only "
            f"{ckpt.config.embedding_size} embedding rows"
        )
    return vocab


def tokenizer_json(vocab, extra_names: list[str] | None = None, template=None) -> str | None:
    """HF fast-tokenizer ``tokenizer.json`` equivalent to ``spiece.model`` + extra ids.

    transformers 5.x has only the ``tokenizers``-backed T5Tokenizer; without this file it converts
    ``spiece.model`` at load time through protobuf (which fails when the installed protobuf runtime
    is older than sentencepiece's generated code). Built like HF's T5 converter: Unigram over the
    pieces and their scores, the model's precompiled normalizer, Metaspace, ``</s>`` appended, and
    ``<extra_id_k>`` at V − 1 − k. ``None`` when the ``tokenizers`` library is not installed.

    ``extra_names`` renames the extra ids (index k = id V − 1 − k; the bert export names the top
    three [MASK], [CLS], [SEP]); ``template`` is a ``TemplateProcessing`` post-processor
    replacing T5's "append </s>".
    """
    try:
        from tokenizers import (
            AddedToken,
            Tokenizer,
            decoders,
            normalizers,
            pre_tokenizers,
            processors,
        )
        from tokenizers.models import Unigram
    except ImportError:
        return None
    import sentencepiece as spm

    with open(vocab.plain_model_path, "rb") as f:
        proto = f.read()
    sp = spm.SentencePieceProcessor(model_proto=proto)
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    extras = extra_names or [f"<extra_id_{k}>" for k in range(vocab.extra_ids)]
    pieces += [(t, 0.0) for t in reversed(extras)]
    tk = Tokenizer(Unigram(pieces, unk_id=vocab.unk_id, byte_fallback=False))
    charsmap = spm_charsmap(proto)
    if charsmap:
        tk.normalizer = normalizers.Precompiled(charsmap)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        ]
    )
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tk.post_processor = template or processors.TemplateProcessing(
        single=["$A", "</s>"],
        pair=["$A", "</s>", "$B", "</s>"],
        special_tokens=[("</s>", vocab.eos_id)],
    )
    specials = ["<pad>", "</s>", "<unk>", *extras]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tk.to_str()


def tokenizer_files(vocab, model_max_length: int) -> dict[str, dict[str, Any]]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` for HF's T5Tokenizer."""
    extras = [f"<extra_id_{k}>" for k in range(vocab.extra_ids)]
    specials = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    return {
        "tokenizer_config.json": {
            "tokenizer_class": "T5Tokenizer",
            "extra_ids": vocab.extra_ids,
            "model_max_length": int(model_max_length),
            "additional_special_tokens": extras,
            "legacy": True,  # plain SentencePiece behaviour, as the model was trained
            **specials,
        },
        "special_tokens_map.json": {**specials, "additional_special_tokens": extras},
    }


# ---------------------------------------------------------------------------------------------
# Writing the folder


@ownership.owns_output("export", lambda path, output, **_: ownership.beside(output))
def export(
    path: str,
    output: str,
    *,
    vocab_path: str | None = None,
    overwrite: bool = False,
    embed_token_copies: bool = False,
    dropout_rate: float | None = None,
    model_max_length: int | None = None,
) -> dict[str, Any]:
    """Write the HF folder of the checkpoint's family; returns a summary (checkpoint, step,
    files, parameters). Everything is checked before the first byte is written."""
    from c4forge.trainers.models import family_of, get_family

    ckpt = read_checkpoint_meta(path)
    family = family_of(ckpt.config)
    exporter = get_family(family).exporter()
    exporter.check(ckpt.config, dropout_rate)  # e.g. bert refuses a non-gelu FFN here
    tensors = load_weights(ckpt)
    vocab = find_vocabulary(ckpt, vocab_path)
    if os.path.exists(output) and os.listdir(output) and not overwrite:
        raise OutputExistsError(f"{output}: exists and is not empty; pass --overwrite")
    max_len = int(model_max_length or _nested(ckpt.state, "inputs_length") or 512)
    files = exporter.files(ckpt.config, vocab, max_len, dropout_rate, tensors, embed_token_copies)
    architecture = exporter.architecture

    def write_weights(folder: str) -> None:
        save_tensors(tensors, os.path.join(folder, WEIGHTS_FILE))

    write_folder(output, files, write_weights)
    n_params = sum(t.numel() for k, t in tensors.items() if "embed_tokens" not in k)
    return {
        "checkpoint": ckpt.directory,
        "step": ckpt.state.get("step"),
        "output": output,
        "files": sorted(os.listdir(output)),
        "parameters": n_params,
        "ffn": ckpt.config.ffn,
        "family": family,
        "architecture": architecture,
        "tied": bool(getattr(ckpt.config, "tie_embeddings", True)),
        "vocab_size": vocab.vocab_size,
        "embedding_size": ckpt.config.embedding_size,
        "weights_sha256": sha256(os.path.join(output, WEIGHTS_FILE)),
    }


class T5Export:
    """The t5 family's exporter (``Family.exporter``): a ``T5ForConditionalGeneration`` folder."""

    architecture = "T5ForConditionalGeneration"

    def check(self, cfg: ModelConfig, dropout_rate: float | None) -> None:
        """Nothing to refuse before the weights are read."""

    def files(
        self,
        cfg: ModelConfig,
        vocab,
        max_len: int,
        dropout_rate: float | None,
        tensors: dict[str, Any],
        embed_token_copies: bool,
    ) -> dict[str, Any]:
        if embed_token_copies:  # for a transformers release that reports them missing
            tensors["encoder.embed_tokens.weight"] = tensors["shared.weight"].clone()
            tensors["decoder.embed_tokens.weight"] = tensors["shared.weight"].clone()
        return t5_files(cfg, vocab, max_len, dropout_rate)


T5_EXPORT = T5Export()


def t5_files(cfg: ModelConfig, vocab, max_len: int, dropout_rate: float | None) -> dict[str, Any]:
    """The T5 folder's files besides the weights: name → dict (JSON) or bytes."""
    files: dict[str, Any] = {
        CONFIG_FILE: hf_config_dict(cfg, dropout_rate),
        "generation_config.json": {
            "decoder_start_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 0,
        },
    }
    with open(vocab.plain_model_path, "rb") as f:
        files["spiece.model"] = f.read()
    files.update(tokenizer_files(vocab, max_len))
    fast = tokenizer_json(vocab)
    if fast is not None:
        files["tokenizer.json"] = fast.encode("utf-8")
    return files


def write_folder(output: str, files: dict[str, Any], write_weights) -> None:
    """Write ``files`` (and the weights) into a temporary folder next to ``output``, fsync,
    then rename it into place, so a reader never sees half of an export."""
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(output))}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        write_weights(tmp)
        for name, content in files.items():
            if isinstance(content, bytes):
                write_bytes(os.path.join(tmp, name), content)
            else:
                write_json(os.path.join(tmp, name), content)
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name), "rb") as f:
                os.fsync(f.fileno())
        if os.path.exists(output):
            old = f"{tmp}.old"
            os.replace(output, old)
            os.replace(tmp, output)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def spm_charsmap(model_proto: bytes) -> bytes | None:
    """``normalizer_spec.precompiled_charsmap`` of a SentencePiece ModelProto, read off the wire
    format (ModelProto field 3 → NormalizerSpec field 2) so no protobuf runtime is needed."""
    for number, wire, value, _ in proto_fields(model_proto):
        if number == 3 and wire == 2:
            for n2, w2, v2, _ in proto_fields(value):
                if n2 == 2 and w2 == 2:
                    return bytes(v2)
    return None
