"""Ctrl-C latency while tokenizing long documents (stranger F22): `packtool pack` of the PEPs
with mistral-7b-v0.1 (long documents, ~1 MB encode_batch calls), SIGINT `delay` seconds after
the cache's build folder appears (tokenizing by then), time from the signal to the exit.

    python bench/ctrl_c_tokenize.py 0.5 1.5 3
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")


def once(delay: float) -> str:
    work = tempfile.mkdtemp(prefix="ctrlc-")
    cmd = [sys.executable, "-m", "packtool", "pack", os.path.join(DATA, "peps", "peps_pd_cc0.jsonl.gz"),
           "--tokenizer", os.path.join(DATA, "tokenizers", "mistral-7b-v0.1"), "-C", "4096", "--overflow", "split",
           "-o", os.path.join(work, "out"), "--cache-dir", os.path.join(work, "cache"), "--no-progress",
           "--text-field", "text"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    t = time.time()
    while not glob.glob(os.path.join(work, "cache", "**", ".tmp-*"), recursive=True) and p.poll() is None \
            and time.time() - t < 300:
        time.sleep(0.05)
    time.sleep(delay)
    t0, load = time.time(), os.getloadavg()[0]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate()
    shutil.rmtree(work, True)
    return (f"SIGINT {delay} s into tokenizing: exit {p.returncode} {time.time() - t0:.2f} s later "
            f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}); {err.decode().strip()[:60]!r}")


if __name__ == "__main__":
    for d in [float(x) for x in sys.argv[1:]] or [1.0]:
        print(once(d), flush=True)
