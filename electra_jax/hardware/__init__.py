"""Chips and what runs on them: Cloud TPU slices, ahead-of-time compilation, the compiler's cost estimate and FLOP accounting."""
