"""Simulated ``sglang.srt`` (test equipment)."""
