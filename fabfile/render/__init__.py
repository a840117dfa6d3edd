"""Render: the text a deploy writes onto a host, from ``templates/``.

``jinja`` (the two Jinja environments: shell-quoted for launch scripts, plain for Python source and metadata) and
``patchset`` (the NCCL-env patch: the mode chosen and every line of code the host's patcher writes). Pure text.

May import: ``fabfile.errors`` and the agent's pure modules (``fabfile.remote.patch.modes``, ``patch.markers``);
never a plan or a command (``fabfile.plan`` imports this room to put its launch script in a plan).
"""
