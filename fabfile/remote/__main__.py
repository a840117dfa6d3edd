"""Agent entry point: ``python -I STATE/agent/<sha16> VERB B64JSON``. Prints JSON event lines; the last is the result.

Every run is bounded on the host itself: the request's ``deadline_s`` arms SIGALRM, so a lost client can never leave
an agent running forever. SIGHUP is ignored: a dropped SSH session must not kill a deploy half-way (the deploy
finishes headless, writing its journal, and the client re-attaches).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
from typing import Any

from .common import CONTEXT, AgentError, EventSink, unexpected


def _verbs() -> dict[str, Any]:
    # The table is small; each verb imports its own room when called (``Verb.function``).
    from . import verbs

    return verbs.TABLE


def _cpu_s() -> float:
    """This agent's CPU so far, its reaped children (nvidia-smi, ...) included: the result carries it so a benchmark
    can tell the agents' part of a host's CPU from sshd's and the server's (``bench/fleet_deploy.py``)."""
    t = os.times()
    return round(t.user + t.system + t.children_user + t.children_system, 3)


class _Deadline(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Deadline()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sink = EventSink()
    if len(argv) != 3:
        sink.emit("result", ok=False, error=AgentError("bad_request", "usage: agent VERB B64JSON").as_dict())
        return 2
    verb_name = argv[1]
    try:
        req = json.loads(base64.b64decode(argv[2]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        sink.emit("result", ok=False, error=AgentError("bad_request", f"request is not base64 JSON: {e}").as_dict())
        return 2
    if not isinstance(req, dict):
        sink.emit("result", ok=False, error=AgentError("bad_request", "the request is not a JSON object").as_dict())
        return 2
    table = _verbs()
    if verb_name not in table:
        sink.emit("result", ok=False, error=AgentError("bad_request", f"unknown verb {verb_name!r}").as_dict())
        return 2
    CONTEXT["verb"] = verb_name
    CONTEXT["state_dir"] = req.get("state_dir")
    deadline = 0.0
    try:
        if req.get("journal"):
            sink = EventSink(journal=req["journal"])
        deadline = float(req.get("deadline_s") or 0)
        if deadline > 0:
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.setitimer(signal.ITIMER_REAL, deadline)
        # The request is the wire's JSON object: each verb's function reads it as its shape (``protocol``).
        data = table[verb_name].function()(req, sink)
    except AgentError as e:
        sink.emit("result", ok=False, error=e.as_dict(), cpu_s=_cpu_s())
        return 0
    except _Deadline:
        step = f" (in step {CONTEXT['step']!r})" if CONTEXT.get("step") else ""
        err = AgentError("deadline", f"the host-side step {verb_name!r}{step} ran past its {deadline:.0f} s bound "
                         "and was stopped on the host", "raise the timeout or look at the host's load")
        sink.emit("result", ok=False, error=err.as_dict(), cpu_s=_cpu_s())
        return 0
    except Exception as e:
        # Never a raw traceback on the client's screen: one sentence, and the traceback in a file on the host.
        sink.emit("result", ok=False, error=unexpected(e).as_dict(), cpu_s=_cpu_s())
        return 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    sink.emit("result", ok=True, data=data, cpu_s=_cpu_s())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
