#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/verbs_chunk_fuzz.cc (fuzz/corpus/verbs_chunk/): the input
format is described at the top of that harness. Each seed is a short, valid conversation: a
message in chunks into a posted receive, plaintext and sealed, a write-with-imm, a truncated
receive, control chunks, a duplicate, a gap, line noise and a tampered frame."""
import os
import struct
import sys

DATA, ACK, HELLO, BYE = 1, 2, 3, 4
FIRST, LAST, NACK, HEARD, IMM = 1, 2, 4, 8, 32
AUTH, CRC, MAGIC, WHOLE, TAMPER, POST, REL, LARGE = 1, 2, 4, 8, 16, 32, 64, 128


def rec(type_, flags, how, payload=0, seq=0, offset=0, msg=0, imm=0, recv_512=0, tamper_at=0, body=b""):
    if payload > 255:
        how |= LARGE
    d = struct.pack("<BBBHb", type_, flags, how, payload, seq)
    d += offset.to_bytes(3, "little") + msg.to_bytes(3, "little")
    d += struct.pack("<BBH", imm, recv_512, tamper_at)
    assert len(d) == 16
    return d + body[: min(payload, 64)]


def message(nbytes, chunk, how=AUTH | REL, recv=None, imm=0):
    out = b""
    off = 0
    first = True
    while True:
        n = min(chunk, nbytes - off)
        flags = (FIRST if first else 0) | (LAST if off + n == nbytes else 0)
        post = POST if first else 0
        out += rec(DATA, flags, how | post, n, 0, off, nbytes, imm, recv if recv is not None else (nbytes + 511) // 512,
                   body=bytes((off + i) & 255 for i in range(min(n, 64))))
        off += n
        first = False
        if off == nbytes:
            return out


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "verbs_chunk")
    os.makedirs(root, exist_ok=True)
    plain_cap, sealed_cap = 32768 - 64, 32768 - 64 - 48
    seeds = {
        "plain_two_chunks": b"\x00" + message(plain_cap + 100, plain_cap),
        "sealed_two_chunks": b"\x01" + message(sealed_cap + 100, sealed_cap),
        "sealed_chacha_small": b"\x03" + message(300, 300),
        "sealed_truncated": b"\x01" + message(5000, 4000, recv=4),
        "plain_truncated": b"\x00" + message(5000, 4000, recv=4),
        "sealed_imm": b"\x01" + rec(DATA, FIRST | LAST | IMM, AUTH | REL | POST, 0, 0, 0, 0, 7, 1),
        "sealed_control": b"\x05" + rec(HELLO, HEARD, AUTH) + rec(ACK, NACK, AUTH) + message(10, 10) + rec(BYE, 0, AUTH),
        "plain_dup_gap": b"\x00" + message(10, 10) + rec(DATA, FIRST | LAST, AUTH | REL, 10, -1, 0, 10)
        + rec(DATA, FIRST | LAST, AUTH | REL, 10, 3, 0, 10),
        "plain_noise": b"\x00" + rec(DATA, FIRST | LAST, MAGIC | WHOLE | POST, 10, 0, 0, 10, 0, 1)
        + rec(DATA, FIRST | LAST, CRC | MAGIC | POST, 10, 0, 0, 10, 0, 1),
        "sealed_tampered_payload": b"\x01" + rec(DATA, FIRST | LAST, AUTH | REL | POST | TAMPER, 20, 0, 0, 20, 0, 1, 64 + 48 + 3),
        "sealed_tampered_header": b"\x01" + rec(DATA, FIRST | LAST, AUTH | REL | POST | TAMPER, 20, 0, 0, 20, 0, 1, 70),
        "sealed_misplaced": b"\x01" + rec(DATA, LAST, AUTH | REL | POST, 20, 0, 5, 20, 0, 1),
        "sealed_plain_frame": b"\x01" + rec(DATA, FIRST | LAST, CRC | MAGIC | WHOLE | POST, 20, 0, 0, 20, 0, 1),
    }
    for name, data in seeds.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {os.path.normpath(root)}", file=sys.stderr)


if __name__ == "__main__":
    main()
