"""run.py is the psycopg2 runner of the integration package's differential
harness (differential_driver_test.go). It reads commands, one JSON array a
line, from stdin and answers each with one JSON line:

  ["open", url, mode]  connects (mode: autocommit, the only one)
  ["stmt", sql]        runs sql with cursor.execute and prints the result
  ["close"]            ends the connection

The connection is in autocommit mode, so that the script's own BEGIN,
COMMIT and ROLLBACK are its transactions (psycopg2 would otherwise open a
transaction before the first statement). psycopg2 sends every statement
with PQexec, the simple protocol, and keeps only the last result of a
multi-statement query.

A result has the command tag (cursor.statusmessage), the fields as
cursor.description exposes them (name, type OID, internal_size, precision
and scale: psycopg2 shows no typmod and no format code of its own; the
last three derive from the typmod), the rows as psycopg2 converts them
(repr of the Python values), the error's fields (diag) and the transaction
status (conn.info.transaction_status).

Run it with Debian's /usr/bin/python3 and its python3-psycopg2 package.
"""

import json
import sys

import psycopg2
import psycopg2.extensions as ext

TX = {
    ext.TRANSACTION_STATUS_IDLE: "I",
    ext.TRANSACTION_STATUS_INTRANS: "T",
    ext.TRANSACTION_STATUS_INERROR: "E",
}


def err_fields(e):
    if isinstance(e, psycopg2.Error) and e.pgcode:
        d = e.diag
        return {
            "severity": d.severity or "",
            "code": e.pgcode,
            "message": d.message_primary or "",
            "detail": d.message_detail or "",
            "hint": d.message_hint or "",
        }
    return {"other": "%s: %s" % (type(e).__name__, str(e).strip())}


def cell(v):
    if v is None:
        return "NULL"
    if isinstance(v, memoryview):
        # bytea: the repr of a memoryview is its address
        return "bytea:" + v.tobytes().hex()
    return repr(v)


def field(c):
    return "%s:%s:%s:%s:%s" % (c.name, c.type_code, c.internal_size, c.precision, c.scale)


class Runner:
    def __init__(self):
        self.conn = None

    def open(self, url):
        self.conn = psycopg2.connect(url)
        self.conn.autocommit = True
        return {"ok": True}

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        return {"ok": True}

    def tx(self):
        if self.conn is None or self.conn.closed:
            return ""
        return TX.get(self.conn.info.transaction_status, "?")

    def stmt(self, sql):
        out = {"tag": "", "fields": [], "rows": [], "err": None}
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                out["tag"] = cur.statusmessage or ""
                if cur.description is not None:
                    out["fields"] = [field(c) for c in cur.description]
                    out["rows"] = ["|".join(cell(v) for v in r) for r in cur.fetchall()]
        except Exception as e:  # every error is part of the result
            out["err"] = err_fields(e)
        out["tx"] = self.tx()
        return out


def main():
    r = Runner()
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd[0] == "open":
                res = r.open(cmd[1])
            elif cmd[0] == "stmt":
                res = r.stmt(cmd[1])
            elif cmd[0] == "close":
                res = r.close()
            else:
                raise ValueError("unknown command %r" % cmd[0])
        except Exception as e:
            res = {"err": err_fields(e)}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()
    r.close()


if __name__ == "__main__":
    main()
