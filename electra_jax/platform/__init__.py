"""Platform facts: which backends are accelerators and what follows from it (the activations'
dtype, the attention kernels' tiles, the sampler), and each chip's datasheet. Below the model,
which reads them; above nothing but JAX."""
