"""check-env's evidence on the host: what proves that the NCCL variables reached every SGLang process.

``checkenv`` is the ``check_env`` verb's door (the GPU query started before the rest loads), ``judge`` holds the
rules of proof (``evaluate``), ``hints`` the advice beside its rows, ``gather`` reads /proc,
the server log and NCCL_DEBUG_FILE files (``nccllog`` parses their lines), ``ncclenv`` is how NCCL reads its
variables, ``ncclused`` what NCCL chose per all-reduce, ``sglangnccl`` (with the generated
``sglang_env_facts``) what SGLang itself sets, ``interconnect`` what links the GPUs. Imports nothing, so the
client reading ``ncclenv`` loads no other module.
"""

from __future__ import annotations
