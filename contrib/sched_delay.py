#!/usr/bin/env python3
"""How long a proxy's threads wait for a core once woken, under the e2e's load.

One proxy at a time (fuseway binaries given by path, and `nginx` with the e2e's
settings), the bench's backend and `loadgen --connections 32` on 127.0.0.1; in the
middle of a 5 s window `perf sched record -a` for 2 s, then `perf sched timehist`:
each time a thread is switched in, its scheduling delay (from its wake-up to running).
Prints per thread name the switches, the CPU run, the delay's percentiles, and the
load generator's figures for the window:

    cargo build --release --examples
    contrib/sched_delay.py --rounds 2 target/release/fuseway nginx

Needs `perf` (Debian: linux-perf) with the kernel's sched tracepoints, and root or
`kernel.perf_event_paranoid` at most 1. Recording costs the machine too: compare the
proxies with each other, not with a run without it.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

BACKEND = 18081
PROXY = 18080

NGINX = """worker_processes 2; daemon off;
error_log {dir}/error.log crit; pid {dir}/nginx.pid;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 60s;
  upstream be {{ server 127.0.0.1:{backend}; keepalive 64; keepalive_requests 10000000; }}
  server {{ listen 127.0.0.1:{port};
    location / {{ proxy_pass http://be; proxy_http_version 1.1;
      proxy_set_header Connection ""; }} }} }}
"""

FUSEWAY = """{{"ReverseProxy": {{
  "Routes": {{"all": {{"ClusterId": "c", "Match": {{"Path": "/{{**catchall}}"}}}}}},
  "Clusters": {{"c": {{"Destinations": {{"d1": {{"Address": "http://127.0.0.1:{backend}"}}}}}}}}
}}}}
"""


def wait_up(port):
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing answers on port {port}")


def start_proxy(target, tmp):
    if target == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX.format(dir=tmp, backend=BACKEND, port=PROXY))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        return subprocess.Popen([nginx, "-c", conf, "-p", tmp]), "nginx"
    conf = os.path.join(tmp, "fuseway.json")
    with open(conf, "w") as f:
        f.write(FUSEWAY.format(backend=BACKEND))
    args = [target, "--config", conf, "--listen", f"127.0.0.1:{PROXY}", "--access-log", "off"]
    # Its workers' threads are named `fuseway-worker-N` (15 characters kept by the kernel).
    return (
        subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        "fuseway-worker-",
    )


def delays(data):
    """Scheduling delays (s) and run time (s) per thread name, from `perf sched timehist`."""
    out = subprocess.run(
        ["perf", "sched", "timehist", "-i", data],
        capture_output=True, text=True, check=True,
    ).stdout
    by = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) < 6 or not f[0][0].isdigit():
            continue
        try:
            delay, run = float(f[4]) / 1e3, float(f[5]) / 1e3
        except ValueError:
            continue
        name = re.sub(r"\[.*", "", f[2])
        by.setdefault(name, []).append((delay, run))
    return by


def main():
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--rounds", type=int, default=2)
    args.add_argument("targets", nargs="+", help="fuseway binaries, or `nginx`")
    args = args.parse_args()
    examples = "target/release/examples"
    backend = subprocess.Popen(
        [f"{examples}/bench_backend", "--listen", f"127.0.0.1:{BACKEND}", "--threads", "1"],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_up(BACKEND)
        for r in range(1, args.rounds + 1):
            for target in args.targets:
                with tempfile.TemporaryDirectory() as tmp:
                    proxy, threads = start_proxy(target, tmp)
                    try:
                        wait_up(PROXY)
                        load = subprocess.Popen(
                            [f"{examples}/loadgen", "--url", f"http://127.0.0.1:{PROXY}/",
                             "--connections", "32", "--warmup", "1", "--duration", "5"],
                            stdout=subprocess.PIPE, text=True,
                        )
                        time.sleep(2)
                        data = os.path.join(tmp, "sched.data")
                        subprocess.run(
                            ["perf", "sched", "record", "-a", "-o", data, "--", "sleep", "2"],
                            capture_output=True, check=True,
                        )
                        out, _ = load.communicate(timeout=30)
                        figures = " ".join(re.findall(r"(?:rps|p50_us|p99_us|p999_us)=\d+", out))
                        print(f"round {r} {target}: {figures}")
                        ds = delays(data)
                        for name, v in sorted(ds.items(), key=lambda kv: -len(kv[1]))[:3]:
                            d = sorted(x[0] for x in v)
                            at = lambda q: d[min(len(d) - 1, int(q * len(d)))] * 1e6
                            mark = "  <- the proxy" if name.startswith(threads) else ""
                            print(
                                f"  {name[:20]:20} switches {len(d):6}  run {sum(x[1] for x in v) * 1e3:6.0f} ms"
                                f"  delay µs p50 {at(.5):4.0f} p99 {at(.99):5.0f} p999 {at(.999):5.0f}"
                                f" max {d[-1] * 1e6:5.0f}{mark}"
                            )
                    finally:
                        proxy.terminate()
                        proxy.wait(timeout=10)
    finally:
        backend.terminate()


if __name__ == "__main__":
    main()
