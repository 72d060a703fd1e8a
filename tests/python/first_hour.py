"""What a new user meets in the first hour with the Python API, each answered rather than silent:
the trace path used as given, a directory and an existing trace refused (overwrite= replaces),
a step recorded twice skipped without stopping training, a wrong n_head or a forgotten transpose
reported by analyze and check, float32 inputs warned about, SDPA's keywords and grouped-query
shapes refused with what to do, a grouped-query k registered with its own heads, a declared
policy the op contradicts said, too short a trace not judged, and `python3 -m lpdiag analyze`.
    first_hour.py LPDIAG_CLI"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn as nn

import lpdiag
from check_helpers import check, finish

cli = os.path.abspath(sys.argv[1])
C, H, T, V = 32, 2, 16, 11
torch.manual_seed(5)


class Attn(nn.Module):
    def __init__(self, n_head=H, transpose=True, policy="fa2"):
        super().__init__()
        self.n_head, self.transpose, self.policy = n_head, transpose, policy
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).to(torch.bfloat16) for t in self.c_attn(x).split(C, 2))
        if self.transpose:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = lpdiag.attention(q, k, v, causal=True, policy=self.policy)
        if self.transpose:
            y = y.transpose(1, 2)
        return self.c_proj(y.float().reshape(B, T, C))


class Model(nn.Module):
    def __init__(self, **attn):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Attn(**attn) for _ in range(2))
        self.head = nn.Linear(C, V)

    def forward(self, idx):
        x = self.emb(idx)
        for a in self.layers:
            x = x + a(x)
        return self.head(x)


def train(path, model, steps, record_twice=False, **kw):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with lpdiag.Monitor(path, model, **kw) as mon:
        for step in range(steps):
            x = torch.randint(0, V, (2, T))
            loss = nn.functional.cross_entropy(model(x).reshape(-1, V), x.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            mon.record(step, loss)
            if record_twice:
                mon.record(step, loss)  # a gradient-accumulation loop's second call
    return mon


def info(path):
    return json.loads(subprocess.run([cli, "info", "--json", path], capture_output=True, text=True, check=True).stdout)


def run(*args):
    return subprocess.run([cli, *args], capture_output=True, text=True)


def raises(f, needle):
    try:
        f()
    except (RuntimeError, ValueError, TypeError) as e:
        return needle in str(e), str(e).splitlines()[0][:160]
    return False, "no error"


with tempfile.TemporaryDirectory() as d:
    # The path as given; a directory refused; an existing trace refused unless overwrite=True.
    plain = os.path.join(d, "runnoext")
    mon = train(plain, Model(), 3)
    check("Monitor('runnoext') writes runnoext, no .h5 added", os.path.exists(plain) and not os.path.exists(plain + ".h5")
          and mon.trace_path == plain, str(os.listdir(d)))
    ok, msg = raises(lambda: lpdiag.Monitor(d, Model()), "is a directory")
    check("a directory is refused, nothing written beside it", ok and not os.path.exists(d + ".h5"), msg)
    long = os.path.join(d, "long.h5")
    train(long, Model(), 30)
    ok, msg = raises(lambda: lpdiag.Monitor(long, Model()), "already exists")
    check("an existing 30-record trace is refused and left whole", ok and info(long)["records"] == 30, msg)
    train(long, Model(), 1, overwrite=True)
    check("overwrite=True replaces it", info(long)["records"] == 1)

    # Two Monitors on one path: the second cannot write it; training goes on, and the Monitor says
    # so (trace_path None, trace_error the reason) instead of naming a file it does not write.
    shared = os.path.join(d, "shared.h5")
    first, second = lpdiag.Monitor(shared, Model()), lpdiag.Monitor(shared, Model())
    first.record(0, 1.0)
    second.record(0, 1.0)
    check("a path another Monitor holds: trace_path None, trace_error says why", first.trace_path == shared
          and second.trace_path is None and "another writer" in second.trace_error, f"{second.trace_path} {second.trace_error[:100]}")
    first.close()
    second.close()

    # A step recorded twice: skipped, said once, training goes on.
    twice = os.path.join(d, "twice.h5")
    err = io.StringIO()
    try:
        train(twice, Model(), 12, record_twice=True)
        finished = True
    except RuntimeError as e:
        finished, err = False, str(e)
    noted = finished and any("did not increase" in f for f in json.loads(run("analyze", "--json", twice).stdout)["findings"])
    check("recording a step twice does not stop training; one record per step, analyze notes it", finished
          and info(twice)["records"] == 12 and info(twice)["events"] == 1 and noted, str(err))

    # A wrong n_head, or (B, N, H, d) passed where (B, H, N, d) is expected: the counters cannot be
    # recorded; analyze puts a WARNING first and check fails the trace.
    for what, kw in (("a wrong n_head", {"n_head": 4}), ("a forgotten transpose", {"transpose": False})):
        path = os.path.join(d, f"wrong-{what.split()[-1]}.h5")
        train(path, Model(**kw), 12)
        a = run("analyze", "--json", path)
        j = json.loads(a.stdout)
        c = run("check", path)
        check(f"{what}: analyze warns first, check fails", j["findings"][0].startswith("WARNING: attention counters were not recorded")
              and c.returncode == 1 and "could not record" in c.stdout, j["findings"][0][:160] + " | " + c.stdout[:160])

    # float32 inputs under a bf16 policy: warned once.
    q = torch.randn(1, 2, 8, 16)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lpdiag.attention(q, q, q, causal=True)
    check("float32 q, k, v under fa2: a warning names the dtype", any("float32" in str(x.message) for x in w),
          str([str(x.message)[:80] for x in w]))

    # SDPA's keywords: is_causal accepted; attn_mask, dropout_p and GQA shapes refused with what to do.
    b = torch.randn(1, 4, 8, 16, dtype=torch.bfloat16)
    kv = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    same = torch.equal(lpdiag.attention(b, b, b, is_causal=True), lpdiag.attention(b, b, b, causal=True))
    check("is_causal=True is causal=True", same)
    for what, f, needle in (("attn_mask", lambda: lpdiag.attention(b, b, b, attn_mask=torch.ones(8, 8, dtype=torch.bool)), "causal=True"),
                            ("dropout_p", lambda: lpdiag.attention(b, b, b, dropout_p=0.1), "dropout_p"),
                            ("GQA shapes", lambda: lpdiag.attention(b, kv, kv, causal=True), "repeat_interleave")):
        ok, msg = raises(f, needle)
        check(f"{what} refused with what to do instead", ok, msg)

    # A grouped-query k is registered with its own head count, not q's.
    class GQA(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_head = 4
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(C, C), nn.Linear(C, C // 2), nn.Linear(C, C // 2)

    g = nn.Sequential(GQA())
    gpath = os.path.join(d, "gqa.h5")
    with lpdiag.Monitor(gpath, g) as mon:
        mon.record(0, 1.0)
    heads = {m["role"]: m["n_heads"] for m in info(gpath)["matrices"]}
    check("GQA: q registered with 4 heads, k with its own 2", heads.get("attn_q") == 4 and heads.get("attn_k") == 2, str(heads))

    # A declared policy the op contradicts: said, and recorded as what ran.
    decl = os.path.join(d, "declared.h5")
    err = io.StringIO()
    train(decl, Model(policy="fa2"), 12, policy="fp32")
    a = json.loads(run("analyze", "--json", decl).stdout)
    check("Monitor(policy='fp32') around fa2 calls: the trace records fa2 and says the declaration was contradicted",
          a["attention_numerics"]["policy"] == "fa2" and any("declared to the Monitor differ" in f for f in a["findings"]),
          str(a["attention_numerics"]))

    # Too short to judge: said, not "healthy".
    short = os.path.join(d, "short.h5")
    train(short, Model(), 3)
    a = run("analyze", short)
    check("a 3-record trace is not judged", a.returncode == 0 and "NOT JUDGED: too few records (3; need >= 10)" in a.stdout
          and "HEALTHY" not in a.stdout, a.stdout)

    # The CLI from Python.
    env = dict(os.environ, LPDIAG_CLI=cli)
    m = subprocess.run([sys.executable, "-m", "lpdiag", "analyze", long], capture_output=True, text=True, env=env)
    check("python3 -m lpdiag analyze runs the lpdiag program", m.returncode in (0, 1) and "NOT JUDGED" in m.stdout, m.stdout + m.stderr)
finish()
