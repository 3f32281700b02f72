"""GLUE loaders, T5 formats and metrics on real rows (tests/data/glue, byte-exact slices of the GLUE
files) and on small rows written in the formats of QQP, MNLI, QNLI and WNLI.

Expected values are read off the files by eye (first rows, label counts from `cut | sort | uniq`)
or computed by hand, never by the code under test."""

from __future__ import annotations

import os

import numpy as np
import pytest

from c4forge.errors import ConfigError, InputError
from c4forge.finetune.metrics import compute_metrics, glue_score, task_score
from c4forge.finetune.taskdata import load_task_data
from c4forge.glue.formats import parse_prediction, regression_target, t5_input, t5_target
from c4forge.glue.tasks import CustomFields, get_task, load_custom, load_glue, split_file

GLUE = os.path.join(os.path.dirname(__file__), "data", "glue")


def rows(task: str, split: str):
    spec = get_task(task)
    return spec, load_glue(spec, split_file(spec, GLUE, split))


# ------------------------------------------------------------------ the five real tasks


def test_sst2_rows_and_format():
    spec, dev = rows("sst2", "dev")
    assert len(dev) == 100
    assert dev[0].text_a == "it 's a charming and often affecting journey . "
    assert dev[0].label == 1 and dev[1].label == 0  # "unflinchingly bleak and desperate"
    assert dev[0].line == 2  # after the header
    assert t5_input(spec, dev[1]) == "sst2 sentence: unflinchingly bleak and desperate "
    assert [t5_target(spec, k) for k in (0, 1)] == ["negative", "positive"]
    _, train = rows("sst2", "train")
    assert len(train) == 300


def test_mrpc_bom_and_unbalanced_quotes():
    spec, dev = rows("mrpc", "dev")
    assert len(dev) == 50
    assert sum(ex.label for ex in dev) == 30  # `cut -f1 | sort | uniq -c`: 30 × 1, 20 × 0
    first = dev[0]
    assert first.label == 1
    assert first.text_a.startswith("He said the foodservice pie business doesn 't fit")
    # an unbalanced double quote stays part of the text (QUOTE_NONE), it does not swallow rows
    assert first.text_b.startswith('" The foodservice pie business does not fit')
    assert t5_input(spec, first).startswith("mrpc sentence1: He said the foodservice")
    assert ' sentence2: " The foodservice' in t5_input(spec, first)
    assert [t5_target(spec, k) for k in (0, 1)] == ["not_equivalent", "equivalent"]


def test_cola_no_header():
    spec, dev = rows("cola", "dev")
    assert len(dev) == 80  # no header row lost or invented
    assert dev[0].text_a == "The sailors rode the breeze clear of the rocks."
    assert dev[0].line == 1
    assert sum(ex.label == 0 for ex in dev) == 27
    assert (
        t5_input(spec, dev[0]) == "cola sentence: The sailors rode the breeze clear of the rocks."
    )
    assert [t5_target(spec, k) for k in (0, 1)] == ["unacceptable", "acceptable"]
    _, train = rows("cola", "train")
    assert len(train) == 150


def test_stsb_scores_and_targets():
    spec, dev = rows("stsb", "dev")
    assert len(dev) == 60 and spec.regression
    assert dev[0].text_a == "A man with a hard hat is dancing."
    assert dev[0].label == 5.0 and dev[1].label == 4.75
    assert t5_target(spec, 4.75) == "4.8"
    assert t5_target(spec, 2.57) == "2.6"  # finetune.md §4's example
    # ties go to even, as tf.round: 3.3·5 = 16.5 → 16 → "3.2"; 3.5·5 = 17.5 → 18 → "3.6"
    assert regression_target(3.3) == "3.2" and regression_target(3.5) == "3.6"
    assert t5_input(spec, dev[0]) == (
        "stsb sentence1: A man with a hard hat is dancing. "
        "sentence2: A man wearing a hard hat is dancing."
    )


def test_rte_labels():
    spec, dev = rows("rte", "dev")
    assert len(dev) == 40
    assert dev[0].label == 1  # not_entailment
    assert dev[0].text_b == "Christopher Reeve had an accident."
    assert t5_target(spec, 0) == "entailment" and t5_target(spec, 1) == "not_entailment"


