"""OpenPGP public key fingerprints (RFC 4880 section 12.2; RFC 9580 for v6 keys), stdlib only.

Module_utils for library/glm5_apt_signed_source.py: apt keys are checked by fingerprint on
targets that may have no gpg (Debian 13 verifies with sqv, minimal systems have gpgv only).
"""

from __future__ import annotations

import base64
import hashlib
import re

ARMOR_BLOCK = re.compile(
    r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S
)
PUBLIC_KEY_TAG = 6


class KeyProblem(Exception):
    """The key cannot be read or is not the expected one; the message says why."""


def dearmor(text: str) -> bytes:
    blocks = ARMOR_BLOCK.findall(text)
    if not blocks:
        raise KeyProblem("no 'BEGIN PGP PUBLIC KEY BLOCK' in the key text")
    data = b""
    for block in blocks:
        _headers, _, body = block.partition("\n\n") if "\n\n" in block else ("", "", block)
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith("=")]  # the CRC24 line
        try:
            data += base64.b64decode("".join(lines), validate=True)
        except ValueError as exc:
            raise KeyProblem(f"the armoured key is not valid base64 ({exc})") from None
    return data


def packets(data: bytes):
    """(tag, body) of each OpenPGP packet, old and new header formats."""
    at = 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            raise KeyProblem(f"not an OpenPGP packet at byte {at}")
        if first & 0x40:  # new format
            tag, at = first & 0x3F, at + 1
            octet = data[at]
            if octet < 192:
                length, at = octet, at + 1
            elif octet < 224:
                length, at = ((octet - 192) << 8) + data[at + 1] + 192, at + 2
            elif octet == 255:
                length, at = int.from_bytes(data[at + 1 : at + 5], "big"), at + 5
            else:
                raise KeyProblem("partial packet lengths are not used in keys")
        else:  # old format
            tag, kind, at = (first >> 2) & 0x0F, first & 0x03, at + 1
            if kind == 3:
                raise KeyProblem("indeterminate packet length in a key")
            size = (1, 2, 4)[kind]
            length, at = int.from_bytes(data[at : at + size], "big"), at + size
        body = data[at : at + length]
        if len(body) != length:
            raise KeyProblem("the key data ends inside a packet")
        yield tag, body
        at += length


def fingerprint(body: bytes) -> str:
    version = body[0] if body else 0
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyProblem(f"public key packet version {version} is not supported")


def key_fingerprints(data: bytes) -> list[str]:
    """Fingerprints of the primary keys in an armoured or binary keyring."""
    if b"-----BEGIN PGP" in data:
        data = dearmor(data.decode("ascii", "replace"))
    found = [fingerprint(body) for tag, body in packets(data) if tag == PUBLIC_KEY_TAG]
    if not found:
        raise KeyProblem("no public key in the key data")
    return found


def normal_fingerprint(text: str) -> str:
    return re.sub(r"\s+", "", text).upper()
