"""check-env names only the causes it knows: an SGLang condition the judge has no rule for is never stated as the
cause of an unproven value."""

from __future__ import annotations


def test_an_unknown_sglang_condition_is_not_stated_as_the_cause() -> None:
    from fabfile.remote.evidence import judge as evidence

    flags = evidence.argv_flags([])  # launch flags unknown: whether --enable-deterministic-inference was on
    facts = {"sglang_version": "0.5.23", "sglang_sets": evidence.sglang_nccl_rules("0.5.23", flags)}
    sched = {"pid": 10, "rank": 0, "label": "TP0", "title": "sglang::scheduler_TP0", "environ_status": "ok",
             "environ": {}, "markers": [],
             "nccl": {"env": {"NCCL_ALGO": ["allreduce:tree"], "NCCL_PROTO": ["LL"]},
                      "inits": [{"rank": 0, "nranks": 2, "phase": "COMPLETE"}], "lines": 4}}
    res = evidence.evaluate({"schedulers": [sched], "launcher": {}, "facts": facts}, {"NCCL_ALGO": "Ring"})
    messages = " ".join(h["message"] for h in res["hints"])
    assert "SGLang itself sets" not in messages
    assert "SGLang may set NCCL_ALGO" in messages and "unknown" in messages
