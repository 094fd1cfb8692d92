"""Export a run for HF transformers (PyTorch): folders that `from_pretrained` and `AutoTokenizer`
load.

    python launch/export.py --workdir=/tmp/electra_demo --out=/tmp/electra_demo_hf
        -> /tmp/electra_demo_hf/discriminator (ElectraForPreTraining)
           /tmp/electra_demo_hf/generator     (ElectraForMaskedLM)
    python launch/export.py --workdir=/tmp/electra_sst2 --out=/tmp/electra_sst2_hf [--seed=1]
        -> ElectraForSequenceClassification (ElectraForTokenClassification for tagging)

--workdir is a pre-training run (launch/train.py), a fine-tuning (launch/finetune.py; the seed
with the best dev score unless --seed), or a checkpoint of the original TensorFlow release (its
folder, with vocab.txt). The latest checkpoint is exported unless --step.
"""

import json
import sys


from absl import flags

from electra_jax import cli

_WORKDIR = flags.DEFINE_string('workdir', None, 'the --workdir of launch/train.py or finetune.py, '
                                'or an original TF checkpoint')
_OUT = flags.DEFINE_string('out', None, 'a new folder for the HF transformers model(s)')
_STEP = flags.DEFINE_integer('step', None, 'the checkpoint step (default: the latest)')
_SEED = flags.DEFINE_integer('seed', None, 'a fine-tuning\'s seed (default: best on dev)')
_CHECK = flags.DEFINE_bool('check', False, 'load the export in HF transformers and compare its '
                           'token ids and logits with ours (needs torch and transformers)')
flags.mark_flags_as_required(['workdir', 'out'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  from electra_jax.storage import fs  # pylint: disable=import-outside-toplevel
  from electra_jax.tools import export  # pylint: disable=import-outside-toplevel
  log = lambda line: print(line, flush=True)
  cli.check_paths(_WORKDIR.value, _OUT.value)
  done = export.export(_WORKDIR.value, _OUT.value, _STEP.value, _SEED.value, log)
  for folder in done.folders:
    arch = json.loads(fs.read_text(fs.join(folder, 'config.json')))['architectures'][0]
    if fs.remote(folder):  # HF transformers loads local folders: copy it first
      local = fs.basename(folder)
      log(f'{folder}: `gcloud storage cp -r {folder} .`, then transformers.{arch}.from_pretrained('
          f'{local!r}), transformers.AutoTokenizer.from_pretrained({local!r})')
    else:
      log(f'{folder}: transformers.{arch}.from_pretrained({folder!r}), '
          f'transformers.AutoTokenizer.from_pretrained({folder!r})')
  if _CHECK.value:
    try:
      export.verify(done, log)
    except KeyboardInterrupt as e:  # (SIGTERM too: cli.run raises it as Terminated)
      print(f'interrupted during --check: the export in {_OUT.value} is complete and unchecked; '
            'export again to a new --out with --check to check it', file=sys.stderr, flush=True)
      cli.exit_now(143 if isinstance(e, cli.Terminated) else 130)


if __name__ == '__main__':
  cli.run(main)
