"""Text to batches: corpus -> vocabulary (tokenizer) -> examples -> records (prepare) -> the input
pipeline."""
