#!/usr/bin/python3
"""STAND-IN systemctl (glm5svc Molecule tests only) in the chroot that stands in for container 200.

The chroot runs no systemd; this runs a unit the way systemd runs glm5.service, with what
that unit uses, and nothing from the host's systemd:

- start: ExecStart= as User=/Group= (with the user's groups), Environment=, EnvironmentFile=,
  WorkingDirectory=, UMask=, LimitNOFILE=/LimitMEMLOCK= (where this system allows them),
  StateDirectory=/CacheDirectory=/RuntimeDirectory= (made and given to the user),
  NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. A manager process per unit holds the notify
  socket (NotifyAccess=main: the main process's messages only) and is the unit's child
  subreaper, so the unit's processes stay its descendants (its "cgroup"). Type=notify returns
  once READY=1 came (TimeoutStartSec=, extended by EXTEND_TIMEOUT_USEC=), failing when the
  main process exits first; WatchdogSec= is enforced once ready (SIGABRT).
- stop: KillSignal= to the main process (KillMode=mixed), TimeoutStopSec= for it to drain and
  exit, then SIGKILL to the unit's processes that are left; returns when all are gone.
- restart, is-active (the truth: the manager and the main process are checked), show
  (-p/--property, --value), is-enabled, enable/disable (the [Install] symlinks),
  daemon-reload (units are read at each start).

Longer than 400 lines: one self-contained file, installed into the chroot as its systemctl.

Not done: sandboxing (ProtectSystem=, DeviceAllow=, SystemCallFilter=, ...), Restart=,
cgroups, the journal: a unit's output goes to /var/log/glm5-stand-in/<unit>.log. Each call
that changes something is logged to /var/log/glm5-stand-in/systemctl.log.
"""

import ctypes
import grp
import json
import os
import pwd
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import struct
import sys
import time

UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
STATE_DIR = "/run/glm5-stand-in-systemd"  # the stand-in reboot clears /run/glm5-stand-in
LOG_DIR = "/var/log/glm5-stand-in"
CALLS_LOG = LOG_DIR + "/systemctl.log"
RUNNING = ("activating", "active", "deactivating")


def unit_name(name):
    return name if "." in name else name + ".service"


def unit_path(unit):
    for folder in UNIT_DIRS:
        if os.path.isfile(os.path.join(folder, unit)):
            return os.path.join(folder, unit)
    return None


def read_unit(path):
    """{section: {key: [values]}}; an empty assignment resets a list, as systemd does."""
    sections, section, pending = {}, None, ""
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = sections.setdefault(line.strip("[]"), {})
            elif "=" in line and section is not None:
                key, value = (part.strip() for part in line.split("=", 1))
                section[key] = section.get(key, []) + [value] if value else []
    return sections


def one(service, key, default=None):
    values = service.get(key) or [default]
    return values[-1]


def seconds(text, default):
    """A systemd time span ("20min", "180s", "2min 30s", "infinity") in seconds."""
    if not text:
        return default
    if text == "infinity":
        return float("inf")
    units = {
        "": 1,
        "us": 1e-6,
        "ms": 1e-3,
        "s": 1,
        "sec": 1,
        "m": 60,
        "min": 60,
        "h": 3600,
        "hr": 3600,
    }
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)\s*([a-z]*)", text))


def state_path(unit):
    return os.path.join(STATE_DIR, unit + ".json")


