#!/usr/bin/env bash
# The accelerator measurements behind the README's GPU numbers, in the order they are taken:
#   bash benchmarks/gpu_benchmarks.sh attention   # the kernels' check and time vs explicit / fused
#   bash benchmarks/gpu_benchmarks.sh base        # Base 64 x 512 bf16 vs HF + torch.compile, profiled
#   bash benchmarks/gpu_benchmarks.sh small       # Small 128 x 128 vs HF + torch.compile
#   bash benchmarks/gpu_benchmarks.sh maxbatch    # largest batch per device, Base and Large at 512
#   bash benchmarks/gpu_benchmarks.sh quick       # our steps alone, each variant of a change in turn
#   bash benchmarks/gpu_benchmarks.sh start       # a Base fine-tuning's start, first and from the cache
#   bash benchmarks/gpu_benchmarks.sh all         # attention, base, small, maxbatch
# Each section prints its results and writes JSON next to OUT (default /tmp/electra_gpu).
# Wall time on an H100 (jax 0.11.2, at ff97c9e): base's first command 277 s (our compile 72 s, the
# peer's torch.compile most of the rest); small's did not finish in 249 s. On an H200 at 37966d2
# base (both commands) took 7 min 55 s, attention about 40 s. A 15-minute device session fits base
# and one more short section, not all.
# An image with jax, flax, optax, orbax, torch and transformers but not this package's other
# dependencies gets them as wheels on PYTHONPATH: ml_collections, and google-auth for the storage
# module (with pyasn1-modules, pyasn1, cryptography, cffi, pycparser).
# `quick` is for iterating on a change within one device session: the pre-training step (Base
# 64 x 512) and the fine-tuning steps (Base 32 x 128 on short texts, packed and padded) alone, with
# each step's kernels by category, once per variant in VARIANTS (';'-separated sets of flags; an
# empty set is the code as committed), no peer (base re-measures it, once per change). Its inputs,
# made on a machine with the quick start's workdir and the task suite, travel with the checkout:
#   bash benchmarks/gpu_benchmarks.sh inputs      # copies them to gpu_inputs/ (ignored by git: carry it)
#   VARIANTS=";--config.model.attention=explicit" bash benchmarks/gpu_benchmarks.sh quick
# (QUICK_CONFIG=configs/tiny.py runs the same commands at the tiny sizes: a dry run on a CPU.)
# The fine-tuning tokenizes the task: an image without sentencepiece and tokenizers needs their
# wheels on PYTHONPATH too.
set -euo pipefail
cd "$(dirname "$0")/.."
# The launch scripts import the installed package; a GPU image that has the dependencies but not
# this package (pip install -e .) runs them from the checkout (checked from /: in the checkout the
# current folder would make it importable).
PY=${PYTHON:-python3}
(cd / && $PY -c 'import electra_jax') 2>/dev/null || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/electra_gpu}
mkdir -p "$OUT"
bench() { PYTHONUNBUFFERED=1 $PY -m benchmarks.benchmark "$@"; }

attention() {
  # one Base layer's attention, batch 64 x 512: the kernels are checked against the explicit path
  # (same dropout mask) and timed; the settings after the default are candidates (block sizes,
  # or FlashOptions fields by name; the default is 8 warps, 3 stages)
  bench --config=configs/base.py --mode=attention --config.data.batch_size=64 \
    --config.model.dtype=bfloat16 --steps=20 --repeats=5 \
    --blocks="num_warps=4,num_stages=2;num_warps=8,num_stages=4;num_warps=4,num_stages=3;128,128,128,32,128,32" \
    --json="$OUT/attention.json"
}

base() {
  bench --config=configs/base.py --config.model.dtype=bfloat16 --config.data.batch_size=64 \
    --peer=hf-compile --json="$OUT/base.json"
  # the kernels one by one: outside CUDA graphs, which the trace shows as one event each (the step
  # is slower so: quote the time above)
  XLA_FLAGS=--xla_gpu_enable_command_buffer= bench --config=configs/base.py \
    --config.model.dtype=bfloat16 --config.data.batch_size=64 --steps=2 --repeats=1 \
    --profile --profile_dir="$OUT/trace_base" --top=25 --json="$OUT/base_profile.json"
}

small() {
  bench --config=configs/small.py --config.model.dtype=bfloat16 --config.data.batch_size=128 \
    --peer=hf-compile --json="$OUT/small.json"
}

