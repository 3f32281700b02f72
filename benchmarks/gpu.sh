#!/usr/bin/env bash
# One command that measures the training step on one H100/H200 (model.md §4): c4forge vs HF for
# T5 base (64 × 512/114) and bert-base (128 × 128), the step breakdown (forward + backward,
# optimizer, attention), the top-10 kernels, the loader's time per batch and `c4forge train`'s
# tokens/s on real shards. Budget: under 8 minutes (each phase has its own time limit, so a slow
# compile costs its phase, not the run). Without CUDA every phase says so and runs on the CPU.
#
#   benchmarks/gpu.sh --prepare   build the real shards from the bundled C4 sample (clean →
#                                 vocab → shards 512/114) into $C4FORGE_GPU_BENCH (.gpu-bench);
#                                 needs the full install (Beam), so run it where that is, and
#                                 carry the folder to the GPU machine if it lacks Beam
#   benchmarks/gpu.sh             everything (builds the shards first when they are missing)
#   benchmarks/gpu.sh --smoke     tiny shapes, a few steps, no compile: checks the script anywhere
#   GPU_BENCH_FLEX=1 benchmarks/gpu.sh   also T5 forward + backward with --attn flex (one more
#                                 compile, ~2 min more: over the 8-minute budget)
#
# The log goes to stdout and to $OUT/gpu-bench.log (or $C4FORGE_GPU_BENCH/gpu-bench.log).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
BENCH="${C4FORGE_GPU_BENCH:-.gpu-bench}"
PY="${PYTHON:-python3}"
MODE="${1:-}"
mkdir -p "$BENCH"
LOG="${OUT:-$BENCH}/gpu-bench.log"

prepare() {
    local inputs
    if [ -f "$BENCH/shards/index.json" ]; then
        echo "shards: $BENCH/shards already built"
        return 0
    fi
    echo "=== prepare: clean → vocab → shards from the bundled sample into $BENCH"
    inputs=$("$PY" -c "from c4forge.samples import demo_inputs; print(' '.join(demo_inputs('$BENCH/input')))") || return 1
    # shellcheck disable=SC2086
    "$PY" -m c4forge clean $inputs --output "$BENCH/clean" --overwrite || return 1
    "$PY" -m c4forge vocab "$BENCH/clean" --output "$BENCH/vocab" --vocab-size 2000 --overwrite || return 1
    "$PY" -m c4forge shards "$BENCH/clean" --vocab "$BENCH/vocab" --output "$BENCH/shards" \
        --inputs-length 512 --overwrite || return 1
    rm -rf "$BENCH/input"
    du -sh "$BENCH/shards"
}

if [ "$MODE" = "--prepare" ]; then
    prepare
    exit $?
fi

run() {
    local limit=$1
    shift
    timeout --signal=INT --kill-after=20 "$limit" "$PY" benchmarks/gpu.py "$@" \
        --shards "$BENCH/shards" --results "$BENCH/results.json"
    local rc=$?
    [ $rc -eq 0 ] || echo "!!! phase $* ended with exit code $rc (124: over its ${limit} s limit)"
}

{
    echo "c4forge GPU benchmark $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    else
        echo "no nvidia-smi: no NVIDIA GPU here; the figures below check the script, not the speed"
    fi
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, '| cuda', torch.cuda.is_available(), '| transformers', transformers.__version__)"
    rm -f "$BENCH/results.json"
    prepare || echo "!!! could not build shards here (missing the pipeline's packages?): the loader and cli phases are skipped; run 'benchmarks/gpu.sh --prepare' where c4forge is fully installed and carry $BENCH"
    if [ "$MODE" = "--smoke" ]; then
        run 600 --smoke
    else
        run 270 --phases t5
        run 120 --phases bert
        run 150 --phases loader,cli
        [ "${GPU_BENCH_FLEX:-0}" = 1 ] && run 150 --phases flex
    fi
    echo "done $(date -u +%FT%TZ)"
} 2>&1 | tee "$LOG"
