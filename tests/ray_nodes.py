"""A Ray cluster of two nodes on this machine, with no disk the nodes share for data (for
tests/storage/test_store_ray_nodes.py and bench/storage.py).

Each node is one `ray start --block` process bound to a loopback address of its own
(127.0.0.2, 127.0.0.3), with `--num-cpus 1`, its own Ray temp folder, its own scratch folder
as TMPDIR (where packtool's tasks write before they upload), a custom resource naming it, and
no autoscaler or log monitor. With `isolate()`, each node runs in a user+mount namespace of
its own in which the other node's folder and the `hide` folders are an empty read-only
tmpfs (nothing of them can be read there, by Python or native code). Every Python process of
a node (its workers above all) loads an audit `sitecustomize` that records each local path
the process opens, lists, renames or removes (Python's audit events), and, every few
milliseconds, the files it holds open (/proc/self/fd: what Arrow's C++ opens), one line per
new path, into its node's log.

Stopping kills, by process id, the processes this object started and their descendants
(found by a token in their environment, which every Ray process of a node inherits), never
`ray stop`: that would end every Ray instance on the machine, other users' included.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
TOKEN_VAR = "PACKTOOL_TEST_RAY_NODE"  # PACKTOOL_*: the driver forwards its own, never set there

AUDIT_SITE = r'''
import os as _os
_log = _os.environ.get("RAYNODE_AUDIT_LOG")
if _log:
    import sys as _sys, threading as _threading, time as _time
    _fd = _os.open(_log, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o644)
    _pid, _seen = str(_os.getpid()), set()
    _EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "os.rmdir",
               "shutil.rmtree", "shutil.copyfile", "os.chdir", "os.truncate"}

    def _note(event, path):
        try:
            path = _os.fsdecode(path)
        except Exception:
            return
        if not path.startswith("/"):
            path = _os.path.join(_os.getcwd(), path)
        if path.startswith(("/proc/", "/dev/", "/sys/")) or (event, path) in _seen:
            return
        _seen.add((event, path))
        _os.write(_fd, f"{_pid}\t{event}\t{path}\n".encode())

    def _hook(event, args):
        if event in _EVENTS:
            for a in args[:2] if event in ("os.rename", "shutil.copyfile") else args[:1]:
                if isinstance(a, (str, bytes)):
                    _note(event, a)

    def _open_files():
        while True:
            try:
                for n in _os.listdir("/proc/self/fd"):
                    try:
                        _note("fd", _os.readlink("/proc/self/fd/" + n))
                    except OSError:
                        pass
            except Exception:
                pass
            _time.sleep(0.005)

    _sys.addaudithook(_hook)
    _threading.Thread(target=_open_files, daemon=True, name="audit-fds").start()
'''


# Two loopback addresses, so each node is a host of its own to Ray (its object manager sends
# objects over TCP, as between machines). Ray rewrites 127.0.0.1 itself to the machine's
# outward address; other addresses of 127.0.0.0/8 it keeps, and they never leave the machine.
HEAD_IP, SECOND_IP = "127.0.0.2", "127.0.0.3"


def free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


AUTH_ENV = {"RAY_AUTH_MODE": "disabled"}  # the nodes and every driver of them
# Every driver of the nodes: Ray Data's usage-collection actor (a process of its own) is not
# started. The nodes: a killed node is declared dead after ~3 s instead of ~15 s (its raylet
# refuses the checks at once; the kill test waits for it), while a live node must miss
# three checks of 3 s each (a loaded machine's stall) to be taken for dead.
DRIVER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DATA_USAGE_DISABLED": "1"}
FAST_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "3000",
            "RAY_health_check_failure_threshold": "3"}


class _PortTaken(Exception):
    pass


def reset_driver_auth() -> None:
    """With AUTH_ENV in this process's environment: make it a driver of these nodes. Ray 2.60
    turns token authentication on in a process that started a local Ray (RAY_AUTH_MODE=token
    in its environment, the mode kept in its core); reset as Ray's own tests do."""
    try:
        from ray._private.authentication_test_utils import reset_auth_token_state
    except ImportError:  # a Ray without token authentication
        return
    reset_auth_token_state()


class Node:
    def __init__(self, name: str, root: str, ip: str):
        self.name, self.ip = name, ip
        self.temp = os.path.join(root, name, "ray")     # Ray's own temp folder for this node
        self.scratch = os.path.join(root, name, "scratch")  # TMPDIR of its processes
        self.audit = os.path.join(root, name, "audit.log")
        for d in (self.temp, self.scratch):
            os.makedirs(d, exist_ok=True)
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen | None = None

    def pids(self) -> list[int]:
        """Every live process of this node: its `ray start` and whatever inherited the token.
        /proc/PID/environ is searched as bytes: Ray's agents and workers set their process
        title over the start of their environment block, which psutil's parse then misses
        (their processes outlived the module)."""
        mark = f"\0{TOKEN_VAR}={self.token}\0".encode()
        out = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/environ", "rb") as f:
                        if mark in b"\0" + f.read() + b"\0":
                            out.append(int(name))
                except OSError:
                    continue
        return out

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for _ in range(5):  # a raylet may start a worker between the listing and its kill
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if not pids or sig != signal.SIGKILL:
                break
            time.sleep(0.05)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def opened(self) -> list[tuple[int, str, str]]:
        """(pid, event, path) of everything the node's Python processes touched."""
        if not os.path.exists(self.audit):
            return []
        with open(self.audit) as f:
            return [(int(a), b, c) for a, b, c in (line.rstrip("\n").split("\t", 2) for line in f if line.count("\t") >= 2)]