# ------------------------------------------------------------------ written rows of the other four


def test_qqp_qnli_wnli_rows():
    spec, qqp = rows("qqp", "train")
    assert [ex.label for ex in qqp] == [1, 0, 1, 0, 0, 1]
    assert qqp[4].text_a == 'Is "Hamlet" a tragedy?'
    assert t5_input(spec, qqp[0]) == (
        "qqp question1: How do I learn to cook rice? question2: What is the best way to cook rice?"
    )
    assert t5_target(spec, 1) == "duplicate"
    spec, qnli = rows("qnli", "dev")
    assert [ex.label for ex in qnli] == [0, 1, 0]
    assert t5_input(spec, qnli[0]).startswith("qnli question: When did the bridge open? sentence:")
    spec, wnli = rows("wnli", "train")
    assert [ex.label for ex in wnli] == [1, 0, 1, 0]
    assert [t5_target(spec, k) for k in (0, 1)] == ["not_entailment", "entailment"]


def test_mnli_hypothesis_first_and_two_dev_splits():
    data = load_task_data("mnli", GLUE)
    assert list(data.evals) == ["dev_matched", "dev_mismatched"]
    assert [ex.label for ex in data.train] == [0, 1, 2, 0]
    ex = data.train[0]
    assert t5_input(data.spec, ex) == (
        "mnli hypothesis: A cat was on the mat. premise: The cat sat on the mat all afternoon."
    )
    assert ex.text_a.startswith("The cat")  # BERT order: A = premise
    assert len(data.evals["dev_matched"]) == 3 and len(data.evals["dev_mismatched"]) == 3


def test_max_train_examples_is_a_fixed_subset():
    a = load_task_data("sst2", GLUE, limit=50).train
    b = load_task_data("sst2", GLUE, limit=50).train
    assert [e.index for e in a] == [e.index for e in b] and len(a) == 50
    assert [e.index for e in a] == sorted(e.index for e in a)


# ------------------------------------------------------------------ bad input


def write(tmp_path, folder: str, name: str, text: str) -> str:
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    (d / name).write_text(text, encoding="utf-8")
    return str(tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("sentence\tlabel\ngood film \t1\nbad film \n", ":3: missing column"),
        ("sentence\tlabel\ngood film \t1\nbad\tfilm \t0\n", ":3: extra tab"),
        ("sentence\tlabel\ngood film \tpositive\n", ":2: unknown label 'positive'"),
        ("", "empty file"),
        ("sentence\tlabel\n", "no rows"),
        ("text\tlabel\nx\t1\n", ":1: header has no column 'sentence'"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, text, message):
    root = write(tmp_path, "SST-2", "train.tsv", text)
    with pytest.raises(InputError) as err:
        load_glue(get_task("sst2"), os.path.join(root, "SST-2", "train.tsv"))
    assert message in str(err.value)
    assert "SST-2/train.tsv" in str(err.value)


def test_bad_score_and_missing_file(tmp_path):
    head = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    )
    root = write(tmp_path, "STS-B", "dev.tsv", head + "0\tg\tf\ty\t0\tn\tn\ta\tb\thigh\n")
    with pytest.raises(InputError, match=r"dev.tsv:2: score 'high' is not a number"):
        load_glue(get_task("stsb"), os.path.join(root, "STS-B", "dev.tsv"))
    with pytest.raises(InputError, match="RTE/train.tsv: no such file"):
        split_file(get_task("rte"), root, "train")


def test_task_typo():
    with pytest.raises(ConfigError, match="unknown task 'sst' \\(did you mean 'sst2'\\?\\)"):
        get_task("sst")
    assert get_task("SST-2").name == "sst2" and get_task("sts-b").name == "stsb"


