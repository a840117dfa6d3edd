"""Simulated SGLang subpackage (test equipment)."""
