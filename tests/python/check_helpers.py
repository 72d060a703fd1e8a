"""What the Python tests share: a named check that counts failures, `finish()` (print ok/FAIL, exit
0/1), and the probe entry run as a subprocess (python3 -m lpdiag probe ARGS), returning (exit
code, stdout, stderr)."""
import subprocess
import sys

failures = 0


def check(what, ok, detail=""):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail[:2000]}" if detail and not ok else ""))
    failures += not ok


def probe(*args):
    out = subprocess.run([sys.executable, "-m", "lpdiag", "probe", *args], capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


def finish():
    print("FAIL" if failures else "ok")
    sys.exit(1 if failures else 0)
