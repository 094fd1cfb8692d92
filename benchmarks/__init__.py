"""The lab: measurements of the package, beside it and not installed with it. Run from the checkout,
each command a module: `python -m benchmarks.benchmark --config=configs/small.py`.

    benchmark.py          the step's speed, memory, largest batch, attention paths, input pipeline
                          and checkpoint cost, fine-tuning's examples/s (bench_command.py says each
                          mode; step_benchmark.py, finetune_benchmark.py, io_benchmark.py measure;
                          profiling.py reads traces; peer_hf.py and peer_hf_trainer.py are the
                          same work in HF transformers + PyTorch, run in a child process)
matmul_ceiling.py     the highest MFU XLA's TPU cost model allows the step's matmuls (ceiling.py)
    compile_table.py      every preset compiled for Cloud TPU slices here: memory and estimates
    build_tasks.py        the real-text task suite, from text the system's packages ship (suite.py)
    chaos.py              a run killed at random and resumed, against one never killed
    gpu_benchmarks.sh     issue 70's GPU measurements in one script
"""
