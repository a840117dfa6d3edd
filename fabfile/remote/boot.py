"""The agent's bootstrap and the host-side path safety rules (stdlib only, Python 3.9+).

GPU hosts are shared. Code the tool runs as the deploying user must come only from places no other account can
change, and files that may hold secrets must be readable by no one else. This module holds the rules, and it is
also sent whole as ``python -I -c SOURCE MODE ...`` (the agent may not be on the host yet):

* ``prep STATE``: make STATE and STATE/agent (0700) or refuse them (not ours, or writable by others);
* ``unpack ZIP DIR ZIP_SHA MANIFEST_SHA``: install an uploaded agent archive into DIR: read it once, check its
  sha256, extract into a private temporary directory, verify every file against the manifest shipped inside it,
  rename into place. Someone else (a concurrent deploy) having installed the same bytes first is success, once
  the existing directory passes the same checks;
* ``run DIR MANIFEST_SHA VERB B64``: check DIR and every directory above it, verify every file against the
  manifest, then run the agent. A missing DIR exits 3 with ``NOT_INSTALLED`` on stderr (the client ships it).

A refusal is one JSON result line ``{"event": "result", "ok": false, "error": {"kind": "unsafe_path", ...}}``,
the agent protocol's own shape, so the client reports it like any other agent error (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys

NOT_INSTALLED = "specdeploy-agent-not-installed"
MANIFEST = "MANIFEST.json"
HINT = ("use a directory that only the deploying user can write (the default under its HOME is), or fix the "
        "owner and mode of the one named")


class Unsafe(Exception):
    """A path the tool must not run code from or write private files to; the message is a sentence."""

    def __init__(self, message: str, hint: str = HINT) -> None:
        super().__init__(message)
        self.hint = hint


def _reinstall(d: str) -> str:
    return (f"if nobody else can write there, remove {d} (the next command installs the agent again); otherwise "
            "someone changed the tool's code on this host: investigate before deploying")


def _who(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_ancestors(path: str) -> None:
    """Every directory above ``path`` (as written and as resolved) must be owned by root or by us and not
    writable by others, unless sticky (/tmp): otherwise another account could rename ``path`` away and put its
    own in its place. Symlinks on the way must be owned by root or by us too."""
    me = os.geteuid()
    seen = set()
    for variant in (os.path.abspath(path), os.path.realpath(path)):
        parts = [p for p in variant.split("/") if p][:-1]
        for cur in ["/", *("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))]:
            if cur in seen:
                continue
            seen.add(cur)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                return  # the rest does not exist yet: it will be created by us
            if st.st_uid not in (0, me):
                raise Unsafe(f"{cur} (above {path}) belongs to {_who(st.st_uid)}, not to {_who(me)} or root: "
                             "that account could replace what lies below it")
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                raise Unsafe(f"{cur} (above {path}) is writable by other accounts (mode {st.st_mode & 0o7777:o}) "
                             "without the sticky bit: they could replace what lies below it")


def check_dir(path: str, what: str, create: bool = True) -> None:
    """Make ``path`` a private directory of ours, or refuse it with a sentence.

    Missing: created 0700 (when ``create``). Ours and readable by others: tightened to 0700 (logs and records may
    hold secrets). Not ours, writable by others, a symlink to someone else's, or not a directory: refused.
    """
    me = os.geteuid()
    check_ancestors(path)
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return
        os.makedirs(path, mode=0o700, exist_ok=True)
        lst = os.lstat(path)
    if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (0, me):
        raise Unsafe(f"{what} {path} is a symlink owned by {_who(lst.st_uid)}")
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise Unsafe(f"{what} {path} is not a directory")
    if st.st_uid != me:
        raise Unsafe(f"{what} {path} belongs to {_who(st.st_uid)}, not to {_who(me)} who deploys: "
                     "another account could put code or links there")
    if st.st_mode & 0o022:
        raise Unsafe(f"{what} {path} is writable by other accounts (mode {st.st_mode & 0o7777:o}): "
                     "they could put code or links there")
    if st.st_mode & 0o077 and create:
        os.chmod(path, 0o700)


def open_private(path: str, append: bool = True) -> int:
    """Open (creating 0600) a file that may hold secrets: never through a symlink, only our own regular file,
    tightened to 0600 if it was readable by others. Returns a file descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if os.path.islink(path):
            raise Unsafe(f"{path} is a symlink; refusing to write through it") from None
        raise Unsafe(f"cannot open {path}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise Unsafe(f"{path} is not a regular file of {_who(os.geteuid())}")
    if st.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_nofollow(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def verify_tree(d: str, manifest_sha: str) -> None:
    """``d`` holds exactly the manifest's files with its hashes, everything ours and writable by us alone."""
    me = os.geteuid()
    try:
        manifest_bytes = _read_nofollow(os.path.join(d, MANIFEST))
    except OSError as e:
        raise Unsafe(f"the agent at {d} has no readable manifest ({e.strerror})") from None
    if _sha(manifest_bytes) != manifest_sha:
        raise Unsafe(f"the agent manifest at {d} is not the one shipped", _reinstall(d))
    manifest: dict[str, str] = json.loads(manifest_bytes.decode("utf-8"))
    found: list[str] = []
    prefix = os.path.join(d, "")  # every path below starts with it: cut, not os.path.relpath (two abspaths a file)
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                # Gone between the listing and now: another agent process of this version writing its bytecode
                # (``x.pyc.<id>``, renamed into place a moment later). A file that is not there cannot run; a
                # shipped file that vanished is caught below as missing.
                continue
            if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise Unsafe(f"{p} in the agent directory is not a plain file or directory", _reinstall(d))
            if st.st_uid != me or st.st_mode & 0o022:
                raise Unsafe(f"{p} in the agent directory belongs to {_who(st.st_uid)} or is writable by others "
                             f"(mode {st.st_mode & 0o7777:o})")
            rel = p[len(prefix):]
            if stat.S_ISREG(st.st_mode) and "__pycache__" not in rel.split(os.sep) and rel != MANIFEST:
                found.append(rel)
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != me or st.st_mode & 0o022:
        raise Unsafe(f"the agent directory {d} is not a private directory of {_who(me)}")
    extra = sorted(set(found) - set(manifest))
    missing = sorted(set(manifest) - set(found))
    if extra or missing:
        raise Unsafe(f"the agent directory {d} does not hold what was shipped "
                     f"({'extra: ' + ', '.join(extra) if extra else 'missing: ' + ', '.join(missing)})", _reinstall(d))
    for rel, digest in manifest.items():
        if _sha(_read_nofollow(os.path.join(d, rel))) != digest:
            raise Unsafe(f"{os.path.join(d, rel)} differs from the file shipped (sha256 mismatch)", _reinstall(d))


def prep(state_dir: str) -> None:
    check_dir(state_dir, "state_dir")
    check_dir(os.path.join(state_dir, "agent"), "the agent directory")


def unpack(zip_path: str, d: str, zip_sha: str, manifest_sha: str) -> None:
    parent = os.path.dirname(d)
    check_dir(parent, "the agent directory")
    try:
        data = _read_nofollow(zip_path)
    finally:
        try:
            os.unlink(zip_path)
        except FileNotFoundError:
            pass
    if _sha(data) != zip_sha:
        raise Unsafe(f"the uploaded agent archive {zip_path} is not the one sent (sha256 mismatch)")
    if os.path.lexists(d):
        verify_tree(d, manifest_sha)  # installed before (by us or a concurrent deploy): fine if it verifies
        return
    # Imported here: every agent call runs this bootstrap, and only an install unpacks (~7 ms of imports saved).
    import io
    import shutil
    import tempfile
    import zipfile

    tmp = tempfile.mkdtemp(prefix=".install-", dir=parent)  # 0700, ours, a name nobody can predict
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                name = info.filename
                if name.startswith("/") or ".." in name.split("/") or name.endswith("/"):
                    raise Unsafe(f"the agent archive holds an unexpected entry {name!r}")
                target = os.path.join(tmp, *name.split("/"))
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(z.read(info))
        verify_tree(tmp, manifest_sha)
        try:
            os.rename(tmp, d)
            tmp = ""
        except OSError:
            verify_tree(d, manifest_sha)  # a concurrent install won the rename: the same bytes, checked
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def run(d: str, manifest_sha: str, verb: str, payload: str) -> int:
    if not os.path.lexists(d):
        sys.stderr.write(NOT_INSTALLED + "\n")
        return 3
    agent_dir = os.path.dirname(d)
    check_dir(os.path.dirname(agent_dir), "state_dir", create=False)
    check_dir(agent_dir, "the agent directory", create=False)
    verify_tree(d, manifest_sha)
    sys.path.insert(0, d)
    sys.argv = [d, verb, payload]
    from specdeploy_agent.__main__ import main  # type: ignore[import-not-found]

    code: int = main(sys.argv)
    return code


def refuse(message: str, hint: str = HINT) -> None:
    sys.stdout.write(json.dumps({"event": "result", "ok": False, "error": {
        "kind": "unsafe_path", "message": message, "hint": hint, "details": {}}}) + "\n")
    sys.stdout.flush()


def boot(argv: list[str]) -> int:
    import signal

    mode = argv[1] if len(argv) > 1 else ""
    try:
        if mode == "run":
            return run(argv[2], argv[3], argv[4], argv[5])
        signal.alarm(60)  # installing is bounded on the host too, like every remote command
        if mode == "prep":
            prep(argv[2])
        elif mode == "unpack":
            unpack(argv[2], argv[3], argv[4], argv[5])
        else:
            refuse(f"unknown bootstrap mode {mode!r}")
            return 2
    except Unsafe as e:
        refuse(str(e), e.hint)
    return 0


def unsafe_reason(path: str, what: str) -> str | None:
    """The sentence :func:`check_dir` would refuse ``path`` with (checking only, creating nothing), or None."""
    try:
        check_dir(path, what, create=False)
    except Unsafe as e:
        return str(e)
    except OSError as e:
        return f"{what} {path} cannot be checked: {e.strerror}"
    return None


if __name__ == "__main__":
    sys.exit(boot(sys.argv))
