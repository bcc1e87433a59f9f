#!/usr/bin/env python3
"""An independent implementation of lattice's join handshake (version 1), from the protocol as
src/lattice/crypto/handshake.h documents it, in the Python standard library alone: BLAKE2b from
hashlib, X25519 written out from RFC 7748, libsodium's crypto_kdf as the BLAKE2b construction it
documents (key = master key, salt = subkey id little-endian, personalisation = context).

It prints the messages and keys of one fixed exchange as C++ constants; the known-answer test
(handshake_kat_test.cc) holds its output and checks the C++ code byte for byte. Rerun it only when
the protocol version changes:  python3 tests/crypto/handshake_kat.py
"""
import hashlib
import struct

P = 2**255 - 19
A24 = 121665


def x25519(k: bytes, u: bytes) -> bytes:
    """RFC 7748 section 5, with the scalar clamped as it says."""
    k = bytearray(k)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    scalar = int.from_bytes(k, "little")
    x1 = int.from_bytes(u, "little") & ((1 << 255) - 1)
    x2, z2, x3, z3, swap = 1, 0, x1, 1, 0
    for t in reversed(range(255)):
        bit = (scalar >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % P, (x2 - z2) % P
        aa, bb = a * a % P, b * b % P
        e = (aa - bb) % P
        c, d = (x3 + z3) % P, (x3 - z3) % P
        da, cb = d * a % P, c * b % P
        x3 = (da + cb) ** 2 % P
        z3 = x1 * (da - cb) ** 2 % P
        x2 = aa * bb % P
        z2 = e * (aa + A24 * e) % P
    if swap:
        x2, x3, z2, z3 = x3, x2, z3, z2
    return (x2 * pow(z2, P - 2, P) % P).to_bytes(32, "little")


BASE = (9).to_bytes(32, "little")


def h(*parts, key=b""):
    return hashlib.blake2b(b"".join(parts), digest_size=32, key=key).digest()


def kdf(key: bytes, subkey_id: int, ctx: bytes) -> bytes:
    return hashlib.blake2b(b"", digest_size=32, key=key, salt=struct.pack("<Q", subkey_id) + bytes(8),
                           person=ctx + bytes(8)).digest()


def ctx_bytes(c: str) -> bytes:
    b = c.encode()
    return struct.pack("<I", len(b)) + b


def header(msg_type: int, cipher: int, flags: int) -> bytes:
    return b"LTHS" + bytes([1, msg_type, cipher, flags])


def exchange(secret: bytes, context: str, cipher: int, ni, ei_secret, nr, er_secret):
    cipher_bit = 1 << (cipher - 1)
    ei = x25519(ei_secret, BASE)
    h1 = header(1, cipher_bit, 0)
    mac1 = h(b"m1", ctx_bytes(context), h1, ni, ei, key=kdf(secret, 1, b"lathello"))
    m1 = h1 + ni + ei + mac1

    er = x25519(er_secret, BASE)
    h2 = header(2, cipher, 0)
    transcript = h(b"transcript", ctx_bytes(context), m1, h2, nr, er)
    dh = x25519(er_secret, ei)
    assert dh == x25519(ei_secret, er)
    master = h(b"master", dh, transcript, key=secret)
    keys = {name: kdf(master, i, b"lathsv01") for i, name in enumerate(
        ["i2r", "r2i", "confirm_r", "confirm_i", "session_id"], start=1)}
    mac2 = h(b"m2", transcript, key=keys["confirm_r"])
    m2 = h2 + nr + er + mac2
    h3 = header(3, cipher, 0)
    m3 = h3 + h(b"m3", transcript, h3, key=keys["confirm_i"])
    return m1, m2, m3, keys["i2r"], keys["r2i"], keys["session_id"][:16]


def main():
    secret = bytes(range(32))
    out = exchange(secret, "tcp data 0->1 epoch 3", 2,
                   bytes([0x11]) * 32, bytes([0x22]) * 32, bytes([0x33]) * 32, bytes([0x44]) * 32)
    for name, value in zip(["kM1", "kM2", "kM3", "kKeyI2R", "kKeyR2I", "kSessionId"], out):
        text = value.hex()
        lines = [text[i:i + 64] for i in range(0, len(text), 64)]
        print(f"constexpr const char* {name} =\n    " + "\n    ".join(f'"{ln}"' for ln in lines) + ";")


if __name__ == "__main__":
    main()
