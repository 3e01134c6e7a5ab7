"""Crash-test drivers: a process that imports rasfast once, then forks one child per kill
point; each child counts "points" (before and after every durable primitive of
rasfast.index.durable, os.replace and os.pwrite; a pwrite that the kill lands right after writes
only half its bytes) and SIGKILLs itself at point k. k = 0 runs to the end and writes the
count next to the directory. The driver itself runs no torch op before forking, so no
OpenMP pool is forked."""
import json
import os
import subprocess
import sys
import textwrap

# Defines point(), wrap() and kill_at, and wraps the primitives; the caller's script adds
# `def run(d): ...` (and may wrap more functions) before LOOP.
PRELUDE = textwrap.dedent("""
    import json, os, signal, sys
    from rasfast.index import durable as _durable

    count, kill_at = [0], [0]

    def point():
        count[0] += 1
        if count[0] == kill_at[0]:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(mod, name, torn=False):
        f = getattr(mod, name)
        def w(*a, **k):
            point()
            if torn and count[0] + 1 == kill_at[0]:  # the kill lands right after: tear it
                fd, data, off = a
                f(fd, memoryview(data)[:max(1, len(memoryview(data)) // 2)], off)
                point()
            r = f(*a, **k)
            point()
            return r
        setattr(mod, name, w)

    for name in ("write_new_file", "pwrite_at", "atomic_write", "fsync_dir"):
        wrap(_durable, name)
    wrap(os, "replace")
    wrap(os, "pwrite", torn=True)
""")

# Forks a child per (k, directory) of the JSON job list in sys.argv[-1] and prints
# {k: exit status (negative: killed by that signal)}.
LOOP = textwrap.dedent("""
    status = {}
    for k, d in json.loads(sys.argv[-1]):
        pid = os.fork()
        if pid == 0:
            kill_at[0] = k
            run(d)
            if k == 0:
                with open(os.path.join(d, "..", "points"), "w") as f:
                    f.write(str(count[0]))
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        status[str(k)] = -os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)
    print(json.dumps(status))
""")


def drive(body: str, args, jobs):
    """Runs PRELUDE + body (defining run(d)) + LOOP with ``args`` and the (k, dir) ``jobs``;
    returns {k: exit status}."""
    script = PRELUDE + textwrap.dedent(body) + LOOP
    res = subprocess.run([sys.executable, "-c", script, *map(str, args),
                          json.dumps([[k, str(d)] for k, d in jobs])],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stderr[-3000:]
    return {int(k): v for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}
