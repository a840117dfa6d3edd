"""Inventory, the first room of the data flow: the YAML file that names the hosts and how to run SGLang on them,
checked field by field before any connection (``hosts``: the file's schema, its layering and the resolved ``Host``,
``Inventory``, ``Cluster`` and ``Router`` values).

May import: ``fabfile.errors`` only. Everything after it (plan, transport, commands) reads these values.
"""
