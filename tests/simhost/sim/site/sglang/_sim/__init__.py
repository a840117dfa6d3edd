"""Internals of the SGLang simulator (test equipment; not part of SGLang's layout)."""
