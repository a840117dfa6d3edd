"""The one table of SGLang launch flags the tool writes from inventory fields.

Read by every side that must agree on it: render (``plan.deploy_plan.launch_argv`` writes each flag from its
field), the inventory's check (``schema``: a flag of this table in ``sglang_args`` would be a second source of
truth), adopt (a hand-started line's flags go back to these fields), diff (a record's alias and render's spelling
are one flag) and the version check (its hint names the field a missing flag comes from). It lives in
``inventory/``, the lowest room, because the inventory's check reads it and may import nothing above itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchFlag:
    flag: str                       # the spelling render writes
    field: str                      # the inventory field it comes from (a dotted path under the host entry)
    aliases: tuple[str, ...] = ()   # other spellings SGLang's argparse takes for it (a prefix it completes, too)
    whole: bool = False             # its value is a whole number
    deploy_flag: str | None = None  # the `inv deploy` flag that overrides the field for one deploy
    # Accepted in sglang_args as well: served-model-name was read there before it had a field, and inventories
    # still write it so; every other flag of the table is refused there.
    in_args_too: bool = False
    # An optional top-level field: render writes the flag only when the host sets the field, and adopt fills the
    # field from the flag, both by this row alone (a new such flag is one row here and the field itself). The other
    # rows each have their own place in the launch line and their own defaults in an adopted entry.
    when_set: bool = False

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.flag, *self.aliases)

    @property
    def source(self) -> str:
        """Where its value comes from, as a user writes it: ``speculative.steps / --steps``."""
        return self.field + (f" / {self.deploy_flag}" if self.deploy_flag else "")


LAUNCH_FLAGS: tuple[LaunchFlag, ...] = (
    LaunchFlag("--model-path", "model", ("--model",)),
    LaunchFlag("--tp-size", "tp", ("--tensor-parallel-size", "--tp"), whole=True),
    LaunchFlag("--host", "listen"),
    LaunchFlag("--port", "port", whole=True),
    LaunchFlag("--served-model-name", "served_model_name", in_args_too=True, when_set=True),
    LaunchFlag("--speculative-algorithm", "speculative.algorithm"),
    LaunchFlag("--speculative-draft-model-path", "draft_model", ("--speculative-draft-model",)),
    LaunchFlag("--speculative-num-steps", "speculative.steps", whole=True, deploy_flag="--steps"),
    LaunchFlag("--speculative-eagle-topk", "speculative.topk", whole=True, deploy_flag="--topk"),
    LaunchFlag("--speculative-num-draft-tokens", "speculative.draft_tokens", whole=True,
               deploy_flag="--draft-tokens"),
)

# Every spelling -> its row; field -> the spelling render writes.
BY_SPELLING: dict[str, LaunchFlag] = {s: row for row in LAUNCH_FLAGS for s in row.spellings}
FLAG_OF: dict[str, str] = {row.field: row.flag for row in LAUNCH_FLAGS}


def row_of(flag: str) -> LaunchFlag | None:
    """The table's row for any spelling of a flag (``--tp`` → the ``tp`` row), None for a flag of no field."""
    return BY_SPELLING.get(flag)


def canonical(flag: str) -> str:
    """The spelling render writes for ``flag`` (``--tensor-parallel-size`` → ``--tp-size``); another flag as is."""
    row = BY_SPELLING.get(flag)
    return row.flag if row is not None else flag
