#!/usr/bin/env python3
"""A Wink cluster on loopback: 3 nats-servers with JetStream, N Wink nodes, HAProxy.

Used through cluster/up, cluster/ctl and cluster/down (docs/CLUSTER.md). Everything lives under
one directory DIR; DIR/cluster.json says where everything is:

  {"router": "http://127.0.0.1:P", "router_admin": "127.0.0.1:P", "router_map": "DIR/owners.map",
   "partitions": P, "config": "DIR/config.json", "token_file": F or null,
   "nodes": [{"name", "url", "data", "pid", "argv"}], "nats": [{"name", "url", "pid", "argv"}],
   ...}

A "pid" is null when the process was stopped by ctl; otherwise it is the process started with
"argv", which is how a PID is told from a later process that reused the number. Every run holds
an exclusive lock on DIR/ctl.lock from its first read of cluster.json to its last write, so two
runs never write over each other's PIDs.
"""

import argparse
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def die(msg):
    print(f"cluster: {msg}", file=sys.stderr)
    sys.exit(1)


@contextlib.contextmanager
def locked(d):
    """Holds DIR/ctl.lock exclusively. The lock's descriptor is not inherited by what we start
    (Popen closes it), so it ends with this process even if it is killed."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "ctl.lock"), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"cluster: waiting for another run on {d} (ctl.lock)", file=sys.stderr)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def read_token(path):
    """The token as `wink serve --token-file` reads it: the first line, trimmed."""
    try:
        with open(path) as f:
            token = (f.readline() or "").strip()
    except OSError as e:
        die(f"the token file {path}: {e.strerror}")
    if not token or not all(33 <= ord(c) <= 126 for c in token):
        die(f"the token file {path}: its first line must be a printable token without spaces")
    return token


_given = set()

# Ports handed to clusters, one file per port naming the cluster's directory, shared by every
# cluster/up on this machine (tests start several at once). A port stays reserved while its
# directory exists, so a stopped server's port is not handed to another cluster meanwhile.
PORTS = os.path.join(tempfile.gettempdir(), "wink-cluster-ports")


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def reserve(port, d):
    """Reserves `port` for the cluster in `d`; false if another cluster holds it."""
    os.makedirs(PORTS, exist_ok=True)
    path = os.path.join(PORTS, str(port))
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(path) as f:
                    owner = f.read()
            except OSError:
                continue
            # An empty file is one being written: held.
            if not owner or os.path.isdir(owner):
                return False
            # Its cluster's directory is gone: reclaim it. One renamer wins; the others retry.
            try:
                os.rename(path, f"{path}.stale.{os.getpid()}")
                os.unlink(f"{path}.stale.{os.getpid()}")
            except OSError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(d)
        return True
    return False


def release_ports(d):
    try:
        names = os.listdir(PORTS)
    except OSError:
        return
    for name in names:
        path = os.path.join(PORTS, name)
        try:
            with open(path) as f:
                if f.read() != d:
                    continue
            os.unlink(path)
        except OSError:
            pass


def free_port(d):
    """A port for the cluster in `d` that nothing listens on now, outside the kernel's
    ephemeral range and reserved machine-wide. Outside the range, because a port the kernel
    may hand out (to a socket bound to port 0, or to an outgoing connection) can be taken
    between this check and the server's bind, or while a stopped server is down; reserved, so
    two clusters started at once never pick the same one."""
    lo, hi = ephemeral_range()
    low, high = (10000, lo - 1) if lo > 12000 else (hi + 1, 65535)
    for _ in range(10000):
        port = random.randint(low, high)
        if port in _given:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        if reserve(port, d):
            _given.add(port)
            return port
    die(f"no free port in {low}..{high}")


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
                             start_new_session=True, close_fds=True)
    return p.pid


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def ours(pid, argv):
    """Whether `pid` is still the process started with `argv` (not a later one that reused the
    number). An entry written by an older cluster/up has no argv: its PID is trusted."""
    if not pid:
        return False
    if argv is None:
        return alive(pid)
    return cmdline(pid) == argv


def running(entry):
    return alive(entry.get("pid")) and ours(entry["pid"], entry.get("argv"))


def http_status(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


def meta_of(server):
    """A server's view of JetStream's meta group (`/jsz`'s `meta_cluster`), or why none."""
    try:
        with urllib.request.urlopen(server["monitor"] + "/jsz", timeout=2) as r:
            return json.load(r).get("meta_cluster") or {}
    except Exception as e:
        return {"error": str(e)}


def jetstream_whole(servers):
    """Whether every server names the same JetStream meta leader and the leader sees every other
    server as a current peer: until then a stream of R=3 may find "no suitable peers for
    placement", and a node that starts meanwhile spends its start retrying."""
    metas = [meta_of(n) for n in servers]
    leaders = {m.get("leader") for m in metas}
    if len(leaders) != 1 or not next(iter(leaders)):
        return False
    replicas = next((m["replicas"] for m in metas if "replicas" in m), [])
    return (len(replicas) == len(servers) - 1
            and all(r.get("current") and not r.get("offline") for r in replicas))


def wait_for(what, check, seconds, entry=None, others=()):
    """Waits for `check`; on failure the logs of `entry` and of `others` (the NATS servers a
    node depends on) say why."""
    if not waited(what, check, seconds, entry, others):
        die_late(what, seconds, entry)


def waited(what, check, seconds, entry=None, others=()):
    """Whether `check` held within `seconds`; a process `entry` that exits meanwhile ends the
    command with its log."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return True
        if entry is not None and not alive(entry["pid"]):
            die(f"{what} exited; its log, {entry['log']}, ends with:\n" + tail(entry["log"])
                + "".join(f"\n{o['name']}'s log ends with:\n" + tail(o["log"], 5)
                          for o in others))
        time.sleep(0.2)
    return False


def die_late(what, seconds, entry=None):
    die(f"{what} did not come up within {seconds} s"
        + (f"; its log, {entry['log']}, ends with:\n" + tail(entry["log"])
           if entry is not None else ""))


def nats_whole(servers, seconds):
    """Whether every server answers healthy and JetStream's meta group takes them all within
    `seconds`; a server that exits ends the start at once, with its log."""
    def whole():
        for n in servers:
            if not alive(n["pid"]):
                die(f"{n['name']} exited; its log, {n['log']}, ends with:\n" + tail(n["log"]))
        return (all(http_status(n["monitor"] + "/healthz") == 200 for n in servers)
                and jetstream_whole(servers))
    return waited("JetStream", whole, seconds)


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


def nats_conf(d, i, ports, nats_count, cluster_name, unsafe=False):
    name = f"nats-{i}"
    home = os.path.join(d, name)
    os.makedirs(home, exist_ok=True)
    routes = ", ".join(f"nats-route://127.0.0.1:{ports['route'][j]}"
                       for j in range(nats_count) if j != i - 1)
    conf = os.path.join(home, "nats.conf")
    sync = ("  # UNSAFE (--unsafe-nats-sync): nats-server's default, a sync every 2 minutes."
            if unsafe else
            "  # Every acknowledged message is on disk before the ack (the default syncs every 2\n"
            "  # minutes, so a power cut could lose acknowledged writes); a node refuses writes\n"
            "  # without it.\n"
            "  sync_interval: always")
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
{sync}
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


def node_entry(d, name, port, config, token_file):
    home = os.path.join(d, name)
    data = os.path.join(home, "data")
    os.makedirs(data, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    # The access log apart: `log` is the node's error log, what an operator reads first.
    cmd = [None, "serve", data, "--listen", f"127.0.0.1:{port}", "--cluster", config,
           "--name", name, "--maintenance-interval", "0",
           "--access-log", os.path.join(home, "access.log")]
    if token_file:
        cmd += ["--token-file", token_file]
    return {"name": name, "url": url, "data": data, "cmd": cmd,
            "log": os.path.join(home, "log"), "pid": None, "argv": None}


def haproxy_conf(d, state):
    """HAProxy's configuration, and its partition map as the first placement gives it (the
    nodes keep the map current through the runtime API: docs/CLUSTER.md § Routing straight to an
    owner)."""
    def server(n, backup=False):
        return (f"  server {n['name']} {n['url'][len('http://'):]} check inter 500 fall 2 rise 2"
                + (" backup" if backup else ""))
    servers = "\n".join(server(n) for n in state["nodes"])
    # One backend per node: the node, then the others while its health check fails.
    per_node = "".join(
        f"""backend node_{n['name']}
  option httpchk GET /_cluster
  http-check expect status 200
{server(n)}
""" + "".join(server(o, True) + "\n" for o in state["nodes"] if o is not n)
        for n in state["nodes"])
    names = [n["name"] for n in state["nodes"]]
    parts = state["partitions"]
    with open(state["router_map"], "w") as f:
        f.writelines(f"{p} node_{names[p % len(names)]}\n" for p in range(parts))
    conf = os.path.join(d, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(f"""global
  maxconn 4096
  # The runtime API, through which the nodes set the partition map.
  stats socket ipv4@{state['router_admin']} level admin
