"""Joining the Ray cluster at `--ray-address` within a stated time (issue 23, S37-4).

`ray.init(address=...)` asks the cluster's GCS for its id in Ray's native client: against an
address where no GCS answers (a refused port, a host that drops the packets, a server that is
not a GCS: the dashboard's port, an HTTP server) each attempt waits ~40 s, 20 attempts (~13
minutes), and prints Ray's native `[... W ...]` warnings on stderr. Python's Ctrl-C and SIGTERM
handlers run only when the main thread is back in the interpreter, so a stop lands up to 40 s
late. `check_answers` asks the address once, before ray.init, within JOIN_SECONDS: a TCP
connection first (the exact reason for a refused port or a name that does not resolve), then
Ray's own GCS client in a child process, whose stderr is kept from the user and which is killed
at the deadline. The main thread waits in Python meanwhile, so Ctrl-C and SIGTERM land at once.
Ray asks a loopback address (127.0.0.1, localhost, ::1) at this machine's own address: both are
said (S38-6). `chosen` is the one reading of RAY_ADDRESS.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from packtool.errors import PacktoolConfigError

# A GCS answers its cluster id in milliseconds; the rest is the child's Python and Ray import.
JOIN_SECONDS = 20.0

# Ray's own client (what ray.init uses), asked for the cluster id: it prints `answered` only
# once a GCS gave one. Nothing of packtool is imported there.
_ASK_GCS = "import sys, ray._raylet as r; r.GcsClient(address=sys.argv[1]).cluster_id; print('answered')"


def chosen(address: str | None) -> tuple[str | None, bool]:
    """The address to join (None: start a local Ray) and whether RAY_ADDRESS gave it. Ray's
    own variable (`ray job submit` sets it) is read when no address is given, stripped (a job
    script's `" $HEAD"`); empty is unset, as for Ray. A blank one is refused here, naming it:
    Ray read it as an address and failed in its local start, said as "the local Ray node did
    not start" (S38-6)."""
    if address is not None:
        return address, False
    raw = os.environ.get("RAY_ADDRESS", "")
    value = raw.strip()
    if raw and not value:
        raise PacktoolConfigError(f"environment variable RAY_ADDRESS={raw!r}: not a Ray address (blank); "
                                  f"unset it, or give HOST:PORT")
    return (None, False) if value in ("", "local") else (value, True)


@contextmanager
def ray_reads(address: str | None):
    """While Ray is asked and started: RAY_ADDRESS as packtool read it. ray.init and its
    address resolution re-read the variable whenever the address handed to them is None or
    `auto` (a padded `" local"` or `" auto"` failed as "Invalid address format"), and a local
    start with no address joined a cluster `ray start` had left on this machine instead."""
    raw = os.environ.get("RAY_ADDRESS")
    if raw is None or raw.strip() == raw:
        yield
        return
    os.environ["RAY_ADDRESS"] = raw.strip()
    try:
        yield
    finally:
        os.environ["RAY_ADDRESS"] = raw


def check_answers(address: str) -> None:
    """Raise an OSError (ConnectionRefusedError, TimeoutError, ConnectionError) saying why no Ray
    GCS answers at `address` within JOIN_SECONDS; Ray's own address errors (a malformed address,
    `auto` with no cluster found) as Ray raises them. A Ray Client address (ray://) is left to
    Ray's client, which bounds its own connection."""
    if address.startswith("ray://"):
        return
    from ray._private import services
    gcs = services.canonicalize_bootstrap_address(address)  # the address ray.init will ask (auto, localhost)
    if gcs is None:  # "local": ray.init starts a node here
        return
    host, port = services.parse_address(gcs)
    given = services.parse_address(address)
    # ray.init asks this machine's own address for a loopback one: the line says the address
    # given and the one asked, which a head listening on 127.0.0.1 alone does not answer at
    moved = given is not None and given[0] != host and services.is_localhost(given[0])
    said = f"{address} (Ray connects to this machine's address {gcs} for it)" if moved else gcs
    deadline = time.monotonic() + JOIN_SECONDS
    _connects(gcs, said, host, int(port), deadline, moved)
    _gcs_answers(gcs, said, deadline)


def _connects(gcs: str, said: str, host: str, port: int, deadline: float, moved: bool) -> None:
    try:
        socket.create_connection((host.strip("[]"), port), timeout=_left(deadline)).close()
    except socket.gaierror as e:
        raise ConnectionError(f"{host} does not resolve: {e.strerror}") from None
    except ConnectionRefusedError:
        fix = f"; start the head with --node-ip-address {host}, or give its own address" if moved else ""
        raise ConnectionRefusedError(f"{said} refused the connection: nothing listens there{fix}") from None
    except (TimeoutError, socket.timeout):
        raise TimeoutError(f"{said} did not answer within {JOIN_SECONDS:g} s") from None


def _gcs_answers(gcs: str, said: str, deadline: float) -> None:
    child = subprocess.Popen([sys.executable, "-c", _ASK_GCS, gcs], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=_left(deadline))
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{said} accepts connections, but no Ray GCS answered there within "
                           f"{JOIN_SECONDS:g} s (the GCS port, 6379 by default, not the dashboard's "
                           f"8265)") from None
    finally:  # a deadline, Ctrl-C or SIGTERM: the child goes with the question
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0 or "answered" not in out:
        why = _last_word(err) or f"exit status {child.returncode}"
        if "AuthenticationError" in why:  # Ray's own text runs past the line's length: the fix is short
            raise PermissionError(f"{said}: its GCS wants this process's auth token: set RAY_AUTH_MODE=token "
                                  f"and the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token")
        raise ConnectionError(f"{said}: Ray's GCS client got no cluster id there ({why})")


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.05)


def _last_word(err: str) -> str:
    """The child's reason: its exception's line, not Ray's native `[time W pid] file:line` log."""
    lines = [x.strip() for x in err.splitlines() if x.strip() and not x.startswith("[")]
    return lines[-1].removeprefix("ray.exceptions.").replace("RPC error: ", "") if lines else ""
