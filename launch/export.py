"""Export a run for HF transformers (PyTorch): folders that `from_pretrained` and `AutoTokenizer`
load.

    python launch/export.py --workdir=/tmp/electra_demo --out=/tmp/electra_demo_hf
        -> /tmp/electra_demo_hf/discriminator (ElectraForPreTraining)
           /tmp/electra_demo_hf/generator     (ElectraForMaskedLM)
    python launch/export.py --workdir=/tmp/electra_sst2 --out=/tmp/electra_sst2_hf [--seed=1]
        -> ElectraForSequenceClassification ([CLS]), ElectraForTokenClassification (tagging),
           ElectraForMultipleChoice, or for a head on the mean of the tokens and for SQuAD's head
           the class the folder ships in modeling_electra_jax.py (AutoModelFor...(...,
           trust_remote_code=True))

--workdir is a pre-training run (launch/train.py), a fine-tuning (launch/finetune.py; the seed
with the best dev score unless --seed), or a checkpoint of the original TensorFlow release (its
folder, with vocab.txt). The latest checkpoint is exported unless --step. --check loads the export
in HF transformers and compares it with ours; for a fine-tuning of your own files it also runs the
dev file through HF's pipeline and exits 1 unless every row gets our prediction. --onnx adds each
folder's ONNX graph (onnx/model.onnx, beside its config.json and tokenizer.json: the layout of
onnx-community's folders), which --check runs in ONNX Runtime at shapes the export never traced
(exit 1 unless within 1e-4 of ours).
"""

import json
import sys

from absl import flags

from electra_jax import cli
from electra_jax.apps import export
from electra_jax.storage import fs

_WORKDIR = flags.DEFINE_string('workdir', None, 'the --workdir of launch/train.py or finetune.py, '
                                'or an original TF checkpoint')
_OUT = flags.DEFINE_string('out', None, 'a new folder for the HF transformers model(s)')
_STEP = flags.DEFINE_integer('step', None, 'the checkpoint step (default: the latest)')
_SEED = flags.DEFINE_integer('seed', None, 'a fine-tuning\'s seed (default: best on dev)')
_CHECK = flags.DEFINE_bool('check', False, 'load the export in HF transformers and compare its '
                           'token ids and logits with ours (needs torch and transformers)')
_ONNX = flags.DEFINE_bool('onnx', False, 'beside each HF folder\'s model, its ONNX graph '
                          '(onnx/model.onnx, batch and length dynamic) for ONNX Runtime; --check '
                          'runs it there too (needs pip install -e ".[onnx]")')
_UNFINISHED = flags.DEFINE_bool('allow_unfinished', False, 'export a fine-tuning whose seeds have '
                                'not all finished (refused otherwise)')
flags.mark_flags_as_required(['workdir', 'out'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  log = lambda line: print(line, flush=True)
  cli.check_paths(_WORKDIR.value, _OUT.value)
  if _CHECK.value:
    export.check_can_verify()
  done = export.export(_WORKDIR.value, _OUT.value, _STEP.value, _SEED.value, log,
                       _UNFINISHED.value, onnx=_ONNX.value)
  for folder in done.folders:
    config = json.loads(fs.read_text(fs.join(folder, 'config.json')))
    local = fs.basename(folder) if fs.remote(folder) else folder
    arch, auto = config['architectures'][0], list(config.get('auto_map', {}))
    load = (f'transformers.{auto[0]}.from_pretrained({local!r}, trust_remote_code=True)' if auto
            else f'transformers.{arch}.from_pretrained({local!r})')
    copy = f'`gcloud storage cp -r {folder} .`, then ' if fs.remote(folder) else ''
    log(f'{folder}: {copy}{load}, transformers.AutoTokenizer.from_pretrained({local!r})')
  if _CHECK.value:
    try:
      checked = export.verify(done, log)
    except KeyboardInterrupt as e:  # (SIGTERM too: cli.run raises it as Terminated)
      print(f'interrupted during --check: the export in {_OUT.value} is complete and unchecked; '
            'export again to a new --out with --check to check it', file=sys.stderr, flush=True)
      cli.exit_now(143 if isinstance(e, cli.Terminated) else 130)
    wrong = [name for name, c in checked.items() if not c.get('dev', {'agrees': True})['agrees']]
    if [name for name, c in checked.items() if not c.get('onnx', {'agrees': True})['agrees']]:
      print(f'error: the ONNX graph in {_OUT.value} does not give our outputs (see above); '
            'report it with this output', file=sys.stderr, flush=True)
      cli.exit_now(1)
    if wrong:
      print(f'error: the export in {_OUT.value} does not give our predictions on the dev file '
            '(see above); report it with this output', file=sys.stderr, flush=True)
      cli.exit_now(1)


if __name__ == '__main__':
  cli.run(main)
