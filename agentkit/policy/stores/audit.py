"""The audit log: who decided what, in a hash chain a store keeps (docs/design.md#approvals-desk).

Every decision on an approval (approve, deny, a four-eyes sign-off, a status lookup asked
again), every release of a stuck claim and every purge appends one **entry** to the store's
audit log, in the same transaction as the change it records. An entry says who (the person's
name, or None when a channel named nobody), when (``at``: the store's clock, seconds since
the epoch), what (``action``, and for a call its ``tool``, ``arguments_digest`` — sha256 of
the arguments' canonical JSON —, ``key``, ``approval_id``, its owner), an optional ``note``,
its number ``seq`` (1, 2, 3 …) and ``prev``, the previous entry's ``hash`` (64 zeros for the
first). ``hash`` is the sha256 of the entry's canonical JSON without ``hash`` and
``signature``: changing any field of any entry, removing one or moving one breaks the chain
at that entry.

Signatures
    With a signing key configured (an Ed25519 private key in PEM; the ``signing`` extra,
    ``cryptography``), each entry also carries ``signed_by`` (the public key's id, inside
    the hashed part) and ``signature`` (Ed25519 over the hash, base64). A chain alone can be
    recomputed by whoever edits the store; signed entries cannot, without the private key,
    and :func:`verify_lines` checks them with the public key alone. The key is the store's
    :attr:`~agentkit.policy.stores.algorithm.StoreBase.audit_signer`, else the file that
    ``$AGENTKIT_AUDIT_SIGNING_KEY`` names (every process that decides — the desk, the CLI, a
    server — should have the same key: an unsigned entry fails a verify with the public key).

Exports
    :func:`export_lines` writes the log as JSON lines, one entry a line, then a closing line
    (``{"end": …}``: how many entries, the last hash, signed too when a key is configured):
    without it, entries removed at the end of a file could not be told from a shorter log.
    :func:`verify_lines` checks a file offline and names the first entry that is wrong.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agentkit.boundary.canonical import canonical_json

__all__ = [
    "AUDIT_LOCK",
    "GENESIS",
    "SIGNING_KEY_ENV",
    "Broken",
    "Signer",
    "Verifier",
    "arguments_digest",
    "closing_line",
    "entry_hash",
    "env_signer",
    "export_lines",
    "load_public_key",
    "load_signer",
    "new_signing_key",
    "seal",
    "verify_lines",
]

#: The ``prev`` of the first entry.
GENESIS = "0" * 64
#: The name a backend locks (inside the decision's transaction) while it appends an entry.
AUDIT_LOCK = "agentkit:audit"
#: The environment variable naming the Ed25519 private key (PEM) that signs new entries.
SIGNING_KEY_ENV = "AGENTKIT_AUDIT_SIGNING_KEY"
#: The fields an entry's hash does not cover (the hash itself, and the signature of it).
UNHASHED = ("hash", "signature")


class Signer(Protocol):
    """What signs entries: ``key_id`` names its public key; ``sign(data)`` is the raw
    signature of ``data``."""

    key_id: str

    def sign(self, data: bytes) -> bytes: ...


class Verifier(Protocol):
    """What checks signatures: ``key_id`` names the key; ``verify`` says whether
    ``signature`` is its signature of ``data``."""

    key_id: str

    def verify(self, signature: bytes, data: bytes) -> bool: ...


def arguments_digest(arguments: Any) -> str:
    """sha256 hex of the arguments' canonical JSON: what a person approved, as a digest
    (the desk shows it beside the arguments; the audit entry records it)."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8", "surrogatepass")).hexdigest()


def entry_hash(entry: Mapping[str, Any]) -> str:
    """The hash of an entry (or a closing line): sha256 of its canonical JSON without
    ``hash`` and ``signature``."""
    body = {name: value for name, value in entry.items() if name not in UNHASHED}
    return hashlib.sha256(canonical_json(body).encode("utf-8", "surrogatepass")).hexdigest()