def read_state(unit):
    try:
        with open(state_path(unit), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {"state": "inactive"}


def write_state(unit, state):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = state_path(unit) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(tmp, state_path(unit))


def process_start(pid):
    """The process's start time (clock ticks since boot), None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZX" else fields[19]


def alive(pid, start):
    return bool(pid) and process_start(pid) == start


def active_state(unit):
    """The unit's state as it is: a manager that died leaves the unit failed."""
    state = read_state(unit)
    if state["state"] in RUNNING and not alive(state.get("manager"), state.get("manager_start")):
        state.update(state="failed", result="manager-gone")
    return state


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def log_call(args):
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(CALLS_LOG, "a", encoding="utf-8") as handle:
        handle.write("systemctl " + " ".join(args) + "\n")


def unit_log(unit):
    return os.path.join(LOG_DIR, unit + ".log")


def log_since(unit, offset, lines=40):
    """The unit's output written after `offset` (its last lines)."""
    try:
        with open(unit_log(unit), "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ---- the manager: one per running unit, a daemon ----


class Manager:
    def __init__(self, unit, service, report):
        self.unit, self.service, self.report = unit, service, report
        self.notify_type = one(service, "Type", "simple") == "notify"
        self.timeout_start = seconds(one(service, "TimeoutStartSec"), 90)
        self.timeout_stop = seconds(one(service, "TimeoutStopSec"), 90)
        self.watchdog = seconds(one(service, "WatchdogSec"), 0)
        self.notify_access = one(service, "NotifyAccess", "main" if self.notify_type else "none")
        self.stop_requested = False
        self.main = None
        self.exit_status = None
        self.state = {
            "state": "activating",
            "manager": os.getpid(),
            "manager_start": process_start(os.getpid()),
        }

    def say(self, text):
        print(f"STAND-IN systemd: {self.unit}: {text}", flush=True)

    def save(self, **changes):
        self.state.update(changes)
        write_state(self.unit, self.state)

    def tell_client(self, text):
        if self.report is not None:
            os.write(self.report, (text + "\n").encode())
            os.close(self.report)
            self.report = None

    def directories(self, user):
        made = {}
        for key, top in (
            ("StateDirectory", "/var/lib"),
            ("CacheDirectory", "/var/cache"),
            ("RuntimeDirectory", "/run"),
        ):
            mode = int(one(self.service, key + "Mode", "0755"), 8)
            for name in " ".join(self.service.get(key, [])).split():
                path = os.path.join(top, name)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
                if user is not None:
                    os.chown(path, user.pw_uid, user.pw_gid)
                made.setdefault(key, []).append(path)
        return made

    def environment(self, user, made, socket_path):
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "INVOCATION_ID": secrets.token_hex(16),
        }
        if user is not None:
            env.update(
                USER=user.pw_name, LOGNAME=user.pw_name, HOME=user.pw_dir, SHELL=user.pw_shell
            )
        for key, var in (
            ("StateDirectory", "STATE_DIRECTORY"),
            ("CacheDirectory", "CACHE_DIRECTORY"),
            ("RuntimeDirectory", "RUNTIME_DIRECTORY"),
        ):
            if made.get(key):
                env[var] = ":".join(made[key])
        if self.notify_access != "none":
            env["NOTIFY_SOCKET"] = socket_path
        for assignment in self.service.get("Environment", []):
            env.update(item.split("=", 1) for item in shlex.split(assignment) if "=" in item)
        for name in self.service.get("EnvironmentFile", []):
            optional, name = name.startswith("-"), name.lstrip("-")
            try:
                with open(name, encoding="utf-8") as handle:
                    for line in handle:
                        line = line.strip()
                        if line and line[0] not in "#;" and "=" in line:
                            key, value = line.split("=", 1)
                            env[key.strip()] = " ".join(shlex.split(value)) if value.strip() else ""
            except OSError:
                if not optional:
                    raise
        return env

    def exec_child(self, user, env, argv):
        """In the forked main process: what systemd's exec_child does for this unit, then exec."""
        os.setsid()
        for key, limit in (
            ("LimitNOFILE", resource.RLIMIT_NOFILE),
            ("LimitMEMLOCK", resource.RLIMIT_MEMLOCK),
        ):
            value = one(self.service, key)
            if value:
                soft, _, hard = value.partition(":")
                pair = [
                    resource.RLIM_INFINITY if v == "infinity" else int(v)
                    for v in (soft, hard or soft)
                ]
                try:
                    resource.setrlimit(limit, pair)
                except (OSError, ValueError) as exc:  # this system's own hard limit is lower
                    hard = resource.getrlimit(limit)[1]
                    above = pair[0] == resource.RLIM_INFINITY or pair[0] > hard
                    resource.setrlimit(limit, (hard if above else pair[0], hard))
                    print(
                        f"STAND-IN systemd: {key}={value} not allowed here ({exc}): {hard}",
                        flush=True,
                    )
        os.umask(int(one(self.service, "UMask", "0022"), 8))
        if user is not None:
            group = one(self.service, "Group")
            gid = grp.getgrnam(group).gr_gid if group else user.pw_gid
            os.initgroups(user.pw_name, gid)
            os.setgid(gid)
            os.setuid(user.pw_uid)
        if "WATCHDOG_USEC" in env:
            env["WATCHDOG_PID"] = str(os.getpid())
        os.chdir(
            one(self.service, "WorkingDirectory", "/")
            .lstrip("-")
            .replace("~", env.get("HOME", "/"))
        )
        os.execve(argv[0], argv, env)

    def start(self):
        name = one(self.service, "User")
        user = pwd.getpwnam(name) if name else None
        made = self.directories(user)
        socket_path = os.path.join(STATE_DIR, self.unit + ".notify")
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(socket_path)
        os.chmod(socket_path, 0o666)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.settimeout(0.2)
        env = self.environment(user, made, socket_path)
        if self.watchdog:
            env["WATCHDOG_USEC"] = str(int(self.watchdog * 1e6))
        argv = shlex.split(one(self.service, "ExecStart").lstrip("@-:+!"))
        self.main = os.fork()
        if self.main == 0:
            try:
                self.exec_child(user, env, argv)
            except BaseException as exc:  # noqa: BLE001 - reported, then systemd's exit code
                print(
                    f"STAND-IN systemd: cannot run {argv}: {type(exc).__name__}: {exc}", flush=True
                )
            finally:
                os._exit(203)  # systemd's EXIT_EXEC
        self.say(f"started {argv[0]} as main process {self.main}")
        self.save(main=self.main, main_start=process_start(self.main), result="success")
        if not self.notify_type:
            self.save(state="active", since=time.time())
            self.tell_client("active")
        self.loop(sock, time.monotonic() + self.timeout_start)
        for path in made.get("RuntimeDirectory", []):
            shutil.rmtree(path, ignore_errors=True)
        sock.close()
        os.unlink(socket_path)

    def receive(self, sock, deadline, last_ping):
        try:
            data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except TimeoutError:
            return deadline, last_ping
        sender = next(
            (
                struct.unpack("iII", d[:12])[0]
                for level, kind, d in ancillary
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
            ),
            None,
        )
        if self.notify_access == "main" and sender != self.main:
            self.say(f"a notification from PID {sender}, not the main PID {self.main}: ignored")
            return deadline, last_ping
        for line in data.decode(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key == "READY" and value == "1" and self.state["state"] == "activating":
                self.say("READY=1")
                self.save(state="active", since=time.time())
                self.tell_client("active")
                last_ping = time.monotonic()
            elif key == "STATUS":
                self.save(status=value)
            elif key == "EXTEND_TIMEOUT_USEC" and self.state["state"] == "activating":
                deadline = max(deadline, time.monotonic() + int(value) / 1e6)
            elif key == "WATCHDOG" and value == "1":
                last_ping = time.monotonic()
            elif key == "STOPPING" and value == "1":
                self.save(state="deactivating")
        return deadline, last_ping

    def loop(self, sock, deadline):
        last_ping, stop_deadline = time.monotonic(), None
        while True:
            deadline, last_ping = self.receive(sock, deadline, last_ping)
            while True:  # reap the unit's processes (this is their subreaper)
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == 0:
                    break
                if pid == self.main:
                    self.exit_status = status
            now = time.monotonic()
            if self.exit_status is not None:
                break
            if self.state["state"] == "activating" and now > deadline:
                self.say("start operation timed out, terminating")
                self.save(result="timeout")
                self.stop_requested = True
            if (
                self.watchdog
                and self.state["state"] == "active"
                and now - last_ping > self.watchdog
            ):
                self.say("watchdog timeout, killing the main process with SIGABRT")
                self.save(result="watchdog")
                os.kill(self.main, signal.SIGABRT)
            if self.stop_requested and stop_deadline is None:
                kill_signal = one(self.service, "KillSignal", "SIGTERM")
                self.say(f"stopping: {kill_signal} to the main process {self.main}")
                self.save(state="deactivating")
                os.kill(self.main, getattr(signal, kill_signal))
                stop_deadline = now + self.timeout_stop
            if stop_deadline is not None and now > stop_deadline:
                self.say("stop timed out, killing the main process")
                self.save(result="timeout")
                os.kill(self.main, signal.SIGKILL)
                stop_deadline = float("inf")
        self.finish()

    def finish(self):
        code = os.waitstatus_to_exitcode(self.exit_status)
        left = descendants(os.getpid())
        if left:
            self.say(f"killing what is left of the unit: {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            while descendants(os.getpid()):
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
        clean = code == 0 or (self.stop_requested and code == -signal.SIGTERM)
        result = (
            self.state["result"]
            if self.state["result"] != "success"
            else ("success" if clean else "exit-code")
        )
        before_ready = self.state["state"] == "activating"
        self.say(f"main process exited, code {code}; {result}")
        self.save(
            state="inactive" if result == "success" and not before_ready else "failed",
            result=result,
            exit_code=code,
            main=0,
        )
        self.tell_client(
            f"failed: the main process exited with {code} ({result})"
            + (" before READY=1" if before_ready else "")
        )


def run_manager(unit, service, report):
    """The manager's process: detached from the caller (its output and session)."""
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    # Nothing of the caller's stays open here (its output must end when it returns).
    os.closerange(3, report)
    os.closerange(report + 1, 65536)
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    log = os.open(unit_log(unit), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    manager = Manager(unit, service, report)
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the unit's orphans stay here
    signal.signal(signal.SIGTERM, lambda *_: setattr(manager, "stop_requested", True))
    try:
        manager.save()
        manager.start()
    except Exception as exc:  # noqa: BLE001 - the caller must hear of any failure
        manager.say(f"failed: {type(exc).__name__}: {exc}")
        manager.save(state="failed", result="resources", main=0)
        manager.tell_client(f"failed: {type(exc).__name__}: {exc}")
    os._exit(0)


# ---- the commands ----


def start(unit):
    path = unit_path(unit)
    if path is None:
        print(f"Failed to start {unit}: Unit {unit} not found.", file=sys.stderr)
        return 5
    if active_state(unit)["state"] in RUNNING:
        return 0
    service = read_unit(path).get("Service", {})
    os.makedirs(STATE_DIR, exist_ok=True)
    os.makedirs(LOG_DIR, exist_ok=True)
    offset = os.path.getsize(unit_log(unit)) if os.path.exists(unit_log(unit)) else 0
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        run_manager(unit, service, write_end)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end) as answer:
        said = answer.read().strip() or "failed: the manager died"
    if said == "active":
        return 0
    print(
        f"Job for {unit} failed ({said}). Its output ({unit_log(unit)}) ends:",
        log_since(unit, offset),
        sep="\n",
        file=sys.stderr,
    )
    return 1


def stop(unit):
    state = active_state(unit)
    if state["state"] not in RUNNING:
        if state["state"] == "failed" and state.get("result") == "manager-gone":
            write_state(unit, {**state, "main": 0})
        return 0
    service = read_unit(unit_path(unit) or "/dev/null").get("Service", {})
    os.kill(state["manager"], signal.SIGTERM)
    limit = time.monotonic() + seconds(one(service, "TimeoutStopSec"), 90) + 30
    while alive(state["manager"], state["manager_start"]):
        if time.monotonic() > limit:
            print(
                f"Failed to stop {unit}: its manager {state['manager']} is still there",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.1)
    return 0


def show(unit, properties, value_only):
    path = unit_path(unit)
    service = read_unit(path).get("Service", {}) if path else {}
    state = active_state(unit)
    running = state["state"] in RUNNING
    since = state.get("since")
    values = {
        "Id": unit,
        "Names": unit,
        "LoadState": "loaded" if path else "not-found",
        "FragmentPath": path or "",
        "ActiveState": state["state"],
        "SubState": {
            "activating": "start",
            "active": "running",
            "deactivating": "stop-sigterm",
            "failed": "failed",
        }.get(state["state"], "dead"),
        "Result": state.get("result", "success"),
        "Type": one(service, "Type", "simple"),
        "NotifyAccess": one(service, "NotifyAccess", "none"),
        "MainPID": str(state.get("main", 0) if running else 0),
        "ExecMainStatus": str(state.get("exit_code", 0)),
        "StatusText": state.get("status", ""),
        "UnitFileState": enabled_state(unit, path)[0],
        "ActiveEnterTimestamp": time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(since))
        if since
        else "",
    }
    for key in properties or list(values):
        print(values.get(key, "") if value_only else f"{key}={values.get(key, '')}")
    return 0


def wants_links(unit, path):
    install = read_unit(path).get("Install", {})
    return [
        f"/etc/systemd/system/{target}.{kind}/{unit}"
        for key, kind in (("WantedBy", "wants"), ("RequiredBy", "requires"))
        for target in " ".join(install.get(key, [])).split()
    ]


def enabled_state(unit, path):
    if path is None:
        return "", 1
    links = wants_links(unit, path)
    if not links:
        return "static", 0
    return ("enabled", 0) if all(os.path.islink(link) for link in links) else ("disabled", 1)


def enable(unit, on):
    path = unit_path(unit)
    if path is None:
        print(
            f"Failed to {'enable' if on else 'disable'} unit: Unit file {unit} does not exist.",
            file=sys.stderr,
        )
        return 1
    for link in wants_links(unit, path):
        if on and not os.path.islink(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(path, link)
            print(f"Created symlink '{link}' \u2192 '{path}'.", file=sys.stderr)
        elif not on and os.path.islink(link):
            os.unlink(link)
            print(f"Removed '{link}'.", file=sys.stderr)
    return 0


def main(argv):
    value_only, properties, words = False, [], []
    args = iter(argv)
    for arg in args:
        if arg in ("-p", "--property"):
            properties += next(args, "").split(",")
        elif arg.startswith("--property="):
            properties += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-p"):
            properties += arg[2:].split(",")
        elif arg == "--value":
            value_only = True
        elif arg in (
            "-l",
            "--full",
            "-q",
            "--quiet",
            "--no-pager",
            "--system",
            "--no-ask-password",
        ):
            continue
        else:
            words.append(arg)
    if not words:
        print("STAND-IN systemctl: no command", file=sys.stderr)
        return 2
    command, units = words[0], [unit_name(word) for word in words[1:]]
    if command in ("start", "stop", "restart", "enable", "disable"):
        log_call(words)
    if command == "daemon-reload":
        return 0
    if command in ("start", "stop", "restart") and units:
        rc = 0
        for unit in units:
            if command in ("stop", "restart"):
                rc = rc or stop(unit)
            if command in ("start", "restart"):
                rc = rc or start(unit)
        return rc
    if command == "is-active" and units:
        states = [active_state(unit)["state"] for unit in units]
        print("\n".join(states))
        return 0 if all(state == "active" for state in states) else 3
    if command == "show" and units:
        return max(show(unit, properties, value_only) for unit in units)
    if command == "is-enabled" and units:
        answers = [enabled_state(unit, unit_path(unit)) for unit in units]
        for unit, (text, _) in zip(units, answers, strict=True):
            if text:
                print(text)
            else:
                print(
                    f"Failed to get unit file state for {unit}: No such file or directory",
                    file=sys.stderr,
                )
        return max(rc for _, rc in answers)
    if command in ("enable", "disable") and units:
        return max(enable(unit, command == "enable") for unit in units)
    print(f"STAND-IN systemctl: unsupported: {' '.join(argv)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
