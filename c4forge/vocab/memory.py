"""What `c4forge vocab` will need in memory, said before the work, and refused where it cannot fit.

Why a model of the trainer: SentencePiece's unigram trainer peaks in seed-piece extraction, which
builds a suffix array over every sampled character (32-bit code points plus four 32-bit index
arrays, one sentence-boundary element per line, objectives.md §1.4). That peak grows linearly
with the sample and arrives only after the sampling pass has read the whole train split, so a
run that cannot fit should be refused before it reads anything. The coefficients below are a
least-squares fit of the peak PSS of the whole `c4forge vocab` process (sampled every 0.2 s,
``c4forge.proctree``) on runs at several sample sizes of a real clean output
(benchmarks/RESULTS.md §14); the element count is characters + lines, the suffix array's length.

The default sample is sized by this fit so that a default run stays under ``DEFAULT_PEAK_TARGET``
on any corpus: a character budget, plus a line budget that only binds on text of very short
lines (where the per-line cost would otherwise grow the element count past the budget).
"""

from __future__ import annotations

from dataclasses import dataclass

from c4forge.errors import ConfigError

# Peak PSS = BASE + PER_ELEMENT × (characters + lines) of the sample: least squares over four
# runs of 2.5e7, 5e7, 1e8 and 2e8 characters (8,000 pieces; 0.575, 1.123, 2.125, 4.367 GB; each
# within 3 % of the fit) on the clean output of 400,000 benchmark pages (RESULTS §14). The
# suffix-array stage alone is 20 bytes per element; the rest is SentencePiece's copy of the lines.
TRAINER_BASE_BYTES = 21_000_000
TRAINER_BYTES_PER_ELEMENT = 21.68
DEFAULT_PEAK_TARGET = 3_000_000_000
# Lines of ordinary text average ≈ 240 characters (the bundled C4 sample: 239); the estimate made
# before sampling assumes no shorter than this, and the check after sampling uses the real count.
TYPICAL_LINE_CHARS = 200


@dataclass(frozen=True)
class Need:
    """The trainer's expected peak for a sample of ``chars`` characters in ``lines`` lines;
    ``bound``: the figure is an upper bound (the sample's size was not yet known)."""

    chars: int
    lines: int
    bound: bool = False

    @property
    def peak_bytes(self) -> int:
        return trainer_peak(self.chars, self.lines)


def trainer_peak(chars: int, lines: int) -> int:
    """Expected peak PSS in bytes of a `c4forge vocab` run on a sample of this size."""
    return TRAINER_BASE_BYTES + int(TRAINER_BYTES_PER_ELEMENT * (chars + lines))


def chars_that_fit(memory: int, line_chars: float = TYPICAL_LINE_CHARS) -> int:
    """The largest character budget whose expected peak is ``memory`` bytes."""
    per_char = TRAINER_BYTES_PER_ELEMENT * (1 + 1 / line_chars)
    return max(0, int((memory - TRAINER_BASE_BYTES) / per_char))


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def fit_text() -> str:
    return (
        f"{TRAINER_BASE_BYTES / 1e9:.2f} GB + {TRAINER_BYTES_PER_ELEMENT:g} bytes per character "
        "and line"
    )


def check_fits(need: Need, available: int | None, *, what: str) -> None:
    """Refuse (``ConfigError``) a sample whose expected peak exceeds ``available`` bytes.

    Why refuse rather than warn: the peak comes after the sampling pass (minutes to hours on a
    large corpus) and an out-of-memory kill then loses that work, and may take other processes
    with it; the refusal costs nothing and names the sample that fits."""
    if available is None or need.peak_bytes <= available:
        return
    fits = chars_that_fit(available)
    raise ConfigError(
        f"{what} needs about {gb(need.peak_bytes)} of memory for SentencePiece's trainer "
        f"({need.chars:,} characters in {need.lines:,} lines; {fit_text()}, measured), but "
        f"{gb(available)} is available; use --sample-chars {fits:,} or less "
        f"(the default sample needs at most {gb(DEFAULT_PEAK_TARGET)})"
    )