def seal(seq: int, prev: str, at: float, fields: Mapping[str, Any],
         signer: Signer | None) -> dict[str, Any]:
    """Entry number ``seq`` of a chain whose last hash is ``prev``: ``fields`` (who, action,
    what), its time, its hash, and with a ``signer`` its signature."""
    entry: dict[str, Any] = {**fields, "seq": seq, "prev": prev, "at": at}
    for name in UNHASHED:
        entry.pop(name, None)
    if signer is not None:
        entry["signed_by"] = signer.key_id
    else:
        entry.pop("signed_by", None)
    entry["hash"] = entry_hash(entry)
    if signer is not None:
        entry["signature"] = base64.b64encode(signer.sign(entry["hash"].encode("ascii"))).decode()
    return entry


def closing_line(count: int, head: str, exported_at: float,
                 signer: Signer | None) -> dict[str, Any]:
    """The last line of an export: how many entries it holds and the last one's hash."""
    line: dict[str, Any] = {"end": True, "entries": count, "head": head,
                            "exported_at": exported_at}
    if signer is not None:
        line["signed_by"] = signer.key_id
    line["hash"] = entry_hash(line)
    if signer is not None:
        line["signature"] = base64.b64encode(signer.sign(line["hash"].encode("ascii"))).decode()
    return line


def export_lines(entries: Iterable[str], exported_at: float,
                 signer: Signer | None) -> Iterator[str]:
    """The log as JSON lines (each stored entry's text, in order), then the closing line."""
    count, head = 0, GENESIS
    for text in entries:
        entry = json.loads(text)
        count, head = count + 1, str(entry.get("hash"))
        yield text
    yield canonical_json(closing_line(count, head, exported_at, signer))


@dataclass(frozen=True)
class Broken:
    """Where a verify failed: the ``entry`` number (its line in the file) and why."""

    entry: int
    reason: str

    def __str__(self) -> str:
        return f"entry {self.entry}: {self.reason}"


def verify_lines(lines: Iterable[str], verifier: Verifier | None = None) -> int | Broken:
    """Check an export: every entry in order (``seq`` 1, 2, …), each linked to the one
    before, each hash its contents', each signed by ``verifier``'s key when one is given,
    and the closing line last, naming as many entries and the last hash (signed too). Returns
    the number of entries, or the first :class:`Broken` one (its line number)."""
    prev, count, closed = GENESIS, 0, False
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if closed:
            return Broken(number, "a line after the closing line (entries added at the end?)")
        try:
            entry = json.loads(line)
        except ValueError:
            return Broken(number, "not a JSON line (the file was edited or cut)")
        if not isinstance(entry, dict):
            return Broken(number, "not a JSON object")
        if entry.get("end") is True:
            problem = _closing_problem(entry, count, prev, verifier)
            if problem:
                return Broken(number, problem)
            closed = True
            continue
        seq = entry.get("seq")
        if seq != number:
            return Broken(number, f"its number is {seq!r}, not {number}: an entry was removed,"
                                  " added or moved before it")
        if entry.get("prev") != prev:
            return Broken(number, f"does not follow entry {number - 1}: its prev is not that"
                                  " entry's hash (an entry was removed or moved)")
        if entry.get("hash") != entry_hash(entry):
            return Broken(number, "changed: its hash does not match its contents")
        problem = _signature_problem(entry, verifier)
        if problem:
            return Broken(number, problem)
        prev, count = str(entry["hash"]), count + 1
    if not closed:
        return Broken(count + 1, f"the file ends after entry {count} without its closing line:"
                                 " cut short (entries removed at the end?)")
    return count


def _closing_problem(line: dict[str, Any], count: int, head: str,
                     verifier: Verifier | None) -> str | None:
    if line.get("entries") != count or line.get("head") != head:
        return (f"the closing line names {line.get('entries')!r} entries ending in another"
                f" hash; the file holds {count}: entries were removed or added")
    if line.get("hash") != entry_hash(line):
        return "the closing line was changed: its hash does not match its contents"
    return _signature_problem(line, verifier)


