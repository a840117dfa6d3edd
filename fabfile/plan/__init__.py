"""Plan: what a deploy (or a sweep) will do, as pure values, decided before anything is touched on a host.

``deploy_plan`` (the ``Plan`` of one host: argv, environment, files, patch, steps), ``sweep_plan`` (a sweep's
configurations, their order, the prediction for those held back), ``versioncheck`` with its
generated table ``sglang_spec_facts`` (what each SGLang release accepts on its launch line), ``predict`` and
``analysis`` (the sweep's and break-even's maths). No I/O here.

May import: ``fabfile.errors``, ``fabfile.inventory``, ``fabfile.render`` (the launch script a plan carries) and the
agent's pure modules (``fabfile.remote.evidence.ncclenv``, ``patch.modes``, ``versions``).
"""
