"""Fine-tuning the discriminator: tasks -> encoded arrays -> the pre-training step -> scores.

    tasks.py   where labelled text comes from (GLUE via TFDS, the user's CSV/TSV/JSONL files)
    encode.py  text pairs -> [CLS] a [SEP] b [SEP] id arrays, truncated by the documented rule
    heads.py   the discriminator encoder with a task head (parameter names of pre-training)
    scores.py  accuracy, F1, Matthews correlation, Pearson, Spearman
    run.py     the loop: the same `train_step` and mesh as pre-training, K seeds, results table
"""
