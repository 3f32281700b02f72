"""`c4forge export` (model.md §7–§8): a checkpoint in, a folder HF transformers loads and agrees
with (logits to 1e-5 in fp32, the tokenizer's sentinels at V − 1 …), bad checkpoints refused."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest
import torch

from c4forge.cli import main
from c4forge.errors import InputError, OutputExistsError, VerificationError
from c4forge.io.storage import sha256, write_json
from c4forge.trainers.config import make_config
from c4forge.trainers.data import decoder_input_tokens
from c4forge.trainers.export import export, load_model, resolve_checkpoint
from c4forge.trainers.models.t5 import GLUTransformer

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
import train_fixtures as fx  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

PIECES = 1000
V = PIECES + 100
E = -(-V // 128) * 128  # 1152


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def c4_texts(c4_sample) -> list[str]:
    with gzip.open(c4_sample, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, c4_texts) -> str:
    """A real unigram SentencePiece model trained on the bundled C4 sample (T5's special ids)."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(c4_texts[:300]),
        model_writer=buf,
        vocab_size=PIECES,
        **fx.T5_SPM_SETTINGS,
    )
    path = str(tmp_path_factory.mktemp("vocab") / "sentencepiece.model")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path


def write_run(run: str, model: GLUTransformer, vocab_model: str | None, step: int = 5, **state):
    """A run directory in the checkpoint layout of model.md §7."""
    name = f"step-{step:08d}"
    step_dir = os.path.join(run, "checkpoints", name)
    os.makedirs(step_dir)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(step_dir, "model.safetensors"))
    write_json(os.path.join(step_dir, "config.json"), model.config.to_dict())
    config = {"inputs_length": 48}
    if vocab_model:
        config["vocab_model"] = vocab_model
        state.setdefault("vocab_sha256", sha256(vocab_model))
    write_json(
        os.path.join(step_dir, "trainer_state.json"), {"step": step, "config": config, **state}
    )
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write(name + "\n")
    return step_dir


def batch():
    g = torch.Generator().manual_seed(3)
    inputs = torch.randint(3, V, (3, 48), generator=g)
    inputs[1, 30:] = 0
    targets = torch.randint(3, V, (3, 12), generator=g)
    targets[2, 9:] = 0
    return inputs, targets


