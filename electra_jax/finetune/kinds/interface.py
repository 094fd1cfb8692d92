"""The interface of a kind of fine-tuning task. Each kind is one module of
electra_jax/finetune/kinds/ defining `KIND`, an object of a subclass of `Kind`, and one entry of
registry.py's table. The driver (run.py), the export (apps/export.py), the loaders and the baseline
ask the task's kind; none of them names a kind.

    kind = registry.get(task.kind)
    kind.encode(task, examples, tokenizer, max_len, train, cfg)  -> encoded arrays (`.arrays()`)
    kind.model(model_cfg, task, cfg, rate)                       -> the encoder with the head
    kind.loss(params, batch, rng, deterministic, model=, task=)  -> (loss, metrics)
    kind.scores(task, outputs, data, examples, cfg)              -> {metric: value}
    kind.write_predictions(task, split, outputs, examples, folder, data, cfg) -> the file written
    kind.read_new(cfg, path, task, log)  -> the examples of a new file, read as training reads them
    kind.predicted(task, outputs, data, examples, cfg) -> per example its prediction and confidence
    kind.to_hf(params, model_cfg, labels, dropout, pooling)      -> (HF state dict, config fields)
    kind.in_units(state, meta)           -> that state dict with outputs in the labels' own units
"""

import jax
import jax.numpy as jnp
import numpy as np

from electra_jax import UserError

INPUTS = ('input_ids', 'segment_ids', 'input_mask')
# A batch's fields that are not a model's token inputs: the rows' places and the labels. Any other
# field of a batch is a per-token input the kind's model takes by its name (`token_inputs`).
PLACES = ('positions', 'starts', 'slots', 'labels')


def token_inputs(batch: dict) -> dict:
  """The fields of `batch` that its model takes by name beside the inputs (`Kind.token_inputs`)."""
  return {k: v for k, v in batch.items() if k not in INPUTS + PLACES}


