"""Pre-training objectives: masking and sampling, each loss, the registry of objectives, and the
metric sums they report."""
