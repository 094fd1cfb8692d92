"""What users run on finished runs, each driven by a launch/ script; the library never imports it.

    export.py         a workdir -> folders HF transformers loads (launch/export.py)
    compare.py        objectives and starts compared at equal compute, fine-tuned side by side
                      (launch/compare.py); compare_suite.py the same over a real-text suite
    diagnose.py       what a pre-training learnt: representation statistics and linear probes
                      (launch/diagnose.py)
"""
