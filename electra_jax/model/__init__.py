"""The networks: ELECTRA's embeddings, encoders and heads, its generator shapes, and the attention
paths with their kernels."""
