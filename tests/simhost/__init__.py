"""Simulated GPU fleet for tests (test equipment, not real GPUs): real sshd per host, own namespaces."""
