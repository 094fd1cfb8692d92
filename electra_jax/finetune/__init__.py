"""Fine-tuning the discriminator: tasks -> encoded arrays -> the pre-training step -> scores.

    tasks.py    where labelled text comes from (GLUE, your own files, the built-in task, loaders
                of SQuAD and CoNLL)
    encode.py   text pairs -> [CLS] a [SEP] b [SEP] id arrays, truncated by the documented rule;
                tagged sentences -> tags on each word's first sub-token
    tagging.py  CoNLL files, BIOES, entity-level precision / recall / F1
    squad.py    SQuAD questions, sliding-window features, span decoding, the official EM / F1
    heads.py    the discriminator encoder with a task head (parameter names of pre-training)
    scores.py   accuracy, F1, Matthews correlation, Pearson, Spearman
    run.py      the loop: the same `train_step` and mesh as pre-training, K seeds, results table,
                evaluation and prediction of saved fine-tunings
"""
