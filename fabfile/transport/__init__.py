"""Transport: how commands, files and agent calls reach a host; one session per host per run.

``base`` (the ``Transport`` interface and ``LocalTransport``: ``sh -c`` on this machine), ``ssh`` (the hardened
Fabric connection; ``proxy``: its hops and a watched ProxyCommand), ``openssh`` (read-only commands through the
``ssh`` binary and one reused ControlMaster connection), ``sshfailures`` (what a failed connection says, and how
long it is retried, for both), ``trust`` (first contact: a host key fetched
and written to known_hosts only on confirmation), ``agentclient`` (ships the host-side agent, ``fabfile.remote``,
and calls its verbs) and ``session`` (a host's transport and agent, opened once; ``connector`` swaps in a fake
for tests).

May import: ``fabfile.errors``, ``fabfile.inventory``, ``fabfile.present.output`` (the one printer every layer may
use) and ``fabfile.remote`` (whose files it ships); never a command.
"""
