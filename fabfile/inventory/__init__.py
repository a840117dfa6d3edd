"""Inventory, the first room of the data flow: the YAML file that names the hosts and how to run SGLang on them,
checked field by field before any connection. ``hosts`` is the door (``load``; every value by name), ``values``
defines them (``Host``, ``Inventory``, ``Cluster``, ``Router``, ``Speculative``, ``Timeouts``), ``resolve`` lays the
file's layers into ``Host`` values, ``schema`` reads the YAML and checks its fields (pydantic, imported only to
validate) and ``cache`` is the CLI's private cache of validated inventories, so an unchanged file skips that import.

May import: ``fabfile.errors`` only. Everything after it (plan, transport, commands) reads these values.
"""
