#!/usr/bin/env python3
"""Read and verify a Lehr namespace file (format in docs/files.md)."""
import hashlib, json, sys

def uvarint(b, i):
    n = shift = 0
    while True:
        c = b[i]; i += 1
        n |= (c & 0x7F) << shift; shift += 7
        if c < 0x80: return n, i

def read_lehr(path):
    data = open(path, "rb").read()
    if not data.startswith(b"LEHR1\n"): raise ValueError("not a Lehr file")
    payload, trailer = data[:-72], data[-72:]
    if trailer != b"sha256:" + hashlib.sha256(payload).hexdigest().encode() + b"\n":
        raise ValueError("file checksum mismatch (torn or damaged file)")
    end = payload.index(b"\n", 6)
    header, body = json.loads(payload[6:end]), payload[end + 1:]
    if len(body) != header["body_size"]: raise ValueError("body size mismatch")
    if "sha256:" + hashlib.sha256(b"lehr-content-v1\n" + body).hexdigest() != header["checksum"]:
        raise ValueError("content checksum mismatch")
    props, i = {}, 0
    while i < len(body):
        fields = []
        for _ in range(3):
            n, i = uvarint(body, i); fields.append(body[i:i + n]); i += n
        props[fields[0].decode()] = (fields[1].decode(), fields[2])  # key -> (content type, value)
    return header, props

if __name__ == "__main__":
    h, props = read_lehr(sys.argv[1])
    print(f'{h["namespace"]} version {h["version"]} ({h["kind"]}) {h["checksum"]}, {len(props)} properties')
    for key, (ctype, value) in props.items():
        print(key, ctype, len(value), "bytes")
