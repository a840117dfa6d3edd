"""The host-side agent: stdlib-only code shipped to the GPU host once and run by the host's own Python.

Everything here must import and run with nothing but the standard library (Python 3.9+), because the only
interpreter guaranteed on a GPU host is the one that runs SGLang. The client never parses shell output: each verb
answers with JSON lines (see ``common.emit``).
"""