defaults
  mode http
  timeout connect 2s
  # A client must send its request's headers within 10 s and may not fall silent for more than
  # 20 s (reading the answer or sending a body), so a slow client cannot pin a connection.
  timeout http-request 10s
  timeout client 20s
  timeout http-keep-alive 10s
  # Just above a node's own longest deadline (a PUT: at most 15 s), so a request sent to a node
  # that froze just after taking it ends (504) within 20 s instead of lasting the whole freeze.
  timeout server 20s
  # A node that refuses the connection (killed) is tried again elsewhere; a request it took is
  # never replayed by HAProxy (it may have been published).
  retries 2
  option redispatch
frontend wink
  bind {state['router'][len('http://'):]}
  # The key's partition as the nodes compute it: crc32("domain/title") mod P, from
  # /domain/sys/key_rev_value/bucket/title; the map names the backend of a live owner.
  http-request set-var(txn.title) path,field(6,/),url_dec
  http-request set-var(txn.partition) path,field(2,/),concat(/,txn.title),crc32,mod({parts})
  use_backend %[var(txn.partition),map({state['router_map']},nodes)]
  default_backend nodes
backend nodes
  # Any node: the path up to the title, /domain/sys/key_rev_value/bucket/title, hashed.
  balance uri path-only depth 5
  hash-type consistent
  option httpchk GET /_cluster
  http-check expect status 200
{servers}
{per_node}""")
    return conf


def start_haproxy(d, state):
    conf = haproxy_conf(d, state)
    cmd = ["haproxy", "-f", conf, "-db"]
    old = state.get("haproxy", {})
    if running(old):
        # A soft reload: the new process takes the port, the old one finishes its requests.
        cmd += ["-sf", str(old["pid"])]
    pid = spawn(cmd, os.path.join(d, "haproxy.log"))
    state["haproxy"] = {"pid": pid, "cmd": cmd, "argv": cmd}


def start(entry, binary):
    cmd = [binary] + entry["cmd"][1:]
    entry["pid"] = spawn(cmd, entry["log"])
    entry["argv"] = cmd


def up(args):
    d = os.path.abspath(args.dir)
    with locked(d):
        up_locked(d, args)


def up_locked(d, args):
    if os.path.exists(os.path.join(d, "cluster.json")):
        die(f"{d} holds a cluster already (cluster/down {d} first)")
    token_file = None
    if args.token_file:
        token_file = os.path.abspath(args.token_file)
        read_token(token_file)
    nats_bin = install()
    wink = wink_binary()
    nats_count = 3
    ports = {k: [free_port(d) for _ in range(nats_count)]
             for k in ("client", "route", "monitor")}
    state = {"router": f"http://127.0.0.1:{free_port(d)}",
             "router_admin": f"127.0.0.1:{free_port(d)}",
             "router_map": os.path.join(d, "owners.map"), "partitions": args.partitions,
             "config": os.path.join(d, "config.json"), "token_file": token_file,
             "nats_bin": nats_bin, "wink": wink, "nodes": [], "nats": []}
    # A name of its own: a route that reaches another cluster on this machine (a port taken
    # between free_port(d) and the server's bind) is refused, not merged.
    cluster_name = f"wink-{os.getpid()}-{ports['route'][0]}"
    for i in range(1, nats_count + 1):
        state["nats"].append(nats_conf(d, i, ports, nats_count, cluster_name,
                                       args.unsafe_nats_sync))
    for n in state["nats"]:
        n["cmd"][0] = nats_bin
    # Fresh servers that race their first routes ("Duplicate Route") have formed a meta group
    # of two, which never takes the third: every stream of R=3 then finds "no suitable peers".
    # Their stores are still empty, so such a start is thrown away and made again.
    for attempt in range(1, 4):
        for n in state["nats"]:
            start(n, nats_bin)
        save(d, state)
        # A JetStream cluster is healthy once its meta group has a leader that sees every
        # server: seconds when the machine is idle, and once (CI, two busy cores) more than a
        # minute. A server left out of the group never turns healthy, so a start that is not
        # whole in time is made again rather than waited on.
        if nats_whole(state["nats"], 150):
            break
        seen = "".join(f"{n['name']}: healthz {http_status(n['monitor'] + '/healthz')}, "
                       f"{meta_of(n)}\n{tail(n['log'], 5)}" for n in state["nats"])
        if attempt == 3:
            die(f"JetStream's meta group is not whole after 3 starts:\n{seen}")
        print(f"cluster/up: JetStream's meta group is not whole after 150 s; starting the NATS "
              f"servers again (their stores are empty):\n{seen}", file=sys.stderr)
        for n in state["nats"]:
            stop_pid(n["pid"], signal.SIGTERM)
            n["pid"] = None
            shutil.rmtree(os.path.join(os.path.dirname(n["cmd"][2]), "js"), ignore_errors=True)
        save(d, state)
    names = [f"n{i}" for i in range(1, args.nodes + 1)]
    for name in names:
        state["nodes"].append(node_entry(d, name, free_port(d), state["config"], token_file))
    config = {"nats": [n["url"] for n in state["nats"]],
              "nats_monitor": [n["monitor"] for n in state["nats"]],
              "unsafe_acks_without_nats_fsync": args.unsafe_nats_sync,
              "nodes": [{"name": n["name"], "url": n["url"]} for n in state["nodes"]],
              "partitions": args.partitions, "replicas": args.replicas,
              "buckets": {"html": {}}, "stream_max_age": args.stream_max_age,
              "replace_after_secs": args.replace_after,
              "routers": [{"admin": state["router_admin"], "map": state["router_map"]}]}
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
        deadline = time.time() + 30
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        if alive(pid):
            die(f"pid {pid} outlived SIGKILL for 30 s")


def ctl(args):
    d = os.path.abspath(args.dir)
    if not os.path.exists(os.path.join(d, "cluster.json")):
        die(f"no cluster in {d}")
    with locked(d):
        # Read under the lock: a run that held it before may have changed cluster.json.
        state = load(d)
        if args.action == "add":
            return add(d, state, args.name)
        entry = find(state, args.name)
        if args.action in ("kill", "stop"):
            if running(entry):
                if args.action == "kill":
                    stop_pid(entry["pid"], signal.SIGKILL)
                else:
                    stop_pid(entry["pid"], signal.SIGTERM, 30)
            entry["pid"] = None
            save(d, state)
        elif args.action == "start":
            if running(entry):
                die(f"{args.name} runs already (pid {entry['pid']})")
            binary = state["nats_bin"] if "monitor" in entry else state["wink"]
            start(entry, binary)
            save(d, state)
            if "monitor" in entry:
                wait_nats_process(d, entry, state)
            else:
                wait_for(entry["name"], lambda: http_status(entry["url"] + "/_cluster") == 200,
                         90, entry)


def wait_nats_process(d, entry, state):
    """Waits for the server itself, and for JetStream's health only when a majority of the
    servers runs: after all servers stopped, the first one back has no quorum (its /healthz
    answers 503) until a second one starts, and it must be possible to start them one by one.
    With a quorum, the server is waited for until it has caught up (until then JetStream's API
    requests through it time out)."""
    def wait_process():
        wait_for(entry["name"],
                 lambda: http_status(entry["monitor"] + "/healthz?js-enabled-only=true") == 200,
                 60, entry)
    wait_process()
    up = sum(1 for n in state["nats"] if running(n))
    if 2 * up <= len(state["nats"]):
        print(f"cluster: {entry['name']} runs; JetStream has no quorum until a majority of the "
              f"servers runs ({up} of {len(state['nats'])} do)", file=sys.stderr)
        return
    # After a power cut of every machine a server can stay "not current with the meta leader"
    # for minutes (seen on CI: over 180 s); started again, it asks the leader to catch it up
    # afresh. Its stores are kept: only the process is restarted.
    what = entry["name"] + "'s JetStream"
    for attempt in range(1, 4):
        if waited(what, lambda: http_status(entry["monitor"] + "/healthz") == 200, 90, entry):
            return
        if attempt == 3:
            die_late(what, 3 * 90, entry)
        print(f"cluster: {what} has not caught up within 90 s; starting it again; its log "
              f"ends with:\n{tail(entry['log'], 3)}", file=sys.stderr)
        stop_pid(entry["pid"], signal.SIGTERM, 30)
        start(entry, state["nats_bin"])
        save(d, state)
        wait_process()


def snapshot(peer, bucket, token_file):
    req = urllib.request.Request(f"{peer['url']}/_cluster/snapshot/{bucket}", method="POST")
    if token_file:
        req.add_header("Authorization", f"Bearer {read_token(token_file)}")
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.load(r)["snapshot"]
    except urllib.error.HTTPError as e:
        die(f"{peer['name']} refused a snapshot of {bucket}: {e.code} {e.read()[:300]!r}")


def add(d, state, name):
    if any(n["name"] == name for n in state["nodes"]):
        die(f"node {name} exists")
    token_file = state.get("token_file")
    entry = node_entry(d, name, free_port(d), state["config"], token_file)
    # Start from a live peer's snapshot of each bucket: its records say where replay starts.
    with open(state["config"]) as f:
        config = json.load(f)
    peer = next((n for n in state["nodes"] if running(n)), None)
    if peer is None:
        die("no live node to take a snapshot from")
    for bucket in config["buckets"]:
        snap = snapshot(peer, bucket, token_file)
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


def started_here(d, argv):
    """Whether a command line is one of the processes a cluster in `d` starts: a nats-server
    with its configuration there, a `wink serve` of a data root there, or HAProxy with its
    configuration there."""
    inside = d.rstrip("/") + "/"
    if len(argv) < 3:
        return False
    prog = os.path.basename(argv[0])
    if prog.startswith("nats-server") and "-c" in argv[:-1]:
        return argv[argv.index("-c") + 1].startswith(inside)
    if prog.startswith("haproxy") and "-f" in argv[:-1]:
        return argv[argv.index("-f") + 1].startswith(inside)
    return argv[1] == "serve" and argv[2].startswith(inside) and "--cluster" in argv


def ours_in_proc(d):
    """Every process on the machine that `d`'s cluster started, whatever cluster.json says (a
    run killed between starting a process and writing cluster.json, an old HAProxy still
    finishing its requests after a reload)."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        argv = cmdline(int(name))
        if argv and started_here(d, argv) and alive(int(name)):
            found.append(int(name))
    return found


