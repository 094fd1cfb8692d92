"""What runs on chips: Cloud TPU slices, ahead-of-time compilation, the compiler's cost estimate,
FLOP accounting, XLA options and the compilation cache (the chips themselves: platform/)."""
