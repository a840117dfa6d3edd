"""check-env never says "proven" for a value a worker does not have (issue 21), end to end on a simulated TP 2
host running SGLang 0.5.23 whose NCCL lines are printed the way NCCL 2.28 prints them.

Each test is one case from the issue and fails on the code before it: evidence that belongs to another process,
a precedence rule that differed between the launch and check-env, values NCCL reformats, values NCCL ignores,
variables NCCL reads only under conditions, and hints that named the wrong cause.
"""

from __future__ import annotations


def test_an_unknown_sglang_condition_is_not_stated_as_the_cause() -> None:
    from fabfile.remote import evidence

    flags = evidence._argv_flags([])  # launch flags unknown: whether --enable-deterministic-inference was on
    facts = {"sglang_version": "0.5.23", "sglang_sets": evidence.sglang_nccl_rules("0.5.23", flags)}
    sched = {"pid": 10, "rank": 0, "label": "TP0", "title": "sglang::scheduler_TP0", "environ_status": "ok",
             "environ": {}, "markers": [],
             "nccl": {"env": {"NCCL_ALGO": ["allreduce:tree"], "NCCL_PROTO": ["LL"]},
                      "inits": [{"rank": 0, "nranks": 2, "phase": "COMPLETE"}], "lines": 4}}
    res = evidence.evaluate({"schedulers": [sched], "launcher": {}, "facts": facts}, {"NCCL_ALGO": "Ring"})
    messages = " ".join(h["message"] for h in res["hints"])
    assert "SGLang itself sets" not in messages
    assert "SGLang may set NCCL_ALGO" in messages and "unknown" in messages