class TwoNodes:
    """A head and a second node; `address` for `ray.init`/`--ray-address`. `hide`: folders of
    the driver's machine that no node may see (with `isolate`)."""

    def __init__(self, root: str, env: dict, repo: str, audit: bool = True, hide: tuple = ()):
        self.root, self.env, self.repo, self.audit, self.hide = root, env, repo, audit, tuple(hide)
        site = os.path.join(root, "site")
        os.makedirs(site, exist_ok=True)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(AUDIT_SITE)
        self.site = site
        self.head, self.second = Node("head", root, HEAD_IP), Node("second", root, SECOND_IP)
        self.port = free_port(HEAD_IP)
        self.address = f"{HEAD_IP}:{self.port}"
        self.isolated = False  # set by isolate(): each node in its own mount namespace
        self.why_not_isolated = "not asked"

    def isolate(self) -> bool:
        """Start each node in a user+mount namespace of its own, where the other node's folder
        and the `hide` folders are an empty read-only tmpfs: a node that opens a path there
        gets ENOENT (EROFS to create), whatever opened it (Python, Arrow's C++, the raylet).
        False, with `why_not_isolated`, where this machine does not allow it."""
        probe = os.path.join(self.root, "probe")
        os.makedirs(probe, exist_ok=True)
        open(os.path.join(probe, "seen"), "w").close()
        try:
            r = subprocess.run([*self._unshare([probe]), "sh", "-c", f"test ! -e {probe}/seen"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            r = None
            self.why_not_isolated = f"unshare: {e}"
        if r is not None and r.returncode != 0:
            self.why_not_isolated = f"unshare exited {r.returncode}: {r.stderr.strip()[-300:]}"
        self.isolated = r is not None and r.returncode == 0
        if self.isolated:
            self.why_not_isolated = ""
        return self.isolated

    @staticmethod
    def _unshare(hidden: list[str]) -> list[str]:
        mounts = " && ".join(f"mount -t tmpfs -o ro,size=4k,mode=0555 packtool-hidden '{d}'" for d in hidden)
        return ["unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c", f'{mounts} && exec "$@"', "sh"]

    def _start(self, node: Node, *args: str) -> None:
        env = {**self.env, "TMPDIR": node.scratch, TOKEN_VAR: node.token,
               **({"RAYNODE_AUDIT_LOG": node.audit} if self.audit else {}),
               "PYTHONPATH": os.pathsep.join([self.site, self.repo] if self.audit else [self.repo]), "RAY_USAGE_STATS_ENABLED": "0",
               **AUTH_ENV, **FAST_ENV}
        # no autoscaler monitor and no log monitor (drivers take no worker logs): two Python
        # processes less per node on a 2-core machine
        cmd = [RAY, "start", "--block", "--node-ip-address", node.ip, "--num-cpus", "1",
               "--temp-dir", node.temp, "--resources", json.dumps({f"node_{node.name}": 1}),
               "--dashboard-agent-listen-port", str(free_port(node.ip)), "--disable-usage-stats",
               "--object-store-memory", str(200 << 20), "--include-log-monitor", "false", *args]
        if self.isolated:
            other = self.second if node is self.head else self.head
            cmd = [*self._unshare([os.path.dirname(other.temp), *self.hide]), *cmd]
        log = open(os.path.join(self.root, f"{node.name}.out"), "w")
        node.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_second(self) -> None:
        self.second = Node("second", self.root, SECOND_IP) if self.second.proc is not None else self.second
        self._start(self.second, "--address", self.address)

    def start(self, timeout: float = 90, tries: int = 3) -> "TwoNodes":
        """Both nodes, the GCS taking connections. `free_port` only probes: another process (a
        parallel test's Ray) may bind the port before the head does, and the head then exits
        ("Failed to start the grpc server"); started again on another port, up to `tries` times."""
        for attempt in range(tries):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                if attempt == tries - 1:
                    raise RuntimeError(f"ray head exited: {self.log('head')}") from None
                self.stop()
                self.head, self.second = (Node(n.name, self.root, n.ip) for n in (self.head, self.second))
                self.port = free_port(HEAD_IP)
                self.address = f"{HEAD_IP}:{self.port}"
        return self

    def _start_once(self, timeout: float) -> "TwoNodes":
        self._start(self.head, "--head", "--port", str(self.port), "--include-dashboard", "false", "--no-monitor")
        # at once, not once the GCS answers: `ray start --address` retries its first connect
        # for ~20 s while the head comes up (both import Ray meanwhile); wait_nodes starts
        # it again if it gave up
        self.start_second()
        t0 = time.time()
        while True:  # the GCS takes connections
            if self.head.proc.poll() is not None:
                if "Failed to start the grpc server" in self.log("head"):
                    raise _PortTaken()
                raise RuntimeError(f"ray head exited: {self.log('head')}")
            try:
                with socket.create_connection((HEAD_IP, self.port), timeout=1):
                    break
            except OSError:
                if time.time() - t0 > timeout:
                    raise RuntimeError(f"ray head did not start: {self.log('head')}") from None
                time.sleep(0.2)
        return self

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.root, f"{name}.out")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def wait_nodes(self, n: int, timeout: float = 90) -> None:
        """With the caller connected (ray.init): until `n` nodes are alive."""
        import ray
        t0, again = time.time(), n > 1
        while sum(1 for x in ray.nodes() if x["Alive"]) < n:
            if again and self.second.proc.poll() is not None:  # it gave up before the GCS was up
                again = False
                self.start_second()
            if time.time() - t0 > timeout:
                raise RuntimeError(f"{n} ray nodes not alive after {timeout} s: {self.log('second')}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Nothing of the cluster is kept: every process of both nodes is killed at once."""
        for node in (self.second, self.head):
            node.kill()