class Kind:
  """A kind of task: the interface, with the defaults most kinds share."""
  name = ''
  baseline = ''  # the TF-IDF baseline's targets (finetune/baseline.py): 'classes', 'numbers' or
  #                '' (it does not apply)
  onnx_rows = ''  # what launch/predict_onnx.py makes of a row's output in an ONNX export:
  #                'classes' (a logit per class), 'number' (in the labels' units) or '' (not served)
  predicts_dev = False  # --mode=predict also writes the dev split's predictions
  own_data = ''  # what task.train holds for this kind, for messages ('' : not your own data)
  hf_class = ''  # the HF transformers class it is exported as ('' : none)
  hf_pipeline = ''  # the HF pipeline task reading the export ('' : none that apps/export.py checks)
  init_shape: tuple[int, ...] = (1, 8)  # of the token ids the model is initialized on
  # its examples are sequences that rows pack (finetune/inputs/packing.py); False: each example is
  # a row as `encode` gives it (SQuAD's windows)
  packs = True
  # its examples are texts of one class each: the discriminator may be prompted with a word per
  # class (apps/zeroshot.py, kinds/prompted.py), and K examples of each class drawn
  # (task.shots)
  text_classes = False
  # per-token arrays its model takes by name beside the inputs, packed into rows as the ids are
  # (encode's `Encoded.token_inputs`: the prompted kind's label-word mask)
  token_inputs: tuple[str, ...] = ()
  # its model starts from the pre-trained detection head too (discriminator_predictions)
  reads_head = False
  # its head reads the token types (SQuAD's: the context is segment 1): an export's tokenizer
  # gives them even where the encoder takes none (ModernBERT's)
  reads_segments = False

  def load(self, cfg, log=print):
    """(task, {split: examples}) of your own files task.train / dev / test (kinds whose
    `own_data` says what such files hold)."""
    raise NotImplementedError

  def model(self, model_cfg, task, cfg, rate: float):
    raise NotImplementedError

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    raise NotImplementedError

  def shape_of_outputs(self, task) -> str:
    """What the head predicts, for the log's first line ('3 classes', 'one number')."""
    n = len(task.labels)
    return f'{n} output{"s" * (n != 1)}'

  def sequences(self, task) -> int:
    """Encoded sequences per example (multiple choice: one per candidate)."""
    del task
    return 1

  def label_shapes(self, task, layout) -> dict:
    """{name: (shape, dtype)} of the labels in a train batch of `layout` (packing.Layout)."""
    raise NotImplementedError

  def batch_shapes(self, task, layout, sharding) -> dict:
    """The abstract train batch of `layout` (packing.Layout; without packing, a row per
    sequence): the rows' arrays, the sequences' starts, the examples' slots, the labels."""
    rows, length = layout.rows, layout.length
    fields = {**{k: ((rows, length), jnp.int32)
                 for k in INPUTS + ('positions',) + self.token_inputs},
              'starts': ((rows, layout.slots), jnp.int32),
              'slots': ((layout.examples, layout.choices), jnp.int32),
              **self.label_shapes(task, layout)}
    return {k: jax.ShapeDtypeStruct(dims, dtype, sharding=sharding)
            for k, (dims, dtype) in fields.items()}

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    raise NotImplementedError

  def notes(self, split: str, data, examples: list, max_len: int) -> list[str]:
    """Lines for the log about how the split was encoded (examples cut to fit)."""
    if not getattr(data, 'truncated', 0):
      return []
    return [f'{split}: {data.truncated} of {len(data)} examples cut to {max_len} tokens (the '
            'longer text loses its last tokens first)']

  def scores(self, task, outputs, data, examples: list, cfg=None) -> dict:
    raise NotImplementedError

  def write_predictions(self, task, split: str, outputs, examples: list, folder: str, data=None,
                        cfg=None) -> str:
    raise NotImplementedError

  # How launch/predict.py writes this kind's predictions: 'table' (a row per example: .tsv, .csv
  # or .jsonl), 'conll' (a word and its tag per line) or 'json' ({id: answer}).
  prediction_format = 'table'

  def metrics(self, labels: tuple) -> tuple:
    """The scores of a task of your own files with these labels (the first: the headline)."""
    raise NotImplementedError

  def read_new(self, cfg, path: str, task, log=print) -> list:
    """The examples of a new file `path` read as the fine-tuning read its own files (columns and
    header of `cfg`, the task's config); their labels where the file has them."""
    raise UserError(f'a {self.name} fine-tuning predicts on the files its task names; give it '
                    'its test file with --config.task.test and launch/finetune.py --mode=predict')

  def predicted(self, task, outputs, data, examples: list, cfg=None) -> list[dict]:
    """Per example: {'prediction': ..., and its confidence ('probabilities' of each output,
    per word for tagging, an answer's 'probability')}."""
    raise NotImplementedError

  def check(self, cfg, splits: dict):
    """Refuses (UserError) a config that cannot fine-tune these splits."""
    if cfg.head_init == 'probe' and not self.baseline:
      raise UserError(f"head_init='probe' fits a linear model on the encoder's features, for "
                      f"classification and regression; a {self.name} head has none; use "
                      "--config.head_init=random")

  def describe(self, cfg) -> str:
    """The kind's part of the recipe line ('' or ', head on cls')."""
    return ''

  def check_export(self, config, workdir: str):
    """Refuses (UserError) a fine-tuning whose head HF transformers cannot hold."""

  def exported_labels(self, meta: dict) -> list[str]:
    """The names an export gives the outputs, from a checkpoint's `meta`."""
    return [str(x) for x in meta['labels']]

  def in_units(self, state: dict, meta: dict) -> dict:
    """The exported state dict with outputs in the labels' own units (`meta`: the checkpoint's)."""
    del meta
    return state

  def from_units(self, outputs, meta: dict):
    """An export's outputs (in_units') back in the model's own units, to compare with ours."""
    del meta
    return outputs

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float,
            pooling: str = 'cls', cfg=None) -> tuple[dict, dict]:
    """(state dict, config fields) of the fine-tuned model as HF's task class (`hf_class`), its
    head's dropout `dropout`; a head on the mean of the tokens (`pooling`) as the class
    convert/hf_code.py ships in the folder (`cfg`: the fine-tuning's config)."""
    raise UserError(f'a {self.name} fine-tuning has no HF transformers class to export to; export '
                    'the pre-trained model instead')

  def hf_inputs(self, ids, segments, mask) -> tuple:
    """A tokenized batch of text pairs laid out as this kind's model and HF's take it."""
    return ids, segments, mask

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    """Our model of an export with `outputs` logits, to compare with HF's."""
    raise NotImplementedError

  def hf_array(self, output) -> np.ndarray:
    """What an export check compares of HF's output: its logits."""
    return output.logits.numpy()

  def our_array(self, outputs) -> np.ndarray:
    """What an export check compares of our model's outputs (check_model's)."""
    return np.asarray(outputs)

  def compared(self, mask):
    """Which outputs an export check compares (all; per-token heads: the real tokens)."""
    return slice(None)
