"""Programs around the library, which the library never imports: each is driven by a launch/
script.

    benchmark.py  the step's speed, memory, largest batch, attention paths, input pipeline and
                  checkpoint cost (launch/benchmark.py); profiling.py reads its traces; peer_hf.py
                  is the same step in HF transformers + PyTorch, run in a child process
    compare.py    objectives and starts compared at equal compute, fine-tuned side by side
                  (launch/compare.py); suite.py builds the real-text task suite it runs
                  (launch/build_tasks.py)
    diagnose.py   what a pre-training learnt: representation statistics and linear probes
                  (launch/diagnose.py)
"""
