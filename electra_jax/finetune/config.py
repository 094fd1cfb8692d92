"""The one fine-tuning config: every field, its default and what it means.

The model (sizes, vocabulary) comes from the pre-training run named by `init`; what is set here is
the task and the recipe. Zeros mean "the paper's value for this model size / task".
"""

import ml_collections


def default_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.init = ''  # a pre-training workdir: its final checkpoint, vocabulary and model config
  c.from_scratch = False  # True: that model and vocabulary with random weights (a baseline)
  c.seed = 0  # seed of the first fine-tuning; run k uses seed + k
  c.num_seeds = 1  # fine-tunings from the same checkpoint; the median is reported (paper: 10)
  c.epochs = 0.0  # 0: the paper's for the task (3; 10 for RTE and STS-B; 3 for your own data)
  c.batch_size = 32  # global batch (a multiple of the number of devices)
  c.eval_batch_size = 32  # global batch of evaluation and prediction
  c.max_seq_length = 128  # tokens per example, [CLS] and [SEP]s included
  c.dropout_rate = -1.0  # dropout in the encoder and on the head's input; -1: the rate the model
  #                       was pre-trained with (0.1 for the paper's presets and HF models; tiny: 0)
  c.pooling = 'cls'  # the classifier's input: 'cls' ([CLS]'s hidden state: the paper, HF's head)
  #                    or 'mean' (the mean over the example's tokens); tagging reads every token
  c.reinit = ''  # parts of the pre-trained encoder that start from random weights instead, comma
  #               separated: embeddings, word_embeddings, layer_<i> (0: the lowest), top (the last)
  c.log_every = 50  # steps between progress lines
  c.eval_every = 0  # steps between dev scores (0: at the end only); the best checkpoint is kept
  c.save_every = 500  # steps between checkpoints (and at the end, and when stopped by SIGTERM)
  c.baseline = True  # classification / regression: also score a TF-IDF + logistic (ridge)
  #                   regression baseline on the same splits (finetune/baseline.py)

  t = c.task = ml_collections.ConfigDict()
  t.name = 'sst2'  # a GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), squad1, squad2,
  #                   'builtin', or 'own' (named after the train file, or its folder for train.csv)
  t.max_train_examples = 0  # train examples used, a fixed random subset (0: all; 'builtin': 4,000)
  t.tfds_data_dir = ''  # TFDS data_dir for GLUE ('' = TFDS's default)
  t.glue_dir = ''  # GLUE from the original download's TSV folders (<glue_dir>/MNLI/train.tsv ...)
  t.train = ''  # your own data: a .csv/.tsv (header row) or .jsonl file ...
  t.dev = ''  # ... evaluated after training (optional)
  t.test = ''  # ... predicted (optional); scored too when every row has a label
  t.header = True  # .csv/.tsv: the first row names the columns; False: name them by position
  t.text_a = 'text'  # the column holding the text (header=False: its position, 0 first)
  t.text_b = ''  # a second text column for pair tasks ('' = single text)
  t.label = 'label'  # the label column
  t.kind = 'classification'  # 'classification' (names), 'regression' (numbers), 'tagging' (CoNLL)
  t.tag_column = -1  # tagging: the column of a CoNLL line that holds the tag (-1: the last)

  q = c.qa = ml_collections.ConfigDict()  # SQuAD (task.name squad1 / squad2)
  q.doc_stride = 128  # tokens between the starts of a context's windows
  q.max_query_length = 64  # question tokens kept
  q.n_best = 20  # spans considered per question
  q.max_answer_length = 30  # tokens of an answer at most
  q.start_top = 5  # best starts whose end logits are computed at prediction time
  q.null_threshold = -2.75  # SQuAD 2.0: no answer where the null log-odds exceed this

  o = c.optimizer = ml_collections.ConfigDict()
  o.learning_rate = 0.0  # 0: the paper's for the size (3e-4 Small, 1e-4 Base, 5e-5 Large)
  o.layerwise_decay = 0.0  # 0: the paper's (0.8 Small/Base, 0.9 Large); 1 disables
  o.layerwise_decay_rule = 'intended'  # 'intended' or 'original' (the release's off-by-one)
  o.word_table_lr = 1.0  # a further learning-rate factor of the word embeddings (the paper: 1). The
  #   table feeds a LayerNorm, so only its rows' directions matter, and Adam moves each weight by
  #   about the learning rate whatever its size: pre-training leaves the rows larger than at
  #   initialization, so they turn more slowly than random weights' (docs/short_pretraining.md).
  #   A factor of 10 is the same as starting from a table 10x smaller.
  o.warmup_fraction = 0.1  # share of the steps spent warming up
  o.weight_decay = 0.0  # the paper's 0 (the original code used 0.01)
  o.b1 = 0.9
  o.b2 = 0.999
  o.eps = 1e-6
  o.bias_correction = False  # the original Adam has no bias correction
  o.grad_clip_norm = 1.0
  return c


def dropout_rate(cfg, model_cfg) -> float:
  """The fine-tuning's dropout rate: `cfg.dropout_rate`, or the pre-trained model's where -1."""
  return model_cfg.dropout_rate if cfg.dropout_rate < 0 else cfg.dropout_rate


def paper_learning_rate(hidden_size: int) -> float:
  return 3e-4 if hidden_size <= 256 else 1e-4 if hidden_size <= 768 else 5e-5


def paper_layerwise_decay(num_layers: int) -> float:
  return 0.9 if num_layers >= 24 else 0.8
