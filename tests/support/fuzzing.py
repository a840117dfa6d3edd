"""Hypothesis strategies shared by the fuzz tests: text a shell, a template or an argument parser would read as
something other than text."""

from __future__ import annotations

from hypothesis import strategies as st

SHELLISH = st.sampled_from(["$(touch /tmp/pwned)", "`id`", "; rm -rf /", "a'b\"c", "$HOME", "\\", "%s%n",
                            "-- --help", "--steps=9", "\t\n", " ", "", "null", "~", "*", "{{ 7*7 }}"])
