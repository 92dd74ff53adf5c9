#!/usr/bin/env python3
"""free-ports.py LO HI N [TAKEN...] - prints N distinct loopback TCP ports in [LO, HI], space
separated, that nothing listens on now and that are not among TAKEN. Exit 1 if it cannot.

The one port picker of the test scripts (zk.sh, mariadb-pair.sh, nats.sh, scripts/cluster.sh,
tests/integration/cluster/selftest.sh). Ranges: other users of the machine take 24xxx and
25xxx; the kernel's ephemeral range starts above 32767, so no client socket holds a port below
it.
A port is free only at the moment of the check: callers retry a start that fails to bind."""
import random
import socket
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 64
    lo, hi, n = int(argv[1]), int(argv[2]), int(argv[3])
    taken = set(int(a) for a in argv[4:] if a.isdigit())
    got = []
    for _ in range(4000):
        p = random.randint(lo, hi)
        if p in taken:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            s.close()
        got.append(p)
        taken.add(p)
        if len(got) == n:
            print(*got)
            return 0
    return 1


sys.exit(main(sys.argv))
