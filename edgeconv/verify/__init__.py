"""Proving the built model: float-vs-quantized parity, where the error comes from, and the
artifacts firmware teams flash and test (C array, op resolver, golden vectors, memory)."""
