"""Inventory, the first room of the data flow: the YAML file that names the hosts and how to run SGLang on them,
checked field by field before any connection (``hosts``: its layering and the resolved ``Host``, ``Inventory``,
``Cluster`` and ``Router`` values; ``schema``: the file's YAML and fields, pydantic, imported only to validate;
``cache``: the CLI's private cache of validated inventories, so an unchanged file skips that import).

May import: ``fabfile.errors`` only. Everything after it (plan, transport, commands) reads these values.
"""
