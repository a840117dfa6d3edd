"""The tool's own Invoke ``Program``: the core options this tool supports, and its parse errors as sentences.

Invoke's ``Program`` offers options that mean nothing here (``--echo``, ``--pty``, ``--prompt-for-sudo-password``:
this tool runs no local shell commands through Invoke) and reports a mistyped flag as ``No idea what '--stesp' is!``
(exit 1). This one keeps --help, --list (-l, -F json), --version, --complete and --print-completion-script; a parse
error is one sentence naming the flag, with the nearest flag or command ("did you mean --steps?"), exit 2 like every
other bad input; ``--list`` prints each command's whole summary; each value flag shows what it takes (``--steps=N``);
``--host`` values tab-complete from the inventory; and a closed pipe (``inv --list | head -1``) ends quietly.

``specdeploy`` (fabfile/cli/main.py) runs this Program. ``inv`` is Invoke's own Program instance
(``invoke.main.program``), which loads tasks.py only after it has parsed its core options: tasks.py hands that
running instance this class (:func:`take_over`), so everything after the collection is loaded behaves as here.
Bare ``inv --help`` and ``inv --version`` are answered before tasks.py is read and stay Invoke's.
"""

from __future__ import annotations

import atexit
import gc
import os
import re
import shlex
import sys
from typing import Any

from invoke.exceptions import Exit, ParseError
from invoke.parser import Parser
from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext
from invoke.program import Program
from invoke.util import helpline

from fabfile.cli.flagspec import flag_name, metavars
from fabfile.flags import quote

# The core options kept: everything else of Invoke's is about running local shell commands.
CORE = ("help", "list", "list-format", "list-depth", "version", "complete", "print-completion-script")

# What each value flag takes, as help shows it (``--steps=N``): the tasks' flags from their specs, then the core
# options'; a flag named in neither shows its own name.
METAVARS = {
    **metavars(),
    "help": "COMMAND", "list": "NAMESPACE", "list-format": "FORMAT", "list-depth": "N",
    "print-completion-script": "SHELL", "collection": "NAME", "search-root": "DIR",
}
_LONG = re.compile(r"--([\w-]+)")
_KIND = re.compile(r"\b(?:STRING|INT)\b")
_UNKNOWN = re.compile(r"No idea what '(.*)' is!")
_NO_VALUE = re.compile(r"Flag <Argument: ([^\s>(]+)")


