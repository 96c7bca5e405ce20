"""``python -m agentkit audit export|verify FILE|keygen FILE``: the evidence of who decided
what (docs/design.md#approvals-desk).

``export`` writes a store's audit log as JSON lines (:mod:`agentkit.policy.stores.audit`:
one entry a line, then the closing line); ``verify`` checks such a file offline, with no
store: the chain (each entry's hash its contents', each linked to the one before, numbered
1, 2, …), and with ``--public-key`` every signature. A changed, removed, added or moved entry
fails with its number (its line), exit status 1 and one line. ``keygen`` makes an Ed25519
key pair for ``$AGENTKIT_AUDIT_SIGNING_KEY`` (the private key, mode 0600) and ``verify
--public-key`` (the public key, beside it as ``FILE.pub``).

The command line (:mod:`agentkit.faces.cli`) opens the store; this module does the rest.
Exit status: 0 done (verify: the file holds an unbroken chain); 1 verify found a break; 2 a
file, key or store that cannot be used (one line).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from agentkit.boundary.canonical import escape_invisible
from agentkit.policy.stores.audit import (
    Broken,
    env_signer,
    export_lines,
    load_public_key,
    new_signing_key,
    verify_lines,
)
from agentkit.policy.stores.operations import OperableStore

__all__ = ["export_audit", "keygen", "verify_audit"]


def export_audit(store: OperableStore, out: IO[str], err: IO[str], *, command: str) -> int:
    """Write ``store``'s audit log to ``out`` as JSON lines (the closing line signed with
    the configured key, when one is); returns 0, or 2 for a signing key that cannot be used.
    Raises ``StoreError``."""
    try:
        signer = env_signer()
    except (ValueError, ImportError) as exc:
        err.write(f"{command}: $AGENTKIT_AUDIT_SIGNING_KEY: {exc}\n")
        return 2
    lines = 0
    for line in export_lines(store.audit_entries(), store.store_now(), signer):
        out.write(line + "\n")
        lines += 1
    count = lines - 1  # the closing line is not an entry
    err.write(f"{command}: {count} entr{'y' if count == 1 else 'ies'} exported\n")
    return 0


def verify_audit(path: str, public_key: str | None, out: IO[str], err: IO[str], *,
                 command: str) -> int:
    """Check the export in ``path`` (``-``: standard input is not accepted: give a file);
    returns 0 (one line: how many entries, signed or not), 1 (one line: the first broken
    entry's number and why) or 2 (a file or key that cannot be used)."""
    verifier = None
    if public_key is not None:
        try:
            verifier = load_public_key(public_key)
        except (ValueError, ImportError) as exc:
            err.write(f"{command}: {escape_invisible(str(exc))}\n")
            return 2
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as file:
            found = verify_lines(_lines(file), verifier)
    except OSError as exc:
        err.write(f"{command}: {escape_invisible(path)}: cannot read it"
                  f" ({(exc.strerror or str(exc)).lower()})\n")
        return 2
    if isinstance(found, Broken):
        err.write(f"{command}: {escape_invisible(path)}: {escape_invisible(str(found))}\n")
        return 1
    signed = f", each signed by {verifier.key_id}" if verifier is not None else (
        " (signatures not checked: give --public-key PEM)")
    out.write(f"{escape_invisible(path)}: {found} entr{'y' if found == 1 else 'ies'}, the chain"
              f" unbroken{signed}\n")
    return 0


def keygen(path: str, out: IO[str], err: IO[str], *, command: str) -> int:
    """Write a new Ed25519 private key to ``path`` (mode 0600, never over an existing file)
    and its public key to ``path.pub``; returns 0, or 2 (one line)."""
    try:
        private, public = new_signing_key()
    except ImportError as exc:
        err.write(f"{command}: {exc}\n")
        return 2
    target, public_path = Path(path), Path(f"{path}.pub")
    for existing in (target, public_path):
        if existing.exists():
            err.write(f"{command}: {escape_invisible(str(existing))}: exists already; nothing"
                      " was written (a signing key is never overwritten)\n")
            return 2
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(private)
        public_path.write_bytes(public)
    except OSError as exc:
        err.write(f"{command}: {escape_invisible(path)}: cannot write it"
                  f" ({(exc.strerror or str(exc)).lower()})\n")
        return 2
    out.write(f"wrote the signing key {escape_invisible(str(target))} (keep it private; set"
              f" AGENTKIT_AUDIT_SIGNING_KEY={escape_invisible(str(target))} wherever approvals"
              f" are decided) and its public key {escape_invisible(str(public_path))} (for"
              " audit verify --public-key)\n")
    return 0


def _lines(file: IO[str]) -> list[str]:
    """The file's lines; a last empty line (the final newline) is not an entry."""
    lines = file.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines
