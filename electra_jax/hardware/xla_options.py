"""XLA options that programs are compiled with, where one of XLA's defaults is slow for them.

On the CPU, XLA hands dots with the element-wise and reduction operations around them to YNNPACK
as library fusions. For float32 train steps that is as fast or faster; for a float32 forward pass
it is slower, by up to 1.8x at some shapes (a Small classifier at 32 x 128: 838 ms against 465 ms
without them; at 8, 16 and 64 rows 1.1-1.4x; measured at 2173aeb), and in bfloat16 YNNPACK's dots
are the fast ones (227 ms). So fine-tuning's prediction program (forward only, float32 on CPUs)
is compiled without them, on its own (`jax.jit(..., compiler_options=forward(dtype))`); every
other program keeps XLA's defaults. `benchmarks/benchmark.py --mode=finetune` times prediction with
XLA's defaults beside it on CPUs (the `xla defaults` row). An XLA that no longer takes the option
is said in a warning, and its defaults are used.
"""

import functools
import sys

import jax

_CPU_FORWARD = {'xla_cpu_experimental_ynn_fusion_type': ''}  # no YNNPACK library fusions


@functools.lru_cache(maxsize=None)
def forward(dtype: str) -> dict | None:
  """The compiler options of a forward-only program computing in `dtype` on JAX's default
  backend, or None for XLA's defaults: also where this XLA does not know the option (it is
  experimental)."""
  if jax.default_backend() != 'cpu' or dtype != 'float32':
    return None
  try:
    jax.jit(lambda x: x + 1, compiler_options=_CPU_FORWARD).lower(
        jax.ShapeDtypeStruct((), 'float32')).compile()
  except Exception as e:  # (an XLA without the option: its defaults)
    print(f'warning: this XLA (jax {jax.__version__}) does not take '
          f'{", ".join(_CPU_FORWARD)} ({" ".join(str(e).split())[:120]}); fine-tuning\'s '
          'prediction keeps its default fusions, up to 1.8x slower on CPUs in float32',
          file=sys.stderr, flush=True)
    return None
  return dict(_CPU_FORWARD)