def named(tuples: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """Help's flag specs with what each takes (``-F FORMAT, --list-format=FORMAT``), where
    Invoke shows every value as STRING or INT."""
    out = []
    for spec, text in tuples:
        long = _LONG.search(spec)
        name = long[1] if long else ""
        out.append((_KIND.sub(METAVARS.get(name, name.upper()), spec), text))
    return out


def summary(obj: Any) -> str | None:
    """A task's whole first paragraph on one line (Invoke's --list shows its first line, cut mid-sentence)."""
    doc = (obj.__doc__ or "").strip()
    if not doc:
        return helpline(obj)
    return " ".join(doc.split("\n\n", 1)[0].split())


def _suggest(word: str, names: list[str]) -> str:
    import difflib

    if len(word) > 64:  # a name is short: nothing is near this (and difflib's time grows with the length)
        return ""
    near = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f"; did you mean {near[0]}?" if near else ""


class SpecProgram(Program):
    def core_args(self) -> list[Argument]:
        return [a for a in super().core_args() if a.name in CORE]

    def parse_core(self, argv: list[str] | None) -> None:
        from invoke.completion.complete import print_completion_script

        self.normalize_argv(argv)
        self.parse_core_args()
        if self.args.version.value:
            self.print_version()
            raise Exit
        if self.args["print-completion-script"].value:
            print_completion_script(shell=self.args["print-completion-script"].value, names=self.binary_names)
            raise Exit

    def update_config(self, merge: bool = True) -> None:
        # Invoke's reads the run/sudo options dropped above; there is nothing of theirs to carry into the config.
        if merge:
            self.config.merge()

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as e:
            self._refuse(e)

    def parse_cleanup(self) -> None:
        halp = self.args.help.value
        if isinstance(halp, str) and halp not in self.parser.contexts:
            me = self.binary.split("[", 1)[0]
            self._refuse_words(f"--help: no command {quote(halp, as_repr=True)}" + _suggest(halp, self._task_names()),
                               f"`{me} --list` shows the commands")
        if self.args.complete.value:
            self._complete_host()
        try:
            super().parse_cleanup()
        except BrokenPipeError:
            _pipe_closed()

    def run(self, argv: list[str] | None = None, exit: bool = True) -> None:
        try:
            super().run(argv, exit)
        except BrokenPipeError:
            _pipe_closed()

    def execute(self) -> None:
        # Invoke turns Python's bytecode cache off once it has parsed its flags (its --write-pyc, off by default,
        # keeps a tasks folder free of .pyc files), so every run compiled each fabfile module it imported again:
        # ~50 ms of a 0.3 s `inv status`. fabfile is a package like any other: Python's own rule again, so -B and
        # PYTHONDONTWRITEBYTECODE still turn the cache off.
        sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)
        # At exit Python's last garbage collection walks every object the run made (paramiko, Jinja, rich, the
        # results): 40-60 ms of a 0.3 s `inv status`, measured. Freezing them at exit (atexit runs before that
        # collection) skips the walk; nothing here relies on a finalizer at exit (sessions and files are closed
        # by the commands themselves).
        atexit.unregister(gc.freeze)
        atexit.register(gc.freeze)
        super().execute()

    def _make_parser(self) -> Parser:
        # Invoke builds a parser context for every task on each run, and its parser deep-copies them all: ~25 ms of
        # each start-up. Only the tasks named on the command line (and --help's) can be parsed; completion, which
        # offers every command, gets them all.
        if self.args.complete.value:
            return super()._make_parser()
        words = set(self.core.unparsed) | {self.args.help.value}
        names = self.collection.task_names
        contexts = [ParserContext(name=n, aliases=aliases, args=self.collection[n].get_arguments(
                        ignore_unknown_help=self.config.tasks.ignore_unknown_help))
                    for n, aliases in names.items() if n in words or words.intersection(aliases)]
        return Parser(initial=self.initial_context, contexts=contexts)

    def _make_pairs(self, coll: Any, ancestors: list[str] | None = None) -> list[tuple[str, str | None]]:
        pairs = super()._make_pairs(coll, ancestors)
        return [(shown, summary(coll.tasks[name]) if name in coll.tasks else text)
                for (shown, text), name in ((p, p[0].split(" ")[0].lstrip(".")) for p in pairs)]

    def print_task_help(self, name: str) -> None:
        # Invoke shows every value flag as `--steps=STRING`: say what each takes instead.
        ctx = self.parser.contexts[name]
        original = ctx.help_tuples

        ctx.help_tuples = lambda: named(original())
        try:
            super().print_task_help(name)
        finally:
            del ctx.help_tuples

    def print_help(self) -> None:
        # What takes a value says what (Invoke: STRING); `inv` with no command (tasks.py loaded) lists the commands.
        print(f"Usage: {self.binary.split('[', 1)[0]} [--core-opts] <command> [--command-opts] ...\n")
        print("Core options:\n")
        self.print_columns(named(self.initial_context.help_tuples()))
        if getattr(self, "collection", None) is not None:
            self.list_tasks()

    def _task_names(self) -> list[str]:
        return sorted(self.collection.task_names) if self.collection is not None else []

    def _refuse(self, e: ParseError) -> None:
        text = str(e)
        ctx = e.context
        flags = sorted(f for f in (ctx.flags if ctx is not None else {}) if f.startswith("--"))
        me = self.binary.split("[", 1)[0]  # `inv[oke]` is typed `inv`
        command = f"{me} {ctx.name}" if ctx is not None and ctx.name else me
        unknown = _UNKNOWN.match(text)
        if unknown:
            word = unknown[1]
            if word.startswith("-"):
                flag = word.split("=", 1)[0]
                self._refuse_words(f"{quote(flag)}: {command} has no such flag" + _suggest(flag, flags),
                                   f"`{me} --help {ctx.name}` lists its flags" if ctx is not None and ctx.name
                                   else f"`{me} --help` lists the options")
            if ctx is not None and ctx.name:
                twice = _given_twice(self.core.unparsed, ctx.name, flags)
                if twice:
                    values = ", ".join(_values_of(self.core.unparsed, ctx.name, twice))
                    self._refuse_words(f"{twice}: given twice ({values})",
                                       f"give {twice} once; `{me} --help {ctx.name}` says what it takes")
                if "--host" in flags and "/" not in word and not os.path.exists(word):
                    # `inv status sim2`: a host named without its flag
                    self._refuse_words(f"{quote(word)}: {command} takes no bare word",
                                       f"to name a host: `{command} --host {quote(word)}`")
                self._refuse_words(f"{quote(word)}: {command} takes no bare word",
                                   f"`{me} --help {ctx.name}` lists its flags (a file is named by one)")
            self._refuse_words(f"{quote(word)}: no such command" + _suggest(word, self._task_names()),
                               f"`{me} --list` shows the commands")
        no_value = _NO_VALUE.search(text)
        if no_value:
            flag = flag_name(no_value[1])
            self._refuse_words(f"{flag}: needs a value (e.g. {flag}={METAVARS.get(flag[2:], flag[2:].upper())})",
                               f"`{me} --help {ctx.name}` says what it takes" if ctx is not None and ctx.name else "")
        self._refuse_words(text, "")

    def _refuse_words(self, sentence: str, hint: str) -> None:
        from fabfile.errors import FlagError
        from fabfile.present.output import print_error

        error = FlagError(sentence, hint)
        print_error(error)
        raise Exit(code=error.exit_code)

    def _complete_host(self) -> None:
        """``--host <TAB>``: the inventory's hosts, groups, clusters and ``all`` (Invoke completes no flag values)."""
        try:
            tokens = shlex.split(self.core.remainder)
        except ValueError:
            return
        if not tokens or not (tokens[-1] == "--host" or (len(tokens) > 1 and tokens[-2] == "--host"
                                                         and not tokens[-1].startswith("-"))):
            return
        path = next((tokens[i + 1] if t == "--inventory" else t.partition("=")[2]
                     for i, t in enumerate(tokens[:-1]) if t == "--inventory" or t.startswith("--inventory=")), None)
        path = path or os.environ.get("SPECDEPLOY_INVENTORY") or "inventory.yaml"
        from fabfile.errors import SpecDeployError
        from fabfile.inventory import hosts as inventory

        try:
            inv = inventory.load(path, cache=True)
        except (SpecDeployError, OSError):
            raise Exit from None
        # A comma list: what is typed so far stays, each name is offered after it (`--host sim1,<TAB>`).
        typed = tokens[-1] if tokens[-1] != "--host" else ""
        before = typed.rpartition(",")[0] + "," if "," in typed else ""
        for name in sorted({*inv.hosts, *inv.groups, *inv.clusters, "all"}):
            print(before + name)
        raise Exit


