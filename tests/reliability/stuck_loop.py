"""A loop that stops recording (stuck) after SIGTERM still ends: the Monitor's handler waits at
most LPDIAG_TERMINATION_GRACE_S for the next record, then its watchdog closes the trace (the
training thread is not inside the writer) and the signal's default action ends the process. The
records are never flushed before the signal (flush interval 1000): they are all in the trace. A forked child, which records nothing,
has SIGTERM's default action back (read from /proc: it does not catch the signal, while the
Monitor's process does). The records written before the signal are in the trace. Where CUDA
is there (the GPU machine), a third loop records a CUDA model (W_Q on the device, the loss a
device tensor): its last record waits for the side stream's statistics when the signal comes,
and must be kept too; elsewhere that mode says it is skipped.
    stuck_loop.py LIBLPDIAG_TORCH LPDIAG"""
import os
import signal
import subprocess
import sys
import tempfile
import time

lib, lpdiag = sys.argv[1], sys.argv[2]
failures = 0


def check(what, ok, detail=""):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
    failures += not ok


CHILD = r'''
import os, sys, time, torch
torch.ops.load_library(sys.argv[1])
mon = torch.classes.lpdiag.Monitor(sys.argv[2], 1, 2, 8, "{}", 0, 1, False)
mon.set_flush_every(1000)  # nothing is flushed before the signal
if sys.argv[3] == "cuda":
    w = torch.randn(48, 16, device="cuda")
    mon.add_fused_qkv("h.0.attn", 0, w)
for step in range(3):
    if sys.argv[3] == "cuda":
        w.add_(0.01)
        mon.record(step, (w * w).sum(), 1e-3, w.norm())
    else:
        mon.record(step, 1.0, 1e-3, 1.0)
if sys.argv[3] == "fork":
    pid = os.fork()
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    print(pid, flush=True)
print("stuck", flush=True)
time.sleep(1000)  # never records again
'''

with tempfile.TemporaryDirectory() as d:
    modes = ["stuck", "fork"]
    try:
        import torch
        torch.ops.load_library(lib)
        cuda = torch.cuda.is_available()
    except Exception:
        cuda = False
    if cuda:
        modes.append("cuda")
    else:
        print("skip cuda: no CUDA device or a CPU build of the hooks (the GPU machine runs it)")
    for mode in modes:
        trace = os.path.join(d, f"{mode}.h5")
        env = dict(os.environ, LPDIAG_TERMINATION_GRACE_S="2")
        p = subprocess.Popen([sys.executable, "-c", CHILD, lib, trace, mode], stdout=subprocess.PIPE, text=True, env=env)
        child = int(p.stdout.readline()) if mode == "fork" else None
        check(f"{mode}: the loop reached its stuck point", p.stdout.readline().strip() == "stuck")
        if mode == "fork":
            # Whether a process catches SIGTERM, from the kernel's own record (no timing involved):
            # the Monitor's process must (its handler), the forked child must not.
            def catches_sigterm(pid):
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("SigCgt:"):
                            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
                return False

            check("fork: the Monitor's process catches SIGTERM (the handler is in place)", catches_sigterm(p.pid))
            # The parent reports the child's pid as soon as fork() returns there; the child resets
            # its handler in its own fork() return path, which it may not have been scheduled to
            # run yet. Poll for up to 5 s: a child that keeps the handler fails after that.
            t0 = time.time()
            while catches_sigterm(child) and time.time() - t0 < 5:
                time.sleep(0.05)
            check("fork: the forked child does not (default action restored)", not catches_sigterm(child))
            os.kill(child, signal.SIGKILL)
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = None
        took = time.time() - t0
        check(f"{mode}: SIGTERM ended the stuck loop within the grace (rc {rc}, {took:.1f} s)",
              rc == -signal.SIGTERM and 1.5 <= took <= 10)
        info = subprocess.run([lpdiag, "info", trace], capture_output=True, text=True)
        check(f"{mode}: the trace is readable with all 3 records (none was flushed before the signal)",
              info.returncode == 0 and any(l.split()[:2] == ["records", "3"] or l.strip().startswith("records") and " 3" in l
                                           for l in info.stdout.splitlines()), info.stdout + info.stderr)
print("FAIL" if failures else "ok")
sys.exit(1 if failures else 0)