def down(args):
    d = os.path.abspath(args.dir)
    if not os.path.isdir(d):
        die(f"no cluster in {d}")
    with locked(d):
        try:
            state = load(d)
        except OSError:
            state = None
        entries = []
        if state is not None:
            entries = [state.get("haproxy", {})] + state["nodes"] + state["nats"]
        # Every PID listed, even one whose entry looks stale, if it is still the process that
        # was started there; then every other process of this directory's cluster.
        pids = {e["pid"] for e in entries if e.get("pid") and ours(e["pid"], e.get("argv"))}
        pids |= set(ours_in_proc(d))
        if state is None and not pids:
            die(f"no cluster in {d}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.time() + 15
        while any(alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        for pid in pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        left = [p for p in pids if alive(p)]
        deadline = time.time() + 10
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = [p for p in left if alive(p)]
        if state is not None:
            for e in entries:
                if e:
                    e["pid"] = None
            save(d, state)
            os.replace(os.path.join(d, "cluster.json"), os.path.join(d, "cluster.down.json"))
        release_ports(d)
        if left:
            die(f"processes {left} outlived SIGKILL")


def main():
    ap = argparse.ArgumentParser(prog="cluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("dir")
    u.add_argument("--nodes", type=int, default=3)
    u.add_argument("--replicas", type=int, default=2)
    u.add_argument("--partitions", type=int, default=64)
    u.add_argument("--stream-max-age", type=int, default=7 * 86400)
    u.add_argument("--replace-after", type=int, default=300,
                   help="seconds without a lease before a node's partitions get other live "
                        "owners (0: never)")
    u.add_argument("--unsafe-nats-sync", action="store_true",
                   help="nats-servers with their default sync (every 2 minutes) and nodes that "
                   "acknowledge writes anyway: a power cut may lose acknowledged writes "
                   "(for benchmarks of the difference)")
    u.add_argument("--token-file", help="every node needs this token for changes "
                   "(wink serve --token-file); ctl and add send it")
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
