"""Model configuration of the GLU-Transformer (model.md §1): one dataclass, three presets.

``ModelConfig`` is what a checkpoint's ``config.json`` stores (``to_dict``) and what ``export``
turns into an HF ``T5Config``. ``make_config`` is the only place presets, the 2/3 rule for gated
FFNs and user overrides meet, so a typo in an override is caught here with the valid names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError

# --ffn name -> (number of matrices, activation, HF feed_forward_proj), model.md §1.2.
# "linear" is the identity (bilinear); GELU is always the tanh approximation.
FFN_VARIANTS: dict[str, tuple[int, str, str]] = {
    "relu": (2, "relu", "relu"),
    "gelu": (2, "gelu_tanh", "gelu_new"),
    "swish": (2, "silu", "silu"),
    "glu": (3, "sigmoid", "gated-sigmoid"),
    "bilinear": (3, "linear", "gated-linear"),
    "reglu": (3, "relu", "gated-relu"),
    "geglu": (3, "gelu_tanh", "gated-gelu"),
    "swiglu": (3, "silu", "gated-silu"),
}

ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex")

# d_ff is the 2-matrix width; gated variants get 2/3 of it (model.md §1.2) unless d_ff is given.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(d_model=128, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=32, d_ff=384),
    "small": dict(d_model=512, num_layers=8, num_decoder_layers=8, num_heads=6, d_kv=64, d_ff=1536),
    "base": dict(
        d_model=768, num_layers=12, num_decoder_layers=12, num_heads=12, d_kv=64, d_ff=3072
    ),
}


@dataclass
class ModelConfig:
    """Shape and numerics of the encoder-decoder. ``embedding_size`` is E (V rounded up to 128)."""

    embedding_size: int
    d_model: int = 768
    num_layers: int = 12
    num_decoder_layers: int = 12
    num_heads: int = 12
    d_kv: int = 64
    d_ff: int = 2048
    ffn: str = "geglu"
    tie_embeddings: bool = False
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    dropout_rate: float = 0.0
    attn: str = "sdpa"
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # --- derived ---------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """HF's name for the number of embedding rows (E)."""
        return self.embedding_size

    @property
    def n_layers(self) -> int:
        """Encoder layers (the name the bert family and fine-tuning use)."""
        return self.num_layers

    @property
    def family(self) -> str:
        """The model family (a bert config has it as a field; config.json of t5 has no key)."""
        return "t5"

    @property
    def max_position(self) -> None:
        """No longest input: relative position buckets (the bert family has a number here)."""
        return None

    @property
    def d_attn(self) -> int:
        return self.num_heads * self.d_kv

    @property
    def is_gated(self) -> bool:
        return FFN_VARIANTS[self.ffn][0] == 3

    @property
    def activation(self) -> str:
        return FFN_VARIANTS[self.ffn][1]

    @property
    def hf_feed_forward_proj(self) -> str:
        return FFN_VARIANTS[self.ffn][2]

    # --- checks and (de)serialisation -------------------------------------------------------
    def validate(self) -> None:
        if self.ffn not in FFN_VARIANTS:
            raise ConfigError(f"unknown FFN variant {self.ffn!r}; valid: {', '.join(FFN_VARIANTS)}")
        if self.attn not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(
                f"unknown attention implementation {self.attn!r}; "
                f"valid: {', '.join(ATTN_IMPLEMENTATIONS)}"
            )
        for name in (
            "embedding_size",
            "d_model",
            "num_layers",
            "num_decoder_layers",
            "num_heads",
            "d_kv",
            "d_ff",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model config: {name} must be a positive integer, got {value!r}")
        if self.relative_attention_num_buckets % 4:
            # bidirectional buckets halve the count, and half of those are exact offsets
            raise ConfigError(
                "model config: relative_attention_num_buckets must be a multiple of 4"
            )
        if not 0.0 <= float(self.dropout_rate) < 1.0:
            raise ConfigError(
                f"model config: dropout_rate must be in [0, 1), got {self.dropout_rate}"
            )
        if not float(self.layer_norm_epsilon) > 0:
            raise ConfigError("model config: layer_norm_epsilon must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Inverse of ``to_dict``; unknown keys are refused (a config from another tool or typo)."""
        return config_from_dict(cls, data, "model config", "embedding_size")


def config_from_dict(cls: type, data: dict[str, Any], what: str, required: str) -> Any:
    """A config dataclass from JSON: unknown keys and a missing ``required`` key are refused."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"{what}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    if required not in data:
        raise ConfigError(f"{what}: {required} is missing")
    return cls(**data)


def make_config(preset: str, embedding_size: int, **overrides: Any) -> ModelConfig:
    """Preset + FFN (2/3 rule for gated variants unless ``d_ff`` is given) + overrides.

    ``None`` values in ``overrides`` mean "not given" (an argparse default), so a CLI can pass
    every option through unchanged.
    """
    values = preset_values(PRESETS, preset, "geglu", ModelConfig, "model", overrides)
    return ModelConfig(embedding_size=embedding_size, **values)


def preset_values(
    presets: dict[str, dict[str, int]],
    preset: str,
    default_ffn: str,
    cls: type,
    what: str,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """A preset's fields with the 2/3 rule for gated FFNs, then the given overrides (None = not
    given); unknown presets, options and FFN variants are ConfigErrors naming the valid ones."""
    if preset not in presets:
        raise ConfigError(f"unknown {what} preset {preset!r}; valid: {', '.join(presets)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    known = {f.name for f in dataclasses.fields(cls)} - {"embedding_size", "vocab_size", "family"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(
            f"unknown {what} option(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    ffn = overrides.get("ffn", default_ffn)
    if ffn not in FFN_VARIANTS:
        raise ConfigError(f"unknown FFN variant {ffn!r}; valid: {', '.join(FFN_VARIANTS)}")
    values: dict[str, Any] = dict(presets[preset])
    if FFN_VARIANTS[ffn][0] == 3:
        values["d_ff"] = values["d_ff"] * 2 // 3  # 3·d·(2/3·d_ff) = 2·d·d_ff
    values.update(overrides)
    values["ffn"] = ffn
    return values
