"""Fine-tuning the discriminator: tasks -> encoded arrays -> the pre-training step -> scores.

    run.py        the driver: the same `train_step` and mesh as pre-training, K seeds, results,
                  evaluation and prediction of saved fine-tunings
    config.py     the fine-tuning config, its checks and the recipe it resolves
    pretrained.py the model a fine-tuning starts from (a pre-training workdir, HF, original)
    tasks.py      where labelled text comes from (GLUE, the built-in tasks, SQuAD; your own
                  files through files.py, read as meant)
    kinds.py      the interface and registry of task kinds; one module per kind owns its reading,
                  encoding, head, loss, scores, prediction files and HF export:
                  classification.py regression.py tagging.py (CoNLL, BIOES, entity F1)
                  qa.py (with squad.py: windows, span decoding, official EM / F1)
                  multiple_choice.py
    encode.py     text pairs -> [CLS] a [SEP] b [SEP] id arrays, truncated by the documented rule;
                  tagged sentences -> tags on each word's first sub-token
    heads.py      the discriminator encoder with a classifier head (parameter names of pre-training)
    batches.py    global batches, the train stream, predictions and scores over a split
    results.py    the seeds' table, median and baseline row; results.md / results.json
    search.py     a few recipes (--config.search), each fine-tuned K times, the best dev median kept
    scores.py     accuracy, F1, Matthews correlation, Pearson, Spearman
    baseline.py   TF-IDF + linear model on the same splits
    compiling.py  the fine-tuning compiled for a Cloud TPU slice (--topology)
"""
