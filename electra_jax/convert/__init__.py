"""Conversions between our parameters and other layouts (HF transformers' ELECTRA)."""
