"""Fine-tuning the discriminator: tasks -> encoded arrays -> the pre-training step -> scores.

Three rooms, each importing only those before it: inputs/ (where labelled text comes from and how
it becomes arrays: tasks, files, encode, squad, packing), kinds/ (each kind of task, its head and
scores, and their registry) and, here, the driver:

    run.py        the driver: the same `train_step` and mesh as pre-training, K seeds of one
                  recipe, results, evaluation and prediction of saved fine-tunings (a search of
                  recipes drives it from apps/search.py)
    config.py     the fine-tuning config declared and typed once (FinetuningConfig), its checks and
                  the recipe it resolves
    pretrained.py the model a fine-tuning starts from (a pre-training workdir, HF, original)
    batches.py    a batch's arrays assembled from inputs/packing.py's plan, global batches, the
                  train stream, predictions and scores over a split
    results.py    the seeds' table, median and baseline row; results.md / results.json
    probe.py      the head from a linear probe, and the probe per layer
    baseline.py   TF-IDF + linear model on the same splits
    compiling.py  the fine-tuning compiled for a Cloud TPU slice (--topology)
"""
