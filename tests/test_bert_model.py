"""The bert family's encoder (finetune.md §2): presets, HF equivalence of the network, every GLU
FFN, padding, the fine-tuning API (hidden states, pooler) and the family registry."""

from __future__ import annotations

import contextlib
import math

import pytest

torch = pytest.importorskip("torch")

from hf_reference import build_hf_bert  # noqa: E402

from c4forge.errors import ConfigError, InputError  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers import models  # noqa: E402
from c4forge.trainers.config import FFN_VARIANTS  # noqa: E402
from c4forge.trainers.models.bert import BertConfig, BertForPreTraining, make_config  # noqa: E402


def _batch(vocab: int = 1100, b: int = 3, t: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (b, t), generator=g)
    if b > 1:
        ids[1, 15:] = 0  # a padded row
    tt = torch.zeros_like(ids)
    tt[:, 10:] = 1
    return ids, tt


@pytest.mark.parametrize(
    "preset, layers, hidden, heads, d_ff",
    [
        ("bert-tiny", 2, 128, 2, 512),
        ("bert-mini", 4, 256, 4, 1024),
        ("bert-small", 4, 512, 8, 2048),
        ("bert-medium", 8, 512, 8, 2048),
        ("bert-base", 12, 768, 12, 3072),
    ],
)
def test_presets_follow_the_table(preset, layers, hidden, heads, d_ff):
    cfg = make_config(preset, 30522)
    assert (cfg.n_layers, cfg.d_model, cfg.num_heads, cfg.d_ff) == (layers, hidden, heads, d_ff)
    assert cfg.ffn == "gelu" and cfg.max_position == 512 and cfg.layer_norm_epsilon == 1e-12
    assert make_config(preset, 30522, ffn="geglu").d_ff == d_ff * 2 // 3  # the 2/3 rule


def test_bert_base_has_the_papers_parameter_count():
    with torch.device("meta"):
        model = BertForPreTraining(make_config("bert-base", 30522))
    n = sum(p.numel() for p in model.parameters())
    assert 109e6 < n < 111e6  # BERT paper: 110 M with its 30k WordPiece vocabulary
    with torch.device("meta"):  # gated variants: same parameters by the 2/3 rule (± biases)
        gated = BertForPreTraining(make_config("bert-base", 30522, ffn="swiglu"))
    assert abs(sum(p.numel() for p in gated.parameters()) - n) / n < 1e-3


def test_config_errors_name_the_valid_choices():
    with pytest.raises(ConfigError, match="valid: bert-tiny, bert-mini"):
        make_config("bert-huge", 1000)
    with pytest.raises(ConfigError, match="valid: relu, gelu, swish"):
        make_config("bert-tiny", 1000, ffn="swoosh")
    with pytest.raises(ConfigError, match="unknown key"):
        BertConfig.from_dict({"vocab_size": 10, "hidden": 3})
    with pytest.raises(ConfigError, match="valid: tiny, small, base, bert-tiny"):
        models.family_of_preset("bert-tni")


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_equals_hf_bert_for_pretraining(attn):
    """Same weights in HF's BertForPreTraining: MLM and NSP logits agree (fp32, eval mode)."""
    torch.manual_seed(0)
    cfg = make_config("bert-tiny", 1152, attn=attn)
    model = BertForPreTraining(cfg).eval()
    hf = build_hf_bert(cfg, model).eval()
    ids, tt = _batch()
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=(ids != 0).long())
        full = model.full_mlm_logits(ids, tt)
        positions = torch.tensor([[1, 2, 3], [4, 14, 0], [5, 6, 23]])
        mlm, nsp = model(ids, tt, positions)
    real = (ids != 0)[..., None]  # HF computes pad rows too; compare real ones
    torch.testing.assert_close(full * real, ref.prediction_logits * real, rtol=0, atol=1e-5)
    torch.testing.assert_close(nsp, ref.seq_relationship_logits, rtol=0, atol=1e-5)
    picked = torch.gather(full, 1, positions[:, :, None].expand(-1, -1, full.shape[-1]))
    torch.testing.assert_close(mlm, picked, rtol=0, atol=1e-5)


@pytest.mark.parametrize("ffn", sorted(FFN_VARIANTS))
def test_every_ffn_forward_backward(ffn):
    torch.manual_seed(1)
    model = BertForPreTraining(make_config("bert-tiny", 1152, ffn=ffn))
    ids, tt = _batch()
    mlm, nsp = model(ids, tt, torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert mlm.shape == (3, 2, 1152) and nsp.shape == (3, 2) and mlm.dtype == torch.float32
    (mlm.logsumexp(-1).sum() + nsp.sum()).backward()
    gate = model.bert.encoder.layer[0].intermediate
    assert hasattr(gate, "gate") == (FFN_VARIANTS[ffn][0] == 3)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(2)
    model = BertForPreTraining(make_config("bert-tiny", 1152)).eval()
    ids, tt = _batch(b=1, t=12)
    ids[:, 12:] = 0
    padded = torch.cat([ids, torch.zeros(1, 8, dtype=ids.dtype)], 1)
    tt_pad = torch.cat([tt, torch.zeros(1, 8, dtype=tt.dtype)], 1)
    with torch.no_grad():
        a = model.hidden_states(ids, tt)[-1]
        b = model.hidden_states(padded, tt_pad)[-1][:, :12]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_fine_tuning_api_hidden_states_and_pooler():
    torch.manual_seed(3)
    cfg = make_config("bert-tiny", 1152)
    model = BertForPreTraining(cfg).eval()
    ids, tt = _batch()
    with torch.no_grad():
        states = model.hidden_states(ids, tt, (ids != 0).long())
        assert len(states) == cfg.n_layers + 1
        assert all(s.shape == (3, 24, cfg.d_model) for s in states)
        emb = model.bert.embeddings(ids, tt)
        torch.testing.assert_close(states[0], emb)  # H_0 = the embedding output
        pooled = model.pooled(states[-1])
        assert pooled.shape == (3, cfg.d_model) and pooled.abs().max() <= 1.0  # tanh
        nsp = model.cls.seq_relationship(pooled)
        _, nsp_forward = model(ids, tt, torch.zeros(3, 1, dtype=torch.long))
    torch.testing.assert_close(nsp, nsp_forward)
    assert (cfg.d_model, cfg.n_layers, cfg.max_position, cfg.vocab_size) == (128, 2, 512, 1152)
    assert cfg.dropout_rate == 0.1


def test_init_statistics_and_first_loss_near_ln_e():
    torch.manual_seed(4)
    cfg = make_config("bert-tiny", 2048)
    model = BertForPreTraining(cfg)
    w = model.bert.encoder.layer[0].attention.self.query.weight
    assert abs(w.std().item() - 0.02) < 0.002 and model.bert.pooler.dense.bias.abs().max() == 0
    ids, tt = _batch(vocab=2000, b=8, t=32)
    positions = torch.randint(1, 14, (8, 5))
    mlm, _ = model(ids, tt, positions)
    labels = torch.gather(ids, 1, positions)
    loss = torch.nn.functional.cross_entropy(mlm.reshape(-1, 2048), labels.reshape(-1))
    assert abs(loss.item() - math.log(2048)) < 0.1  # N(0, 0.02) weights: near-uniform logits


def test_registry_builds_and_loads_every_family(tmp_path):
    torch.manual_seed(5)
    for preset, family in (("tiny", "t5"), ("bert-tiny", "bert")):
        fam, cfg = models.make_config(preset, 1152)
        assert fam == family and models.family_of(cfg) == family
        model = models.build_model(family, cfg)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        run = tmp_path / family
        ckpt.save_checkpoint(str(run), 7, model, opt, {"config": {}}, cfg.to_dict())
        loaded = models.load_pretrained(str(run))
        assert loaded.family == family and loaded.step == 7 and not loaded.model.training
        assert loaded.config == cfg and len(loaded.fingerprint) == 64
        assert models.config_from_dict(family, cfg.to_dict()) == cfg
        assert models.read_config(cfg.to_dict()) == (family, cfg)
        a, b = model.state_dict(), loaded.model.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        again = models.load_pretrained(loaded.checkpoint)  # a step-N folder works too
        assert again.fingerprint == loaded.fingerprint
    with pytest.raises(ConfigError, match="a bert model config is not a t5 config"):
        models.config_from_dict("t5", make_config("bert-tiny", 1152).to_dict())
    with pytest.raises(ConfigError, match="cannot build"):
        models.build_model("t5", make_config("bert-tiny", 1152))
    with pytest.raises(InputError, match="no such run"):
        models.load_pretrained(str(tmp_path / "absent"))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_full_rows_attend_without_a_mask(attn):
    """Rows without padding declared full: same MLM/NSP logits and gradients as the masked path."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 500, (2, 24), generator=g)
    types = (torch.arange(24) >= 12).long().expand(2, -1)
    positions = torch.tensor([[1, 5, 9], [2, 3, 20]])
    out = {}
    for full in (False, True):
        torch.manual_seed(0)
        model = BertForPreTraining(make_config("bert-tiny", 512, attn=attn, dropout_rate=0.0))
        mlm, nsp = model(ids, types, positions, full_rows=full)
        (mlm.logsumexp(-1).sum() + nsp.logsumexp(-1).sum()).backward()
        out[full] = (mlm.detach(), nsp.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-5, rtol=0)
    for name, grad in out[False][2].items():
        torch.testing.assert_close(out[True][2][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_sparse_mlm_head_gives_the_dense_loss_and_counts_only_its_flops():
    """The head runs at the P gathered positions only: its loss (the trainer's sums, padded
    predictions weighing 0) equals the dense loss over logits at every position with labels
    elsewhere ignored; the FLOPs count the P rows the head computes, not the T rows of a dense
    head, so MFU is not inflated."""
    import torch.nn.functional as F

    from c4forge.trainers.flops import bert_flops_breakdown
    from c4forge.trainers.models.bert import BertTraining

    ids, tt = _batch()
    positions = torch.tensor([[1, 4, 7, 0], [2, 3, 9, 0], [5, 6, 8, 11]])  # last: padded for 2 rows
    weights = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    labels = torch.gather(ids, 1, positions)
    item = {
        "input_ids": ids,
        "token_type_ids": tt,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_label": torch.tensor([0, 1, 0]),
    }
    torch.manual_seed(0)
    model = BertForPreTraining(make_config("bert-tiny", 1100, dropout_rate=0.0))
    glue = BertTraining()
    sums, _ = glue.forward_sums(model, glue.to_device(item, "cpu"), 0.0, contextlib.nullcontext())
    dense_labels = torch.full_like(ids, -100)
    dense_labels.scatter_(1, positions, torch.where(weights > 0, labels, -100))
    dense = model.full_mlm_logits(ids, tt)
    dense_sum = F.cross_entropy(dense.reshape(-1, 1100), dense_labels.reshape(-1), reduction="sum")
    torch.testing.assert_close(sums[0], dense_sum, atol=1e-4, rtol=1e-6)
    cfg = model.config
    parts = bert_flops_breakdown(cfg, seq_length=24, predictions=4)
    assert parts["mlm_decoder"] == 6.0 * cfg.d_model * cfg.vocab_size * 4  # P rows, not T = 24
