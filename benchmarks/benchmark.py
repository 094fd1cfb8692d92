r"""Time a config's train step (tokens/s, ms/step, FLOPs, MFU) and/or its input pipeline.

    python -m benchmarks.benchmark --config=configs/small.py --config.data.batch_size=16
    python -m benchmarks.benchmark --config=configs/small.py --config.data.batch_size=16 --peer=hf
    python -m benchmarks.benchmark --config=configs/small.py --config.data.batch_size=16 --profile
    python -m benchmarks.benchmark --config=configs/small.py --mode=both   # input vs step, same run
    python -m benchmarks.benchmark --config=configs/small.py --mode=checkpoint  # save/restore times
    python -m benchmarks.benchmark --config=configs/large.py --mode=memory --config.fsdp=True
    python -m benchmarks.benchmark --config=configs/tiny.py --mode=objectives  # COCO-LM, AMOS
    python -m benchmarks.benchmark --config=configs/base.py --mode=objectives --topology=v5e-8
python -m benchmarks.benchmark --config=configs/base.py --mode=max_batch
--config.model.dtype=bfloat16 python -m benchmarks.benchmark --config=configs/base.py
--mode=attention --config.data.batch_size=64 python -m benchmarks.benchmark --mode=finetune
--init=/tmp/electra_demo --config=configs/small.py \
        --finetune_config=configs/finetune/builtin.py:topic --finetune_config.max_seq_length=128 \
        --peer=hf --topology=v5e-8

--mode=finetune times fine-tuning (examples/s of training and of prediction) with each example
padded to max_seq_length and with examples packed into rows, on --finetune_config's task
tokenized with --init's vocabulary; --config (optional here) gives the model's sizes instead of
--init's, with random weights. --peer=hf also times HF transformers' Trainer on the same examples
(each batch padded to its longest row, length-grouped batches; one Trainer whose steps go on
across the runs, as ours do), --peer=hf-compile the same under torch.compile; --topology also
estimates the padded and packed steps on that TPU slice from XLA's cost model (compiled here,
nothing runs).

--mode=input reads --records (default: records of the config's sequence length built from the
built-in corpus in a temporary folder) at the config's global batch.
"""

from absl import flags

from benchmarks import bench_command
from electra_jax import cli
from electra_jax.config import files as config_files

_CONFIG = cli.define_config_file('config', None, 'a configs/*.py file[:variant]')
_STEPS = flags.DEFINE_integer('steps', 10, 'timed steps per run', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'timed runs; the median is reported',
                                lower_bound=1)
_JSON = flags.DEFINE_string('json', None, 'also write the result to this JSON file')
_MODE = flags.DEFINE_enum('mode', 'step', ['step', 'input', 'both', 'checkpoint', 'memory',
                                           'max_batch', 'attention', 'finetune', 'objectives'],
                          'what to time (memory: compile only, the step\'s memory per device; '
                          'max_batch: the largest batch that fits a device; attention: one '
                          'layer\'s attention on each path; finetune: fine-tuning padded, packed '
                          'and with --peer=hf HF\'s Trainer; objectives: the step of each of '
                          '--objectives, alternating, or with --topology estimated there)')
_OBJECTIVES = flags.DEFINE_string('objectives', 'electra,cocolm,amos', '--mode=objectives: the '
                                  'objectives whose steps are compared, the first the reference')
_BLOCKS = flags.DEFINE_string('blocks', '', "--mode=attention: more kernel settings to time, "
                              "'bq,bk,bk_dkv,bq_dkv,bq_dq,bk_dq;...' (FlashOptions' block sizes) "
                              "or FlashOptions fields by name, 'num_warps=8,num_stages=3;...'")
_MEMORY_GB = flags.DEFINE_float('memory_gb', 0, '--mode=max_batch: memory per device to fit in '
                                '(default: what the GPU/TPU reports)')
_RECORDS = flags.DEFINE_string('records', '', 'records folder for --mode=input/both; empty: build '
                               'one from the built-in corpus in a temporary folder')
_PEER = flags.DEFINE_enum('peer', '', ['', 'hf', 'hf-compile'], "also time the same step "
                          "written with HF transformers in PyTorch ('hf'; 'hf-compile': under "
                          "torch.compile), alternating runs with ours")
_PROFILE = flags.DEFINE_bool('profile', False, 'also trace --steps steps with jax.profiler and '
                             'print the kernels that take the time, per step')
_PROFILE_DIR = flags.DEFINE_string('profile_dir', '', 'where the trace is kept (TensorBoard or '
                                   'Perfetto read it); empty: a temporary folder')
_TOP = flags.DEFINE_integer('top', 15, 'kernels listed by --profile', lower_bound=1)
_BATCHES = flags.DEFINE_integer('batches', 50, 'timed input batches per run', lower_bound=1)
_FT_CONFIG = cli.define_config_file('finetune_config', None, '--mode=finetune: the fine-tuning '
                                    'config (task, max_seq_length, batch sizes)', 'fine-tuning')
_INIT = flags.DEFINE_string('init', None, '--mode=finetune: the pre-training workdir (or HF '
                            'folder) whose vocabulary tokenizes the task, and whose model is '
                            'timed unless --config is given')
_TOPOLOGY = flags.DEFINE_string('topology', None, '--mode=finetune: also estimate the padded and '
                                'packed steps on this Cloud TPU slice (v5e-8, ...), compiled here; '
                                '--mode=objectives: estimate the steps there instead of timing '
                                'them here')


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config, ft = _CONFIG.value, _FT_CONFIG.value
  if _MODE.value == 'finetune':
    if ft is None or not _INIT.value:
      raise cli.UserError('--mode=finetune needs --finetune_config (the task) and --init (the '
                          'vocabulary, and the model unless --config is given)')
    config_files.require_config(ft, 'fine-tuning', '--finetune_config')
    if config is not None:
      config_files.require_config(config, 'pre-training')
    cli.check_paths(_INIT.value)
    ft.init = _INIT.value
  bench_command.run(config, bench_command.Options(
      mode=_MODE.value, steps=_STEPS.value, repeats=_REPEATS.value, json=_JSON.value,
      blocks=_BLOCKS.value, memory_gb=_MEMORY_GB.value, records=_RECORDS.value, peer=_PEER.value,
      profile=_PROFILE.value, profile_dir=_PROFILE_DIR.value, top=_TOP.value,
      batches=_BATCHES.value, finetune_config=ft, topology=_TOPOLOGY.value,
      objectives=_OBJECTIVES.value))


if __name__ == '__main__':
  cli.run(main)