def _task_words(argv: list[str], task: str) -> list[str]:
    """The words after ``task`` on the command line (Invoke has split ``--flag=value`` into two)."""
    return argv[argv.index(task) + 1:] if task in argv else list(argv)


def _given_twice(argv: list[str], task: str, flags: list[str]) -> str | None:
    """The first of ``task``'s flags given more than once (Invoke then read the second one's value as a command)."""
    seen: set[str] = set()
    for word in _task_words(argv, task):
        name = word.split("=", 1)[0]
        if name in flags:
            if name in seen:
                return name
            seen.add(name)
    return None


def _values_of(argv: list[str], task: str, flag: str) -> list[str]:
    """Each value ``flag`` was given, in order, quoted."""
    words = _task_words(argv, task)
    out = []
    for i, word in enumerate(words):
        if word.startswith(flag + "="):
            out.append(quote(word.split("=", 1)[1]))
        elif word == flag and i + 1 < len(words):
            out.append(quote(words[i + 1]))
    return out


def _pipe_closed() -> None:
    from fabfile.present.text import pipe_closed

    pipe_closed()


def take_over(program: Program) -> None:
    """Make Invoke's running ``inv`` Program this one (see the module's docstring): tasks.py calls it on load."""
    if type(program) is Program:
        program.__class__ = SpecProgram
