"""The kinds of fine-tuning task, the room above the inputs: each kind owns its reading, encoding,
head, loss, scores, prediction files and HF export.

    interface.py  what a kind is (`Kind`), which the driver, the export, the loaders and the
                  baseline ask; none of them names a kind
    registry.py   the kinds' table, and the loading of a task by its config
    classification.py regression.py tagging.py (CoNLL, BIOES, entity F1)
    qa.py (with inputs/squad.py) multiple_choice.py
    heads.py      the discriminator encoder with a classifier head (parameter names of pre-training)
    scores.py     accuracy, F1, Matthews correlation, Pearson, Spearman
"""
