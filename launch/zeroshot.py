r"""The discriminator as a zero-shot classifier: no training, only the detection head of any
pre-trained ELECTRA (electra_jax/apps/zeroshot.py).

    python launch/zeroshot.py --init=/tmp/electra_demo --config=configs/finetune/<task>.py \
        --template='It was {label}.' --label_words=pos=great,neg=terrible
        -> the accuracy on the task's dev split beside the majority class's
    python launch/zeroshot.py --init=/tmp/electra_demo --config=configs/finetune/builtin.py:topic
        (GLUE's classification tasks but WNLI and the built-in tasks have a default prompt:
        finetune/inputs/prompts.py DEFAULTS)

--init: a pre-training workdir (launch/train.py), an HF transformers folder of an
ElectraForPreTraining discriminator or an original TensorFlow checkpoint, with its vocabulary.
--config: a fine-tuning config, whose task (and --config.task.* overrides: your own files) gives
the labelled dev split; each of its classes gets a word in --label_words. Your own dev file needs
no train file (--config.task.dev alone): its labels are the classes.
"""

from absl import flags

from electra_jax import cli
from electra_jax.apps import zeroshot
from electra_jax.config import files as config_files

_CONFIG = cli.define_config_file('config', None, 'a fine-tuning config file '
                                 '(configs/finetune/*.py[:variant]): the task', 'fine-tuning')
_INIT = flags.DEFINE_string('init', None, 'the pre-trained discriminator: a pre-training workdir, '
                            'an HF folder or an original checkpoint')
_TEMPLATE = flags.DEFINE_string('template', '', 'the sentence after each text, holding {label} '
                                'where each class\'s word goes (\'\': the task\'s default)')
_WORDS = flags.DEFINE_string('label_words', '', 'each class\'s word: class=word,class=word')
_BATCH = flags.DEFINE_integer('batch_size', 32, 'texts scored at a time (at most all of them)',
                              lower_bound=1)
flags.mark_flags_as_required(['config', 'init'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config_files.require_config(_CONFIG.value, 'fine-tuning')
  cli.check_paths(_INIT.value, _CONFIG.value)
  zeroshot.evaluate(_CONFIG.value, _INIT.value, _TEMPLATE.value, _WORDS.value, _BATCH.value,
                    log=lambda line: print(line, flush=True))


if __name__ == '__main__':
  cli.run(main)
