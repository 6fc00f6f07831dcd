#!/usr/bin/env python3
"""A Wink cluster on loopback: 3 nats-servers with JetStream, N Wink nodes, HAProxy.

Used through cluster/up, cluster/ctl and cluster/down (docs/CLUSTER.md). Everything lives under
one directory DIR; DIR/cluster.json says where everything is:

  {"router": "http://127.0.0.1:P", "config": "DIR/config.json",
   "nodes": [{"name", "url", "data", "pid"}], "nats": [{"name", "url", "pid"}], ...}
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def die(msg):
    print(f"cluster: {msg}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wink_binary():
    w = os.environ.get("WINK")
    if w:
        return w
    for p in ("target/release/wink", "target/debug/wink"):
        if os.path.exists(os.path.join(REPO, p)):
            return os.path.join(REPO, p)
    w = shutil.which("wink")
    if w:
        return w
    die("no wink binary: build it (cargo build --release) or set WINK")


def install():
    out = subprocess.run([os.path.join(HERE, "install")], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return out.strip().splitlines()[-1]


def spawn(cmd, log):
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    return p.pid


def http_status(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


def wait_for(what, check, seconds, entry=None, others=()):
    """Waits for `check`; on failure the logs of `entry` and of `others` (the NATS servers a
    node depends on) say why."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return
        if entry is not None and not alive(entry["pid"]):
            die(f"{what} exited; its log, {entry['log']}, ends with:\n" + tail(entry["log"])
                + "".join(f"\n{o['name']}'s log ends with:\n" + tail(o["log"], 5)
                          for o in others))
        time.sleep(0.2)
    die(f"{what} did not come up within {seconds} s")


def tail(path, n=10):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie of ours is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def load(d):
    with open(os.path.join(d, "cluster.json")) as f:
        return json.load(f)


