"""What a JAX backend is: an accelerator or not, and the choices that follow from it.

    ACCELERATORS       the backends whose matrix units take bfloat16 (TPUs, GPUs)
    auto_dtype         model.dtype='auto': the activations' dtype on a backend
    kernel_tiles       the attention kernels' block sizes and launch settings on a backend
"""

ACCELERATORS = ('tpu', 'gpu', 'cuda', 'rocm')
GPUS = ('gpu', 'cuda', 'rocm')


def is_accelerator(backend: str) -> bool:
  return backend in ACCELERATORS


def auto_dtype(backend: str) -> str:
  """model.dtype='auto': bfloat16 activations on TPUs and GPUs (the MXU's and tensor cores' input;
  parameters and optimizer state stay float32), float32 on CPUs (where bfloat16 matmuls are only
  about 2x faster and the tests compare with float32 references)."""
  return 'bfloat16' if is_accelerator(backend) else 'float32'


def kernel_tiles(backend: str) -> dict:
  """The attention kernels' settings per backend (model/flash.py's FlashOptions fields): 128-row
  tiles on TPUs (the MXU's), Triton's defaults with 8 warps and 3 pipeline stages on GPUs (the
  fastest of the settings measured on an H200: benchmarks/benchmark.py --mode=attention --blocks;
  docs/measured.md), and the interpreter (the same kernels, GPU layout) elsewhere."""
  if backend == 'tpu':
    return dict(backend='tpu', block_q=128, block_k=128, block_k_dkv=128, block_q_dkv=128,
                block_q_dq=128, block_k_dq=128)
  if backend in GPUS:
    return dict(backend='gpu', num_warps=8, num_stages=3)
  return dict(backend='gpu', interpret=True)
