"""What users run on finished runs, each driven by a launch/ script; the library never imports it.

    export.py         a workdir of any kind -> folders HF transformers loads, checked there
                      (launch/export.py)
    onnx_export.py    an exported folder's model as an ONNX graph, and run in ONNX Runtime
                      (launch/export.py --onnx)
    onnx_predict.py   an ONNX export's predictions on a new file, no JAX, PyTorch or TensorFlow
                      (launch/predict_onnx.py)
    predict.py        a fine-tuning's model on a new file (launch/predict.py)
    prediction_files.py  where predictions go and their table (both prediction commands)
    search.py         launch/finetune.py's job: a fine-tuning, or a search of recipes, each
                      fine-tuned K times, the best dev median kept
    zeroshot.py       the discriminator prompted, no training (launch/zeroshot.py); its probe is
                      the zero-shot signal launch/train.py hands a pre-training
    compare.py        objectives and starts compared at equal compute, fine-tuned side by side
                      (launch/compare.py); compare_suite.py the same over a real-text suite
    diagnose.py       what a pre-training learnt: representation statistics and linear probes
                      (launch/diagnose.py)
"""