def test_custom_tsv_csv_jsonl(tmp_path):
    (tmp_path / "train.tsv").write_text("txt\ty\nnice\tpos\nawful\tneg\nfine\tpos\n")
    (tmp_path / "dev.tsv").write_text("txt\ty\nugly\tneg\n")
    fields = CustomFields("txt", "y")
    data = load_task_data("custom", str(tmp_path / "train.tsv"), custom=fields)
    assert data.spec.labels == ("neg", "pos")
    assert [ex.label for ex in data.train] == [1, 0, 1]
    assert data.evals["dev"][0].label == 0
    assert t5_input(data.spec, data.train[0]) == "custom txt: nice"
    (tmp_path / "d.csv").write_text('a,b,score\n"x, y",z,1.5\n')
    rows_csv, labels = load_custom(CustomFields("a", "score", "b", True), str(tmp_path / "d.csv"))
    assert labels is None and rows_csv[0].text_a == "x, y" and rows_csv[0].label == 1.5
    (tmp_path / "d.jsonl").write_text('{"t": "a", "l": "x"}\n\n{"t": "b", "l": "z"}\n')
    rows_j, labels = load_custom(CustomFields("t", "l"), str(tmp_path / "d.jsonl"))
    assert labels == ("x", "z") and rows_j[1].line == 3


def test_custom_errors(tmp_path):
    (tmp_path / "train.tsv").write_text("txt\ty\nnice\tpos\nawful\tneg\n")
    (tmp_path / "dev.tsv").write_text("txt\ty\nugly\tmeh\n")
    with pytest.raises(InputError, match=r"dev.tsv:2: unknown label 'meh'"):
        load_task_data("custom", str(tmp_path / "train.tsv"), custom=CustomFields("txt", "y"))
    with pytest.raises(InputError, match=r"train.tsv:2: no field 'text'"):
        load_custom(CustomFields("text", "y"), str(tmp_path / "train.tsv"))
    (tmp_path / "bad.jsonl").write_text('{"t": "a", "l": 1}\n{oops\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: not JSON"):
        load_custom(CustomFields("t", "l"), str(tmp_path / "bad.jsonl"))
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(InputError, match="unsupported file type"):
        load_custom(CustomFields("t", "l"), str(tmp_path / "x.txt"))


# ------------------------------------------------------------------ decoding back to labels


def test_parse_prediction_counts_invalid():
    sst2, stsb = get_task("sst2"), get_task("stsb")
    assert parse_prediction(sst2, "positive") == (1, True)
    assert parse_prediction(sst2, " negative ") == (0, True)
    assert parse_prediction(sst2, "positively") == (-1, False)
    assert parse_prediction(stsb, "3.4") == (3.4, True)
    assert parse_prediction(stsb, "three") == (-1.0, False)
    assert parse_prediction(stsb, "nan") == (-1.0, False)


# ------------------------------------------------------------------ metrics


def test_metrics_by_hand():
    y = [1, 1, 0, 0, 1]
    p = [1, 0, 0, 1, -1]  # one invalid output
    m = compute_metrics(get_task("mrpc"), y, p)
    assert m["accuracy"] == pytest.approx(2 / 5)
    # F1 with invalid → wrong class: preds [1,0,0,1,0]: tp 1, fp 1, fn 2 → 2/(2+1+2)
    assert m["f1"] == pytest.approx(2 / 5)
    # MCC of a 2×2 table tp=2, tn=2, fp=1, fn=1: (4-1)/sqrt(3·3·3·3) = 1/3
    mcc = compute_metrics(get_task("cola"), [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1])
    assert mcc["matthews_corrcoef"] == pytest.approx(1 / 3)
    corr = compute_metrics(get_task("stsb"), [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert corr["pearson"] == pytest.approx(0.8)  # centred dot 4 / (√5 · √5)
    assert corr["spearman"] == pytest.approx(0.8)
    flat = compute_metrics(get_task("stsb"), [1.0, 2.0], [3.0, 3.0])
    assert flat["pearson"] == 0.0 and flat["constant_predictions"] is True


def test_task_and_glue_scores():
    mrpc = get_task("mrpc")
    assert task_score(mrpc, {"dev": {"f1": 0.8, "accuracy": 0.7}}) == pytest.approx(0.75)
    mnli = get_task("mnli")
    both = {"dev_matched": {"accuracy": 0.6}, "dev_mismatched": {"accuracy": 0.5}}
    assert task_score(mnli, both) == pytest.approx(0.55)
    assert glue_score({"a": 0.5, "b": 0.7, "c": float("nan")}) == pytest.approx(0.6)
    assert glue_score({}) is None
    assert np.isclose(task_score(get_task("stsb"), {"dev": {"pearson": 0.3, "spearman": 0.5}}), 0.4)
