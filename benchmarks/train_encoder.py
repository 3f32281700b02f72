"""The encoder side of benchmarks/train.py (``--preset bert-*``): c4forge's BERT against HF
``BertForPreTraining`` with the same weights on the same batches.

Rows are ``--inputs-length`` tokens (default 128) with ``--predictions`` masked positions (BERT's
20), real ``bert_mlm_nsp`` rows from ``--shards`` or random ones. Each model computes masked-LM +
NSP loss its own way: ours gathers the masked positions before the vocabulary matmul, HF's
``labels=`` path computes logits at every position, as users run it. AdamW (BERT's), bf16 +
``torch.compile`` on CUDA, fp32 eager on the CPU; FLOPs from finetune.md §2's shape
(``flops.bert_flops_per_example``) for MFU.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np
import torch
from train import describe, report

from c4forge.trainers.data import DataPlan, TrainStream, open_shard_set
from c4forge.trainers.flops import bert_flops_per_example
from c4forge.trainers.models.bert import BERT_COLUMNS, BertForPreTraining, BertTraining, make_config
from c4forge.trainers.optim import build_optimizer, weight_decay_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # hf_reference
from hf_reference import build_hf_bert  # noqa: E402


def bert_batches(args, vocab_size: int, n: int) -> list[dict[str, torch.Tensor]]:
    """Real bert_mlm_nsp rows (``--shards``) or random rows with ``--predictions`` masks each."""
    if args.shards:
        shards = open_shard_set(args.shards)
        obj = shards.index["objective"]
        args.inputs_length, args.predictions = obj["inputs_length"], obj["targets_length"]
        plan = DataPlan(batch_size=args.batch_size)
        stream = TrainStream(shards, plan, 0, n, columns=BERT_COLUMNS)
        return [{k: item[k] for k in BERT_COLUMNS} for item in stream]
    rng = np.random.default_rng(0)
    b, t, p = args.batch_size, args.inputs_length, args.predictions
    segments = np.broadcast_to((np.arange(t) >= t // 2).astype(np.int64), (b, t)).copy()
    out = []
    for _ in range(n):
        ids = rng.integers(3, min(vocab_size, 32000), (b, t))
        pos = np.sort([rng.choice(np.arange(1, t), p, replace=False) for _ in range(b)], axis=1)
        out.append(
            {
                "input_ids": torch.from_numpy(ids),
                "token_type_ids": torch.from_numpy(segments),
                "masked_lm_positions": torch.from_numpy(pos),
                "masked_lm_ids": torch.from_numpy(np.take_along_axis(ids, pos, 1)),
                "masked_lm_weights": torch.ones(b, p),
                "next_sentence_label": torch.from_numpy(rng.integers(0, 2, b)),
            }
        )
    return out


def make_bert_step(name, model, dev, compile_):
    """One AdamW step of MLM + NSP loss (ours: the trainer's sums; HF: its labels= path)."""
    model.train()
    opt = build_optimizer("adamw", weight_decay_groups(model.named_parameters()), lr=1e-4)
    fwd = torch.compile(model) if compile_ else model
    autocast = (
        torch.autocast(dev.kind, dtype=torch.bfloat16)
        if dev.kind == "cuda"
        else contextlib.nullcontext()
    )
    glue = BertTraining()

    def step(item):
        b = glue.to_device(item, dev.device, non_blocking=True)
        if name == "hf-bert":
            labels = torch.full_like(b.input_ids, -100)
            real = b.masked_lm_weights > 0
            labels.scatter_(1, b.masked_lm_positions, torch.where(real, b.masked_lm_ids, -100))
            with autocast:
                loss = fwd(
                    input_ids=b.input_ids,
                    token_type_ids=b.token_type_ids,
                    attention_mask=(b.input_ids != 0).long(),
                    labels=labels,
                    next_sentence_label=b.next_sentence_label,
                ).loss
        else:
            sums, _ = glue.forward_sums(fwd, b, 0.0, autocast)
            loss = (sums / glue.counts(b).clamp_min(1)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def main_bert(args, dev, compile_, peak) -> None:
    data = bert_batches(args, args.embedding_size, args.steps + args.warmup)
    cfg = make_config(args.preset, args.embedding_size, ffn=args.ffn or "gelu")
    flops = bert_flops_per_example(cfg, args.inputs_length, args.predictions)
    tokens = args.batch_size * args.inputs_length
    nonpad = sum(int((b["input_ids"] != 0).sum()) for b in data) / len(data)
    describe(dev, compile_)
    print(
        f"preset {args.preset} ffn {cfg.ffn} d_ff {cfg.d_ff}, E {cfg.vocab_size}, batch "
        f"{args.batch_size} × {args.inputs_length} ({args.predictions} predictions), "
        f"{flops:.3g} FLOPs/example, {'real shard rows' if args.shards else 'random full rows'}"
    )
    torch.manual_seed(0)
    ours = BertForPreTraining(cfg).to(dev.device)
    models = [("c4forge", ours)]
    if not args.no_hf and cfg.ffn == "gelu":  # HF BERT has no gated FFN
        models.append(("hf-bert", build_hf_bert(cfg, ours).to(dev.device)))
    report(models, make_bert_step, data, dev, compile_, args, flops, tokens, nonpad, peak)
