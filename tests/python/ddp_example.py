"""The Python example under torchrun with DDP (gloo on the CPU, 2 processes): one trace per rank,
each with the rank and world size the Monitor took from torch.distributed and every signal
(check_example_trace.py), and `lpdiag analyze` reading both files as one run (2 files, both
ranks' records, a verdict).
    ddp_example.py LPDIAG_CLI LIBLPDIAG_TORCH
torchrun's own console is used (python3 -m torch.distributed.run). With Debian's torch 1.13 on
Python >= 3.11 its default `--redirects 0 --tee 0` parse to None (enum.Flag no longer iterates
the zero member) and the launcher crashes, so the test passes `--redirects 1 --tee 1`."""
import json
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    cli, lib = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ddp.h5")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={free_port()}", "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(d, "logs"),
               os.path.join(ROOT, "examples", "python", "train_gpt2.py"), "--lib", lib, "--steps", "30", "--out", out]
        print(" ".join(cmd), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        print(r.stdout[-2000:], r.stderr[-3000:] if r.returncode else "")
        assert r.returncode == 0, f"torchrun exited {r.returncode}"
        paths = [os.path.join(d, f"ddp.rank{k}.h5") for k in (0, 1)]
        for p in paths:
            assert os.path.exists(p), f"{p} missing: {sorted(os.listdir(d))}"
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "hooks", "check_example_trace.py"), p, "2"], check=True)
        try:
            import h5py
            for k, p in enumerate(paths):
                with h5py.File(p, "r") as f:
                    assert int(f.attrs["rank"]) == k and int(f.attrs["world_size"]) == 2, dict(f.attrs)
        except ImportError:
            print("h5py absent: rank attributes not read")
        a = subprocess.run([cli, "analyze", "--json"] + paths, capture_output=True, text=True)
        assert a.returncode in (0, 1), a.stderr  # 1: a finding; 2 would be unusable input
        j = json.loads(a.stdout)
        assert len(j["files"]) == 2, j["files"]
        assert j["records"] == 60, f"records {j['records']}: both ranks' 30 records expected"
        assert j["first_step"] == 0 and j["last_step"] == 29, (j["first_step"], j["last_step"])
        assert j["run"]["healthy"] is True, j["run"]
        print(f"ddp: 2 rank traces, analyze read {j['records']} records of steps {j['first_step']}..{j['last_step']} as one run")


if __name__ == "__main__":
    main()
