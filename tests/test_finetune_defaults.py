"""Fine-tuning defaults that fit the model: the cls/hire learning rate
follows the backbone's width, is stated in --help, and the rule that chose it is recorded."""

from __future__ import annotations

import pytest

from c4forge.finetune import recipe as recipes


@pytest.mark.parametrize(
    ("d_model", "lr"),
    [(128, 1e-3), (256, 1e-3), (512, 1e-4), (768, 3e-5), (1024, 3e-5)],  # bert-tiny … large
)
def test_cls_and_hire_rates_follow_the_width(d_model, lr):
    for head in ("cls", "hire"):
        recipe = recipes.resolve_recipe(head, d_model)
        assert recipe["lr"] == lr
        assert recipe["lr_rule"].startswith(f"default for d_model {d_model}")


def test_the_text_head_keeps_t5s_constant_rate_and_lr_overrides():
    assert recipes.resolve_recipe("text", 768)["lr"] == 1e-3
    given = recipes.resolve_recipe("cls", 128, lr=2e-5)
    assert given["lr"] == 2e-5 and given["lr_rule"] == "--lr"


def test_help_states_the_rule(capsys):
    from c4forge.cli import main

    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "d_model <= 256: 1e-3, <= 512: 1e-4, wider: 3e-5" in text