def _signature_problem(entry: Mapping[str, Any], verifier: Verifier | None) -> str | None:
    if verifier is None:
        return None
    signature = entry.get("signature")
    if not isinstance(signature, str):
        return "not signed (verify was given a public key: every entry must be signed)"
    if entry.get("signed_by") != verifier.key_id:
        return f"signed by another key ({entry.get('signed_by')!r}, not {verifier.key_id!r})"
    try:
        raw = base64.b64decode(signature, validate=True)
    except ValueError:
        return "its signature is not base64"
    if not verifier.verify(raw, str(entry.get("hash")).encode("ascii", "replace")):
        return "its signature does not match (changed, or signed by another key)"
    return None


# ---- Ed25519 keys (the ``signing`` extra: cryptography, imported only here, when used)


class _Ed25519Signer:
    def __init__(self, private_key: Any) -> None:
        self._key = private_key
        self.key_id = _key_id(private_key.public_key())

    def sign(self, data: bytes) -> bytes:
        signed: bytes = self._key.sign(data)
        return signed

    def __repr__(self) -> str:
        return f"Ed25519 signer {self.key_id}"


class _Ed25519Verifier:
    def __init__(self, public_key: Any) -> None:
        self._key = public_key
        self.key_id = _key_id(public_key)

    def verify(self, signature: bytes, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._key.verify(signature, data)
        except InvalidSignature:
            return False
        return True


def _serialization() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:
        raise ImportError("signed audit entries need the 'cryptography' package:"
                          " pip install 'agentkit[signing]'") from exc
    return serialization


def _key_id(public_key: Any) -> str:
    """A public key's id: ``ed25519:`` and the first 16 hex digits of sha256 of its raw bytes."""
    serialization = _serialization()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read(64 * 1024)
    except OSError as exc:
        raise ValueError(f"{os.fspath(path)}: cannot read the {what}"
                         f" ({(exc.strerror or str(exc)).lower()})") from None


def load_signer(path: str | os.PathLike[str]) -> Signer:
    """The Ed25519 private key in the PEM file ``path`` (unencrypted PKCS#8). Raises
    ``ValueError`` (one line naming the file) and ``ImportError`` (no cryptography)."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise _unreadable(path, "an unencrypted PEM private key", exc) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise _not_ed25519(path, key)
    return _Ed25519Signer(key)


def load_public_key(path: str | os.PathLike[str]) -> Verifier:
    """The Ed25519 public key in the PEM file ``path`` (or the public half of a private
    key's PEM). Raises ``ValueError`` (one line naming the file) and ``ImportError``."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    data = _read(path, "public key")
    try:
        if b"PRIVATE KEY" in data:
            key: Any = serialization.load_pem_private_key(data, password=None)
            key = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise _unreadable(path, "a PEM public key", exc) from None
    if not isinstance(key, Ed25519PublicKey):
        raise _not_ed25519(path, key)
    return _Ed25519Verifier(key)


def _unreadable(path: str | os.PathLike[str], wanted: str, exc: Exception) -> ValueError:
    """One line naming the file, what it should hold, and the first line of why not."""
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ValueError(f"{os.fspath(path)}: not {wanted} ({why})")


def _not_ed25519(path: str | os.PathLike[str], key: Any) -> ValueError:
    return ValueError(f"{os.fspath(path)}: not an Ed25519 key (a {type(key).__name__})")


def new_signing_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as PEM: (private key, PKCS#8 unencrypted; public key)."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


_env_signers: dict[str, Signer] = {}


def env_signer() -> Signer | None:
    """The signer ``$AGENTKIT_AUDIT_SIGNING_KEY`` names (loaded once per path), or None when
    it is unset. Raises ``ValueError``/``ImportError`` for a key that cannot be used."""
    path = os.environ.get(SIGNING_KEY_ENV)
    if not path:
        return None
    signer = _env_signers.get(path)
    if signer is None:
        signer = _env_signers[path] = load_signer(path)
    return signer