@pytest.mark.parametrize(
    "ffn, tied", [("geglu", False), ("relu", False), ("swiglu", False), ("geglu", True)]
)
def test_hf_loads_export_with_equal_logits(tmp_path, spm_model, ffn, tied):
    torch.manual_seed(0)
    model = GLUTransformer(make_config("tiny", E, ffn=ffn, tie_embeddings=tied)).eval()
    run = str(tmp_path / "run")
    write_run(run, model, spm_model)
    out = str(tmp_path / "hf")
    summary = export(run, out)
    assert summary["step"] == 5 and summary["vocab_size"] == V
    assert sorted(os.listdir(out)) == sorted(
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "special_tokens_map.json",
            "spiece.model",
            "tokenizer_config.json",
            "tokenizer.json",
        ]
    )
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["tie_word_embeddings"] is tied  # written explicitly, false when untied
    assert cfg["vocab_size"] == E and cfg["d_ff"] == model.config.d_ff
    assert (
        cfg["feed_forward_proj"]
        == {"geglu": "gated-gelu", "relu": "relu", "swiglu": "gated-silu"}[ffn]
    )

    hf, info = transformers.T5ForConditionalGeneration.from_pretrained(
        out, output_loading_info=True, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    hf.eval()
    inputs, targets = batch()
    dec_in = decoder_input_tokens(targets)
    # HF's own shift (labels → decoder inputs, start id 0) is ours
    assert torch.equal(
        hf._shift_right(targets.masked_fill(targets == 0, -100)).clamp(min=0), dec_in
    )
    with torch.no_grad():
        ours = model(inputs, dec_in)
        theirs = hf(input_ids=inputs, attention_mask=(inputs != 0).long(), decoder_input_ids=dec_in)
    torch.testing.assert_close(theirs.logits, ours, atol=1e-5, rtol=0)
    # and the round trip through our own loader
    with torch.no_grad():
        torch.testing.assert_close(load_model(run)(inputs, dec_in), ours, atol=0, rtol=0)


def test_exported_tokenizer_maps_sentinels_from_the_top(tmp_path, spm_model, c4_texts):
    torch.manual_seed(0)
    run = str(tmp_path / "run")
    write_run(run, GLUTransformer(make_config("tiny", E)), spm_model)
    out = str(tmp_path / "hf")
    export(run, out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids("<extra_id_0>") == V - 1
    assert tok.convert_tokens_to_ids("<extra_id_99>") == PIECES
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok.model_max_length == 48  # the run's inputs_length
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    texts = [
        "The quick brown fox  jumps over the lazy dog.",
        "ﬁne café — ½ Ｆｕｌｌｗｉｄｔｈ",  # NFKC normalisation comes from the model's charsmap
        *c4_texts[300:400],  # real documents the vocabulary was not trained on
    ]
    for text in texts:
        assert tok(text).input_ids == sp.encode(text) + [1]
    ids = tok("a <extra_id_0> b <extra_id_1>").input_ids
    assert V - 1 in ids and V - 2 in ids
    assert tok.decode(sp.encode(texts[0])) == sp.decode(sp.encode(texts[0]))


def test_cli_export_run_and_step_dirs(tmp_path, spm_model, capsys):
    torch.manual_seed(0)
    run = str(tmp_path / "run")
    step_dir = write_run(run, GLUTransformer(make_config("tiny", E, ffn="reglu")), None)
    out = str(tmp_path / "hf")
    # vocabulary not recorded: refused with a hint, then given with --vocab
    assert main(["export", run, "--output", out]) == 2
    assert "--vocab" in capsys.readouterr().err
    assert main(["export", run, "--output", out, "--vocab", spm_model]) == 0
    assert "step 5" in capsys.readouterr().out
    assert main(["export", step_dir, "--output", out, "--vocab", spm_model]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["export", step_dir, out, "--vocab", spm_model, "--overwrite"]) == 0
    assert resolve_checkpoint(os.path.join(run, "checkpoints")) == step_dir
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_bad_checkpoints_are_refused(tmp_path, spm_model):
    torch.manual_seed(0)
    model = GLUTransformer(make_config("tiny", E))
    run = str(tmp_path / "run")
    step_dir = write_run(run, model, spm_model)
    out = str(tmp_path / "hf")

    with pytest.raises(InputError, match="no such"):
        export(str(tmp_path / "nope"), out)
    # a vocabulary other than the one the run was trained with
    other = str(tmp_path / "other-run")
    write_run(other, model, spm_model, vocab_sha256="0" * 64)
    with pytest.raises(VerificationError, match="000000000000"):
        export(other, out)
    # a config that does not match the weights
    cfg_path = os.path.join(step_dir, "config.json")
    good_cfg = open(cfg_path).read()
    write_json(cfg_path, make_config("tiny", E, ffn="relu").to_dict())
    with pytest.raises(VerificationError, match="wi_0"):
        export(run, out)
    with open(cfg_path, "w") as f:
        f.write(good_cfg)
    # a truncated weights file names its path
    weights = os.path.join(step_dir, "model.safetensors")
    data = open(weights, "rb").read()
    with open(weights, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(VerificationError, match="model.safetensors"):
        export(run, out)
    # `latest` naming a checkpoint that is not there
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write("step-00000099\n")
    with pytest.raises(VerificationError, match="step-00000099"):
        export(run, out)
    assert not os.path.exists(out)
    os.makedirs(out)
    open(os.path.join(out, "keep.txt"), "w").close()
    good = str(tmp_path / "good-run")
    write_run(good, model, spm_model)
    with pytest.raises(OutputExistsError):
        export(good, out)
    export(good, out, overwrite=True)
    assert "keep.txt" not in os.listdir(out)


@pytest.mark.parametrize("ffn, tied", [("gelu", False), ("bilinear", True)])
def test_hf_reference_model_is_the_same_function(ffn, tied):
    """benchmarks/train.py compares speed against this HF model: it must compute the same thing."""
    from hf_reference import build_hf_model

    torch.manual_seed(0)
    model = GLUTransformer(make_config("tiny", E, ffn=ffn, tie_embeddings=tied)).eval()
    hf = build_hf_model(model.config, model).eval()
    assert (hf.lm_head.weight is hf.shared.weight) == tied
    inputs, targets = batch()
    dec_in = decoder_input_tokens(targets)
    with torch.no_grad():
        theirs = hf(input_ids=inputs, attention_mask=(inputs != 0).long(), decoder_input_ids=dec_in)
        torch.testing.assert_close(theirs.logits, model(inputs, dec_in), atol=1e-5, rtol=0)
