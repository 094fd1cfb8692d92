"""Pre-training: the application of the engine (train/) to an objective over a corpus.

    run.py        the driver: a workdir, its records, its first weights, the loop, summary.json
    preflight.py  the config fitted to init_from's weights and the objective, every field checked
    init_from.py  the weights a pre-training starts from (another run, HF, the original release)
    setup.py      the step's setup of a pre-training: its model, objective, optimizer and draws
    compiling.py  its programs compiled ahead of the first batch, or for a Cloud TPU slice here
"""
