#!/usr/bin/env python3
"""Open N client connections to a PostgreSQL-protocol server, log each in
(trust authentication), run SELECT 1 on it, and keep them all open and idle
until stdin closes or SIGTERM. Prints "ready N" on stdout once every
connection is idle. Used by bench/idle.sh.

usage: idle_clients.py HOST PORT USER DATABASE N [tls]

With "tls", every connection asks for TLS first (SSLRequest, as libpq's
sslmode=require: the certificate is not verified) and fails if refused.
"""
import socket
import ssl
import struct
import sys
from concurrent.futures import ThreadPoolExecutor


def startup(user, db):
    body = struct.pack("!I", 196608)
    for k, v in (("user", user), ("database", db), ("application_name", "idle")):
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def read_until_ready(s):
    """Reads messages up to ReadyForQuery; fails on ErrorResponse."""
    buf = b""
    while True:
        while len(buf) >= 5:
            typ = buf[0:1]
            n = struct.unpack("!I", buf[1:5])[0]
            if len(buf) < 1 + n:
                break
            msg, buf = buf[: 1 + n], buf[1 + n :]
            if typ == b"E":
                raise RuntimeError("server error: %r" % msg)
            if typ == b"R" and struct.unpack("!I", msg[5:9])[0] != 0:
                raise RuntimeError("authentication other than trust requested")
            if typ == b"Z":
                return
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk


def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def open_one(host, port, user, db, ctx):
    s = socket.create_connection((host, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ctx is not None:
        s.sendall(struct.pack("!II", 8, 80877103))  # SSLRequest
        if s.recv(1) != b"S":
            raise RuntimeError("TLS refused")
        s = ctx.wrap_socket(s, server_hostname=host)
    s.sendall(startup(user, db))
    read_until_ready(s)
    q = b"SELECT 1\0"
    s.sendall(b"Q" + struct.pack("!I", len(q) + 4) + q)
    read_until_ready(s)
    return s


def main():
    host, port, user, db, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    ctx = tls_context() if sys.argv[6:7] == ["tls"] else None
    with ThreadPoolExecutor(max_workers=16) as ex:
        socks = list(ex.map(lambda _: open_one(host, port, user, db, ctx), range(n)))
    print("ready %d" % len(socks), flush=True)
    sys.stdin.read()  # until the caller closes our stdin
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
