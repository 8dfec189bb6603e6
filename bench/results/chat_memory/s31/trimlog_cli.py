"""Experiment: log every HeapBound trim during `packtool pack` (the command).

    python trimlog_cli.py DATA TOKENIZER WORK TEMPLATE [SLACK_MIB]   (0: a trim after every encode chunk)
"""
import ctypes, json, os, sys, time, resource
import packtool.heap as hp
import packtool.tokenize.pipeline as pl

class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None); libc.mallinfo2.restype = MI
log = []
t0 = time.time()
orig = hp.HeapBound.check
def vm():
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: int(l.split()[1]) >> 10 for l in f if l.startswith(("VmRSS", "VmHWM", "RssAnon"))}
def check(self):
    before = self.trims
    orig(self)
    if self.trims != before:
        m = libc.mallinfo2()
        log.append({"t": round(time.time() - t0, 1), "low_after": self.low >> 20, "used": m.uordblks >> 20,
                    "free": m.fordblks >> 20, "pyblocks": sys.getallocatedblocks(), **vm()})
hp.HeapBound.check = check
def report(code, _exit=os._exit):
    print(json.dumps({"maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10, "end": vm(), "trims": log}))
    sys.stdout.flush()
    _exit(code)
os._exit = report
data, tok, work, tmpl = sys.argv[1:5]
if len(sys.argv) > 5:  # another trim trigger
    pl._HEAP_SLACK = int(sys.argv[5]) << 20
sys.argv = ["packtool", "pack", data, "--tokenizer", tok, "--chat-template", tmpl, "-C", "4096", "--overflow", "split",
            "--cache-dir", os.path.join(work, "cache"), "-o", os.path.join(work, "out"), "--no-progress"]
from packtool.cli import main
main()