maxbatch() {
  bench --config=configs/base.py --mode=max_batch --config.model.dtype=bfloat16 --peer=hf \
    --json="$OUT/maxbatch_base.json"
  bench --config=configs/large.py --mode=max_batch --config.model.dtype=bfloat16 \
    --config.data.max_seq_length=512 --peer=hf --json="$OUT/maxbatch_large.json"
}

INPUTS=${INPUTS:-gpu_inputs}

inputs() {
  # the quick start's vocabulary and config (no checkpoint: the steps are timed on random
  # weights) and one task of benchmarks/build_tasks.py's suite
  local demo=${DEMO:-/tmp/electra_demo} suite=${SUITE:-/tmp/electra_suite}
  mkdir -p "$INPUTS/init/data" "$INPUTS/task"
  cp "$demo/config.json" "$demo/workdir.json" "$INPUTS/init/"
  cp "$demo/data/metadata.json" "$demo/data/vocab.model" "$INPUTS/init/data/"
  cp "$suite/debian_section/train.csv" "$suite/debian_section/dev.csv" "$INPUTS/task/"
  # a Base-sized pre-training's folder without weights, for `start` (its fine-tunings start from
  # random weights): the quick start's, with configs/base.py's model
  mkdir -p "$INPUTS/init_base"
  cp -r "$INPUTS/init/data" "$INPUTS/init/workdir.json" "$INPUTS/init_base/"
  $PY - "$INPUTS/init/config.json" "$INPUTS/init_base/config.json" <<'EOF'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location('base', 'configs/base.py')
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)
config = json.load(open(sys.argv[1]))
config['model'] = {**base.get_config().model.to_dict(), 'vocab_size': config['model']['vocab_size']}
json.dump(config, open(sys.argv[2], 'w'), indent=2)
EOF
  echo "inputs in $INPUTS: carry it with the checkout"
}

start() {
  # a fine-tuning's start, the same command twice with an empty compilation cache first: the first
  # run compiles its programs, the second loads them whole (docs/speed.md, "Compiled once"). The
  # time from the process's start to the first step's line; Base-sized, from random weights
  # (from_scratch: the inputs carry no checkpoint), the tiny model under QUICK_CONFIG
  local init="$INPUTS/init_base" cache="$OUT/start_cache" i t0 line
  [ -z "${QUICK_CONFIG:-}" ] || init="$INPUTS/init"
  rm -rf "$cache"
  for i in 1 2; do
    rm -rf "$OUT/start_$i"
    t0=$(date +%s%N)
    $PY launch/finetune.py --config=configs/finetune/own.py --init="$init" \
      --workdir="$OUT/start_$i" --config.from_scratch=True \
      --config.task.train="$INPUTS/task/train.csv" --config.task.dev="$INPUTS/task/dev.csv" \
      --config.epochs=0.02 --config.log_every=1 --config.baseline=False \
      --compilation_cache="$cache" 2>&1 | while IFS= read -r line; do
        echo "$line"
        if [[ $line == *"| step 1/"* ]]; then
          echo "== run $i: the first step's line $(( ($(date +%s%N) - t0) / 1000000 )) ms after the start"
        fi
      done
  done
}

quick() {
  local variants i=0 config=${QUICK_CONFIG:-configs/base.py}
  IFS=';' read -ra variants <<< "${VARIANTS:-}"
  [ ${#variants[@]} -gt 0 ] || variants=('')
  for v in "${variants[@]}"; do
    i=$((i + 1))
    echo "== variant $i: ${v:-as committed}"
    # shellcheck disable=SC2086  # a variant is several flags
    bench --config="$config" --config.model.dtype=bfloat16 --config.data.batch_size=64 \
      --steps=10 --repeats=3 --json="$OUT/quick_pretrain_$i.json" $v
    # shellcheck disable=SC2086
    bench --mode=finetune --config="$config" --config.model.dtype=bfloat16 \
      --init="$INPUTS/init" --finetune_config=configs/finetune/own.py \
      --finetune_config.task.train="$INPUTS/task/train.csv" \
      --finetune_config.task.dev="$INPUTS/task/dev.csv" --steps=20 --repeats=3 \
      --json="$OUT/quick_finetune_$i.json" $v
  done
}

case "${1:-all}" in
  attention) attention ;;
  base) base ;;
  small) small ;;
  maxbatch) maxbatch ;;
  inputs) inputs ;;
  quick) quick ;;
  start) start ;;
  all) attention; base; small; maxbatch ;;
  *) echo "usage: $0 attention|base|small|maxbatch|inputs|quick|start|all" >&2; exit 2 ;;
esac