def save(d, state):
    path = os.path.join(d, "cluster.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


def nats_conf(d, i, ports, nats_count, cluster_name):
    name = f"nats-{i}"
    home = os.path.join(d, name)
    os.makedirs(home, exist_ok=True)
    routes = ", ".join(f"nats-route://127.0.0.1:{ports['route'][j]}"
                       for j in range(nats_count) if j != i - 1)
    conf = os.path.join(home, "nats.conf")
    with open(conf, "w") as f:
        f.write(f"""server_name: {name}
listen: 127.0.0.1:{ports['client'][i - 1]}
http: 127.0.0.1:{ports['monitor'][i - 1]}
# Renders up to about 8 MiB fit in one message; larger ones are refused with 413.
max_payload: 8MB
jetstream {{
  store_dir: "{home}/js"
  max_memory_store: 64MB
  max_file_store: 8GB
  # Every acknowledged message is on disk before the ack (the default syncs every 2 minutes,
  # so a power cut could lose acknowledged writes); a node refuses writes without it.
  sync_interval: always
}}
cluster {{
  name: {cluster_name}
  listen: 127.0.0.1:{ports['route'][i - 1]}
  routes: [{routes}]
}}
""")
    return {"name": name, "url": f"nats://127.0.0.1:{ports['client'][i - 1]}",
            "monitor": f"http://127.0.0.1:{ports['monitor'][i - 1]}",
            "cmd": [None, "-c", conf], "log": os.path.join(home, "log"), "pid": None}


def node_entry(d, name, port, config):
    home = os.path.join(d, name)
    data = os.path.join(home, "data")
    os.makedirs(data, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    cmd = [None, "serve", data, "--listen", f"127.0.0.1:{port}", "--cluster", config,
           "--name", name, "--maintenance-interval", "0"]
    return {"name": name, "url": url, "data": data, "cmd": cmd,
            "log": os.path.join(home, "log"), "pid": None}


def haproxy_conf(d, state):
    servers = "\n".join(
        f"  server {n['name']} {n['url'][len('http://'):]} check inter 500 fall 2 rise 2"
        for n in state["nodes"])
    conf = os.path.join(d, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(f"""global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  # A node that refuses the connection (killed) is tried again elsewhere; a request it took is
  # never replayed by HAProxy (it may have been published).
  retries 2
  option redispatch
frontend wink
  bind {state['router'][len('http://'):]}
  default_backend nodes
backend nodes
  # The path up to the title, /domain/sys/key_rev_value/bucket/title: one node per key.
  balance uri path-only depth 5
  hash-type consistent
  option httpchk GET /_cluster
  http-check expect status 200
{servers}
""")
    return conf


def start_haproxy(d, state):
    conf = haproxy_conf(d, state)
    cmd = ["haproxy", "-f", conf, "-db"]
    old = state.get("haproxy", {}).get("pid")
    if alive(old):
        # A soft reload: the new process takes the port, the old one finishes its requests.
        cmd += ["-sf", str(old)]
    pid = spawn(cmd, os.path.join(d, "haproxy.log"))
    state["haproxy"] = {"pid": pid, "cmd": cmd}


def start(entry, binary):
    cmd = [binary] + entry["cmd"][1:]
    entry["pid"] = spawn(cmd, entry["log"])


def up(args):
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    if os.path.exists(os.path.join(d, "cluster.json")):
        die(f"{d} holds a cluster already (cluster/down {d} first)")
    nats_bin = install()
    wink = wink_binary()
    nats_count = 3
    ports = {k: [free_port() for _ in range(nats_count)] for k in ("client", "route", "monitor")}
    state = {"router": f"http://127.0.0.1:{free_port()}",
             "config": os.path.join(d, "config.json"),
             "nats_bin": nats_bin, "wink": wink, "nodes": [], "nats": []}
    # A name of its own: a route that reaches another cluster on this machine (a port taken
    # between free_port() and the server's bind) is refused, not merged.
    cluster_name = f"wink-{os.getpid()}-{ports['route'][0]}"
    for i in range(1, nats_count + 1):
        state["nats"].append(nats_conf(d, i, ports, nats_count, cluster_name))
    for n in state["nats"]:
        n["cmd"][0] = nats_bin
        start(n, nats_bin)
    save(d, state)
    # A JetStream cluster is healthy once its meta group has a leader: seconds when the machine
    # is idle, and once (CI, two busy cores) more than a minute.
    for n in state["nats"]:
        wait_for(n["name"], lambda n=n: http_status(n["monitor"] + "/healthz") == 200, 180, n)
    names = [f"n{i}" for i in range(1, args.nodes + 1)]
    for name in names:
        state["nodes"].append(node_entry(d, name, free_port(), state["config"]))
    config = {"nats": [n["url"] for n in state["nats"]],
              "nats_monitor": [n["monitor"] for n in state["nats"]],
              "nodes": [{"name": n["name"], "url": n["url"]} for n in state["nodes"]],
              "partitions": args.partitions, "replicas": args.replicas,
              "buckets": {"html": {}}, "stream_max_age": args.stream_max_age}
    with open(state["config"], "w") as f:
        json.dump(config, f, indent=1)
    for n in state["nodes"]:
        start(n, wink)
    save(d, state)
    for n in state["nodes"]:
        wait_for(n["name"], lambda n=n: http_status(n["url"] + "/_cluster") == 200, 90, n,
                 state["nats"])
    start_haproxy(d, state)
    save(d, state)
    wait_for("haproxy", lambda: http_status(state["router"] + "/_cluster") == 200, 30)
    print(json.dumps({"cluster": os.path.join(d, "cluster.json"), "router": state["router"]}))


def find(state, name):
    for n in state["nodes"] + state["nats"]:
        if n["name"] == name:
            return n
    die(f"no node or nats server called {name}")


def stop_pid(pid, sig, wait=10):
    if not alive(pid):
        return
    try:
        os.kill(pid, sig)
    except OSError:
        return
    deadline = time.time() + wait
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def ctl(args):
    d = os.path.abspath(args.dir)
    state = load(d)
    if args.action == "add":
        return add(d, state, args.name)
    entry = find(state, args.name)
    if args.action == "kill":
        stop_pid(entry["pid"], signal.SIGKILL)
    elif args.action == "stop":
        stop_pid(entry["pid"], signal.SIGTERM, 30)
    elif args.action == "start":
        if alive(entry["pid"]):
            die(f"{args.name} runs already (pid {entry['pid']})")
        binary = state["nats_bin"] if entry["name"].startswith("nats-") else state["wink"]
        start(entry, binary)
        save(d, state)
        if "monitor" in entry:
            wait_for(entry["name"], lambda: http_status(entry["monitor"] + "/healthz") == 200, 60,
                     entry)
        else:
            wait_for(entry["name"], lambda: http_status(entry["url"] + "/_cluster") == 200, 90,
                     entry)
    save(d, state)


def add(d, state, name):
    if any(n["name"] == name for n in state["nodes"]):
        die(f"node {name} exists")
    entry = node_entry(d, name, free_port(), state["config"])
    # Start from a live peer's snapshot of each bucket: its records say where replay starts.
    with open(state["config"]) as f:
        config = json.load(f)
    peer = next((n for n in state["nodes"] if alive(n["pid"])), None)
    if peer is None:
        die("no live node to take a snapshot from")
    for bucket in config["buckets"]:
        req = urllib.request.Request(f"{peer['url']}/_cluster/snapshot/{bucket}", method="POST")
        with urllib.request.urlopen(req, timeout=600) as r:
            snap = json.load(r)["snapshot"]
        # The snapshot is a private copy inside the peer's data root, on the same file system.
        os.replace(snap, os.path.join(entry["data"], bucket))
    config["nodes"].append({"name": name, "url": entry["url"]})
    with open(state["config"] + ".tmp", "w") as f:
        json.dump(config, f, indent=1)
    os.replace(state["config"] + ".tmp", state["config"])
    state["nodes"].append(entry)
    start(entry, state["wink"])
    save(d, state)
    wait_for(name, lambda: http_status(entry["url"] + "/_cluster") == 200, 90, entry)
    start_haproxy(d, state)
    save(d, state)


def down(args):
    d = os.path.abspath(args.dir)
    try:
        state = load(d)
    except OSError:
        die(f"no cluster in {d}")
    pids = [state.get("haproxy", {}).get("pid")] + [n["pid"] for n in state["nodes"]] + \
        [n["pid"] for n in state["nats"]]
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 15
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    os.rename(os.path.join(d, "cluster.json"), os.path.join(d, "cluster.down.json"))


def main():
    ap = argparse.ArgumentParser(prog="cluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("dir")
    u.add_argument("--nodes", type=int, default=3)
    u.add_argument("--replicas", type=int, default=2)
    u.add_argument("--partitions", type=int, default=64)
    u.add_argument("--stream-max-age", type=int, default=7 * 86400)
    c = sub.add_parser("ctl")
    c.add_argument("dir")
    c.add_argument("action", choices=["start", "stop", "kill", "add"])
    c.add_argument("name")
    dn = sub.add_parser("down")
    dn.add_argument("dir")
    args = ap.parse_args()
    {"up": up, "ctl": ctl, "down": down}[args.cmd](args)


if __name__ == "__main__":
    main()
